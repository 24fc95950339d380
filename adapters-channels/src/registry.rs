//! The one channel factory (SPEC §9): the worker and the settings page's test send both look channels
//! up here, so a test send goes through the same adapter and the same classification as a delivery.
//!
//! [`ConfiguredChannel::new`] builds a `[[channel]]` entry through its kind's entry in
//! [`crate::kinds::KINDS`], the one list of kinds (one line each).

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use herald_domain::classify::Classified;
use herald_domain::{ChannelKind, ChannelName, ChannelRules, Policy};
use herald_ports::{Channel, ChannelRegistry, OutboundMessage};

use crate::config::{ChannelConfig, ConfigError};
use crate::egress::Egress;
use crate::kinds::ChannelAdapter;

/// One configured channel of whichever kind its `[[channel]]` entry names.
pub struct ConfiguredChannel {
    adapter: Box<dyn ChannelAdapter>,
    /// Set only by [`ConfiguredChannel::with_policy`].
    policy: Option<Policy>,
}

/// The former name of [`ConfiguredChannel`], from when every kind was one HTTP struct.
pub type HttpChannel = ConfiguredChannel;

impl ConfiguredChannel {
    /// Validates `config` and builds the adapter of its kind, with the default egress settings.
    ///
    /// # Errors
    /// An invalid setting (see [`ChannelConfig::validate`]), or a client that cannot be built.
    pub fn new(config: &ChannelConfig) -> Result<Self, ConfigError> {
        Self::with_egress(config, &Egress::default())
    }

    /// As [`ConfiguredChannel::new`], with the installation's egress settings (`[egress]`), which guard the
    /// kinds whose destination names a host a user chose (Web Push).
    ///
    /// # Errors
    /// An invalid setting (see [`ChannelConfig::validate`]), or a client that cannot be built.
    pub fn with_egress(config: &ChannelConfig, egress: &Egress) -> Result<Self, ConfigError> {
        let entry = crate::kinds::entry(config.kind)
            .ok_or_else(|| ConfigError::new(&config.name, "kind", "is not a kind this build knows"))?;
        let adapter: Box<dyn ChannelAdapter> = (entry.build)(config, egress)?;
        Ok(ConfiguredChannel { adapter, policy: None })
    }

    /// Replaces the resend policy. Configuration cannot reach this: it exists for the negative
    /// control NC2, which must show that a blind resend really prompts a user twice.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    #[must_use]
    pub fn kind(&self) -> ChannelKind {
        self.adapter.rules().contract.kind
    }
}

#[async_trait]
impl Channel for ConfiguredChannel {
    fn name(&self) -> &ChannelName {
        self.adapter.name()
    }

    fn rules(&self) -> ChannelRules {
        let mut rules = self.adapter.rules();
        if let Some(policy) = self.policy {
            rules.policy = policy;
        }
        rules
    }

    fn outbound_text(&self, body: &str, digest_count: Option<u32>) -> String {
        self.adapter.outbound_text(body, digest_count)
    }

    fn check_destination(&self, destination: &str) -> Result<(), &'static str> {
        self.adapter.check_destination(destination)
    }

    async fn send(&self, message: &OutboundMessage) -> Classified {
        self.adapter.send(message).await
    }

    async fn query(&self, reference: &str) -> Classified {
        self.adapter.query(reference).await
    }
}

impl fmt::Debug for ConfiguredChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.policy {
            None => fmt::Debug::fmt(&self.adapter, f),
            Some(policy) => {
                f.debug_struct("ConfiguredChannel").field("adapter", &self.adapter).field("policy", &policy).finish()
            }
        }
    }
}

/// The configured channels, in configuration order.
#[derive(Clone, Default)]
pub struct HttpChannelRegistry {
    channels: Vec<Arc<dyn Channel>>,
}

impl HttpChannelRegistry {
    /// Builds one [`ConfiguredChannel`] per `[[channel]]` entry, with the default egress settings.
    ///
    /// # Errors
    /// The first invalid entry, or a name configured twice (`channel.<name>.name`).
    pub fn from_configs(configs: &[ChannelConfig]) -> Result<Self, ConfigError> {
        Self::from_configs_with_egress(configs, &Egress::default())
    }

    /// As [`HttpChannelRegistry::from_configs`], with the installation's egress settings (`[egress]`).
    ///
    /// # Errors
    /// The first invalid entry, or a name configured twice (`channel.<name>.name`).
    pub fn from_configs_with_egress(configs: &[ChannelConfig], egress: &Egress) -> Result<Self, ConfigError> {
        let channels = configs
            .iter()
            .map(|config| {
                ConfiguredChannel::with_egress(config, egress).map(|channel| Arc::new(channel) as Arc<dyn Channel>)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::from_channels(channels)
    }

    /// A registry of already built channels, for tests that wrap or replace an adapter.
    ///
    /// # Errors
    /// A name that occurs twice.
    pub fn from_channels(channels: impl IntoIterator<Item = Arc<dyn Channel>>) -> Result<Self, ConfigError> {
        let mut registry = HttpChannelRegistry::default();
        for channel in channels {
            if registry.channels.iter().any(|known| known.name() == channel.name()) {
                return Err(ConfigError::new(channel.name().as_str(), "name", "is configured more than once"));
            }
            registry.channels.push(channel);
        }
        Ok(registry)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.channels.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty()
    }
}

impl ChannelRegistry for HttpChannelRegistry {
    /// A linear search: a deployment configures a handful of channels.
    fn get(&self, name: &ChannelName) -> Option<Arc<dyn Channel>> {
        self.channels.iter().find(|channel| channel.name() == name).cloned()
    }

    fn names(&self) -> Vec<ChannelName> {
        self.channels.iter().map(|channel| channel.name().clone()).collect()
    }
}

impl fmt::Debug for HttpChannelRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.channels.iter().map(|channel| channel.name().as_str())).finish()
    }
}
