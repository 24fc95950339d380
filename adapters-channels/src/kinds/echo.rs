//! `kind = "echo"`, compiled only with the `test-kind` feature: a kind that sends nowhere, logs nothing and
//! accepts every message, idempotent by its own promise. It exists to prove that a kind is one module and
//! one line of `kinds!` (herald-tests configures it in a real `herald` configuration and delivers through
//! it); nothing ships it.

use async_trait::async_trait;
use herald_domain::classify::Classified;
use herald_domain::{Answers, ChannelKind, Observation, Promise};
use herald_ports::OutboundMessage;

use super::{ChannelBase, Kind, KindChannel};
use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;

/// One configured echo channel.
pub type EchoChannel = KindChannel<Echo>;

/// The echo kind has no part of its own.
pub struct Echo;

#[async_trait]
impl Kind for Echo {
    const KIND: ChannelKind = ChannelKind::new("echo", Promise::Idempotent, Answers::Json { honours_key: true });
    const ADAPTER: &'static str = "EchoChannel";
    const USES_URL: bool = false;

    /// A digest needs a second prompt per window to merge into, so an echo channel refuses a digest of
    /// one (it would only ever send digests): the check of a kind's own rule, naming the key.
    fn check_config(config: &ChannelConfig) -> Result<(), ConfigError> {
        match config.digest {
            Some(digest) if digest.instant_per_hour < 2 => {
                Err(ConfigError::new(&config.name, "digest.instant_per_hour", "must be at least 2 for an echo channel"))
            }
            _ => Ok(()),
        }
    }

    fn build(_config: &ChannelConfig, _egress: &Egress) -> Result<Self, ConfigError> {
        Ok(Echo)
    }

    fn host(&self) -> &str {
        "(nowhere)"
    }

    fn check_destination(&self, _destination: &str) -> Result<(), &'static str> {
        Ok(())
    }

    async fn send(&self, _base: &ChannelBase, message: &OutboundMessage) -> Classified {
        let id = format!("echo-{}", message.reference);
        Classified { observation: Observation::Accepted { provider_msg_id: Some(id) }, detail: "echoed".to_owned() }
    }
}
