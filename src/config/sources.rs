//! The two layers of the configuration, merged by figment: the TOML file, then
//! the environment, whose values win. A name that is no key is refused in
//! either: the file's as it is read, the environment's by serde's
//! `deny_unknown_fields` on [`Raw`] (the environment holds other programs'
//! variables, so only the `CODEX_BRIDGE_*` ones that are configuration go in).
//! [`explain`] turns what figment reports into an error that names the key,
//! or the file or variable, and never a value.
//!
//! A key set in both layers takes the environment's value whole: the
//! environment's values are strings (its lists and tables are JSON), and a
//! string replaces a TOML table rather than merging into it, so
//! `CODEX_BRIDGE_REPOSITORIES` replaces the file's `repositories`.

use super::keys::{self, ENV_PREFIX};
use super::raw::Raw;
use super::ConfigError;
use figment::error::Kind;
use figment::value::{Dict, Map, Num, Value};
use figment::{Figment, Metadata, Profile, Provider};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// Reads both layers into [`Raw`].
pub(super) fn read(
    path: Option<&Path>,
    env: &BTreeMap<String, String>,
) -> Result<Raw, ConfigError> {
    let file = path.map(FileLayer::read).transpose()?;
    let env = EnvLayer::new(env);
    let mut figment = Figment::new();
    if let Some(file) = &file {
        figment = figment.merge(file);
    }
    figment
        .merge(&env)
        .extract::<Raw>()
        .map_err(|e| explain(e, file.as_ref().map(|f| f.path.as_path()), &env))
}

/// The config file, parsed once. Integers are taken from their literal text,
/// so a number too large for any key is still reported with the key's name.
struct FileLayer {
    path: PathBuf,
    dict: Dict,
}

impl FileLayer {
    fn read(path: &Path) -> Result<FileLayer, ConfigError> {
        let fail = |problem: String| ConfigError::File {
            path: path.display().to_string(),
            problem,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        // Only the message and the line: toml's full report quotes the line,
        // which may hold a secret.
        let table = DeTable::parse(&text).map_err(|e| {
            let line = e.span().map(|s| {
                let before = &text.as_bytes()[..s.start.min(text.len())];
                before.iter().filter(|b| **b == b'\n').count() + 1
            });
            fail(match line {
                Some(line) => format!("not valid TOML: {} (line {line})", e.message()),
                None => format!("not valid TOML: {}", e.message()),
            })
        })?;
        let mut dict = Dict::new();
        for (key, value) in table.into_inner() {
            let key = key.into_inner().into_owned();
            let Some(name) = keys::known(&key) else {
                return Err(fail(format!(
                    "unknown key `{key}` (known keys: {})",
                    keys::key_list()
                )));
            };
            let value =
                convert(value.into_inner()).map_err(|problem| super::invalid(name, problem))?;
            dict.insert(key, value);
        }
        Ok(FileLayer {
            path: path.to_owned(),
            dict,
        })
    }
}

/// A TOML value as figment's. Integers become i128 (TOML's own are i64,
/// and a wider literal is a mistake to report, not a parse failure).
fn convert(value: DeValue<'_>) -> Result<Value, String> {
    Ok(match value {
        DeValue::String(s) => Value::from(s.into_owned()),
        DeValue::Integer(i) => match i128::from_str_radix(i.as_str(), i.radix()) {
            Ok(n) => Value::from(Num::I128(n)),
            Err(_) => return Err(format!("`{i}` is far too large a number")),
        },
        DeValue::Float(f) => match f.as_str().parse::<f64>() {
            Ok(f) => Value::from(Num::F64(f)),
            Err(_) => return Err(format!("`{f}` is not a number")),
        },
        DeValue::Boolean(b) => Value::from(b),
        DeValue::Datetime(_) => return Err("a date or time is not a value of any key".into()),
        DeValue::Array(items) => Value::from(
            items
                .into_iter()
                .map(|i| convert(i.into_inner()))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        DeValue::Table(table) => {
            let mut dict = Dict::new();
            for (k, v) in table {
                dict.insert(k.into_inner().into_owned(), convert(v.into_inner())?);
            }
            Value::from(dict)
        }
    })
}

impl Provider for FileLayer {
    fn metadata(&self) -> Metadata {
        Metadata::from("config file", self.path.as_path())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// The `CODEX_BRIDGE_*` variables, as strings. Each goes in under the key it
/// spells (`CODEX_BRIDGE_LISTEN` → `listen`); one that spells none, or is not
/// written in upper case, goes in under its own name, which no key has, so
/// that serde refuses it. Variables that are not configuration
/// ([`keys::NOT_KEYS`]) are left out.
struct EnvLayer {
    dict: Dict,
    /// The variable each entry of `dict` came from.
    names: BTreeMap<String, String>,
}

impl EnvLayer {
    fn new(env: &BTreeMap<String, String>) -> EnvLayer {
        let mut layer = EnvLayer {
            dict: Dict::new(),
            names: BTreeMap::new(),
        };
        for (name, value) in env {
            if !keys::is_config_variable(name) {
                continue;
            }
            let spelled = name[ENV_PREFIX.len()..].to_ascii_lowercase();
            let key = if keys::env_name(&spelled) == *name {
                spelled
            } else {
                name.clone()
            };
            layer.dict.insert(key.clone(), Value::from(value.as_str()));
            layer.names.insert(key, name.clone());
        }
        layer
    }
}

impl Provider for EnvLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named("environment")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

/// What went wrong, by key. Only messages that the readers in [`super::raw`]
/// wrote are shown; figment's own texts can quote a value, so none is.
fn explain(error: figment::Error, file: Option<&Path>, env: &EnvLayer) -> ConfigError {
    let Some(error) = error.into_iter().next() else {
        return unreadable(file);
    };
    match error.kind {
        Kind::UnknownField(name, _) => match env.names.get(&name) {
            Some(variable) => ConfigError::Variable {
                name: variable.clone(),
                problem: unknown_variable(variable),
            },
            // The file's unknown keys are refused as it is read; this is the
            // same refusal, should one get this far.
            None => ConfigError::File {
                path: file.map_or_else(String::new, |p| p.display().to_string()),
                problem: format!("unknown key `{name}` (known keys: {})", keys::key_list()),
            },
        },
        kind => match error.path.first().and_then(|k| keys::known(k)) {
            Some(key) => super::invalid(
                key,
                match kind {
                    Kind::Message(message) => message,
                    _ => "has a value of the wrong type".to_owned(),
                },
            ),
            None => unreadable(file),
        },
    }
}

/// Why a `CODEX_BRIDGE_*` variable that names no key is refused.
fn unknown_variable(name: &str) -> String {
    let hint = match keys::nearest(&name[ENV_PREFIX.len()..]) {
        Some(key) => format!(" (did you mean {}?)", keys::env_name(key)),
        None => String::new(),
    };
    format!(
        "names no config key, so it would do nothing: correct or unset it{hint}; the keys \
         are {}, each as {ENV_PREFIX}<KEY> in upper case",
        keys::key_list()
    )
}

fn unreadable(file: Option<&Path>) -> ConfigError {
    ConfigError::File {
        path: file.map_or_else(|| "(none)".to_owned(), |p| p.display().to_string()),
        problem: "cannot be read as a configuration".to_owned(),
    }
}
