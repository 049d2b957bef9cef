//! How Codex works in a repository: when it asks before acting, what its
//! commands may touch, and how long a turn may run. The configuration sets
//! these (globally and per repository), the actors pick one per thread, and
//! the Codex client sends the first two to the app-server by their wire names
//! ([`ApprovalPolicy::as_str`], [`Sandbox::as_str`]), which are also the words
//! an operator writes in the config.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// When Codex asks for approval before it acts (`approvalPolicy` of a thread).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    diesel::AsExpression,
    diesel::FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Text)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Never asks: whatever the sandbox allows runs.
    Never,
    /// Asks when the model decides it should.
    OnRequest,
    /// Asks before anything but known-safe read-only commands.
    Untrusted,
}

impl ApprovalPolicy {
    /// What the pinned Codex app-server accepts: it refuses `on-failure`
    /// (deprecated upstream), so the configuration refuses it at start rather
    /// than every thread failing later.
    pub const ALL: [ApprovalPolicy; 3] = [
        ApprovalPolicy::Never,
        ApprovalPolicy::OnRequest,
        ApprovalPolicy::Untrusted,
    ];

    /// The name the app-server and the config use.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Never => "never",
            ApprovalPolicy::OnRequest => "on-request",
            ApprovalPolicy::Untrusted => "untrusted",
        }
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ApprovalPolicy {
    /// Says what was given and what is accepted, for the operator's config.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                format!("`{s}` is not an approval policy; expected never, on-request or untrusted")
            })
    }
}

/// What the commands Codex runs may touch (`sandbox` of a thread).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    diesel::AsExpression,
    diesel::FromSqlRow,
)]
#[diesel(sql_type = diesel::sql_types::Text)]
#[serde(rename_all = "kebab-case")]
pub enum Sandbox {
    /// Reads anything, writes nothing.
    ReadOnly,
    /// Writes inside the workspace only.
    WorkspaceWrite,
    /// No sandbox: the machine's own permissions apply.
    DangerFullAccess,
}

impl Sandbox {
    pub const ALL: [Sandbox; 3] = [
        Sandbox::ReadOnly,
        Sandbox::WorkspaceWrite,
        Sandbox::DangerFullAccess,
    ];

    /// The name the app-server and the config use.
    pub fn as_str(self) -> &'static str {
        match self {
            Sandbox::ReadOnly => "read-only",
            Sandbox::WorkspaceWrite => "workspace-write",
            Sandbox::DangerFullAccess => "danger-full-access",
        }
    }
}

impl fmt::Display for Sandbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Sandbox {
    /// Says what was given and what is accepted, for the operator's config.
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|p| p.as_str() == s).ok_or_else(|| {
            format!(
                "`{s}` is not a sandbox mode; expected read-only, workspace-write or danger-full-access"
            )
        })
    }
}

impl ApprovalPolicy {
    /// Reads a stored or configured name.
    pub fn parse(s: &str) -> Result<Self, String> {
        s.parse()
    }
}

impl Sandbox {
    /// Reads a stored or configured name.
    pub fn parse(s: &str) -> Result<Self, String> {
        s.parse()
    }
}

crate::domain::sql::text_column!(ApprovalPolicy);
crate::domain::sql::text_column!(Sandbox);

/// How Codex works in one repository: the thread's approval policy and
/// sandbox, and the turn deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepoPolicy {
    pub approval_policy: ApprovalPolicy,
    pub sandbox: Sandbox,
    pub turn_timeout: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_are_the_serde_names_and_parse_back() {
        for p in ApprovalPolicy::ALL {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
            assert_eq!(p.as_str().parse::<ApprovalPolicy>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        for s in Sandbox::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
            assert_eq!(s.as_str().parse::<Sandbox>(), Ok(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        // The names the app-server accepts, spelled out once.
        let names: Vec<_> = ApprovalPolicy::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(names, ["never", "on-request", "untrusted"]);
        let refused = "on-failure".parse::<ApprovalPolicy>().unwrap_err();
        assert!(
            refused.contains("expected never, on-request or untrusted"),
            "{refused}"
        );
        let names: Vec<_> = Sandbox::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            names,
            ["read-only", "workspace-write", "danger-full-access"]
        );
    }

    #[test]
    fn unknown_names_say_what_is_accepted() {
        let err = "always".parse::<ApprovalPolicy>().unwrap_err();
        assert!(err.contains("not an approval policy") && err.contains("on-request"));
        let err = "yolo".parse::<Sandbox>().unwrap_err();
        assert!(err.contains("not a sandbox mode") && err.contains("read-only"));
    }
}
