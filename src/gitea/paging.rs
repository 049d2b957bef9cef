//! Gitea's paged listings, read to the end.
//!
//! Gitea pages with `page` (from 1) and `limit`, which it silently caps at
//! its `MAX_RESPONSE_ITEMS` (50 unless the administrator changed it), so a
//! page shorter than the `limit` asked for is not proof of the end. Every
//! listing the bridge reads sets `X-Total-Count`; some also set `Link`. The
//! reader stops at the first of: an empty page, the items reaching
//! `X-Total-Count`, a `Link` without `rel="next"`, or (with neither header)
//! a page shorter than the limit. The next page is always built from the
//! bridge's own base URL, never taken from `Link`, whose absolute address
//! comes from Gitea's ROOT_URL and may name another host than `gitea_url`:
//! the token must not follow it there.

use super::client::{GiteaClient, GiteaError};
use serde::de::DeserializeOwned;

/// Items asked for per page: Gitea's default cap, so a full page means more
/// may follow.
pub const PAGE_LIMIT: usize = 50;

/// A listing longer than this many pages is taken for a Gitea that ignores
/// `page` (the same page over and over) rather than read forever.
const MAX_PAGES: u32 = 2000;

/// Whether a `Link` header names a next page.
pub fn link_has_next(link: &str) -> bool {
    link.split(',').any(|part| {
        part.split(';')
            .skip(1)
            .any(|param| param.trim().eq_ignore_ascii_case("rel=\"next\""))
    })
}

impl GiteaClient {
    /// Every item of the listing at `path` (which carries no query),
    /// `query` added to each page's request. A read: each page is retried
    /// while its failure is transient.
    pub(super) fn read_all<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        what: &str,
    ) -> Result<Vec<T>, GiteaError> {
        let mut items: Vec<T> = Vec::new();
        for page in 1..=MAX_PAGES {
            let mut url = form_urlencoded::Serializer::new(String::new());
            for (k, v) in query {
                url.append_pair(k, v);
            }
            url.append_pair("page", &page.to_string());
            url.append_pair("limit", &PAGE_LIMIT.to_string());
            let reply = self.read(&format!("{path}?{}", url.finish()), what)?;
            let batch: Vec<T> = Self::decode(reply.body, what)?;
            let got = batch.len();
            items.extend(batch);
            let done = match (reply.total, reply.link.as_deref()) {
                _ if got == 0 => true,
                (Some(total), _) if items.len() as u64 >= total => true,
                (_, Some(link)) => !link_has_next(link),
                (Some(_), None) => false,
                (None, None) => got < PAGE_LIMIT,
            };
            if done {
                return Ok(items);
            }
        }
        Err(GiteaError::Transport {
            what: what.to_owned(),
            detail: format!(
                "Gitea kept answering with more pages after page {MAX_PAGES}; \
                 check that gitea_url points at Gitea itself"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_header_names_its_next_page_or_not() {
        let middle = "<https://g.example/api/v1/user/repos?limit=2&page=3>; rel=\"next\",\
                      <https://g.example/api/v1/user/repos?limit=2&page=4>; rel=\"last\",\
                      <https://g.example/api/v1/user/repos?limit=2&page=1>; rel=\"first\"";
        assert!(link_has_next(middle));
        let last = "<https://g.example/x?page=1>; rel=\"first\",<https://g.example/x?page=3>; rel=\"prev\"";
        assert!(!link_has_next(last));
        assert!(!link_has_next(""));
        // A comma inside the URL's query does not make a relation.
        assert!(!link_has_next(
            "<https://g.example/x?q=a,rel=\"next\">; rel=\"prev\""
        ));
    }
}
