//! The runtime's calls reaching workers, answers and events included, are
//! tested with the route the server uses (`actors::worker_calls`), which
//! keeps them in the store; its references in `reference`.

use super::*;

#[test]
fn folders_outside_the_root_are_refused() {
    let root = Path::new("/srv/ws");
    assert_eq!(
        relative_cwd(root, Path::new("/srv/ws/worktrees/default/acme/w/issue-1")).as_deref(),
        Some("worktrees/default/acme/w/issue-1")
    );
    for bad in ["/srv/ws", "/srv/other/x", "/srv/ws/../x"] {
        assert_eq!(relative_cwd(root, Path::new(bad)), None, "{bad}");
    }
}

#[test]
fn a_reference_of_another_runtime_is_refused_and_says_so() {
    let e = reference("thread", "019a-local-thread").unwrap_err();
    assert!(
        matches!(&e, AgentError::Refused(m) if m.contains("not a reference of the remote runtime")),
        "{e:?}"
    );
}
