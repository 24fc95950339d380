//! `[[channel]]` entries as the application parses them (SPEC §12): defaults, unknown keys, validation.

use herald_channels::config::{ChannelConfig, ChannelEntry, ConfigError, DigestSetting, MIAOTIXING_DEFAULT_TEXT};
use herald_domain::{Capability, ChannelKind, DigestRule, Millis, Policy, QueryConsistency, RefusalProof};
use serde::Deserialize;

#[derive(Deserialize)]
struct File {
    channel: Vec<ChannelEntry>,
}

/// The entries of `toml_text`, each read by its kind; the error of the first that fails, as text.
fn parse(toml_text: &str) -> Result<Vec<ChannelConfig>, String> {
    let file = toml::from_str::<File>(toml_text).map_err(|error| error.to_string())?;
    file.channel.into_iter().map(|entry| entry.into_config().map_err(|error| error.to_string())).collect()
}

fn one(toml_text: &str) -> ChannelConfig {
    parse(toml_text).expect("parses").remove(0)
}

#[test]
fn spec_example_parses() {
    let config = one(r#"
        [[channel]]
        name = "push"
        kind = "webhook"
        url = "http://127.0.0.1:9001"
        timeout_ms = 400
        max_attempts = 3
        retry_base_ms = 500
        refusal_5xx = "before_acceptance"
        query_consistency = "immediate"
        min_interval_ms = 0
        digest = { instant_per_hour = 3 }
        text = "You have a new update"
        "#);
    config.validate().expect("valid");
    assert_eq!(config.timeout_ms, 400);
    assert_eq!(config.digest, Some(DigestSetting { instant_per_hour: 3, window_secs: None }));
    let rules = config.rules();
    assert_eq!(rules.contract.capability, Capability::Idempotent);
    assert_eq!(rules.digest, Some(DigestRule::per_hour(3)));
    assert_eq!(rules.policy, Policy::Safe);
    assert_eq!(config.text(), Some("You have a new update"));
}

#[test]
fn defaults_apply() {
    let config = one("[[channel]]\nname = \"sms\"\nkind = \"queryable\"\nurl = \"http://127.0.0.1:9002\"\n");
    config.validate().expect("valid");
    assert_eq!(config, ChannelConfig::new("sms", ChannelKind::Queryable, "http://127.0.0.1:9002"));
    assert_eq!(config.timeout_ms, 5_000);
    assert_eq!(config.max_attempts, 3);
    assert_eq!(config.retry_base_ms, 500);
    assert_eq!(config.retry_cap_ms, 60_000);
    assert_eq!(config.refusal_5xx, RefusalProof::BeforeAcceptance);
    assert_eq!(config.query_consistency, QueryConsistency::Immediate);
    assert_eq!(config.min_interval_ms(), 0);
    assert_eq!(config.max_response_bytes(), 64 * 1024);
    assert_eq!(config.text(), None);
    let rules = config.rules();
    assert_eq!(rules.contract.capability, Capability::Queryable { consistency: QueryConsistency::Immediate });
    assert_eq!(rules.retry.max_attempts, 3);
    assert_eq!(rules.min_interval, Millis(0));
    assert_eq!(rules.digest, None);
}

#[test]
fn miaotixing_defaults_to_ten_seconds_and_a_privacy_safe_text() {
    let config = one("[[channel]]\nname = \"miao\"\nkind = \"miaotixing\"\nurl = \"https://miaotixing.com\"\n");
    config.validate().expect("valid");
    assert_eq!(config.min_interval_ms(), 10_000);
    assert_eq!(config.rules().min_interval, Millis(10_000));
    assert_eq!(config.rules().egress_guard, Millis(1_000), "default guard: a tenth, at most 1 s");
    assert_eq!(config.text(), Some(MIAOTIXING_DEFAULT_TEXT));
    assert_eq!(config.rules().contract.capability, Capability::Neither);
}

#[test]
fn query_consistency_takes_a_delay_and_digest_a_window() {
    let config =
        one("[[channel]]\nname = \"sms\"\nkind = \"queryable\"\nurl = \"http://h\"\nquery_consistency = 2000\n\
         refusal_5xx = \"unknown\"\ndigest = { instant_per_hour = 2, window_secs = 60 }\n");
    assert_eq!(config.query_consistency, QueryConsistency::After(Millis(2_000)));
    assert_eq!(config.refusal_5xx, RefusalProof::Unknown);
    assert_eq!(config.rules().digest, Some(DigestRule { instant_per_window: 2, window: Millis(60_000) }));
    assert!(parse(
        "[[channel]]\nname = \"s\"\nkind = \"queryable\"\nurl = \"http://h\"\nquery_consistency = \"soon\"\n"
    )
    .is_err());
    assert!(
        parse("[[channel]]\nname = \"s\"\nkind = \"queryable\"\nurl = \"http://h\"\nquery_consistency = -1\n").is_err()
    );
}

#[test]
fn unknown_keys_are_refused() {
    let err = parse("[[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"http://h\"\npolicy = \"unsafe\"\n")
        .expect_err("policy is not a setting");
    assert!(err.contains("policy"), "{err}");
    let err = parse("[[channel]]\nname = \"p\"\nkind = \"webhook\"\nurl = \"http://h\"\ndigest = { per_day = 1 }\n")
        .expect_err("unknown digest key");
    assert!(err.contains("per_day"), "{err}");
    assert!(parse("[[channel]]\nname = \"p\"\nkind = \"carrier_pigeon\"\nurl = \"http://h\"\n").is_err());
}

#[track_caller]
fn invalid(change: impl FnOnce(&mut ChannelConfig), key: &str) {
    let mut config = ChannelConfig::new("push", ChannelKind::Webhook, "http://127.0.0.1:9001");
    change(&mut config);
    let err: ConfigError = config.validate().expect_err("invalid");
    assert_eq!(err.key, key);
    assert!(err.to_string().starts_with(&format!("{key}: ")), "{err}");
}

#[test]
fn each_validation_error_names_its_key() {
    invalid(|c| c.name = String::new(), "channel.name");
    invalid(|c| c.name = "Push!".into(), "channel.Push!.name");
    invalid(|c| c.url = "not a url".into(), "channel.push.url");
    invalid(|c| c.url = "ftp://example.com".into(), "channel.push.url");
    invalid(|c| c.url = "http://example.com/?token=1".into(), "channel.push.url");
    invalid(|c| c.timeout_ms = 0, "channel.push.timeout_ms");
    invalid(|c| c.max_attempts = 0, "channel.push.max_attempts");
    invalid(|c| c.retry_cap_ms = 1, "channel.push.retry_cap_ms");
    invalid(
        |c| c.digest = Some(DigestSetting { instant_per_hour: 0, window_secs: None }),
        "channel.push.digest.instant_per_hour",
    );
    invalid(
        |c| c.digest = Some(DigestSetting { instant_per_hour: 1, window_secs: Some(0) }),
        "channel.push.digest.window_secs",
    );
    invalid(|c| c.text = Some("  ".into()), "channel.push.text");
    invalid(|c| c.max_response_bytes = Some(0), "channel.push.max_response_bytes");
    invalid(
        |c| {
            c.min_interval_ms = Some(300);
            c.egress_guard_ms = Some(0);
        },
        "channel.push.egress_guard_ms",
    );
}

#[test]
fn url_errors_do_not_repeat_the_url() {
    let mut config = ChannelConfig::new("push", ChannelKind::Webhook, "http://example.com/?token=s3cr3t");
    let err = config.validate().expect_err("query refused").to_string();
    assert!(!err.contains("s3cr3t"), "{err}");
    config.url = "s3cr3t://x".into();
    let err = config.validate().expect_err("scheme refused").to_string();
    assert!(!err.contains("s3cr3t"), "{err}");
}

#[test]
fn a_display_name_is_what_the_console_shows_and_a_bad_one_is_refused_by_its_key() {
    let config = one(r#"
        [[channel]]
        name = "miao"
        display_name = "微信提醒 (Miaotixing)"
        kind = "miaotixing"
        url = "https://miaotixing.com"
        "#);
    config.validate().expect("valid");
    assert_eq!(config.display_name.as_deref(), Some("微信提醒 (Miaotixing)"));
    for bad in ["", "   ", "a\u{7}b", &"x".repeat(61)] {
        let mut config = config.clone();
        config.display_name = Some(bad.to_owned());
        let err = config.validate().expect_err("refused").to_string();
        assert!(err.contains("display_name"), "{bad:?}: {err}");
    }
}
