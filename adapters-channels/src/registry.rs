//! The one channel factory (SPEC §9): the worker and the settings page's test send both look channels
//! up here, so a test send goes through the same adapter and the same classification as a delivery.

use std::sync::Arc;

use herald_domain::ChannelName;
use herald_ports::{Channel, ChannelRegistry};

use crate::config::{ChannelConfig, ConfigError};
use crate::http::HttpChannel;

/// The configured channels, in configuration order.
#[derive(Clone, Default)]
pub struct HttpChannelRegistry {
    channels: Vec<Arc<dyn Channel>>,
}

impl HttpChannelRegistry {
    /// Builds one [`HttpChannel`] per `[[channel]]` entry.
    ///
    /// # Errors
    /// The first invalid entry, or a name configured twice (`channel.<name>.name`).
    pub fn from_configs(configs: &[ChannelConfig]) -> Result<Self, ConfigError> {
        let channels = configs
            .iter()
            .map(|config| HttpChannel::new(config).map(|channel| Arc::new(channel) as Arc<dyn Channel>))
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

impl std::fmt::Debug for HttpChannelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.channels.iter().map(|channel| channel.name().as_str())).finish()
    }
}
