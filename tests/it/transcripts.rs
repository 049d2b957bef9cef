//! Turn transcripts: what the bridge stores of a turn, and how the admin API
//! pages through it. The store's queries on both backends; then the whole
//! loop on real parts (the Gitea simulator, the real `codex app-server` and
//! the fake model calling a shell command, `apply_patch` and the Gitea MCP
//! comment tool) read back through the admin API.

use crate::e2e::Loop;
use crate::fakemodel::{Item, Step};
use crate::support::*;
use crate::testapp::*;
use codex_bridge::agent::transcript::{
    ItemBody, ItemPhase, ItemStatus, Prompt, PromptPart, TokenCounts, TranscriptItem,
};
use codex_bridge::domain::TaskId;
use codex_bridge::store::ingest::{self, IngestOutcome};
use codex_bridge::store::run_migrations;
use codex_bridge::store::transcripts::{self, TranscriptCursor};
use codex_bridge::store::DbConn;
use serde_json::{json, Value};

fn message(id: &str, text: &str) -> TranscriptItem {
    TranscriptItem {
        item_id: id.into(),
        status: ItemStatus::Completed,
        body: ItemBody::AgentMessage {
            text: text.into(),
            truncated: false,
        },
    }
}

/// A task of Issue 1 with two turns; its id.
fn task_with_two_turns(c: &mut DbConn) -> TaskId {
    let outcomes = c
        .write_transaction(|c| {
            ingest::ingest_batch(c, &[crate::actors::request("widgets", 1, 1, "@ccbot go")])
        })
        .unwrap();
    let IngestOutcome::Accepted { task_id, .. } = &outcomes[0] else {
        panic!("{outcomes:?}")
    };
    for (turn, at) in [
        ("turn-b", "2026-01-01T00:00:02Z"),
        ("turn-a", "2026-01-01T00:00:01Z"),
    ] {
        exec(c, &format!("INSERT INTO turns (turn_id, task_id, thread_id, kind, status, event_seq, started_at) \
             VALUES ('{turn}', '{task_id}', 'thr-1', 'normal', 'completed', 0, '{at}')")).unwrap();
    }
    task_id.clone()
}

/// Items are stored once per turn and item id (a repeated completion changes
/// nothing), bounded, paged by seq across the task's turns in start order,
/// with each turn's tokens as end - start; the session lists the turns.
fn items_are_stored_once_and_paged_across_turns(c: &mut DbConn) {
    run_migrations(c).unwrap();
    let task = task_with_two_turns(c);
    let prompt = Prompt {
        parts: vec![
            PromptPart::trusted("do "),
            PromptPart::untrusted("<b>it</b>"),
        ],
    }
    .item();
    // turn-a started first: its items come first.
    assert!(transcripts::record_item(c, "turn-a", 0, ItemPhase::Completed, &prompt).unwrap());
    let started = TranscriptItem {
        status: ItemStatus::InProgress,
        ..message("m1", "")
    };
    assert!(transcripts::record_item(c, "turn-a", 3, ItemPhase::Started, &started).unwrap());
    assert!(!transcripts::record_item(c, "turn-a", 4, ItemPhase::Started, &started).unwrap());
    let done = message("m1", &"x".repeat(200_000));
    assert!(transcripts::record_item(c, "turn-a", 9, ItemPhase::Completed, &done).unwrap());
    // A repeated completion is a no-op: the first one stands.
    assert!(!transcripts::record_item(
        c,
        "turn-a",
        10,
        ItemPhase::Completed,
        &message("m1", "other")
    )
    .unwrap());
    for (seq, id) in [(1, "b1"), (2, "b2"), (5, "b3")] {
        transcripts::record_item(c, "turn-b", seq, ItemPhase::Completed, &message(id, id)).unwrap();
    }
    let tokens = |total: i64| TokenCounts {
        input: total - 4,
        cached_input: 1,
        output: 4,
        reasoning: 0,
        total,
    };
    transcripts::record_token_usage(c, "turn-a", "thr-1", tokens(100), tokens(115)).unwrap();
    transcripts::record_token_usage(c, "turn-a", "thr-1", tokens(999), tokens(130)).unwrap();

    // Pages of two items: a, a | b, b | b.
    let mut cursor = TranscriptCursor::START;
    let mut pages = Vec::new();
    loop {
        let page = transcripts::task_transcript(c, &task, None, cursor, 2).unwrap();
        pages.push(page.clone());
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    let shape: Vec<Vec<(String, Vec<String>)>> = pages
        .iter()
        .map(|p| {
            p.turns
                .iter()
                .map(|t| {
                    (
                        t.turn_id.clone(),
                        t.items.iter().map(|i| i.item_id.clone()).collect(),
                    )
                })
                .collect()
        })
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        shape,
        vec![
            vec![("turn-a".to_owned(), s(&["prompt", "m1"]))],
            vec![("turn-b".to_owned(), s(&["b1", "b2"]))],
            vec![("turn-b".to_owned(), s(&["b3"]))],
        ]
    );
    let a = &pages[0].turns[0];
    let m1 = &a.items[1];
    assert_eq!((m1.seq, m1.status), (3, ItemStatus::Completed));
    assert!(m1.completed_at.is_some());
    match &m1.body {
        ItemBody::AgentMessage { text, truncated } => {
            assert!(*truncated);
            assert_eq!(text.len(), codex_bridge::agent::transcript::TEXT_BYTES);
        }
        other => panic!("{other:?}"),
    }
    let t = a.tokens.unwrap();
    assert_eq!(
        (t.thread_start.total, t.thread_end.total, t.used.total),
        (100, 130, 30)
    );
    assert_eq!(t.used.cached_input, 0);
    assert!(pages[1].turns[0].tokens.is_none());
    // The API's JSON: the body's fields beside the row's.
    let json = serde_json::to_value(&a.items[0]).unwrap();
    assert_eq!(json["kind"], "prompt");
    assert_eq!(
        json["parts"][1],
        json!({"text": "<b>it</b>", "untrusted": true})
    );
    assert_eq!(json["status"], "sent");
    // One turn only.
    let only = transcripts::task_transcript(c, &task, Some("turn-b"), TranscriptCursor::START, 10)
        .unwrap();
    assert_eq!(only.turns.len(), 1);
    assert_eq!(only.turns[0].items.len(), 3);
    assert_eq!(only.next, None);

    // The session's turns, oldest first, a page at a time.
    let key = resource("default:acme/widgets:issue:1");
    let (first, next) = transcripts::session_turns(c, &key, 0, 1).unwrap();
    assert_eq!(first[0].turn_id, "turn-a");
    assert_eq!(first[0].tokens.unwrap().used.total, 30);
    assert_eq!(next, Some(1));
    let (second, next) = transcripts::session_turns(c, &key, 1, 1).unwrap();
    assert_eq!(second[0].turn_id, "turn-b");
    assert_eq!(next, None);
    let other = resource("default:acme/widgets:issue:2");
    assert!(transcripts::session_turns(c, &other, 0, 10)
        .unwrap()
        .0
        .is_empty());
}

#[test]
fn transcript_items_are_stored_once_and_paged_across_turns_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = connect(&format!("sqlite://{}", dir.path().join("t.db").display()));
    items_are_stored_once_and_paged_across_turns(&mut c);
}

#[test]
fn transcript_items_are_stored_once_and_paged_across_turns_postgres() {
    let db = PgDb::create();
    items_are_stored_once_and_paged_across_turns(&mut connect(&db.url));
}

/// The whole loop with a turn that runs a command, patches a file and posts
/// its reply; returns the loop and the task. The comment carries markup,
/// and the command prints the Gitea token.
pub fn run_a_turn_that_does_everything() -> (Loop, String) {
    let l = Loop::start_with(|b| b.codex_model("gpt-5.5"));
    let task = a_turn_that_does_everything(&l);
    (l, task)
}

/// On `l` (its Codex on model `gpt-5.5`, for `apply_patch`), the turn of
/// [`run_a_turn_that_does_everything`], finished; its task.
pub fn a_turn_that_does_everything(l: &Loop) -> String {
    let cmd = format!(
        "printf 'token=%s\\n' '{GITEA_TOKEN}'; echo '<img src=x onerror=alert(1)>'; exit 3"
    );
    l.model().push(Step::Reply(vec![Item::shell(&cmd)]));
    l.model().push(Step::apply_patch(
        "*** Begin Patch\n*** Add File: notes.txt\n+line one <script>alert(2)</script>\n+line two\n*** End Patch\n",
    ));
    l.script_reply(l.issue, "Ran the check and added notes.txt.");
    let task = l.comment(
        "bob",
        l.issue,
        "@ccbot please look <script>alert(3)</script> <img src=y onerror=alert(4)>",
    );
    l.wait(&task, "succeeded");
    task
}

/// All items of the task's transcript, read page by page through the API.
fn all_items(app: &TestApp, task: &str, limit: usize) -> (Vec<Value>, Vec<Value>) {
    let mut turns: Vec<Value> = Vec::new();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let q = match &cursor {
            Some(c) => format!("?limit={limit}&cursor={c}"),
            None => format!("?limit={limit}"),
        };
        let r = app.admin_get(&format!("/api/gitea-workflow/tasks/{task}/transcript{q}"));
        assert_eq!(r.status, 200, "{:?}", r.json);
        for t in r.json["turns"].as_array().unwrap() {
            let page_items = t["items"].as_array().unwrap();
            assert!(page_items.len() <= limit);
            items.extend(page_items.iter().cloned());
            if turns.last().map(|x| &x["turnId"]) != Some(&t["turnId"]) {
                turns.push(t.clone());
            }
        }
        match r.json["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return (turns, items),
        }
    }
    panic!("the transcript of {task} never ended");
}

#[test]
fn transcript_of_a_real_turn_through_the_admin_api() {
    let (l, task) = run_a_turn_that_does_everything();
    the_transcript_of_everything(&l, &task);

    // Unknown tasks and sessions, bad cursors and limits, and no token.
    let get = |p: &str| l.app.admin_get(&format!("/api/gitea-workflow{p}"));
    assert_eq!(get("/tasks/task-00000000/transcript").status, 404);
    assert_eq!(
        get("/sessions/default:acme%2Fwidgets:issue:99/turns").status,
        404
    );
    assert_eq!(
        get("/sessions/nonsense/turns").json["code"],
        "invalid_session_key"
    );
    assert_eq!(
        get(&format!("/tasks/{task}/transcript?cursor=x")).json["code"],
        "invalid_cursor"
    );
    assert_eq!(
        get(&format!("/tasks/{task}/transcript?limit=0")).json["code"],
        "invalid_limit"
    );
    let anonymous = l.app.get(
        &format!("/api/gitea-workflow/tasks/{task}/transcript"),
        None,
    );
    assert_eq!(anonymous.status, 401);
}

/// What the turn of [`a_turn_that_does_everything`] leaves, read through
/// the admin API: its items, scrubbed, in order and pageable; its tokens;
/// the session's turns. A turn on a remote worker leaves the same.
pub fn the_transcript_of_everything(l: &Loop, task: &str) {
    let task = task.to_owned();
    let (turns, items) = all_items(&l.app, &task, 100);
    assert_eq!(turns.len(), 1, "{turns:?}");
    let turn = &turns[0];
    assert_eq!(turn["turnId"], l.detail(&task)["task"]["turnId"]);
    assert_eq!(turn["status"], "completed");
    // Token usage from thread/tokenUsage/updated: the fake model reports 15 per request.
    let tokens = &turn["tokens"];
    assert!(tokens["total"].as_i64().unwrap() > 0, "{tokens}");
    assert_eq!(
        tokens["total"].as_i64().unwrap(),
        tokens["threadEnd"]["total"].as_i64().unwrap()
            - tokens["threadStart"]["total"].as_i64().unwrap()
    );
    let kinds: Vec<&str> = items.iter().map(|i| i["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"prompt"), "{kinds:?}");
    let seqs: Vec<i64> = items.iter().map(|i| i["seq"].as_i64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    let of = |kind: &str| -> &Value {
        items
            .iter()
            .find(|i| i["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };

    // The prompt as sent: the Issue's text (the thread's first turn), then
    // the comment's, each marked untrusted.
    let parts = of("prompt")["parts"].as_array().unwrap();
    let untrusted: Vec<&Value> = parts.iter().filter(|p| p["untrusted"] == true).collect();
    assert_eq!(untrusted.len(), 2, "{parts:?}");
    assert!(
        untrusted[0]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Title: ")),
        "{parts:?}"
    );
    assert_eq!(
        untrusted[1]["text"],
        "@ccbot please look <script>alert(3)</script> <img src=y onerror=alert(4)>"
    );
    // Codex's copy of the prompt is not kept twice.
    assert!(!kinds.contains(&"userMessage"), "{kinds:?}");

    // The command, its exit code and output, the token scrubbed from both.
    let command = of("commandExecution");
    assert_eq!(command["exitCode"], 3, "{command}");
    assert_eq!(command["status"], "failed", "{command}");
    let output = command["output"].as_str().unwrap();
    assert!(output.contains("token=[redacted]"), "{output}");
    assert!(output.contains("<img src=x onerror=alert(1)>"), "{output}");
    assert!(command["command"].as_str().unwrap().contains("[redacted]"));
    let everything = serde_json::to_string(&items).unwrap();
    assert!(!everything.contains(GITEA_TOKEN), "{everything}");

    // The file change, its stat and diff.
    let change = of("fileChange");
    assert_eq!(change["status"], "completed", "{change}");
    let file = &change["changes"][0];
    assert!(
        file["path"].as_str().unwrap().ends_with("notes.txt"),
        "{file}"
    );
    assert_eq!(
        (&file["change"], &file["added"], &file["removed"]),
        (&json!("add"), &json!(2), &json!(0))
    );
    assert!(
        file["diff"].as_str().unwrap().contains("line one <script>"),
        "{file}"
    );

    // The reply's MCP tool call with its arguments, and the final text.
    let call = of("mcpToolCall");
    assert_eq!(
        (&call["server"], &call["tool"]),
        (&json!("gitea"), &json!("add_comment"))
    );
    assert_eq!(call["arguments"]["issue_number"], l.issue);
    let finals: Vec<&Value> = items
        .iter()
        .filter(|i| i["kind"] == "agentMessage")
        .collect();
    assert!(
        finals.last().unwrap()["text"]
            .as_str()
            .unwrap()
            .starts_with("Ran the check and added notes.txt."),
        "{finals:?}"
    );

    // Small pages return the same items in the same order.
    let (_, paged) = all_items(&l.app, &task, 2);
    let ids = |v: &[Value]| v.iter().map(|i| i["itemId"].clone()).collect::<Vec<_>>();
    assert_eq!(ids(&paged), ids(&items));

    // The session's turns across tasks: this one, with its tokens.
    let r = l
        .app
        .admin_get("/api/gitea-workflow/sessions/default:acme%2Fwidgets:issue:1/turns");
    assert_eq!(r.status, 200, "{:?}", r.json);
    let session_turns = r.json["turns"].as_array().unwrap();
    assert_eq!(session_turns.len(), 1);
    assert_eq!(session_turns[0]["taskId"], task.as_str());
    assert_eq!(session_turns[0]["tokens"]["total"], tokens["total"]);
    assert_eq!(r.json["threadId"], turn["threadId"]);
}
