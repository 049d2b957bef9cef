//! The request log and the faults a test injects (500s, delays, dropped or
//! refused comments, a review answer lost).

use crate::giteasim::GiteaSim;
use std::collections::HashSet;
use std::time::Duration;

#[derive(Clone, Debug, Default)]
pub(crate) struct Match {
    pub(crate) method: Option<String>,
    pub(crate) prefix: Option<String>,
    pub(crate) suffix: Option<String>,
}

impl Match {
    pub(crate) fn hits(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && self.prefix.as_deref().is_none_or(|p| path.starts_with(p))
            && self.suffix.as_deref().is_none_or(|s| path.ends_with(s))
    }
}

#[derive(Clone, Debug)]
pub(crate) enum FaultKind {
    Fail500,
    Delay(Duration),
}

#[derive(Clone, Debug)]
pub(crate) struct Fault {
    pub(crate) left: usize,
    pub(crate) on: Match,
    pub(crate) kind: FaultKind,
}

#[derive(Default)]
pub(crate) struct Faults {
    pub(crate) list: Vec<Fault>,
    pub(crate) delay: Duration,
    pub(crate) drop_comments: usize,
    /// Reviews still to be created whose answer is a 500.
    pub(crate) lost_review_answers: usize,
    pub(crate) denied: HashSet<String>,
}

/// One request as the simulator saw it.
#[derive(Debug, Clone)]
pub struct LoggedRequest {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: String,
    /// The `Authorization` header, verbatim.
    pub authorization: Option<String>,
    /// Every header (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The request body (lossy UTF-8; empty for git's binary bodies too).
    pub body: String,
    pub status: u16,
    /// When the simulator had the whole request (before any injected delay).
    pub received: std::time::Instant,
}

impl GiteaSim {
    // -- request log and faults ------------------------------------------------

    /// Every request so far, oldest first.
    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.sim.requests.lock().unwrap().clone()
    }

    /// Answer the next `n` requests (any) with 500.
    pub fn fail_next(&self, n: usize) {
        self.push_fault(n, Match::default(), FaultKind::Fail500);
    }

    /// Answer the next `n` requests with this method (`None`: any) whose
    /// path starts with `prefix` (e.g. `/api/v1/repos/acme/widgets/issues/1/comments`) with 500.
    pub fn fail_next_matching(&self, n: usize, method: Option<&str>, prefix: &str) {
        let on = Match {
            method: method.map(str::to_owned),
            prefix: Some(prefix.to_owned()),
            suffix: None,
        };
        self.push_fault(n, on, FaultKind::Fail500);
    }

    /// Answer the next `n` requests with this method to exactly `path`
    /// (not to the paths under it) with 500.
    pub fn fail_next_exact(&self, n: usize, method: &str, path: &str) {
        // Starts and ends with the whole path: is the path.
        let on = Match {
            method: Some(method.to_owned()),
            prefix: Some(path.to_owned()),
            suffix: Some(path.to_owned()),
        };
        self.push_fault(n, on, FaultKind::Fail500);
    }

    /// The next `n` requests with this method to exactly `path` wait
    /// `delay` before being answered.
    pub fn delay_next_exact(&self, n: usize, method: &str, path: &str, delay: Duration) {
        let on = Match {
            method: Some(method.to_owned()),
            prefix: Some(path.to_owned()),
            suffix: Some(path.to_owned()),
        };
        self.push_fault(n, on, FaultKind::Delay(delay));
    }

    /// The next `n` comment listings (`GET .../comments`) answer 500.
    pub fn fail_comment_listings(&self, n: usize) {
        let on = Match {
            method: Some("GET".into()),
            prefix: Some("/api/v1/repos/".into()),
            suffix: Some("/comments".into()),
        };
        self.push_fault(n, on, FaultKind::Fail500);
    }

    /// Every answer waits `delay` first (zero to stop).
    pub fn set_delay(&self, delay: Duration) {
        self.sim.faults.lock().unwrap().delay = delay;
    }

    /// The next `n` matching requests wait `delay` before being answered.
    pub fn delay_next_matching(
        &self,
        n: usize,
        method: Option<&str>,
        prefix: &str,
        delay: Duration,
    ) {
        let on = Match {
            method: method.map(str::to_owned),
            prefix: Some(prefix.to_owned()),
            suffix: None,
        };
        self.push_fault(n, on, FaultKind::Delay(delay));
    }

    /// Every 500 and delay still waiting to be injected is dropped.
    pub fn clear_faults(&self) {
        self.sim.faults.lock().unwrap().list.clear();
    }

    /// The next `n` API comment creations answer 201 with a comment that is
    /// never stored (absent from listings and GET, no webhook).
    pub fn drop_next_comments(&self, n: usize) {
        self.sim.faults.lock().unwrap().drop_comments = n;
    }

    /// The next review created through the API (`POST .../pulls/{n}/reviews`
    /// that Gitea would answer 200) is stored and fires its webhook, but
    /// its answer is a 500 with Gitea's empty-message body: the client
    /// cannot tell that it landed. Each call loses one more answer.
    pub fn drop_next_review_answer(&self) {
        self.sim.faults.lock().unwrap().lost_review_answers += 1;
    }

    /// API comment creation by `user` answers 403 (`user is blocked`).
    pub fn deny_comments_for(&self, user: &str, deny: bool) {
        let mut f = self.sim.faults.lock().unwrap();
        if deny {
            f.denied.insert(user.to_ascii_lowercase());
        } else {
            f.denied.remove(&user.to_ascii_lowercase());
        }
    }

    fn push_fault(&self, n: usize, on: Match, kind: FaultKind) {
        self.sim
            .faults
            .lock()
            .unwrap()
            .list
            .push(Fault { left: n, on, kind });
    }
}
