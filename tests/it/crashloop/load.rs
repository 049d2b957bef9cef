//! The steady load of the crash loop: a thread that keeps commenting as
//! people do — mentions (some of whose turns ask for an approval), steers,
//! `/approve` of pending approvals, and Gitea's replays of earlier
//! deliveries — whether or not the server is up at that moment.

use super::rng::Rng;
use super::{Op, OpKind, OWNER, REPO};
use crate::fakemodel::{Item, Step};
use crate::support::*;
use crate::testapp::SharedPeers;
use diesel::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the load did, for the checks.
#[derive(Default)]
pub struct Record {
    /// Every operation sent to the agent, by nonce.
    pub ops: Vec<Op>,
    /// Gitea's replays asked for.
    pub replays: usize,
    /// `/approve` comments written.
    pub approvals: usize,
}

pub struct Load {
    stop: Arc<AtomicBool>,
    record: Arc<Mutex<Record>>,
    thread: Option<JoinHandle<()>>,
}

impl Load {
    pub fn start(peers: SharedPeers, db_url: String, issues: Vec<i64>, seed: u64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let record = Arc::new(Mutex::new(Record::default()));
        let (s, r) = (stop.clone(), record.clone());
        let thread = std::thread::Builder::new()
            .name("crashloop-load".into())
            .spawn(move || run(&peers, &db_url, &issues, seed, &s, &r))
            .unwrap();
        Load {
            stop,
            record,
            thread: Some(thread),
        }
    }

    /// Stops the load and hands over what it did.
    pub fn finish(mut self) -> Record {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().expect("the load thread panicked");
        }
        std::mem::take(&mut *self.record.lock().unwrap())
    }

    /// The operations so far.
    pub fn ops(&self) -> Vec<Op> {
        self.record.lock().unwrap().ops.clone()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    peers: &SharedPeers,
    db_url: &str,
    issues: &[i64],
    seed: u64,
    stop: &AtomicBool,
    record: &Mutex<Record>,
) {
    let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut approved = BTreeMap::new();
    let mut n = 0u32;
    while !stop.load(Ordering::SeqCst) {
        // About one comment every two seconds: a rate the server keeps up
        // with between kills (four sessions, turns of a few seconds), so
        // the queue stays short and every kill meets work in all states.
        std::thread::sleep(Duration::from_millis(rng.between(800, 3_000)));
        let issue = issues[rng.below(issues.len() as u64) as usize];
        match rng.below(100) {
            0..=54 => {
                n += 1;
                let think = Duration::from_millis(rng.below(2_000));
                let op = mention(peers, issue, seed, n, rng.below(4) == 0, think);
                record.lock().unwrap().ops.push(op);
            }
            55..=69 => {
                let delivered: Vec<String> = peers
                    .gitea()
                    .deliveries()
                    .into_iter()
                    .filter(|d| d.status.is_some())
                    .map(|d| d.id)
                    .collect();
                if !delivered.is_empty() {
                    let pick = &delivered[rng.below(delivered.len() as u64) as usize];
                    peers.gitea().redeliver(pick);
                    record.lock().unwrap().replays += 1;
                }
            }
            70..=79 => {
                n += 1;
                let nonce = nonce(seed, n);
                let text = format!("@{BOT} /steer also mention {nonce} in the answer");
                let comment = peers
                    .gitea()
                    .post_comment_as("bob", OWNER, REPO, issue, &text);
                record.lock().unwrap().ops.push(Op {
                    nonce,
                    kind: OpKind::Steer,
                    issue,
                    comment: comment["id"].as_i64().unwrap(),
                });
            }
            _ => {
                let written = approve_pending(peers, db_url, &mut approved);
                record.lock().unwrap().approvals += written;
            }
        }
    }
}

/// An operation's nonce: unique in the run, and never a prefix of another.
pub fn nonce(seed: u64, n: u32) -> String {
    format!("[op-{seed:x}-{n:06}]")
}

/// Bob asks for work naming a fresh nonce; the model's script for the turn
/// whose newest input carries it: (a command that needs an approval,) the
/// reply through gitea-mcp, the final message.
/// The model takes `think` before the reply, so kills land mid-turn too.
pub fn mention(
    peers: &SharedPeers,
    issue: i64,
    seed: u64,
    n: u32,
    approval: bool,
    think: Duration,
) -> Op {
    let nonce = nonce(seed, n);
    let model = peers.model();
    if approval {
        model.push_for_newest(&nonce, Step::shell(&format!("touch op-{n}.txt")));
    }
    // The reply's text never carries the nonce: a re-post turn's prompt
    // quotes it, and must not count as a second sending of the operation.
    model.push_for_newest(
        &nonce,
        Step::Reply(vec![Item::mcp(
            "gitea",
            "add_comment",
            json!({
                "owner": OWNER,
                "repo": REPO,
                "issue_number": issue,
                "body": format!("Handled request {n}.\n\n{{{{marker}}}}"),
            }),
        )])
        .delayed(think),
    );
    model.push_for_newest(
        &nonce,
        Step::message(&format!("Handled request {n}.\n\n{{{{marker}}}}")),
    );
    let text = format!("@{BOT} please handle {nonce}");
    let comment = peers
        .gitea()
        .post_comment_as("bob", OWNER, REPO, issue, &text);
    Op {
        comment: comment["id"].as_i64().unwrap(),
        nonce,
        kind: if approval {
            OpKind::MentionWithApproval
        } else {
            OpKind::Mention
        },
        issue,
    }
}

#[derive(QueryableByName)]
struct Pending {
    #[diesel(sql_type = diesel::sql_types::Text)]
    approval_id: String,
    #[diesel(sql_type = diesel::sql_types::Text)]
    resource_key: String,
}

/// Bob writes `/approve <id>` in the thread of every pending approval he
/// did not approve in the last ten seconds (his comment's webhook may have
/// met a dead server); how many he wrote.
pub fn approve_pending(
    peers: &SharedPeers,
    db_url: &str,
    approved: &mut BTreeMap<String, Instant>,
) -> usize {
    let mut conn = connect(db_url);
    let pending: Vec<Pending> = codex_bridge::with_conn!(&mut conn, |c| diesel::sql_query(
        "SELECT a.approval_id, t.resource_key FROM approvals a \
         JOIN tasks t ON t.task_id = a.task_id WHERE a.status = 'pending'"
    )
    .load(c))
    .unwrap();
    let mut written = 0;
    for p in pending {
        if approved
            .get(&p.approval_id)
            .is_some_and(|at| at.elapsed() < Duration::from_secs(10))
        {
            continue;
        }
        approved.insert(p.approval_id.clone(), Instant::now());
        let number = codex_bridge::domain::ResourceKey::parse(&p.resource_key)
            .unwrap()
            .number();
        let text = format!("@{BOT} /approve {}", p.approval_id);
        peers
            .gitea()
            .post_comment_as("bob", OWNER, REPO, number, &text);
        written += 1;
    }
    written
}
