//! The task a comment posted in the Gitea simulator made.

use super::TestApp;
use crate::support::{connect, count_where};
use serde_json::Value;

impl TestApp {
    /// The task `comment` (as the simulator answered its post) made, once
    /// the simulator has delivered its webhook to this app.
    ///
    /// The webhook makes it and answers 202, unless the catch-up got there
    /// first: its periodic listing of the repository (on by default, as in
    /// production) can read a comment between the simulator storing it and
    /// the webhook's commit, on a loaded machine more than a few
    /// milliseconds. The webhook is then answered `duplicate` of the
    /// catch-up's task for the same comment, which is the one task the
    /// comment has. Any other answer fails: a duplicate of anything else
    /// means the comment was taken twice.
    pub fn task_of_comment(&self, comment: &Value) -> String {
        let sim = self.gitea();
        sim.wait_idle();
        // Found by the comment's id: a bot receipt's own delivery may come
        // just before or after it.
        let ours = sim
            .deliveries()
            .into_iter()
            .find(|d| d.json()["comment"]["id"] == comment["id"])
            .unwrap_or_else(|| panic!("no delivery of comment {}", comment["id"]));
        let answer: Value = serde_json::from_str(&ours.response_body)
            .unwrap_or_else(|e| panic!("{e}: {}", ours.response_body));
        let task = answer["taskId"].as_str().unwrap_or_default().to_owned();
        match ours.status {
            Some(202) => {}
            Some(200) if answer["status"] == "duplicate" && !task.is_empty() => {
                let mut c = connect(&self.db_url);
                let by_catchup = count_where(
                    &mut c,
                    "webhook_deliveries",
                    &format!(
                        "delivery_key LIKE '%:catchup:{}' AND task_id = '{task}'",
                        comment["id"]
                    ),
                );
                assert_eq!(
                    by_catchup, 1,
                    "the webhook was answered duplicate of {task}, \
                     which the catch-up did not make: {}",
                    ours.response_body
                );
            }
            _ => panic!("{:?}: {}", ours.status, ours.response_body),
        }
        assert!(!task.is_empty(), "{}", ours.response_body);
        task
    }
}
