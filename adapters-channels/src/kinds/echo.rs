//! `kind = "echo"`, compiled only with the `test-kind` feature: a kind that sends nowhere, logs nothing and
//! accepts every message, idempotent by its own promise. It exists to prove that a kind is one module and
//! one line of `kinds!` (herald-tests configures it in a real `herald` configuration and delivers through
//! it); nothing ships it.

use async_trait::async_trait;
use herald_domain::classify::Classified;
use herald_domain::{Answers, ChannelKind, Observation, Promise};
use herald_ports::OutboundMessage;
use serde::Deserialize;

use super::{ChannelBase, Kind, KindChannel};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;

/// One configured echo channel.
pub type EchoChannel = KindChannel<Echo>;

/// The echo kind's own part: the prefix of the ids it answers with.
pub struct Echo {
    prefix: String,
}

/// The keys of an `echo` channel besides the shared ones, declared here and nowhere else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EchoSettings {
    /// What the ids it answers with start with; absent means `echo`.
    #[serde(default)]
    pub prefix: Option<String>,
}

#[async_trait]
impl Kind for Echo {
    const KIND: ChannelKind = ChannelKind::new("echo", Promise::Idempotent, Answers::Json { honours_key: true });
    const ADAPTER: &'static str = "EchoChannel";
    const USES_URL: bool = false;
    type Settings = EchoSettings;

    /// A digest needs a second prompt per window to merge into, so an echo channel refuses a digest of
    /// one (it would only ever send digests): the check of a kind's own rule on a shared key, naming the
    /// key; and its own `prefix`, which must be a short word.
    fn check_config(config: &ChannelConfig, settings: &EchoSettings) -> Result<(), ConfigError> {
        if config.digest.is_some_and(|digest| digest.instant_per_hour < 2) {
            return Err(ConfigError::new(
                &config.name,
                "digest.instant_per_hour",
                "must be at least 2 for an echo channel",
            ));
        }
        match settings.prefix.as_deref() {
            Some(prefix) if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                Err(ConfigError::new(&config.name, "prefix", "must be letters and digits only"))
            }
            _ => Ok(()),
        }
    }

    fn build(_config: &ChannelConfig, settings: &EchoSettings, _egress: &Egress) -> Result<Self, ConfigError> {
        Ok(Echo { prefix: settings.prefix.clone().unwrap_or_else(|| "echo".to_owned()) })
    }

    fn host(&self) -> &str {
        "(nowhere)"
    }

    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, _base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let id = format!("{}-{}", self.prefix, message.reference);
        Classified { observation: Observation::Accepted { provider_msg_id: Some(id) }, detail: "echoed".to_owned() }
    }
}
