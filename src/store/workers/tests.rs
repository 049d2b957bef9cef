use super::*;
use crate::config::DatabaseUrl;
use crate::store::{run_migrations, ConnSettings};

fn db(dir: &tempfile::TempDir) -> DbConn {
    let mut c = DbConn::establish(&ConnSettings {
        url: DatabaseUrl::Sqlite(dir.path().join("db.sqlite")),
        sqlite_busy_timeout: std::time::Duration::from_secs(5),
        read_only: false,
    })
    .unwrap();
    run_migrations(&mut c).unwrap();
    c
}

fn request(id: &str) -> ControlRequest {
    ControlRequest {
        request_id: id.into(),
        reason: "a build machine".into(),
        actor: "admin:alice".into(),
    }
}

fn repos(texts: &[&str]) -> Vec<RepoName> {
    let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
    RepoName::parse_list(&texts).unwrap()
}

#[test]
fn repositories_are_owner_slash_name_folded_and_nothing_else() {
    assert_eq!(
        repos(&["ACME/Widgets", "acme/widgets", "a.b/c-d_e"])
            .iter()
            .map(RepoName::as_str)
            .collect::<Vec<_>>(),
        ["a.b/c-d_e", "acme/widgets"]
    );
    for bad in [
        "",
        "acme",
        "/widgets",
        "acme/",
        "../x",
        "x/..",
        "./x",
        "a/b/c",
        "acme//widgets",
        "acme\\widgets",
        "acme/wid gets",
        "acme/wid%2Fgets",
        " acme/widgets",
    ] {
        let e = RepoName::parse(bad).unwrap_err();
        assert_eq!(e.code, "invalid_repositories", "{bad:?}");
    }
    assert_eq!(
        RepoName::parse_list(&[]).unwrap_err().code,
        "invalid_repositories"
    );
    let many: Vec<String> = (0..=REPOSITORIES_MAX).map(|i| format!("a/r{i}")).collect();
    assert!(RepoName::parse_list(&many).is_err());
}

#[test]
fn names_versions_ids_and_tokens_have_their_shapes() {
    assert_eq!(WorkerName::parse("  build-1 ").unwrap().as_str(), "build-1");
    for bad in ["", "   ", "a\nb", &"x".repeat(NAME_MAX + 1)] {
        assert_eq!(
            WorkerName::parse(bad).unwrap_err().code,
            "invalid_worker_name"
        );
    }
    assert!(WorkerName::parse(&"é".repeat(NAME_MAX)).is_ok());
    assert!(WorkerVersion::parse("0.1.0 (abc123)").is_ok());
    for bad in ["", "1\n2", &"9".repeat(VERSION_MAX + 1)] {
        assert_eq!(
            WorkerVersion::parse(bad).unwrap_err().code,
            "invalid_version"
        );
    }

    let id = WorkerId::mint();
    assert_eq!(WorkerId::parse(id.as_str()), Some(id));
    for bad in [
        "",
        "wrk-",
        "wrk-XYZ",
        "task-0123456789abcdef0123456789abcdef",
    ] {
        assert_eq!(WorkerId::parse(bad), None, "{bad}");
    }

    let token = WorkerToken::mint().unwrap();
    assert_ne!(token.expose(), WorkerToken::mint().unwrap().expose());
    assert_eq!(token.expose().len(), TOKEN_PREFIX.len() + 64);
    let presented = WorkerToken::from_presented(token.expose()).unwrap();
    assert_eq!(presented.hash(), token.hash());
    assert!(!format!("{token:?}").contains(&token.expose()[4..]));
    for bad in ["", "cbw_", "Bearer x", &token.expose().to_uppercase()] {
        assert!(WorkerToken::from_presented(bad).is_none(), "{bad}");
    }
}

#[test]
fn a_worker_is_created_once_authenticated_by_its_token_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = db(&dir);
    let name = WorkerName::parse("build-1").unwrap();
    let created = create(&mut c, &request("r1"), &name, &repos(&["acme/widgets"])).unwrap();
    assert_eq!(created.event.action, "worker.created");
    let text = serde_json::to_string(&created.event).unwrap();
    assert!(!text.contains(created.token.expose()) && !text.contains(&created.token.hash()));

    // The same requestId mints nothing; with another body it conflicts.
    let again = create(&mut c, &request("r1"), &name, &repos(&["acme/widgets"])).unwrap_err();
    assert!(
        matches!(&again, StoreError::Refused { code: "request_replayed", message }
            if message.contains(created.worker.worker_id.as_str())),
        "{again:?}"
    );
    let other = create(&mut c, &request("r1"), &name, &repos(&["acme/other"])).unwrap_err();
    assert!(matches!(
        other,
        StoreError::Refused {
            code: "request_id_conflict",
            ..
        }
    ));
    assert_eq!(list(&mut c).unwrap(), vec![created.worker.clone()]);

    let worker = authenticate(&mut c, &created.token).unwrap().unwrap();
    assert_eq!(worker.worker_id, created.worker.worker_id);
    assert_eq!(worker.repositories, created.worker.repositories);
    assert_eq!(
        authenticate(&mut c, &WorkerToken::mint().unwrap()).unwrap(),
        None
    );

    let version = WorkerVersion::parse("1.2.3").unwrap();
    assert!(seen(&mut c, &worker.worker_id, &version, Some(3)).unwrap());
    let listed = find(&mut c, &worker.worker_id).unwrap().unwrap();
    assert!(listed.last_seen_at.is_some());
    assert_eq!(listed.version.as_deref(), Some("1.2.3"));
    assert_eq!(listed.uncertain_turns, Some(3));

    let first = revoke(&mut c, &request("r2"), &worker.worker_id).unwrap();
    assert_eq!(first.metadata["wasRevoked"], false);
    assert_eq!(
        revoke(&mut c, &request("r2"), &worker.worker_id)
            .unwrap()
            .event_id,
        first.event_id
    );
    let later = revoke(&mut c, &request("r3"), &worker.worker_id).unwrap();
    assert_eq!(later.metadata["wasRevoked"], true);
    assert_eq!(later.metadata["revokedAt"], first.metadata["revokedAt"]);
    assert_eq!(authenticate(&mut c, &created.token).unwrap(), None);
    assert!(!seen(&mut c, &worker.worker_id, &version, None).unwrap());
    let unknown = WorkerId::mint();
    assert!(matches!(
        revoke(&mut c, &request("r4"), &unknown),
        Err(StoreError::NotFound(_))
    ));
}
