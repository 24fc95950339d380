//! The layers of the configuration, merged by figment: the TOML file, then the `HERALD__` overrides
//! over it (a later layer wins key by key). Every merged value keeps the layer it came from, so an error
//! about a key set from the environment names the variable that set it ([`name_variable`]).
//!
//! Two pieces are Herald's own, because figment's stock parts would change behaviour:
//! * the file is parsed here (with figment's TOML format) instead of by figment's `Toml` provider, whose
//!   syntax error quotes the offending line — which may hold a secret; ours names the line only;
//! * the environment layer ([`Environment`]) replaces figment's `Env` provider, which reads only the process
//!   environment (`Config::load` takes the variables as an argument), guesses each value's type from its text
//!   (a numeric token or key id would become a number; here the key decides the type) and cannot reach into
//!   an array (`[[channel]]` entries are addressed by index or name, and figment merges an array whole).

use figment::error::{Kind, OneOf};
use figment::providers::{Format, Serialized, Toml};
use figment::value::{Dict, Value};
use figment::{Figment, Metadata, Profile, Provider};

use super::{ConfigError, Result, ENV_PREFIX};

/// The file's values and the overrides of `env`, merged in that order.
///
/// # Errors
/// A file that is not TOML (naming the line, never its content), or a `HERALD__…` variable that names no
/// key, has a value of the wrong type or addresses a `[[channel]]` that does not exist (naming the variable).
pub(super) fn layered(text: &str, env: impl IntoIterator<Item = (String, String)>) -> Result<Figment> {
    let file = Figment::from(Serialized::defaults(parse_file(text)?));
    let environment = Environment::read(env, &file)?;
    Ok(file.merge(environment))
}

fn parse_file(text: &str) -> Result<Dict> {
    Toml::from_str(text).map_err(|error| {
        // toml's own message quotes the offending line, which may hold a secret: keep the position.
        let position =
            error.span().map(|span| line_of(text, span.start)).map_or(String::new(), |line| format!(" (line {line})"));
        ConfigError::new("file", format!("is not valid TOML{position}: {}", error.message()))
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).map_or(0, |before| before.matches('\n').count()) + 1
}

/// The figment metadata name of the environment layer.
const ENVIRONMENT: &str = "HERALD__ environment variables";

/// Appends `(set by HERALD__…)` to an error whose key was set from the environment.
pub(super) fn name_variable(mut error: ConfigError, figment: &Figment) -> ConfigError {
    // A section's table takes the tag of the last layer that touched it: only a value names its variable.
    let from_environment = match figment.find_value(&error.key) {
        Ok(value) if value.as_dict().is_none() => figment.get_metadata(value.tag()),
        _ => None,
    }
    .filter(|metadata| metadata.name == ENVIRONMENT);
    if let Some(metadata) = from_environment {
        let path: Vec<&str> = error.key.split('.').collect();
        error.reason = format!("{} (set by {})", error.reason, metadata.interpolate(&Profile::Default, &path));
    }
    error
}

/// A figment decoding error as a key and a message that quotes no value. `prefix` is the key of the
/// value that was decoded (empty for the whole configuration, then the root is called `file`).
pub(super) fn decoding_error(error: &figment::Error, prefix: &str) -> ConfigError {
    let mut key = prefix.to_owned();
    for segment in &error.path {
        if segment.bytes().all(|b| b.is_ascii_digit()) {
            key.push_str(&format!("[{segment}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    if key.is_empty() {
        "file".clone_into(&mut key);
    }
    ConfigError::new(key, describe(&error.kind))
}

/// serde's wording, without the value that did not fit: it may be a secret put in the wrong place.
fn describe(kind: &Kind) -> String {
    match kind {
        Kind::Message(message) => message.clone(),
        Kind::InvalidType(_, expected) => format!("invalid type, expected {expected}"),
        Kind::InvalidValue(_, expected) => format!("invalid value, expected {expected}"),
        Kind::InvalidLength(length, expected) => format!("invalid length {length}, expected {expected}"),
        Kind::UnknownVariant(_, expected) => format!("unknown variant, expected {}", OneOf(expected)),
        Kind::UnknownField(field, []) => format!("unknown field `{field}`, there are no fields"),
        Kind::UnknownField(field, expected) => match herald_core::names::nearest(field, expected.iter().copied()) {
            Some(near) => format!("unknown field `{field}` — did you mean `{near}`? (expected {})", OneOf(expected)),
            None => format!("unknown field `{field}`, expected {}", OneOf(expected)),
        },
        Kind::MissingField(field) => format!("missing field `{field}`"),
        Kind::DuplicateField(field) => format!("duplicate field `{field}`"),
        Kind::ISizeOutOfRange(_) | Kind::USizeOutOfRange(_) => "is out of range".to_owned(),
        Kind::Unsupported(_) | Kind::UnsupportedKey(..) => "has an unsupported type".to_owned(),
    }
}

/// How an environment value is read: by its key, never by the look of the text.
#[derive(Clone, Copy)]
enum Type {
    Str,
    Int,
    /// `true` or `false`.
    Bool,
    /// A JSON array of strings, or a comma-separated list.
    List,
}

/// The keys of the sections this module owns, with the type an environment value is read as.
fn type_of(section: &str, key: &str) -> Option<Type> {
    Some(match (section, key) {
        ("database", "url" | "url_file")
        | ("server", "listen")
        | ("worker", "metrics_listen")
        | (
            "auth",
            "service_tokens_file"
            | "admin_tokens_file"
            | "metrics_tokens_file"
            | "user_token_secret"
            | "user_token_secret_file",
        )
        | ("log", "format" | "level")
        | (
            "retention",
            "content_after_erasure"
            | "records_after_erasure"
            | "tombstone_after_erasure"
            | "finished_after"
            | "status_events_after"
            | "interval",
        )
        | ("keys", _) => Type::Str,
        ("database", "max_connections" | "api_max_connections" | "worker_max_connections")
        | (
            "server",
            "body_limit_bytes"
            | "header_read_timeout_ms"
            | "request_timeout_ms"
            | "body_timeout_ms"
            | "max_in_flight"
            | "rate_per_second"
            | "rate_burst"
            | "anonymous_max_in_flight"
            | "anonymous_rate_per_second"
            | "anonymous_rate_burst"
            | "failed_auth_burst"
            | "failed_auth_per_minute",
        )
        | ("console", "session_hours" | "session_idle_minutes" | "sign_in_link_minutes")
        | ("worker", "concurrency" | "lease_ms" | "batch" | "poll_ms")
        | ("test_send", "per_minute" | "per_day")
        | ("retention", "batch") => Type::Int,
        ("server", "https" | "forwarded_for") | ("worker", "enabled") => Type::Bool,
        ("auth", "service_tokens" | "admin_tokens" | "metrics_tokens") | ("egress", "allow_private") => Type::List,
        _ => return None,
    })
}

fn typed(var: &str, kind: Type, raw: &str) -> Result<Value> {
    let bad = |what: &str| ConfigError::new(var, format!("must be {what}"));
    Ok(match kind {
        Type::Str => Value::from(raw.to_owned()),
        Type::Int => Value::from(raw.trim().parse::<i64>().map_err(|_| bad("an integer"))?),
        Type::Bool => Value::from(raw.trim().parse::<bool>().map_err(|_| bad("true or false"))?),
        Type::List if raw.trim_start().starts_with('[') => {
            let list: Vec<String> = serde_json::from_str(raw).map_err(|_| bad("a JSON array of strings"))?;
            Value::from(list)
        }
        Type::List => {
            Value::from(raw.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>())
        }
    })
}

/// A channel value: a TOML value when it parses as one (`400`, `true`, `{ instant_per_hour = 3 }`), else
/// the text itself (`http://…`, `immediate`).
fn channel_value(raw: &str) -> Value {
    Toml::from_str::<Dict>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut table| table.remove("v"))
        .unwrap_or_else(|| Value::from(raw.to_owned()))
}

fn table_at<'a>(table: &'a mut Dict, key: &str, var: &str) -> Result<&'a mut Dict> {
    match table.entry(key.to_owned()).or_insert_with(|| Value::from(Dict::new())) {
        Value::Dict(_, dict) => Ok(dict),
        _ => Err(ConfigError::new(var, format!("`{key}` is not a table in the file"))),
    }
}

/// The `HERALD__SECTION__KEY` and `HERALD__CHANNEL__{index or name}__KEY…` overrides, checked one variable at
/// a time and typed by key. Channel overrides are applied to a copy of the file's `[[channel]]` entries, in
/// the order given (an entry added by index can be addressed by its name afterwards), and the layer carries
/// the whole array: figment replaces an array whole.
struct Environment {
    values: Dict,
}

impl Environment {
    fn read(env: impl IntoIterator<Item = (String, String)>, file: &Figment) -> Result<Environment> {
        let mut values = Dict::new();
        let mut channels: Option<Vec<Value>> = None;
        for (var, raw) in env {
            let Some(path) = var.strip_prefix(ENV_PREFIX) else { continue };
            let parts: Vec<String> = path.split("__").map(str::to_ascii_lowercase).collect();
            if parts.iter().any(String::is_empty) {
                return Err(ConfigError::new(var, "has an empty segment"));
            }
            match parts.as_slice() {
                [section, rest @ ..] if section == "channel" => {
                    let [entry, middle @ .., last] = rest else {
                        return Err(ConfigError::new(var, "must be HERALD__CHANNEL__{index or name}__{key}"));
                    };
                    let channels = match &mut channels {
                        Some(channels) => channels,
                        None => channels.insert(file_channels(file, &var)?),
                    };
                    let mut target = channel_entry(channels, entry, &var)?;
                    for key in middle {
                        target = table_at(target, key, &var)?;
                    }
                    target.insert(last.clone(), channel_value(&raw));
                }
                [section, key] => {
                    let kind = type_of(section, key).ok_or_else(|| {
                        ConfigError::new(&var, format!("`{section}.{key}` is not a configuration key"))
                    })?;
                    let value = typed(&var, kind, &raw)?;
                    if file.find_value(section).is_ok_and(|table| table.as_dict().is_none()) {
                        return Err(ConfigError::new(var, format!("`{section}` is not a table in the file")));
                    }
                    table_at(&mut values, section, &var)?.insert(key.clone(), value);
                }
                _ => return Err(ConfigError::new(var, "must be HERALD__SECTION__KEY")),
            }
        }
        if let Some(channels) = channels {
            values.insert("channel".to_owned(), Value::from(channels));
        }
        Ok(Environment { values })
    }
}

fn file_channels(file: &Figment, var: &str) -> Result<Vec<Value>> {
    match file.find_value("channel") {
        Err(_) => Ok(Vec::new()),
        Ok(Value::Array(_, channels)) => Ok(channels),
        Ok(_) => Err(ConfigError::new(var, "`channel` is not an array of tables in the file")),
    }
}

/// The entry `entry` names: an index (one past the last adds an entry) or a `name`.
fn channel_entry<'a>(channels: &'a mut Vec<Value>, entry: &str, var: &str) -> Result<&'a mut Dict> {
    let index = match entry.parse::<usize>() {
        Ok(index) if index <= channels.len() => index,
        Ok(_) => {
            let count = channels.len();
            return Err(ConfigError::new(
                var,
                format!("there are {count} [[channel]] entries; the next index is {count}"),
            ));
        }
        Err(_) => {
            match channels.iter().position(|channel| channel.find_ref("name").and_then(Value::as_str) == Some(entry)) {
                Some(index) => index,
                None => {
                    return Err(ConfigError::new(
                        var,
                        format!("no [[channel]] is named `{entry}` (use an index to add one)"),
                    ))
                }
            }
        }
    };
    if index == channels.len() {
        channels.push(Value::from(Dict::new()));
    }
    match &mut channels[index] {
        Value::Dict(_, entry) => Ok(entry),
        _ => Err(ConfigError::new(var, "the [[channel]] entry is not a table")),
    }
}

impl Provider for Environment {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENVIRONMENT).interpolater(|_: &Profile, keys: &[&str]| {
            let keys: Vec<String> = keys.iter().map(|key| key.to_ascii_uppercase()).collect();
            format!("{ENV_PREFIX}{}", keys.join("__"))
        })
    }

    fn data(&self) -> figment::Result<figment::value::Map<Profile, Dict>> {
        Ok(Profile::Default.collect(self.values.clone()))
    }
}
