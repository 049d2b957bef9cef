//! Normalisation: a verified Gitea body plus its headers becomes an
//! [`IngestRequest`]. Only the fields we use are read; everything
//! else in Gitea's large payloads is skipped without being kept.

use super::{command, mention};
use crate::domain::command::CommandLine;
use crate::domain::keys::is_gitea_name;
use crate::domain::{IngestRequest, Intent, PayloadHash, RepoRef, ResourceKind, Subject};
use crate::store::sha256_hex;
use serde::Deserialize;

/// Why a body could not be normalised (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NormalizeError {
    #[error("the body is not a valid {event} payload: {detail}")]
    InvalidPayload { event: String, detail: String },
    #[error("repository name `{0}` is not a valid Gitea owner/name")]
    InvalidRepositoryName(String),
    #[error("the X-Gitea-Event header is missing")]
    MissingEvent,
}

impl NormalizeError {
    pub fn code(&self) -> &'static str {
        match self {
            NormalizeError::InvalidPayload { .. } => "invalid_payload",
            NormalizeError::InvalidRepositoryName(_) => "invalid_repository_name",
            NormalizeError::MissingEvent => "missing_event",
        }
    }
}

/// The headers that matter, already read as text.
#[derive(Debug, Clone)]
pub struct DeliveryHeaders {
    pub delivery_id: String,
    /// `X-Gitea-Event` (the event group; old releases send the raw type here).
    pub event: Option<String>,
    /// `X-Gitea-Event-Type` (the raw type; absent before ~1.17).
    pub event_type: Option<String>,
}

/// What normalisation needs from the configuration.
#[derive(Debug, Clone)]
pub struct Normalizer {
    pub instance_id: String,
    pub bot_login: String,
    /// `ignore_logins`, in lower case.
    pub ignore_logins: std::collections::BTreeSet<String>,
}

#[derive(Deserialize)]
struct User {
    login: String,
}

#[derive(Deserialize)]
struct Repository {
    name: String,
    owner: User,
    #[serde(default)]
    clone_url: Option<String>,
    #[serde(default)]
    default_branch: Option<String>,
}

#[derive(Deserialize)]
struct Issue {
    number: i64,
    /// `null` for issues, an object for PRs.
    #[serde(default)]
    pull_request: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Comment {
    id: i64,
    body: String,
    user: User,
    created_at: String,
    updated_at: String,
    #[serde(default)]
    assets: Vec<Asset>,
}

/// An attachment of a comment (`api.Attachment`): only its id counts.
#[derive(Deserialize)]
struct Asset {
    id: i64,
}

#[derive(Deserialize)]
struct BranchRef {
    #[serde(rename = "ref")]
    name: String,
}

#[derive(Deserialize)]
struct PullRequest {
    #[serde(default)]
    number: Option<i64>,
    head: BranchRef,
    base: BranchRef,
    #[serde(default)]
    updated_at: Option<String>,
}

#[derive(Deserialize)]
struct BodyChange {
    from: String,
}

#[derive(Deserialize)]
struct Changes {
    #[serde(default)]
    body: Option<BodyChange>,
}

/// `IssueCommentPayload` (modules/structs/hook.go).
#[derive(Deserialize)]
struct IssueCommentPayload {
    action: String,
    issue: Issue,
    comment: Comment,
    repository: Repository,
    sender: User,
    #[serde(default)]
    is_pull: Option<bool>,
    /// Only in recent releases.
    #[serde(default)]
    pull_request: Option<PullRequest>,
    #[serde(default)]
    changes: Option<Changes>,
}

/// A comment event, from a webhook's payload or the repository's comment
/// listing, as the rules read it.
pub(super) struct CommentEvent {
    /// `created`, `edited` or `deleted`.
    pub(super) action: String,
    /// Where it is and who wrote it.
    pub(super) subject: Subject,
    pub(super) comment_id: i64,
    pub(super) body: String,
    /// Who caused the event (the author, for a listed comment).
    pub(super) sender: String,
    pub(super) created_at: String,
    pub(super) updated_at: String,
    /// The body before an edit, when the event says.
    pub(super) body_before: Option<String>,
    /// Its attachments' asset ids.
    pub(super) attachments: Vec<i64>,
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    content: String,
}

/// `PullRequestPayload` with a review (a PR review submitted as "comment").
#[derive(Deserialize)]
struct ReviewPayload {
    action: String,
    #[serde(default)]
    number: Option<i64>,
    pull_request: PullRequest,
    #[serde(default)]
    review: Option<Review>,
    repository: Repository,
    sender: User,
}

fn invalid(event: &str, e: serde_json::Error) -> NormalizeError {
    NormalizeError::InvalidPayload {
        event: event.to_owned(),
        detail: e.to_string(),
    }
}

impl Normalizer {
    /// Turns one verified delivery into what the store records.
    pub fn normalize(
        &self,
        headers: &DeliveryHeaders,
        body: &[u8],
    ) -> Result<IngestRequest, NormalizeError> {
        let raw_type = headers
            .event_type
            .as_deref()
            .or(headers.event.as_deref())
            .ok_or(NormalizeError::MissingEvent)?
            .to_owned();
        // JSON is UTF-8 throughout, fields nobody reads included (serde
        // skips an ignored string without looking inside it). Checked once
        // here: parsing the text, serde then checks no string again.
        let text = match std::str::from_utf8(body) {
            Ok(text) => text,
            Err(e) => {
                return Err(NormalizeError::InvalidPayload {
                    event: raw_type,
                    detail: format!("it is not UTF-8 (from byte {})", e.valid_up_to()),
                })
            }
        };
        let mut req = IngestRequest {
            delivery_key: format!("{}:{}", self.instance_id, headers.delivery_id),
            delivery_id: headers.delivery_id.clone(),
            event_type: raw_type.clone(),
            action: None,
            payload_hash: PayloadHash::of(body),
            content_key: None,
            sender: None,
            subject: None,
            intent: Intent::Ignore {
                reason: "unsupported_event",
            },
        };
        match raw_type.as_str() {
            "issue_comment" | "pull_request_comment" => {
                let p: IssueCommentPayload =
                    serde_json::from_str(text).map_err(|e| invalid(&raw_type, e))?;
                self.comment(&mut req, p)?;
            }
            // A submitted review of any kind (comment, approve, request
            // changes): its text mentions the bot like a comment does. Gitea
            // names the last two in `X-Gitea-Event` without `_review`.
            "pull_request_review_comment"
            | "pull_request_review_approved"
            | "pull_request_review_rejected"
            | "pull_request_approved"
            | "pull_request_rejected" => {
                let p: ReviewPayload =
                    serde_json::from_str(text).map_err(|e| invalid(&raw_type, e))?;
                self.review(&mut req, p)?;
            }
            _ => {
                // Still must be JSON: a garbled body is a 400, not "ignored".
                serde_json::from_slice::<serde::de::IgnoredAny>(body)
                    .map_err(|e| invalid(&raw_type, e))?;
            }
        }
        Ok(req)
    }

    fn repo(&self, r: Repository) -> Result<RepoRef, NormalizeError> {
        let invalid = || {
            NormalizeError::InvalidRepositoryName(format!(
                "{}/{}",
                r.owner.login.escape_debug(),
                r.name.escape_debug()
            ))
        };
        if !is_gitea_name(&r.owner.login) || !is_gitea_name(&r.name) {
            return Err(invalid());
        }
        let repo =
            RepoRef::new(&self.instance_id, &r.owner.login, &r.name).map_err(|_| invalid())?;
        Ok(RepoRef {
            clone_url: r.clone_url.filter(|u| !u.is_empty()),
            default_branch: r.default_branch.filter(|b| !b.is_empty()),
            ..repo
        })
    }

    fn is_bot(&self, login: &str) -> bool {
        login.eq_ignore_ascii_case(&self.bot_login)
    }

    fn is_ignored(&self, login: &str) -> bool {
        self.ignore_logins.contains(&login.to_ascii_lowercase())
    }

    /// Whether `text` mentions the bot, and if so the command it gives
    /// (`None`: an instruction), from one reading of the Markdown.
    fn mention_of(&self, text: &str) -> Option<Option<CommandLine>> {
        mention::after_first_mention(text, &self.bot_login).map(|after| command::read(&after))
    }

    fn comment(
        &self,
        req: &mut IngestRequest,
        p: IssueCommentPayload,
    ) -> Result<(), NormalizeError> {
        let is_pull = p.is_pull.unwrap_or(false)
            || p.pull_request.is_some()
            || p.issue.pull_request.is_some()
            || req.event_type == "pull_request_comment";
        let (head_ref, base_ref) = match &p.pull_request {
            Some(pr) => (Some(pr.head.name.clone()), Some(pr.base.name.clone())),
            None => (None, None),
        };
        let event = CommentEvent {
            action: p.action,
            subject: Subject {
                repo: self.repo(p.repository)?,
                kind: if is_pull {
                    ResourceKind::Pull
                } else {
                    ResourceKind::Issue
                },
                number: p.issue.number,
                comment_id: Some(p.comment.id),
                author: p.comment.user.login,
                head_ref,
                base_ref,
            },
            comment_id: p.comment.id,
            body: p.comment.body,
            sender: p.sender.login,
            created_at: p.comment.created_at,
            updated_at: p.comment.updated_at,
            body_before: p.changes.and_then(|c| c.body).map(|b| b.from),
            attachments: p.comment.assets.iter().map(|a| a.id).collect(),
        };
        self.comment_event(req, event);
        Ok(())
    }

    /// The one set of rules for a comment, whichever way it came (a webhook,
    /// or the catch-up's listing): the keys that find it again, the bot's own
    /// comments, Gitea's mention rules, and what each action means.
    pub(super) fn comment_event(&self, req: &mut IngestRequest, e: CommentEvent) {
        req.action = Some(e.action.clone());
        req.sender = Some(e.sender.clone());
        req.content_key = Some(format!(
            "{}:comment:{}:{}:{}",
            self.instance_id, e.comment_id, e.action, e.updated_at
        ));
        let trigger_key = format!("{}:comment:{}", self.instance_id, e.comment_id);
        // Never answer ourselves, even when a reply quotes the mention.
        let own = self.is_bot(&e.subject.author) || self.is_bot(&e.sender);
        // Nor another bot, nor a comment carrying a bridge's marker: two
        // bots mentioning each other, or a bridge quoting another's answer,
        // would otherwise answer each other for ever.
        let ignored = self.is_ignored(&e.subject.author) || self.is_ignored(&e.sender);
        let quotes_marker = crate::gitea::reply::quotes_a_marker(&e.body);
        req.subject = Some(e.subject);
        let reason = match (own, ignored, quotes_marker) {
            (true, ..) => Some("bot_comment"),
            (_, true, _) => Some("ignored_login"),
            (.., true) => Some("quotes_marker"),
            _ => None,
        };
        if let Some(reason) = reason {
            req.intent = Intent::Ignore { reason };
            return;
        }
        let mention = self.mention_of(&e.body);
        let mentioned = mention.is_some();
        let command = mention.flatten();
        req.intent = match e.action.as_str() {
            "created" if mentioned => Intent::Trigger {
                trigger_key,
                command,
                text: e.body,
                written_at: e.created_at,
                attachments: e.attachments,
            },
            "created" => Intent::Ignore {
                reason: "no_mention",
            },
            "edited" => {
                let mentioned_before = e
                    .body_before
                    .map(|b| mention::mentions(&b, &self.bot_login));
                if !mentioned && mentioned_before != Some(true) {
                    Intent::Ignore {
                        reason: "no_mention",
                    }
                } else {
                    Intent::Edit {
                        trigger_key,
                        command,
                        text: e.body,
                        written_at: e.updated_at,
                        attachments: e.attachments,
                        // Only a known earlier body without a mention counts as "added".
                        mention_added: mentioned && mentioned_before == Some(false),
                    }
                }
            }
            "deleted" if mentioned => Intent::Delete { trigger_key },
            "deleted" => Intent::Ignore {
                reason: "no_mention",
            },
            _ => Intent::Ignore {
                reason: "unsupported_action",
            },
        };
    }

    fn review(&self, req: &mut IngestRequest, p: ReviewPayload) -> Result<(), NormalizeError> {
        let number =
            p.number
                .or(p.pull_request.number)
                .ok_or_else(|| NormalizeError::InvalidPayload {
                    event: req.event_type.clone(),
                    detail: "no pull request number".into(),
                })?;
        let content = p.review.map(|r| r.content).unwrap_or_default();
        let updated_at = p.pull_request.updated_at.clone().unwrap_or_default();
        let repo = self.repo(p.repository)?;
        // Review payloads carry no review id: the review is identified by where,
        // who, when and what.
        let identity =
            sha256_hex(format!("{}\n{}\n{}", p.sender.login, updated_at, content).as_bytes());
        let trigger_key = format!(
            "{}:review:{}/{}:{}:{}",
            self.instance_id,
            repo.owner,
            repo.name,
            number,
            &identity[..24]
        );
        req.action = Some(p.action.clone());
        req.sender = Some(p.sender.login.clone());
        req.content_key = Some(format!("{trigger_key}:{}", p.action));
        req.subject = Some(Subject {
            repo,
            kind: ResourceKind::Pull,
            number,
            comment_id: None,
            author: p.sender.login.clone(),
            head_ref: Some(p.pull_request.head.name.clone()),
            base_ref: Some(p.pull_request.base.name.clone()),
        });
        req.intent = if self.is_bot(&p.sender.login) {
            Intent::Ignore {
                reason: "bot_comment",
            }
        } else if let Some(command) = self.mention_of(&content) {
            Intent::Trigger {
                trigger_key,
                command,
                text: content,
                written_at: updated_at,
                attachments: Vec::new(),
            }
        } else {
            Intent::Ignore {
                reason: "no_mention",
            }
        };
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gitea");

    /// A fixture's headers and body (also for the listed comments' tests).
    pub(in crate::webhook) fn fixture(name: &str) -> (DeliveryHeaders, Vec<u8>) {
        let body = std::fs::read(format!("{FIXTURES}/{name}.json")).unwrap();
        let headers: serde_json::Value = serde_json::from_slice(
            &std::fs::read(format!("{FIXTURES}/{name}.headers.json")).unwrap(),
        )
        .unwrap();
        let h = |k: &str| headers.get(k).and_then(|v| v.as_str()).map(str::to_owned);
        (
            DeliveryHeaders {
                delivery_id: h("X-Gitea-Delivery").unwrap(),
                event: h("X-Gitea-Event"),
                event_type: h("X-Gitea-Event-Type"),
            },
            body,
        )
    }

    pub(in crate::webhook) fn normalizer() -> Normalizer {
        Normalizer {
            instance_id: "default".into(),
            bot_login: "ccbot".into(),
            ignore_logins: ["otherbot".to_owned()].into(),
        }
    }

    #[test]
    fn the_fixtures_normalise_as_the_manifest_expects() {
        let n = normalizer();
        let (h, b) = fixture("issue_comment.created.issue.mention");
        let r = n.normalize(&h, &b).unwrap();
        let s = r.subject.clone().unwrap();
        assert_eq!(s.resource_key(), "default:acme/widgets:issue:17");
        assert_eq!(s.author, "bob");
        assert!(matches!(r.intent, Intent::Trigger { .. }));
        assert_eq!(
            r.delivery_key,
            "default:6f1c2a8e-3d4b-4e5f-9a7b-1c2d3e4f5a60"
        );

        let (h, b) = fixture("issue_comment.created.pr.mention");
        let r = n.normalize(&h, &b).unwrap();
        let s = r.subject.clone().unwrap();
        assert_eq!(s.resource_key(), "default:acme/widgets:pull:23");
        assert_eq!(s.head_ref.as_deref(), Some("feature/retry-clock"));
        assert_eq!(s.base_ref.as_deref(), Some("main"));
        assert!(matches!(r.intent, Intent::Trigger { .. }));

        let (h, b) = fixture("issue_comment.edited.issue");
        let r = n.normalize(&h, &b).unwrap();
        assert!(
            matches!(
                r.intent,
                Intent::Edit {
                    mention_added: false,
                    ..
                }
            ),
            "{:?}",
            r.intent
        );

        let (h, b) = fixture("issue_comment.deleted.issue");
        assert!(matches!(
            n.normalize(&h, &b).unwrap().intent,
            Intent::Delete { .. }
        ));

        let (h, b) = fixture("issue_comment.created.issue.by_bot");
        assert_eq!(
            n.normalize(&h, &b).unwrap().intent,
            Intent::Ignore {
                reason: "bot_comment"
            }
        );

        let (h, b) = fixture("issue_comment.created.issue.no_mention");
        assert_eq!(
            n.normalize(&h, &b).unwrap().intent,
            Intent::Ignore {
                reason: "no_mention"
            }
        );

        let (h, b) = fixture("issues.opened");
        assert_eq!(
            n.normalize(&h, &b).unwrap().intent,
            Intent::Ignore {
                reason: "unsupported_event"
            }
        );
    }

    #[test]
    fn pr_is_recognised_without_the_top_level_pull_request_and_with_old_headers() {
        let n = normalizer();
        let (mut h, b) = fixture("issue_comment.created.pr.mention");
        let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        v.as_object_mut().unwrap().remove("pull_request");
        v.as_object_mut().unwrap().remove("is_pull");
        h.event_type = None;
        h.event = Some("pull_request_comment".into());
        let r = n.normalize(&h, v.to_string().as_bytes()).unwrap();
        assert_eq!(r.subject.unwrap().kind, ResourceKind::Pull);
    }

    #[test]
    fn path_tricks_in_repository_names_are_refused() {
        let n = normalizer();
        let (h, b) = fixture("issue_comment.created.issue.mention");
        for bad in ["..", "../x", "/etc", "a/b", "", "x y"] {
            let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            v["repository"]["name"] = serde_json::json!(bad);
            let err = n.normalize(&h, v.to_string().as_bytes()).unwrap_err();
            assert_eq!(err.code(), "invalid_repository_name", "{bad}");
        }
    }

    #[test]
    fn other_bots_and_comments_quoting_a_bridges_marker_never_trigger() {
        let n = normalizer();
        let (h, b) = fixture("issue_comment.created.issue.mention");
        let with = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            edit(&mut v);
            n.normalize(&h, &serde_json::to_vec(&v).unwrap())
                .unwrap()
                .intent
        };
        assert!(matches!(with(&|_| {}), Intent::Trigger { .. }));
        let ignored = |reason| Intent::Ignore { reason };
        // `ignore_logins`, as the author or the sender, in any case.
        assert_eq!(
            with(&|v| v["comment"]["user"]["login"] = "OtherBot".into()),
            ignored("ignored_login")
        );
        assert_eq!(
            with(&|v| v["sender"]["login"] = "otherbot".into()),
            ignored("ignored_login")
        );
        // A mention that quotes a bridge's reply or receipt.
        for marker in [
            "<!-- codex-bridge task=task-1 turn=t-1 -->",
            "<!-- codex-bridge receipt=task-1:status:queued -->",
        ] {
            assert_eq!(
                with(&|v| v["comment"]["body"] = format!("@ccbot thanks\n> done\n{marker}").into()),
                ignored("quotes_marker")
            );
        }
    }

    #[test]
    fn a_review_comment_mentioning_the_bot_triggers() {
        let n = normalizer();
        let body = serde_json::json!({
            "action": "reviewed",
            "number": 23,
            "pull_request": {"number": 23, "head": {"ref": "feature/x"}, "base": {"ref": "main"}, "updated_at": "2026-05-12T09:20:41Z"},
            "review": {"type": "pull_request_review_comment", "content": "@ccbot please double-check the retry math"},
            "repository": {"name": "widgets", "owner": {"login": "acme"}},
            "sender": {"login": "carol"}
        });
        let h = DeliveryHeaders {
            delivery_id: "d-1".into(),
            event: Some("pull_request_comment".into()),
            event_type: Some("pull_request_review_comment".into()),
        };
        let r = n.normalize(&h, body.to_string().as_bytes()).unwrap();
        assert!(matches!(r.intent, Intent::Trigger { .. }));
        assert_eq!(
            r.subject.unwrap().resource_key(),
            "default:acme/widgets:pull:23"
        );
    }

    #[test]
    fn garbage_and_missing_fields_are_invalid() {
        let n = normalizer();
        let h = DeliveryHeaders {
            delivery_id: "d".into(),
            event: Some("issue_comment".into()),
            event_type: Some("issue_comment".into()),
        };
        assert_eq!(
            n.normalize(&h, b"{not json").unwrap_err().code(),
            "invalid_payload"
        );
        assert_eq!(
            n.normalize(&h, b"{\"action\":\"created\"}")
                .unwrap_err()
                .code(),
            "invalid_payload"
        );
        let other = DeliveryHeaders {
            event: Some("push".into()),
            event_type: Some("push".into()),
            ..h
        };
        assert_eq!(
            n.normalize(&other, b"[1,").unwrap_err().code(),
            "invalid_payload"
        );
    }
}
