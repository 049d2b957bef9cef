//! An Issue/PR as a turn's prompt may describe it (`Forge::thread_context`):
//! `GET /issues/{n}` (title, body, author), `GET /issues/{n}/comments`, and
//! for a pull request `GET /pulls/{n}` (branches) and `GET /pulls/{n}/files`
//! (changed files with their diff stat). Each distinct commenter's
//! `trigger_permission` is asked once; a question Gitea cannot answer is
//! reported as unknown, never guessed.

use super::forge::{blocking, GiteaForge};
use crate::domain::ResourceKey;
use crate::forge::{ContextComment, FileStat, PullContext, ThreadContext};
use serde_json::Value;
use std::collections::HashMap;

impl GiteaForge {
    pub(super) async fn read_context(&self, key: ResourceKey) -> Result<ThreadContext, String> {
        let (owner, repo, number) = (
            key.repo().owner().to_owned(),
            key.repo().name().to_owned(),
            key.number(),
        );
        let client = self.client().clone();
        let (o, r) = (owner.clone(), repo.clone());
        let pull = key.is_pull();
        let (issue, comments, pull) = blocking(move || {
            let issue = client.get_issue(&o, &r, number)?;
            let comments = client.list_comments(&o, &r, number)?;
            let pull = if pull {
                let refs = client.get_pull(&o, &r, number)?;
                let (files, complete) = client.pull_files(&o, &r, number)?;
                Some((refs, files, complete))
            } else {
                None
            };
            Ok((issue, comments, pull))
        })
        .await
        .map_err(|e| e.to_string())?;
        let text = |p: &str| {
            issue
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let mut permitted: HashMap<String, Option<bool>> = HashMap::new();
        let mut out = Vec::with_capacity(comments.len());
        for c in comments {
            let author = c.author().to_owned();
            let login = author.to_ascii_lowercase();
            let known = match permitted.get(&login) {
                Some(p) => *p,
                None => {
                    let p = self
                        .holds_trigger_permission(&owner, &repo, &author)
                        .await
                        .ok();
                    permitted.insert(login, p);
                    p
                }
            };
            out.push(ContextComment {
                id: c.id,
                author,
                created_at: c.created_at,
                body: c.body,
                author_permitted: known,
            });
        }
        Ok(ThreadContext {
            title: text("/title"),
            body: text("/body"),
            author: text("/user/login"),
            comments: out,
            pull: pull.map(|(refs, files, complete)| PullContext {
                base: refs.base_ref,
                head: refs.head_ref,
                files: files
                    .into_iter()
                    .map(|f| FileStat {
                        filename: f.filename,
                        status: f.status,
                        additions: f.additions,
                        deletions: f.deletions,
                    })
                    .collect(),
                more_files: !complete,
            }),
        })
    }
}
