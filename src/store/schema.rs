// @generated automatically by Diesel CLI.

diesel::table! {
    approvals (approval_id) {
        approval_id -> Text,
        task_id -> Text,
        kind -> Text,
        detail -> Text,
        status -> Text,
        decision -> Nullable<Text>,
        decided_by -> Nullable<Text>,
        created_at -> Text,
        decided_at -> Nullable<Text>,
        request_key -> Nullable<Text>,
    }
}

diesel::table! {
    attempts (attempt_id) {
        attempt_id -> Text,
        task_id -> Text,
        number -> Int8,
        lease_id -> Nullable<Text>,
        owner -> Nullable<Text>,
        status -> Text,
        outcome -> Nullable<Text>,
        started_at -> Text,
        ended_at -> Nullable<Text>,
    }
}

diesel::table! {
    audit_events (id) {
        id -> Int8,
        event_id -> Text,
        task_id -> Nullable<Text>,
        action -> Text,
        actor -> Text,
        from_state -> Nullable<Text>,
        to_state -> Nullable<Text>,
        delivery_id -> Nullable<Text>,
        turn_id -> Nullable<Text>,
        comment_id -> Nullable<Int8>,
        error_code -> Nullable<Text>,
        metadata -> Text,
        at -> Text,
    }
}

diesel::table! {
    catchup_cursors (repo_key) {
        repo_key -> Text,
        since -> Text,
        last_comment_id -> Nullable<Int8>,
        updated_at -> Text,
        lease_owner -> Nullable<Text>,
        lease_expires_at -> Nullable<Text>,
    }
}

diesel::table! {
    comment_changes (id) {
        id -> Int8,
        task_id -> Text,
        session_key -> Text,
        kind -> Text,
        body -> Nullable<Text>,
        command -> Nullable<Text>,
        command_argument -> Nullable<Text>,
        written_at -> Text,
        status -> Text,
        outcome -> Nullable<Text>,
        created_at -> Text,
        decided_at -> Nullable<Text>,
        attachments -> Text,
    }
}

diesel::table! {
    comments (comment_key) {
        comment_key -> Text,
        task_id -> Text,
        kind -> Text,
        resource_key -> Text,
        turn_id -> Nullable<Text>,
        comment_id -> Nullable<Int8>,
        html_url -> Nullable<Text>,
        body_hash -> Nullable<Text>,
        status -> Text,
        created_at -> Text,
        updated_at -> Text,
        attempts -> Int8,
        next_attempt_at -> Nullable<Text>,
        last_error -> Nullable<Text>,
        body -> Nullable<Text>,
    }
}

diesel::table! {
    commit_statuses (id) {
        id -> Int8,
        task_id -> Text,
        repo_key -> Text,
        resource_key -> Text,
        sha -> Text,
        state -> Text,
        description -> Text,
        task_state -> Text,
        progress -> Text,
        attempts -> Int8,
        next_attempt_at -> Nullable<Text>,
        last_error -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
    }
}

diesel::table! {
    control (id) {
        id -> Int8,
        global_paused -> Bool,
        pause_reason -> Nullable<Text>,
        updated_by -> Nullable<Text>,
        updated_at -> Text,
        version -> Int8,
    }
}

diesel::table! {
    control_requests (request_id) {
        request_id -> Text,
        action -> Text,
        target -> Text,
        result -> Text,
        created_at -> Text,
    }
}

diesel::table! {
    leases (repo_key) {
        repo_key -> Text,
        lease_id -> Text,
        owner -> Text,
        acquired_at -> Text,
        renewed_at -> Text,
        expires_at -> Text,
        fence -> Int8,
        released_at -> Nullable<Text>,
    }
}

diesel::table! {
    operation_ledger (operation_id) {
        operation_id -> Text,
        task_id -> Text,
        queue_id -> Text,
        attempt_id -> Nullable<Text>,
        status -> Text,
        thread_id -> Nullable<Text>,
        turn_id -> Nullable<Text>,
        sending_at -> Text,
        accepted_at -> Nullable<Text>,
        sent_at -> Nullable<Text>,
    }
}

diesel::table! {
    outbox_entries (id) {
        id -> Int8,
        queue_id -> Text,
        session_key -> Text,
        task_id -> Text,
        operation_id -> Text,
        fingerprint -> Text,
        mode -> Text,
        status -> Text,
        auto_drain -> Bool,
        hold_reason -> Nullable<Text>,
        user_text -> Text,
        created_at -> Text,
        updated_at -> Text,
        version -> Int8,
        command -> Nullable<Text>,
        command_argument -> Nullable<Text>,
        expected_turn_id -> Nullable<Text>,
        accepted_turn_id -> Nullable<Text>,
        supersedes -> Nullable<Text>,
        revert_turn_id -> Nullable<Text>,
        reverted_at -> Nullable<Text>,
        handoff_phase -> Nullable<Text>,
        handoff_thread_id -> Nullable<Text>,
        handoff_turn_id -> Nullable<Text>,
        handoff_run_task_id -> Nullable<Text>,
    }
}

diesel::table! {
    refusal_counts (action, minute) {
        action -> Text,
        minute -> Text,
        count -> Int8,
    }
}

diesel::table! {
    repositories (repo_key) {
        repo_key -> Text,
        instance_id -> Text,
        owner -> Text,
        name -> Text,
        clone_url -> Nullable<Text>,
        default_branch -> Nullable<Text>,
        status -> Text,
        registered_at -> Text,
        updated_at -> Text,
        version -> Int8,
    }
}

diesel::table! {
    result_deliveries (id) {
        id -> Int8,
        result_id -> Text,
        workflow_id -> Text,
        created_by_task -> Nullable<Text>,
        state -> Text,
        version -> Int8,
        deliveries -> Int8,
        carried_by_task -> Nullable<Text>,
        acked_by_task -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
        delivered_at -> Nullable<Text>,
        acknowledged_at -> Nullable<Text>,
    }
}

diesel::table! {
    server_instances (server_id) {
        server_id -> Text,
        instance_id -> Text,
        version -> Text,
        started_at -> Text,
        heartbeat_at -> Text,
        draining -> Bool,
        drain_requested_at -> Nullable<Text>,
        stopped_at -> Nullable<Text>,
        actors -> Nullable<Text>,
        actors_at -> Nullable<Text>,
        codex_home -> Nullable<Text>,
    }
}

diesel::table! {
    sessions (session_key) {
        session_key -> Text,
        repo_key -> Text,
        kind -> Text,
        number -> Int8,
        thread_id -> Nullable<Text>,
        status -> Text,
        last_task_id -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
        version -> Int8,
        open_entries -> Int8,
        thread_trust -> Nullable<Text>,
        thread_generation -> Int8,
        thread_tools -> Bool,
        paused_reason -> Nullable<Text>,
        paused_at -> Nullable<Text>,
        resumed_at -> Nullable<Text>,
        thread_home -> Nullable<Text>,
        conversation_since -> Nullable<Text>,
    }
}

diesel::table! {
    signed_out (signin_id) {
        signin_id -> Text,
        expires_at -> Int8,
    }
}

diesel::table! {
    task_heads (task_id) {
        task_id -> Text,
        sha -> Text,
        recorded_at -> Text,
    }
}

diesel::table! {
    task_transitions (id) {
        id -> Int8,
        task_id -> Text,
        from_state -> Nullable<Text>,
        to_state -> Text,
        state_version -> Int8,
        actor -> Text,
        reason -> Nullable<Text>,
        error_code -> Nullable<Text>,
        at -> Text,
    }
}

diesel::table! {
    tasks (id) {
        id -> Int8,
        task_id -> Text,
        delivery_key -> Text,
        repo_key -> Text,
        session_key -> Text,
        resource_key -> Text,
        trigger_key -> Text,
        comment_id -> Nullable<Int8>,
        author -> Text,
        state -> Text,
        state_version -> Int8,
        attempt -> Int8,
        reply_attempt -> Int8,
        thread_id -> Nullable<Text>,
        turn_id -> Nullable<Text>,
        lease_id -> Nullable<Text>,
        next_retry_at -> Nullable<Text>,
        error_code -> Nullable<Text>,
        head_ref -> Nullable<Text>,
        base_ref -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
        command -> Nullable<Text>,
        steered_into -> Nullable<Text>,
        workflow_id -> Nullable<Text>,
        continuation -> Nullable<Int8>,
    }
}

diesel::table! {
    transcript_items (turn_id, item_id) {
        turn_id -> Text,
        seq -> Int8,
        item_id -> Text,
        kind -> Text,
        status -> Text,
        started_at -> Text,
        completed_at -> Nullable<Text>,
        payload -> Text,
    }
}

diesel::table! {
    turn_events (turn_id, seq) {
        turn_id -> Text,
        seq -> Int8,
        kind -> Text,
        at -> Text,
    }
}

diesel::table! {
    turn_token_usage (turn_id) {
        turn_id -> Text,
        thread_id -> Text,
        start_input_tokens -> Int8,
        start_cached_input_tokens -> Int8,
        start_output_tokens -> Int8,
        start_reasoning_tokens -> Int8,
        start_total_tokens -> Int8,
        end_input_tokens -> Int8,
        end_cached_input_tokens -> Int8,
        end_output_tokens -> Int8,
        end_reasoning_tokens -> Int8,
        end_total_tokens -> Int8,
        updated_at -> Text,
    }
}

diesel::table! {
    turns (turn_id) {
        turn_id -> Text,
        task_id -> Text,
        thread_id -> Text,
        kind -> Text,
        status -> Text,
        event_seq -> Int8,
        final_text -> Nullable<Text>,
        started_at -> Text,
        completed_at -> Nullable<Text>,
        idle_at -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_deliveries (delivery_key) {
        delivery_key -> Text,
        delivery_id -> Text,
        event_type -> Text,
        action -> Nullable<Text>,
        status -> Text,
        reason -> Nullable<Text>,
        repo_key -> Nullable<Text>,
        resource_key -> Nullable<Text>,
        comment_id -> Nullable<Int8>,
        content_key -> Nullable<Text>,
        duplicate_of -> Nullable<Text>,
        task_id -> Nullable<Text>,
        sender -> Nullable<Text>,
        payload_hash -> Text,
        received_at -> Text,
    }
}

diesel::table! {
    worker_call_events (call_id, place) {
        call_id -> Text,
        place -> Int8,
        event -> Text,
        ends_turn -> Bool,
    }
}

diesel::table! {
    worker_calls (call_id) {
        call_id -> Text,
        repository -> Text,
        caller -> Text,
        kind -> Text,
        body -> Text,
        stream -> Bool,
        state -> Text,
        lease_id -> Nullable<Text>,
        outcome -> Nullable<Text>,
        created_at -> Text,
        deadline_at -> Text,
        delivered_at -> Nullable<Text>,
        answered_at -> Nullable<Text>,
    }
}

diesel::table! {
    worker_leases (repository) {
        repository -> Text,
        lease_id -> Text,
        worker_id -> Text,
        fence -> Int8,
        acquired_at -> Text,
        renewed_at -> Text,
        expires_at -> Text,
        released_at -> Nullable<Text>,
        codex_home -> Nullable<Text>,
    }
}

diesel::table! {
    workers (worker_id) {
        worker_id -> Text,
        name -> Text,
        token_hash -> Text,
        repositories -> Text,
        created_at -> Text,
        revoked_at -> Nullable<Text>,
        last_seen_at -> Nullable<Text>,
        version -> Nullable<Text>,
        uncertain_turns -> Nullable<Int8>,
    }
}

diesel::table! {
    workflow_gates (id) {
        id -> Int8,
        gate_id -> Text,
        workflow_id -> Text,
        kind -> Text,
        question -> Text,
        status -> Text,
        opened_by_task -> Nullable<Text>,
        resumed_by_task -> Nullable<Text>,
        resumed_by -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
    }
}

diesel::table! {
    workflow_results (id) {
        id -> Int8,
        result_id -> Text,
        workflow_id -> Text,
        summary -> Text,
        files_changed -> Text,
        checks_run -> Text,
        risks -> Text,
        blockers -> Text,
        incomplete -> Bool,
        branch -> Nullable<Text>,
        recorded_by_task -> Nullable<Text>,
        created_at -> Text,
    }
}

diesel::table! {
    workflows (id) {
        id -> Int8,
        workflow_id -> Text,
        session_key -> Text,
        parent_workflow_id -> Nullable<Text>,
        state -> Text,
        title -> Text,
        owner -> Text,
        idle_finals -> Int8,
        continuations -> Int8,
        end_code -> Nullable<Text>,
        summary -> Nullable<Text>,
        created_at -> Text,
        updated_at -> Text,
        version -> Int8,
        ended_by_task -> Nullable<Text>,
        wait_reason -> Nullable<Text>,
        wait_until -> Nullable<Text>,
        denials -> Int8,
        child_mode -> Nullable<Text>,
        assignment_key -> Nullable<Text>,
        child_number -> Nullable<Int8>,
        instructions -> Nullable<Text>,
        created_by_task -> Nullable<Text>,
        sandbox -> Nullable<Text>,
        approval_policy -> Nullable<Text>,
        recovered -> Int8,
        forked_from_thread -> Nullable<Text>,
    }
}

diesel::table! {
    worktrees (session_key) {
        session_key -> Text,
        repo_key -> Text,
        head -> Nullable<Text>,
        tree -> Nullable<Text>,
        prepared_at -> Text,
        recorded_at -> Nullable<Text>,
        removed_at -> Nullable<Text>,
    }
}

diesel::joinable!(catchup_cursors -> repositories (repo_key));
diesel::joinable!(leases -> repositories (repo_key));
diesel::joinable!(sessions -> repositories (repo_key));
diesel::joinable!(worker_call_events -> worker_calls (call_id));
diesel::joinable!(worker_leases -> workers (worker_id));
diesel::joinable!(workflows -> sessions (session_key));
diesel::joinable!(worktrees -> repositories (repo_key));
diesel::joinable!(worktrees -> sessions (session_key));

diesel::allow_tables_to_appear_in_same_query!(
    approvals,
    attempts,
    audit_events,
    catchup_cursors,
    comment_changes,
    comments,
    commit_statuses,
    control,
    control_requests,
    leases,
    operation_ledger,
    outbox_entries,
    refusal_counts,
    repositories,
    result_deliveries,
    server_instances,
    sessions,
    signed_out,
    task_heads,
    task_transitions,
    tasks,
    transcript_items,
    turn_events,
    turn_token_usage,
    turns,
    webhook_deliveries,
    worker_call_events,
    worker_calls,
    worker_leases,
    workers,
    workflow_gates,
    workflow_results,
    workflows,
    worktrees,
);
