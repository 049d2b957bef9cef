//! What may become part of a workspace path or a git argument: Gitea names,
//! branch names and clone URLs, checked before anything touches the disk or
//! the network.

use super::WorkspaceError;
use crate::domain::keys::is_gitea_name;
use std::path::{Component, Path, PathBuf};

/// The longest refused value we quote back in an error (enough to recognise it).
const QUOTE_MAX: usize = 80;

/// Git refuses longer ref names on most file systems anyway.
const BRANCH_MAX: usize = 255;

/// `value` escaped (NUL, newlines and the like become visible) and shortened,
/// so that an error message stays one readable line.
pub(super) fn quote(value: &str) -> String {
    let escaped: String = value.escape_debug().collect();
    if escaped.chars().count() > QUOTE_MAX {
        let short: String = escaped.chars().take(QUOTE_MAX).collect();
        format!("\"{short}…\"")
    } else {
        format!("\"{escaped}\"")
    }
}

/// One component of a workspace path (instance, owner or repository): Gitea's
/// alphabet only, so that no value can add a separator, climb out with `..`
/// or start over from `/`.
pub(super) fn check_name(field: &'static str, value: &str) -> Result<(), WorkspaceError> {
    if is_gitea_name(value) {
        return Ok(());
    }
    let reason = if value.is_empty() {
        "it is empty"
    } else if value == "." || value == ".." {
        "`.` and `..` are not names"
    } else if value.len() > 100 {
        "it is longer than 100 characters"
    } else if value.contains(['/', '\\']) {
        "it contains a path separator"
    } else {
        "only letters, digits, '-', '_' and '.' are allowed"
    };
    Err(WorkspaceError::InvalidName {
        field,
        value: quote(value),
        reason,
    })
}

/// The checks on a branch name that must happen before git sees it: a name
/// starting with `-` would be read as an option, `@{…}` and `@` name other
/// commits, and NUL cannot pass through argv. Git's own rules
/// (`git check-ref-format --branch`) run afterwards.
pub(super) fn precheck_branch(value: &str) -> Result<(), WorkspaceError> {
    let reason = if value.is_empty() {
        Some("it is empty")
    } else if value.len() > BRANCH_MAX {
        Some("it is longer than 255 bytes")
    } else if value.starts_with('-') {
        Some("it starts with '-'")
    } else if value == "@" || value.contains("@{") {
        Some("`@` and `@{` name other commits")
    } else if value.chars().any(char::is_control) {
        Some("it contains control characters")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(WorkspaceError::InvalidRef {
            value: format!("branch {}", quote(value)),
            reason: reason.to_owned(),
        }),
        None => Ok(()),
    }
}

/// A clone URL as git will see it: http(s) only, without user information.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RemoteUrl {
    /// The URL git is given and that ends up in `.git/config`.
    pub url: String,
    /// `scheme://authority/`: the only place the token header is sent to
    /// (`http.<origin>.extraHeader`), and what `gitea_url` is compared with.
    pub origin: String,
    /// The URL carried `user:password@`, which was dropped.
    pub had_password: bool,
    /// The URL carried `user@` (with or without a password), which was dropped.
    pub had_userinfo: bool,
}

impl RemoteUrl {
    /// No remote: for a workspace that only runs local commands (reading a
    /// worktree's state, retiring it). It carries no origin, so no token
    /// header can be configured for anything.
    pub(super) fn local_only() -> RemoteUrl {
        RemoteUrl {
            url: String::new(),
            origin: String::new(),
            had_password: false,
            had_userinfo: false,
        }
    }

    /// Parse and sanitise a clone URL. User information is stripped rather than
    /// refused: Gitea never puts any in `clone_url`, an operator may paste a URL
    /// with one, and the token is supplied separately anyway. Everything that is
    /// not plain `http(s)://host[:port]/path` is refused: other transports
    /// (`file://`, `ext::`, ssh) could run commands or read local files, and the
    /// token header only works over HTTP.
    pub fn parse(raw: &str) -> Result<RemoteUrl, WorkspaceError> {
        let parts = split_url(raw)?;
        let path = parts.path.trim_end_matches('/');
        if path.is_empty() {
            return Err(refuse_url(raw, "it names no repository"));
        }
        if path.split('/').any(|seg| seg == "..") {
            return Err(refuse_url(raw, "its path contains `..`"));
        }
        Ok(RemoteUrl {
            url: format!("{}://{}{path}", parts.scheme, parts.host),
            origin: parts.origin(),
            had_password: parts.userinfo.is_some_and(|u| u.contains(':')),
            had_userinfo: parts.userinfo.is_some(),
        })
    }
}

/// `scheme://authority/` of an http(s) base URL such as `gitea_url`.
pub(super) fn origin_of(raw: &str) -> Result<String, WorkspaceError> {
    Ok(split_url(raw)?.origin())
}

/// The pieces of an http(s) URL that matter here.
struct UrlParts<'a> {
    scheme: &'static str,
    userinfo: Option<&'a str>,
    /// Lower-cased host with its port, if any.
    host: String,
    /// From the first `/` after the authority (empty if none).
    path: &'a str,
}

impl UrlParts<'_> {
    fn origin(&self) -> String {
        format!("{}://{}/", self.scheme, self.host)
    }
}

fn refuse_url(raw: &str, reason: &'static str) -> WorkspaceError {
    WorkspaceError::InvalidUrl {
        // Never quote user information back: it may hold a password.
        url: quote(&without_userinfo(raw)),
        reason,
    }
}

fn split_url(raw: &str) -> Result<UrlParts<'_>, WorkspaceError> {
    let refuse = |reason| refuse_url(raw, reason);
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(refuse("it contains whitespace or control characters"));
    }
    let lower = raw.to_ascii_lowercase();
    let scheme = if lower.starts_with("https://") {
        "https"
    } else if lower.starts_with("http://") {
        "http"
    } else {
        return Err(refuse("only http:// and https:// URLs are supported"));
    };
    let rest = &raw[scheme.len() + 3..];
    if rest.contains(['?', '#']) {
        return Err(refuse(
            "it has a query or fragment, which a git remote does not use",
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    if host.is_empty() || host.starts_with(':') {
        return Err(refuse("it has no host"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'))
    {
        return Err(refuse(
            "its host contains characters a host name cannot have",
        ));
    }
    Ok(UrlParts {
        scheme,
        userinfo,
        host: host.to_ascii_lowercase(),
        path,
    })
}

/// `raw` with anything that looks like `user:password@` cut out, for messages.
fn without_userinfo(raw: &str) -> String {
    match (raw.find("://"), raw.rfind('@')) {
        (Some(s), Some(at)) if s < at => format!("{}{}", &raw[..s + 3], &raw[at + 1..]),
        (None, Some(at)) => raw[at + 1..].to_owned(),
        _ => raw.to_owned(),
    }
}

/// `path` made absolute (against the current directory) with `.` and `..`
/// resolved by text alone, so that the prefix check below compares like with like.
pub(super) fn absolute_lexical(path: &Path) -> std::io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut out = PathBuf::new();
    for comp in abs.components() {
        match comp {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_giteas_alphabet() {
        for ok in [
            "acme", "widgets", "a.b", "a-b_c", ".profile", "x.git", "-rf",
        ] {
            assert!(check_name("repo", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            "/etc",
            "a\\b",
            "x\0y",
            "ü",
            "a b",
            "a\nb",
            &"x".repeat(101),
        ] {
            let err = check_name("repo", bad).unwrap_err();
            assert_eq!(err.code(), "invalid_repository_name", "{bad:?}");
        }
        let msg = check_name("owner", "x\0y").unwrap_err().to_string();
        assert!(msg.contains("x\\0y"), "{msg}");
    }

    #[test]
    fn branch_prechecks_stop_option_and_revision_tricks() {
        for bad in ["", "-x", "--upload-pack=evil", "@", "a@{1}", "x\0y", "a\tb"] {
            assert_eq!(
                precheck_branch(bad).unwrap_err().code(),
                "invalid_ref_name",
                "{bad:?}"
            );
        }
        for ok in ["main", "feature/x", "release-1.2", "ü"] {
            assert!(precheck_branch(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn clone_urls_lose_their_userinfo() {
        let u =
            RemoteUrl::parse("https://bot:s3cret@Git.Example.com:3000/acme/widgets.git").unwrap();
        assert_eq!(u.url, "https://git.example.com:3000/acme/widgets.git");
        assert_eq!(u.origin, "https://git.example.com:3000/");
        assert!(u.had_password && u.had_userinfo);

        let u = RemoteUrl::parse("http://127.0.0.1:8080/acme/widgets.git/").unwrap();
        assert_eq!(u.url, "http://127.0.0.1:8080/acme/widgets.git");
        assert!(!u.had_userinfo);

        let u = RemoteUrl::parse("https://bot@h/acme/w").unwrap();
        assert!(u.had_userinfo && !u.had_password);

        assert_eq!(
            origin_of("https://Git.Example.com").unwrap(),
            "https://git.example.com/"
        );
        assert_eq!(origin_of("http://h:3000/sub/").unwrap(), "http://h:3000/");
    }

    #[test]
    fn other_transports_and_odd_urls_are_refused() {
        for bad in [
            "file:///etc",
            "ext::sh -c touch% /tmp/x",
            "git@host:acme/w.git",
            "ssh://host/acme/w.git",
            "https://",
            "https:///acme/w",
            "https://host",
            "https://host/acme/w?token=abc",
            "https://host/a/../b",
            "https://host/a b",
        ] {
            let err = RemoteUrl::parse(bad).unwrap_err();
            assert_eq!(err.code(), "invalid_clone_url", "{bad}");
        }
        let msg = RemoteUrl::parse("ftp://u:pw@host/x")
            .unwrap_err()
            .to_string();
        assert!(!msg.contains("pw"), "{msg}");
    }

    #[test]
    fn lexical_absolute_resolves_dots() {
        let p = absolute_lexical(Path::new("/a/b/../c/./d")).unwrap();
        assert_eq!(p, PathBuf::from("/a/c/d"));
        assert!(absolute_lexical(Path::new("rel")).unwrap().is_absolute());
    }
}
