//! The secrets the server cannot run without. When `webhook_secret` or
//! `admin_token` is not configured it is generated once into
//! `state_dir/generated-secrets.toml` and reused on later starts, so a fresh
//! `serve` works and says where to look. That file is the operator's to read
//! and nobody else's: it is written with mode 0600, and one found readable by
//! others is made private again before it is used, with a warning.

use super::validate::SecretKey;
use super::{Config, ConfigError};
use secrecy::SecretString;
use std::path::{Path, PathBuf};

/// The secrets the server cannot run without, resolved by [`Config::server_secrets`].
#[derive(Clone)]
pub struct ServerSecrets {
    pub webhook_secret: SecretString,
    pub admin_token: SecretString,
    /// Where generated secrets were written, if any were.
    pub generated_file: Option<PathBuf>,
}

/// The name of the file in `state_dir`.
const FILE_NAME: &str = "generated-secrets.toml";

impl Config {
    /// The webhook secret and admin token: the configured ones, else those
    /// generated into `state_dir/generated-secrets.toml` (generated now if the
    /// file lacks them).
    pub fn server_secrets(&self) -> Result<ServerSecrets, ConfigError> {
        if let (Some(w), Some(a)) = (&self.webhook_secret, &self.admin_token) {
            return Ok(ServerSecrets {
                webhook_secret: w.clone(),
                admin_token: a.clone(),
                generated_file: None,
            });
        }
        let file = self.state_dir.join(FILE_NAME);
        let fail = |problem: String| ConfigError::File {
            path: file.display().to_string(),
            problem,
        };
        let mut stored: toml::Table = match std::fs::read_to_string(&file) {
            Ok(text) => {
                make_private(&file).map_err(&fail)?;
                text.parse().map_err(|e: toml::de::Error| {
                    fail(format!(
                        "not valid TOML: {} (delete it to generate new secrets)",
                        e.message()
                    ))
                })?
            }
            Err(_) => toml::Table::new(),
        };
        let mut changed = false;
        let mut resolve = |secret: SecretKey,
                           configured: &Option<SecretString>|
         -> Result<SecretString, ConfigError> {
            if let Some(s) = configured {
                return Ok(s.clone());
            }
            let key = secret.key();
            if let Some(toml::Value::String(s)) = stored.get(key) {
                secret.check(s).map_err(|p| {
                    fail(format!(
                        "`{key}` {p} (delete the file to generate new secrets)"
                    ))
                })?;
                return Ok(SecretString::from(s.clone()));
            }
            let fresh = format!(
                "{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            stored.insert(key.to_owned(), toml::Value::String(fresh.clone()));
            changed = true;
            Ok(SecretString::from(fresh))
        };
        let webhook_secret = resolve(SecretKey::WebhookSecret, &self.webhook_secret)?;
        let admin_token = resolve(SecretKey::AdminToken, &self.admin_token)?;
        if changed {
            write_private(&file, &stored.to_string()).map_err(|e| {
                fail(format!(
                    "cannot write generated secrets: {e}; set webhook_secret and admin_token instead"
                ))
            })?;
        }
        Ok(ServerSecrets {
            webhook_secret,
            admin_token,
            generated_file: Some(file),
        })
    }
}

impl Config {
    /// The admin token of a server started with this configuration, for a
    /// client on the same machine (`codex-bridge codex …`): the configured
    /// one, else the one the server generated into `state_dir`. `None` when
    /// there is neither: nothing is generated here, since a token the server
    /// does not know would only be refused.
    pub fn known_admin_token(&self) -> Result<Option<SecretString>, ConfigError> {
        if let Some(token) = &self.admin_token {
            return Ok(Some(token.clone()));
        }
        if !self.state_dir.join(FILE_NAME).exists() {
            return Ok(None);
        }
        Ok(Some(self.server_secrets()?.admin_token))
    }
}

/// Takes group and other permissions off an existing secrets file, saying so:
/// the secrets in it may already have been read. Refuses when that cannot be
/// done (say, the file belongs to another user).
#[cfg(unix)]
fn make_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| format!("cannot read its permissions: {e}"))?
        .permissions()
        .mode();
    if mode & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700)).map_err(|e| {
        format!(
            "it is readable by others (mode {:o}) and cannot be made private: {e}; \
                 run chmod 600 on it, or delete it to generate new secrets",
            mode & 0o777
        )
    })?;
    tracing::warn!(
        file = %path.display(),
        was = %format!("{:o}", mode & 0o777),
        now = %format!("{:o}", mode & 0o700),
        "the generated secrets file was readable by others; it is private now. Its secrets \
         may have been read: delete it and restart to generate new ones (then update Gitea's \
         webhook secret)"
    );
    Ok(())
}

#[cfg(not(unix))]
fn make_private(_path: &Path) -> Result<(), String> {
    Ok(())
}

/// Writes `text` to `path` through a temporary file created with mode 0600,
/// so the secrets are never readable by others, not even for a moment.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;
    use std::collections::BTreeMap;

    fn config_in(state: &Path) -> Config {
        let env = BTreeMap::from([(
            "CODEX_BRIDGE_STATE_DIR".to_owned(),
            state.to_str().unwrap().to_owned(),
        )]);
        Config::from_sources(None, &env).unwrap()
    }

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn missing_secrets_are_generated_once_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let c = config_in(&dir.path().join("state"));
        let first = c.server_secrets().unwrap();
        let second = c.server_secrets().unwrap();
        assert_eq!(
            first.webhook_secret.expose_secret(),
            second.webhook_secret.expose_secret()
        );
        assert_eq!(
            first.admin_token.expose_secret(),
            second.admin_token.expose_secret()
        );
        assert!(first.webhook_secret.expose_secret().len() >= 32);
        #[cfg(unix)]
        assert_eq!(
            mode(&first.generated_file.unwrap()) & 0o077,
            0,
            "generated secrets must not be readable by others"
        );
    }

    #[test]
    fn a_client_finds_the_servers_admin_token_and_never_makes_one_up() {
        let dir = tempfile::tempdir().unwrap();
        let c = config_in(&dir.path().join("state"));
        assert!(c.known_admin_token().unwrap().is_none());
        assert!(
            !dir.path().join("state").join(FILE_NAME).exists(),
            "nothing generated"
        );
        let server = c.server_secrets().unwrap();
        assert_eq!(
            c.known_admin_token().unwrap().unwrap().expose_secret(),
            server.admin_token.expose_secret()
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_secrets_file_readable_by_others_is_made_private_before_use() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        std::fs::write(
            &file,
            "webhook_secret = \"0123456789abcdef-webhook\"\nadmin_token = \"0123456789abcdef-admin\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let secrets = config_in(dir.path()).server_secrets().unwrap();
        assert_eq!(mode(&file), 0o600);
        // The file's secrets are still the ones used: the operator decides
        // whether to replace them.
        assert_eq!(
            secrets.admin_token.expose_secret(),
            "0123456789abcdef-admin"
        );
    }

    #[test]
    fn a_blank_secret_in_the_file_is_refused_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        std::fs::write(&file, "webhook_secret = \"  \"\n").unwrap();
        let err = config_in(dir.path())
            .server_secrets()
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("webhook_secret") && err.contains("is empty"),
            "{err}"
        );
    }
}
