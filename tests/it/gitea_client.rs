//! The Gitea REST client and the receipts worker against the Gitea simulator:
//! reads retried with backoff, writes never retried blindly, Gitea's errors
//! surfaced with their status, and a receipt whose POST happened before a
//! crash is found by its marker instead of being posted twice. The client and
//! the worker are driven directly, below any server.

use crate::giteasim::{GiteaSim, Perm};
use crate::support::{poll_until_async, BOT, GITEA_TOKEN};
use codex_bridge::config::DatabaseUrl;
use codex_bridge::gitea::receipts::ReceiptMode;
use codex_bridge::gitea::{GiteaClient, GiteaError, GiteaForge, Permission, TriggerPolicy};
use codex_bridge::jobs::receipts::ReceiptWorker;
use codex_bridge::store::{comments, ingest};
use std::sync::Arc;
use std::time::Duration;

fn client(sim: &GiteaSim) -> GiteaClient {
    GiteaClient::new(&sim.base_url(), GITEA_TOKEN.to_owned().into())
        .with_read_backoff(vec![Duration::from_millis(10), Duration::from_millis(10)])
}

fn posts(sim: &GiteaSim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/comments"))
        .count()
}

#[test]
fn reads_are_retried_writes_are_not_and_gitea_errors_keep_their_status() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    let n = sim.create_issue("acme", "widgets", "t", "b", "acme");
    let c = client(&sim);
    assert!(!c.version().unwrap().is_empty());

    // Two 500s, then the listing answers: a read rides over them.
    sim.fail_next_matching(2, Some("GET"), "/api/v1/repos/acme/widgets/issues");
    assert_eq!(c.list_comments("acme", "widgets", n).unwrap(), vec![]);
    // Three in a row outlast the attempts: a transient error, with the status.
    sim.fail_next_matching(3, Some("GET"), "/api/v1/repos/acme/widgets/issues");
    let e = c.list_comments("acme", "widgets", n).unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert!(e.is_transient());

    // A failed POST is not repeated by the client.
    sim.fail_next_matching(1, Some("POST"), "/api/v1/repos/acme/widgets/issues");
    let before = posts(&sim);
    let e = c.create_comment("acme", "widgets", n, "hello").unwrap_err();
    assert_eq!(e.status(), Some(500));
    assert_eq!(posts(&sim), before + 1, "a write is sent once");
    let made = c.create_comment("acme", "widgets", n, "hello").unwrap();
    assert_eq!(made.author(), BOT);
    assert_eq!(
        c.get_comment("acme", "widgets", made.id)
            .unwrap()
            .unwrap()
            .body,
        "hello"
    );

    // Gitea's own messages come through: 404 and 422.
    let e = c.list_comments("acme", "nope", 1).unwrap_err();
    assert!(
        matches!(&e, GiteaError::Status { status: 404, message, .. } if message.contains("target couldn't be found")),
        "{e}"
    );
    let e = c.create_comment("acme", "widgets", n, "").unwrap_err();
    assert_eq!(e.status(), Some(422), "{e}");
    assert!(!e.is_transient());

    // Reactions: 201 new, 200 already there.
    assert!(c.add_reaction("acme", "widgets", made.id, "eyes").unwrap());
    assert!(!c.add_reaction("acme", "widgets", made.id, "eyes").unwrap());
    assert_eq!(
        c.list_reactions("acme", "widgets", made.id).unwrap(),
        vec![(BOT.to_owned(), "eyes".to_owned())]
    );

    // Issue, pull request, repository.
    assert_eq!(c.get_issue("acme", "widgets", n).unwrap()["number"], n);
    sim.commit("acme", "widgets", "feature", "f.txt", "x\n", "feature");
    let pr = sim.create_pull("acme", "widgets", "p", "", "acme", "feature", "main");
    let refs = c.get_pull("acme", "widgets", pr).unwrap();
    assert_eq!(
        (refs.head_ref.as_str(), refs.base_ref.as_str()),
        ("feature", "main")
    );
    assert_eq!(refs.head_sha, sim.branch_head("acme", "widgets", "feature"));
    let repo = c.get_repo("acme", "widgets").unwrap();
    assert_eq!(repo.default_branch, "main");
    assert_eq!(repo.clone_url, sim.clone_url("acme", "widgets"));

    // Permissions: a writer may not read others' (403); an admin may.
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let e = c.permission("acme", "widgets", "bob").unwrap_err();
    assert_eq!(e.status(), Some(403));
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    assert_eq!(
        c.permission("acme", "widgets", "bob").unwrap(),
        Permission::Write
    );
    assert_eq!(
        c.permission("acme", "widgets", "acme").unwrap(),
        Permission::Admin
    );

    // The token travelled only as `Authorization: token …`.
    assert!(sim
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/api/v1/repos"))
        .all(
            |r| r.authorization.as_deref() == Some(&format!("token {GITEA_TOKEN}")[..])
                && !r.query.contains(GITEA_TOKEN)
        ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_posted_before_a_crash_is_found_by_its_marker_not_posted_again() {
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    sim.add_user("bob");
    sim.set_permission("acme", "widgets", "bob", Perm::Write);
    let n = sim.create_issue("acme", "widgets", "t", "b", "bob");
    let dir = tempfile::tempdir().unwrap();
    let store = crate::support::open_store(DatabaseUrl::Sqlite(dir.path().join("r.db")));
    let req = crate::actors::request("widgets", n, 4242, "@ccbot hi");
    let out = store.write(move |c| ingest::ingest(c, &req)).await.unwrap();
    let ingest::IngestOutcome::Accepted { task_id, .. } = out else {
        panic!("{out:?}")
    };
    let key = comments::receipt_key(&task_id, "received".parse().unwrap());
    // The state a crash leaves: the intent recorded, the comment in Gitea,
    // the result never recorded.
    let k = key.clone();
    store
        .write(move |c| {
            comments::mark(
                c,
                &k,
                &comments::Outcome {
                    status: codex_bridge::domain::states::CommentStatus::Posting,
                    count_attempt: true,
                    ..Default::default()
                },
            )
        })
        .await
        .unwrap();
    let c = client(&sim);
    let earlier = c
        .create_comment(
            "acme",
            "widgets",
            n,
            &format!("👀 Received.\n\n<!-- codex-bridge receipt={key} -->"),
        )
        .unwrap();
    let before = posts(&sim);

    let forge = Arc::new(GiteaForge::new(c.clone(), BOT, TriggerPolicy::default()));
    let worker = ReceiptWorker {
        store: store.clone(),
        client: c,
        forge,
        bot_login: BOT.into(),
        mode: ReceiptMode::Comment,
        safety_interval: ReceiptWorker::SAFETY_INTERVAL,
    };
    let running = tokio::spawn(worker.run());
    let posted = || async {
        let k = key.clone();
        store
            .read(move |c| comments::find(c, &k))
            .await
            .unwrap()
            .unwrap()
    };
    let found = poll_until_async(Duration::from_secs(20), || async {
        posted().await.status.as_str() == "posted"
    })
    .await;
    let row = posted().await;
    assert!(found, "still {row:?}");
    running.abort();
    assert_eq!(
        row.comment_id,
        Some(earlier.id),
        "the earlier comment is the receipt"
    );
    assert_eq!(posts(&sim), before, "no second receipt was posted");
    let with_marker = sim
        .comments("acme", "widgets", n)
        .into_iter()
        .filter(|c| c["body"].as_str().unwrap().contains(&key))
        .count();
    assert_eq!(with_marker, 1);
}

/// What a pull request's trust rests on, read as Gitea states it: a
/// same-repository head by an admin is provably ours; a fork's head, or a
/// head whose author maps to no user (or to one without write), is not.
#[actix_web::test]
async fn pull_request_facts_name_a_forks_head_and_an_unknown_author() {
    use codex_bridge::domain::trust::PrFacts;
    use codex_bridge::domain::ResourceKey;
    use codex_bridge::forge::Forge;
    let sim = GiteaSim::start();
    sim.create_repo("acme", "widgets");
    sim.set_permission("acme", "widgets", BOT, Perm::Admin);
    let forge = GiteaForge::new(client(&sim), BOT, TriggerPolicy::default());
    let key = |n: i64| ResourceKey::parse(&format!("default:acme/widgets:pull:{n}")).unwrap();

    sim.commit("acme", "widgets", "topic", "t.txt", "t\n", "topic");
    let ours = sim.create_pull("acme", "widgets", "Ours", "", "acme", "topic", "main");
    let facts = forge.pr_facts(key(ours)).await.unwrap();
    assert_eq!(
        facts,
        PrFacts {
            head_in_base_repo: true,
            head_author_permitted: true
        }
    );

    sim.commit_as("acme", "widgets", "stray", "s.txt", "s\n", "stray", None);
    let stray = sim.create_pull("acme", "widgets", "Stray", "", "acme", "stray", "main");
    let facts = forge.pr_facts(key(stray)).await.unwrap();
    assert!(
        facts.head_in_base_repo && !facts.head_author_permitted,
        "{facts:?}"
    );

    sim.add_user("mallory");
    sim.fork_repo("acme", "widgets", "mallory");
    sim.commit_as(
        "mallory",
        "widgets",
        "evil",
        "e.txt",
        "e\n",
        "evil",
        Some("mallory"),
    );
    let fork = sim.create_fork_pull(
        "acme", "widgets", "mallory", "Evil", "", "mallory", "evil", "main",
    );
    let facts = forge.pr_facts(key(fork)).await.unwrap();
    assert_eq!(
        facts,
        PrFacts {
            head_in_base_repo: false,
            head_author_permitted: false
        }
    );
    // The fork's commit is in the base repository, as Gitea keeps it.
    assert_eq!(
        sim.resolve_pull_head("acme", "widgets", fork),
        sim.branch_head("mallory", "widgets", "evil")
    );
}
