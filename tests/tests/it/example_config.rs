//! The repository's `example.toml` is accepted by the real configuration loader, as `herald serve` reads it.

use std::path::Path;

use herald_app::config::Config;
use herald_channels::registry::HttpChannelRegistry;
use herald_domain::ChannelKind;

#[test]
fn example_toml_loads_validates_and_builds_its_channels() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../example.toml");
    let config = Config::load(Some(&path), std::iter::empty()).expect("example.toml is valid");
    assert!(config.database.url.is_some());
    let auth = config.require_auth("serve").expect("auth");
    assert!(!auth.service_tokens.is_empty() && !auth.admin_tokens.is_empty());
    let keyring = config.require_keys("serve").expect("keys").keyring().expect("the example keys are valid");
    assert_eq!(keyring.current_key_id(), "k2");
    let kinds: Vec<ChannelKind> = config.channels.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChannelKind::Webhook, ChannelKind::Queryable, ChannelKind::Miaotixing]);
    HttpChannelRegistry::from_configs(&config.channels).expect("the channels build");
}
