//! The channel factory and the destination cipher port, as the application uses them.

use std::io;
use std::sync::{Arc, Mutex};

use herald_channels::cipher::Keyring;
use herald_channels::config::ChannelConfig;
use herald_channels::{HttpChannel, HttpChannelRegistry};
use herald_domain::{ChannelKind, ChannelName, IdempotencyKey, Observation, UserId};
use herald_ports::{Channel, ChannelRegistry, CipherError, DestinationCipher, OutboundMessage};
use herald_standin::{Kind, StandIn};
use secrecy::{ExposeSecret, SecretString};

const DEST: &str = "dest-PLANTED-r4Kp2";

fn configs() -> Vec<ChannelConfig> {
    vec![
        ChannelConfig::new("sms", ChannelKind::Queryable, "http://127.0.0.1:9002"),
        ChannelConfig::new("push", ChannelKind::Webhook, "http://127.0.0.1:9001"),
        ChannelConfig::new("miao", ChannelKind::Miaotixing, "https://miaotixing.com"),
    ]
}

#[test]
fn names_come_in_configuration_order() {
    let registry = HttpChannelRegistry::from_configs(&configs()).expect("valid");
    let names: Vec<String> = registry.names().into_iter().map(|n| n.0).collect();
    assert_eq!(names, ["sms", "push", "miao"]);
    let miao = registry.get(&ChannelName::new("miao")).expect("configured");
    assert_eq!(miao.rules().contract.kind, ChannelKind::Miaotixing);
    assert!(registry.get(&ChannelName::new("email")).is_none());
    assert_eq!(format!("{registry:?}"), r#"["sms", "push", "miao"]"#);
}

#[test]
fn a_duplicate_name_is_refused_naming_the_key() {
    let mut configs = configs();
    configs.push(ChannelConfig::new("push", ChannelKind::Queryable, "http://127.0.0.1:9003"));
    let err = HttpChannelRegistry::from_configs(&configs).expect_err("duplicate");
    assert_eq!(err.key, "channel.push.name");
}

#[test]
fn an_invalid_entry_is_refused_naming_its_key() {
    let mut configs = configs();
    configs[1].timeout_ms = 0;
    let err = HttpChannelRegistry::from_configs(&configs).expect_err("invalid");
    assert_eq!(err.key, "channel.push.timeout_ms");
}

#[test]
fn prebuilt_channels_can_be_registered() {
    let channel = HttpChannel::new(&configs()[1]).expect("valid").with_policy(herald_domain::Policy::Unsafe);
    let registry = HttpChannelRegistry::from_channels([Arc::new(channel) as Arc<dyn Channel>]).expect("one");
    let push = registry.get(&ChannelName::new("push")).expect("registered");
    assert_eq!(push.rules().policy, herald_domain::Policy::Unsafe);
}

/// Collects everything a `tracing` subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_send_through_the_registry_traces_the_channel_and_never_the_destination() {
    let standin = StandIn::start(Kind::Push).await;
    let config = ChannelConfig::new("push", ChannelKind::Webhook, standin.base_url());
    let registry = HttpChannelRegistry::from_configs(&[config]).expect("valid");
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let channel = registry.get(&ChannelName::new("push")).expect("configured");
    let message = OutboundMessage {
        reference: "7".to_owned(),
        idempotency_key: IdempotencyKey::for_task("7"),
        destination: SecretString::from(DEST),
        text: "hello".to_owned(),
        ttl_seconds: 30,
    };
    let got = channel.send(&message).await;
    assert!(matches!(got.observation, Observation::Accepted { .. }), "{got:?}");
    assert_eq!(standin.sends_to(DEST), 1);

    let output = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    assert!(output.contains("channel=push"), "{output}");
    assert!(output.contains("send classified"), "{output}");
    assert!(!output.contains(DEST), "{output}");
    standin.shutdown().await;
}

fn keyring(keys: &[&str], current: &str) -> Keyring {
    // Deterministic keys: 32 bytes of the id's first letter, base64-encoded.
    let encode = |id: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode([id.as_bytes()[0]; 32])
    };
    Keyring::new(keys.iter().map(|id| ((*id).to_owned(), SecretString::from(encode(id)))), current).expect("keys")
}

#[test]
fn keyring_is_the_destination_cipher_port() {
    let ring = keyring(&["k1", "k2"], "k2");
    let cipher: &dyn DestinationCipher = &ring;
    let (user, channel) = (UserId::new("u1"), ChannelName::new("miao"));
    let stored = cipher.encrypt(&user, &channel, &SecretString::from(DEST)).expect("encrypts");
    assert_eq!(cipher.decrypt(&user, &channel, &stored).expect("decrypts").expose_secret(), DEST);
    assert!(!cipher.needs_rotation(&stored));

    // Another row's associated data, or flipped bytes: damaged. Empty input: damaged.
    assert_eq!(cipher.decrypt(&UserId::new("u2"), &channel, &stored).err(), Some(CipherError::Invalid));
    let mut tampered = stored.clone();
    *tampered.last_mut().expect("bytes") ^= 1;
    assert_eq!(cipher.decrypt(&user, &channel, &tampered).err(), Some(CipherError::Invalid));
    assert_eq!(cipher.decrypt(&user, &channel, &[]).err(), Some(CipherError::Invalid));

    // Written under k2, read by a keyring that only has k1.
    let old: &dyn DestinationCipher = &keyring(&["k1"], "k1");
    assert_eq!(old.decrypt(&user, &channel, &stored).err(), Some(CipherError::UnknownKey { key_id: "k2".to_owned() }));
    assert!(old.needs_rotation(&stored));
}
