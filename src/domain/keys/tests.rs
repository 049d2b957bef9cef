use super::*;
use proptest::prelude::*;

#[test]
fn a_repository_key_folds_case_and_names_its_parts() {
    let key = RepoKey::parse("default:ACME/Widgets.rs").unwrap();
    assert_eq!(key.as_str(), "default:acme/widgets.rs");
    assert_eq!(key.instance(), "default");
    assert_eq!(key.owner(), "acme");
    assert_eq!(key.name(), "widgets.rs");
    assert_eq!(key, RepoKey::new("default", "acme", "WIDGETS.rs").unwrap());
}

#[test]
fn keys_refuse_path_tricks_and_malformed_text() {
    for bad in [
        "default:acme",
        "default:acme/..",
        "default:../widgets",
        "default:acme/wid/gets",
        "Default:acme/widgets",
        ":acme/widgets",
        "default:acme/wid gets",
    ] {
        assert!(RepoKey::parse(bad).is_err(), "{bad}");
    }
    for bad in [
        "default:acme/widgets:issue:-3",
        "default:acme/widgets:merge:3",
        "default:acme/widgets:issue:x",
        "default:acme/widgets:3",
        "acme/widgets:pull:3",
    ] {
        assert!(ResourceKey::parse(bad).is_err(), "{bad}");
    }
    assert!(TaskId::parse("task-0123").is_err());
    assert!(TaskId::parse("op-0190a2b4c5d6e7f8a9b0c1d2e3f4a5b6").is_err());
    assert!(OperationId::parse("op-0190A2B4C5D6E7F8A9B0C1D2E3F4A5B6").is_err());
}

#[test]
fn a_resource_key_names_its_repository_kind_and_number() {
    let key = ResourceKey::parse("default:Acme/widgets:pull:23").unwrap();
    assert_eq!(key.as_str(), "default:acme/widgets:pull:23");
    assert_eq!(key.repo().as_str(), "default:acme/widgets");
    assert!(key.is_pull());
    assert_eq!(key.number(), 23);
    assert_eq!(key.child(), None);
    assert_eq!(key.resource(), key);
}

#[test]
fn a_child_session_key_names_its_resource_and_number() {
    let key = ResourceKey::parse("default:acme/widgets:issue:12").unwrap();
    let child = key.child_session(3);
    assert_eq!(child.as_str(), "default:acme/widgets:issue:12:child:3");
    assert_eq!(ResourceKey::parse(child.as_str()).unwrap(), child);
    assert_eq!(child.child(), Some(3));
    assert_eq!(child.resource(), key);
    assert_eq!(child.number(), 12);
    assert!(!child.is_pull());
    assert_ne!(child, key);
    assert_eq!(child.child_session(4), key.child_session(4));
    for bad in [
        "default:acme/widgets:issue:12:child:0",
        "default:acme/widgets:issue:12:child:x",
        "default:acme/widgets:issue:12:child:1:child:2",
        "default:acme/widgets:child:2",
    ] {
        assert!(ResourceKey::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn minted_ids_parse_back() {
    let task = TaskId::mint();
    assert_eq!(TaskId::parse(task.as_str()).unwrap(), task);
    let op = OperationId::mint();
    assert_eq!(OperationId::parse(op.as_str()).unwrap(), op);
    let retry = op.reply_retry();
    assert_eq!(OperationId::parse(retry.as_str()).unwrap(), retry);
    assert_ne!(retry, op);
    assert!(TaskId::parse(&format!("{}-reply-retry", TaskId::mint())).is_err());
    assert!(TaskId::mint() > task, "ids are time-ordered");
}

#[test]
fn a_comments_operation_follows_its_text_not_its_delivery() {
    let key = "default:comment:42";
    let first = OperationId::of_comment(key, "2026-12-03T10:00:00Z");
    assert_eq!(first, OperationId::of_comment(key, "2026-12-03T10:00:00Z"));
    assert_eq!(OperationId::parse(first.as_str()).unwrap(), first);
    assert_eq!(first.as_str().len(), 3 + 64);
    let edited = OperationId::of_comment(key, "2026-12-03T10:05:00Z");
    assert_ne!(edited, first, "an edit is a new operation");
    assert_ne!(
        OperationId::of_comment("default:review:42", "2026-12-03T10:00:00Z"),
        first,
        "a review and a comment with the same number are different"
    );
    assert!(edited > first, "a later comment's operation sorts after");
    assert!(
        OperationId::of_comment("default:comment:7", "2026-12-03T10:00:01+08:00")
            < OperationId::of_comment("default:comment:6", "2026-12-03T10:00:02+08:00"),
        "the time leads, whatever the comment"
    );
    let unordered = OperationId::of_comment(key, "yesterday");
    assert_eq!(OperationId::parse(unordered.as_str()).unwrap(), unordered);
    assert_eq!(unordered, OperationId::of_comment(key, "yesterday"));
    let retry = first.reply_retry();
    assert_eq!(OperationId::parse(retry.as_str()).unwrap(), retry);
    assert!(OperationId::parse(&format!("{first}0")).is_err());
    assert!(TaskId::parse(&format!("task-{}", "a".repeat(64))).is_err());
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_][A-Za-z0-9._-]{0,20}".prop_filter("not a dot path", |s| s != "." && s != "..")
}

proptest! {
    /// Any two spellings of one repository that differ in case are one
    /// key, and a key's text parses back to the same key.
    #[test]
    fn keys_round_trip_and_fold_case(owner in name(), repo in name(), number in 1i64..1_000_000, pull: bool) {
        let key = RepoKey::new("default", &owner, &repo).unwrap();
        prop_assert_eq!(&RepoKey::new("default", &owner.to_uppercase(), &repo.to_lowercase()).unwrap(), &key);
        prop_assert_eq!(&RepoKey::parse(key.as_str()).unwrap(), &key);
        let kind = if pull { ResourceKind::Pull } else { ResourceKind::Issue };
        let resource = ResourceKey::new(key.clone(), kind, number);
        let again = ResourceKey::parse(resource.as_str()).unwrap();
        prop_assert_eq!(again.repo(), &key);
        prop_assert_eq!(again.kind(), kind);
        prop_assert_eq!(again.number(), number);
        prop_assert_eq!(&again, &resource);
        let child = resource.child_session(number);
        prop_assert_eq!(&ResourceKey::parse(child.as_str()).unwrap(), &child);
        prop_assert_eq!(child.resource(), resource);
    }
}

/// The ids of comments already stored must be derived again to the letter
/// (a redelivery after an upgrade finds its operation by it): the id is the
/// same as `format!` wrote it.
#[test]
fn a_comments_operation_id_is_what_it_always_was() {
    use sha2::{Digest, Sha256};
    for (key, at) in [
        ("default:comment:42", "2026-12-03T10:00:00Z"),
        ("default:review:7", "1970-01-01T00:00:00.001Z"),
        ("other:comment:1", "2026-12-03T10:00:01+08:00"),
        ("default:comment:9", "yesterday"),
    ] {
        let mut h = Sha256::new();
        h.update(key.as_bytes());
        h.update([0]);
        h.update(at.as_bytes());
        let hash = hex::encode(h.finalize());
        let expected = match chrono::DateTime::parse_from_rfc3339(at) {
            Ok(t) => format!("op-{:012x}{}", t.timestamp_millis(), &hash[..52]),
            Err(_) => format!("op-{hash}"),
        };
        assert_eq!(OperationId::of_comment(key, at).as_str(), expected);
    }
    let repo = RepoKey::new("default", "acme", "widgets").unwrap();
    for (kind, number) in [(ResourceKind::Issue, 7), (ResourceKind::Pull, i64::MAX)] {
        assert_eq!(
            ResourceKey::new(repo.clone(), kind, number).as_str(),
            format!("default:acme/widgets:{}:{number}", kind.as_str())
        );
    }
}
