//! The catch-up's way in: a comment read from a repository's comment
//! listing becomes the request its `created` webhook would have made, by the
//! normaliser's own rules ([`Normalizer::comment_event`]). The catch-up job
//! sits below the webhook in the house's floors, so it asks for these rules
//! through [`CommentRules`], which the normaliser implements here.

use super::event::{CommentEvent, Normalizer};
use crate::domain::{IngestRequest, Intent, PayloadHash, RepoRef, ResourceKind, Subject};
use crate::gitea::comments::RepoComment;
use crate::jobs::catchup::CommentRules;

impl CommentRules for Normalizer {
    /// A listed comment is the `created` event Gitea would have sent for it,
    /// with the body it has now: the same rules as a delivery, and the same
    /// content and trigger keys, so either finds the other's task.
    fn listed_comment(&self, repo: &RepoRef, comment: &RepoComment) -> Option<IngestRequest> {
        let number = comment.number()?;
        let kind = if comment.is_pull() {
            ResourceKind::Pull
        } else {
            ResourceKind::Issue
        };
        let delivery_id = crate::domain::request::catchup_delivery_id(comment.id);
        let mut req = IngestRequest {
            delivery_key: format!("{}:{delivery_id}", self.instance_id),
            delivery_id,
            event_type: match kind {
                ResourceKind::Issue => "issue_comment",
                ResourceKind::Pull => "pull_request_comment",
            }
            .to_owned(),
            action: None,
            // The delivery is the comment itself, whatever later edits do to
            // its body: its id and creation time.
            payload_hash: PayloadHash::of(
                format!("{}\n{}", comment.id, comment.created_at).as_bytes(),
            ),
            content_key: None,
            sender: None,
            subject: None,
            intent: Intent::Ignore {
                reason: "unsupported_event",
            },
        };
        let author = comment.author().to_owned();
        self.comment_event(
            &mut req,
            CommentEvent {
                action: "created".to_owned(),
                subject: Subject {
                    repo: repo.clone(),
                    kind,
                    number,
                    comment_id: Some(comment.id),
                    author: author.clone(),
                    head_ref: None,
                    base_ref: None,
                },
                comment_id: comment.id,
                body: comment.body.clone(),
                sender: author,
                created_at: comment.created_at.clone(),
                updated_at: comment.updated_at.clone(),
                body_before: None,
                attachments: comment.assets.iter().map(|a| a.id).collect(),
            },
        );
        Some(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::event::tests::{fixture, normalizer};

    /// The catch-up's request for a comment carries the webhook's trigger and
    /// content keys, so each finds the other's task; only the delivery differs.
    #[test]
    fn a_listed_comment_is_the_webhooks_created_event() {
        let n = normalizer();
        for (fixture_name, page) in [
            ("issue_comment.created.issue.mention", "issues/17"),
            ("issue_comment.created.pr.mention", "pulls/23"),
        ] {
            let (h, b) = fixture(fixture_name);
            let hook = n.normalize(&h, &b).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            let mut listed = v["comment"].clone();
            let url = format!("https://g.example/acme/widgets/{page}");
            let (issue_url, pull_url) = if page.starts_with("pulls") {
                (String::new(), url)
            } else {
                (url, String::new())
            };
            listed["issue_url"] = issue_url.into();
            listed["pull_request_url"] = pull_url.into();
            let comment: RepoComment = serde_json::from_value(listed).unwrap();
            let repo = hook.subject.as_ref().unwrap().repo.clone();
            let caught = n.listed_comment(&repo, &comment).unwrap();

            assert_eq!(caught.intent, hook.intent, "{fixture_name}");
            assert_eq!(caught.content_key, hook.content_key, "{fixture_name}");
            assert_eq!(caught.sender, hook.sender);
            assert_eq!(caught.event_type, hook.event_type);
            assert_eq!(
                caught.delivery_key,
                format!("default:catchup:{}", comment.id)
            );
            let (s, w) = (caught.subject.unwrap(), hook.subject.unwrap());
            assert_eq!(s.resource_key(), w.resource_key());
            assert_eq!((s.comment_id, &s.author), (w.comment_id, &w.author));
            // The listing names no branches: the catch-up fetches them.
            assert_eq!(s.head_ref, None);
        }

        // The bot's own comment and one without a mention, by the same rules.
        let mut own: RepoComment = serde_json::from_value(serde_json::json!({
            "id": 5, "issue_url": "https://g.example/acme/widgets/issues/1",
            "user": {"login": "CCBot"}, "body": "@ccbot done",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let repo = RepoRef::new("default", "acme", "widgets").unwrap();
        let ignored = |c: &RepoComment| n.listed_comment(&repo, c).unwrap().intent;
        assert_eq!(
            ignored(&own),
            Intent::Ignore {
                reason: "bot_comment"
            }
        );
        own.user = Some(crate::gitea::client::User {
            login: "bob".into(),
        });
        own.body = "`@ccbot` is the bot".into();
        assert_eq!(
            ignored(&own),
            Intent::Ignore {
                reason: "no_mention"
            }
        );
        own.issue_url = String::new();
        assert!(
            n.listed_comment(&repo, &own).is_none(),
            "no number, no request"
        );
    }
}
