//! The runtime's calls reaching workers, answers and events included, are
//! tested with the route the server uses (`actors::worker_calls`), which
//! keeps them in the store.

use super::*;
use proptest::prelude::*;

proptest! {
    #[test]
    fn a_reference_names_its_repository_and_id_back(
        owner in "[a-z0-9][a-z0-9._-]{0,10}",
        name in "[a-z0-9][a-z0-9._-]{0,10}",
        id in "[A-Za-z0-9:_-]{1,40}",
    ) {
        let repository = format!("{owner}/{name}");
        let r = make_ref(&repository, &id);
        prop_assert_eq!(parse_ref(&r), Some((repository.as_str(), id.as_str())));
    }
}

#[test]
fn foreign_references_and_folders_outside_the_root_are_refused() {
    for bad in [
        "",
        "thread-1",
        "remote:",
        "remote:acme:t",
        "remote:acme/w:",
        "remote:/w:t",
    ] {
        assert_eq!(parse_ref(bad), None, "{bad}");
    }
    let root = Path::new("/srv/ws");
    assert_eq!(
        relative_cwd(root, Path::new("/srv/ws/worktrees/default/acme/w/issue-1")).as_deref(),
        Some("worktrees/default/acme/w/issue-1")
    );
    for bad in ["/srv/ws", "/srv/other/x", "/srv/ws/../x"] {
        assert_eq!(relative_cwd(root, Path::new(bad)), None, "{bad}");
    }
}
