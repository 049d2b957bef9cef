//! Sessions' own worktrees against the git smart-HTTP simulator: each
//! session keeps its uncommitted work between turns, "dirty" means changed
//! since the session's last turn ended, another session's worktree never
//! blocks this one, and retiring a worktree keeps what it held.

use crate::workspace::{default_branch, env, git, spec, Env};
use codex_bridge::domain::ResourceKind;
use codex_bridge::workspace::{
    Checkout, Disposition, SessionTree, TreeState, WorkspaceError, WorktreeId,
};

fn issue(number: i64) -> WorktreeId {
    WorktreeId {
        kind: ResourceKind::Issue,
        number,
        child: None,
    }
}

/// What the session's worktree holds now (it must have one).
fn now_in(e: &Env, id: WorktreeId) -> TreeState {
    e.manager
        .tree_state("acme", "widgets", id)
        .unwrap()
        .expect("the session has a worktree")
}

fn fresh(id: WorktreeId) -> SessionTree<'static> {
    SessionTree { id, recorded: None }
}

fn after(id: WorktreeId, recorded: &TreeState) -> SessionTree<'_> {
    SessionTree {
        id,
        recorded: Some(recorded),
    }
}

#[test]
fn worktree_sessions_keep_their_own_uncommitted_work_between_turns() {
    let e = env();
    let first = e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");
    let main = default_branch();

    let one = e
        .manager
        .prepare_session(&s, &main, fresh(issue(1)))
        .unwrap();
    let two = e
        .manager
        .prepare_session(&s, &main, fresh(issue(2)))
        .unwrap();
    assert_eq!(
        one.path,
        e.root.join(".worktrees/default/acme/widgets/issue-1")
    );
    assert_ne!(one.path, two.path);
    assert_eq!(
        (one.branch.as_str(), one.head.as_str()),
        ("codex/issue-1", first.as_str())
    );
    assert_eq!(
        git(&two.path, &["symbolic-ref", "--short", "HEAD"]),
        "codex/issue-2"
    );

    // A turn in each leaves uncommitted work; its end records the state.
    std::fs::write(one.path.join("README.md"), "edited by session one\n").unwrap();
    std::fs::write(one.path.join("one.txt"), "one\n").unwrap();
    std::fs::write(two.path.join("two.txt"), "two\n").unwrap();
    let state_one = now_in(&e, issue(1));
    let state_two = now_in(&e, issue(2));
    assert_ne!(state_one.tree, state_two.tree);
    // Ignored paths (build output) are not the session's state.
    std::fs::write(one.path.join(".gitignore"), "target/\n").unwrap();
    let with_ignore = now_in(&e, issue(1));
    std::fs::create_dir_all(one.path.join("target")).unwrap();
    std::fs::write(one.path.join("target/out.bin"), "build\n").unwrap();
    assert_eq!(now_in(&e, issue(1)), with_ignore);
    // The state was read without touching the agent's own index.
    assert_eq!(git(&one.path, &["diff", "--cached", "--name-only"]), "");
    let state_one = with_ignore;

    // The default branch moves on, and the repository's own checkout is
    // dirty: neither matters to a session.
    e.sim.commit(
        "acme",
        "widgets",
        "main",
        "upstream.txt",
        "up\n",
        "upstream",
    );
    std::fs::write(e.root.join("default/acme/widgets/stray.txt"), "x\n").unwrap();

    let one_again = e
        .manager
        .prepare_session(&s, &main, after(issue(1), &state_one))
        .unwrap();
    assert_eq!(one_again.path, one.path);
    assert_eq!(
        one_again.head, first,
        "an Issue's branch never moves on its own"
    );
    assert_eq!(
        std::fs::read_to_string(one.path.join("README.md")).unwrap(),
        "edited by session one\n"
    );
    assert!(one.path.join("one.txt").exists() && !one.path.join("two.txt").exists());
    e.manager
        .prepare_session(&s, &main, after(issue(2), &state_two))
        .unwrap();
    assert!(two.path.join("two.txt").exists() && !two.path.join("one.txt").exists());

    // Someone else edits session one's worktree after its turn ended.
    std::fs::write(one.path.join("one.txt"), "tampered\n").unwrap();
    let err = e
        .manager
        .prepare_session(&s, &main, after(issue(1), &state_one))
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::Dirty { .. }), "{err}");
    assert_eq!(err.disposition(), Disposition::NeedsOperator);
    assert!(
        err.to_string()
            .contains("changed since the session's last turn ended"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(one.path.join("one.txt")).unwrap(),
        "tampered\n",
        "nothing is reset"
    );
    // The other session is not held up by it.
    e.manager
        .prepare_session(&s, &main, after(issue(2), &state_two))
        .unwrap();
    // An operator who cleared the workspace: taken as it is.
    e.manager
        .prepare_session(&s, &main, fresh(issue(1)))
        .unwrap();

    // A session's worktree on another branch, or mid-merge, waits too.
    let state_two = now_in(&e, issue(2));
    git(&two.path, &["switch", "-q", "-c", "elsewhere"]);
    let err = e
        .manager
        .prepare_session(&s, &main, after(issue(2), &state_two))
        .unwrap_err();
    assert!(
        err.to_string().contains("not on its session's branch"),
        "{err}"
    );
}

#[test]
fn worktree_of_a_pull_request_follows_its_head_only_while_it_holds_no_uncommitted_work() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x1\n", "x1");
    let head1 = e.sim.create_pull("acme", "widgets", 7, "feature/x");
    let s = spec(&e.sim, "acme", "widgets");
    let pr = Checkout::PullRequest {
        number: 7,
        head_ref: "feature/x".into(),
    };
    let id = WorktreeId {
        kind: ResourceKind::Pull,
        number: 7,
        child: None,
    };
    let p = e.manager.prepare_session(&s, &pr, fresh(id)).unwrap();
    assert_eq!(
        (p.branch.as_str(), p.head.as_str()),
        ("codex/pull-7", head1.as_str())
    );
    assert_eq!(
        p.path,
        e.root.join(".worktrees/default/acme/widgets/pull-7")
    );

    // Pushed to while the worktree is clean: fast-forwarded.
    let state = now_in(&e, id);
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x2\n", "x2");
    let head2 = e.sim.create_pull("acme", "widgets", 7, "feature/x");
    let p = e
        .manager
        .prepare_session(&s, &pr, after(id, &state))
        .unwrap();
    assert_eq!(p.head, head2);

    // Pushed to while the agent's work is uncommitted: left where it is.
    std::fs::write(p.path.join("wip.txt"), "wip\n").unwrap();
    let state = now_in(&e, id);
    e.sim
        .commit("acme", "widgets", "feature/x", "x.txt", "x3\n", "x3");
    e.sim.create_pull("acme", "widgets", 7, "feature/x");
    let p = e
        .manager
        .prepare_session(&s, &pr, after(id, &state))
        .unwrap();
    assert_eq!(p.head, head2);
    assert!(p.path.join("wip.txt").exists());
}

#[test]
fn worktree_retired_keeps_its_uncommitted_work_and_comes_back_from_its_branch() {
    let e = env();
    e.sim.create_repo("acme", "widgets");
    let s = spec(&e.sim, "acme", "widgets");
    let main = default_branch();
    let p = e
        .manager
        .prepare_session(&s, &main, fresh(issue(3)))
        .unwrap();
    std::fs::write(p.path.join("done.txt"), "committed\n").unwrap();
    git(&p.path, &["add", "done.txt"]);
    git(&p.path, &["commit", "-q", "-m", "agent's commit"]);
    std::fs::write(p.path.join("wip.txt"), "uncommitted\n").unwrap();

    let retired = e
        .manager
        .retire_session("acme", "widgets", issue(3))
        .unwrap();
    assert!(retired.removed);
    let kept = retired.kept.expect("the uncommitted work is kept");
    assert_eq!(kept, "refs/codex-bridge/retired/issue-3");
    assert!(!p.path.exists());
    let clone = e.root.join("default/acme/widgets");
    assert_eq!(
        git(&clone, &["show", &format!("{kept}:wip.txt")]),
        "uncommitted"
    );
    assert_eq!(
        e.manager.tree_state("acme", "widgets", issue(3)).unwrap(),
        None
    );

    // Mentioned again: made again from its branch, its commits on it.
    let again = e
        .manager
        .prepare_session(&s, &main, fresh(issue(3)))
        .unwrap();
    assert_eq!(again.path, p.path);
    assert!(again.path.join("done.txt").exists());
    assert!(!again.path.join("wip.txt").exists());

    // Retiring a clean worktree keeps nothing; retiring one that is gone
    // is a no-op.
    let clean = e
        .manager
        .retire_session("acme", "widgets", issue(3))
        .unwrap();
    assert_eq!((clean.removed, clean.kept), (true, None));
    let gone = e
        .manager
        .retire_session("acme", "widgets", issue(3))
        .unwrap();
    assert_eq!((gone.removed, gone.kept), (false, None));

    // Deleted by hand while it held uncommitted work: fail closed.
    let p = e
        .manager
        .prepare_session(&s, &main, fresh(issue(4)))
        .unwrap();
    std::fs::write(p.path.join("wip.txt"), "only here\n").unwrap();
    let state = now_in(&e, issue(4));
    std::fs::remove_dir_all(&p.path).unwrap();
    let err = e
        .manager
        .prepare_session(&s, &main, after(issue(4), &state))
        .unwrap_err();
    assert_eq!(err.code(), "workspace_dirty", "{err}");
    assert!(err.to_string().contains("is gone"), "{err}");
    assert!(!p.path.exists());
    // Deleted by hand while clean: made again.
    e.manager
        .prepare_session(&s, &main, fresh(issue(4)))
        .unwrap();
    let state = now_in(&e, issue(4));
    std::fs::remove_dir_all(&p.path).unwrap();
    e.manager
        .prepare_session(&s, &main, after(issue(4), &state))
        .unwrap();
    assert!(p.path.join("README.md").exists());
}
