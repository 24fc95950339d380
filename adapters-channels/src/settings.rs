//! The keys of a `[[channel]]` table that are not shared by every kind, handed to the kind's own settings
//! type ([`crate::kinds::Kind::Settings`]). A key its type does not declare (a misspelling, another kind's
//! key) is refused by the type's `deny_unknown_fields`; every error names the key and never the value (it
//! may be a secret put in the wrong place).

use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde_json::{Map, Value};

/// The keys of a `[[channel]]` table left after the shared ones, as given.
pub type RawSettings = Map<String, Value>;

/// A kind's settings that could not be read: the key (when one is at fault) and what is wrong.
#[derive(Debug)]
pub struct SettingError {
    pub key: Option<String>,
    pub reason: String,
    /// The key is not one of the type's.
    pub unknown: bool,
}

impl SettingError {
    fn at(mut self, key: &str) -> Self {
        self.key.get_or_insert_with(|| key.to_owned());
        self
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for SettingError {}

impl de::Error for SettingError {
    fn custom<T: fmt::Display>(message: T) -> Self {
        SettingError { key: None, reason: message.to_string(), unknown: false }
    }

    fn invalid_type(_given: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!("invalid type, expected {expected}"))
    }

    fn invalid_value(_given: de::Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!("invalid value, expected {expected}"))
    }

    fn unknown_variant(_given: &str, expected: &'static [&'static str]) -> Self {
        Self::custom(format_args!("unknown variant, expected one of {}", expected.join(", ")))
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        let reason = if expected.is_empty() {
            format!("unknown field `{field}`: this kind has no keys of its own")
        } else {
            format!("unknown field `{field}`, this kind's own keys are {}", expected.join(", "))
        };
        SettingError { key: Some(field.to_owned()), reason, unknown: true }
    }

    fn missing_field(field: &'static str) -> Self {
        SettingError { key: Some(field.to_owned()), reason: format!("missing field `{field}`"), unknown: false }
    }
}

/// Reads `raw` as the settings type `S`.
///
/// # Errors
/// The first key that does not fit `S`.
pub fn parse<S: DeserializeOwned>(raw: RawSettings) -> Result<S, SettingError> {
    S::deserialize(Given(Value::Object(raw)))
}

/// Whether the settings type `S` has a key named `key`.
#[must_use]
pub fn has_key<S: DeserializeOwned>(key: &str) -> bool {
    let mut probe = RawSettings::new();
    probe.insert(key.to_owned(), Value::Null);
    !matches!(parse::<S>(probe), Err(error) if error.unknown)
}

/// One given value, read with errors that never quote it.
struct Given(Value);

impl<'de> IntoDeserializer<'de, SettingError> for Given {
    type Deserializer = Given;

    fn into_deserializer(self) -> Given {
        self
    }
}

/// A table's entries, each value's error named by its key.
struct Entries {
    entries: serde_json::map::IntoIter,
    key: String,
    value: Option<Value>,
}

impl<'de> de::MapAccess<'de> for Entries {
    type Error = SettingError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, SettingError> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        let read = seed.deserialize(key.as_str().into_deserializer()).map_err(|e: SettingError| e.at(&key));
        self.key = key;
        read.map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, SettingError> {
        let value = self.value.take().unwrap_or(Value::Null);
        seed.deserialize(Given(value)).map_err(|e| e.at(&self.key))
    }
}

impl<'de> de::Deserializer<'de> for Given {
    type Error = SettingError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingError> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (None, Some(i)) => visitor.visit_i64(i),
                (None, None) => visitor.visit_f64(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => visitor.visit_string(s),
            Value::Array(items) => visitor.visit_seq(de::value::SeqDeserializer::new(items.into_iter().map(Given))),
            Value::Object(map) => {
                visitor.visit_map(Entries { entries: map.into_iter(), key: String::new(), value: None })
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingError> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, SettingError> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(s.into_deserializer()),
            other => Given(other).deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        #[serde(default)]
        port: Option<u16>,
        #[serde(default)]
        on: bool,
    }

    fn raw(json: &str) -> RawSettings {
        serde_json::from_str(json).expect("a table")
    }

    #[test]
    fn errors_name_the_key_and_never_the_value() {
        let sample: Sample = parse(raw(r#"{"port": 25, "on": true}"#)).expect("valid");
        assert_eq!((sample.port, sample.on), (Some(25), true));
        let error = parse::<Sample>(raw(r#"{"port": "hunter2"}"#)).expect_err("a string");
        assert_eq!(error.key.as_deref(), Some("port"));
        assert!(!error.reason.contains("hunter2"), "{error}");
        let error = parse::<Sample>(raw(r#"{"prot": 25}"#)).expect_err("misspelt");
        assert_eq!(error.key.as_deref(), Some("prot"));
        assert!(error.reason.contains("unknown field `prot`") && error.reason.contains("port"), "{error}");
    }
}
