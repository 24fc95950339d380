//! What `herald serve` and `herald worker` refuse before they start (the real binary), and the fresh
//! configuration `herald init` writes, which passes.

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output};

use herald_app::config::{production, Config};
use herald_tests::bins::binary;

fn herald(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(binary("herald"));
    command.args(args).env_remove("HERALD_CONFIG").env_remove("DATABASE_URL");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("the herald binary runs")
}

fn example() -> String {
    format!("{}/../example.toml", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_example_configuration_is_refused_as_it_ships() {
    for command in ["serve", "worker"] {
        let out = herald(&["--config", &example(), command], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("keys.k1") && stderr.contains("herald init"), "{command}: {stderr}");
        assert!(!stderr.contains("RiVDe6Sb"), "never the value: {stderr}");
    }
}

#[test]
fn placeholders_short_tokens_and_plain_http_are_refused_naming_the_key() {
    let key = ("HERALD__KEYS__K1", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=");
    let cases: [(&[(&str, &str)], &str); 4] = [
        (&[("HERALD__AUTH__SERVICE_TOKENS", "example-service-token-0123456789abcdef")], "auth.service_tokens[0]"),
        (&[("HERALD__AUTH__ADMIN_TOKENS", "short-admin-token")], "auth.admin_tokens[0]"),
        (&[("HERALD__AUTH__USER_TOKEN_SECRET", "please-change-me-before-use")], "auth.user_token_secret"),
        (&[("HERALD__CHANNEL__PUSH__URL", "http://push.internal.example")], "channel.push.url"),
    ];
    for (overrides, key_named) in cases {
        let mut vars = vec![
            ("HERALD__KEYS__K1", key.1),
            ("HERALD__KEYS__K2", key.1),
            ("HERALD__AUTH__SERVICE_TOKENS", "a-service-token-of-at-least-32-bytes"),
            ("HERALD__AUTH__ADMIN_TOKENS", "an-admin-token-of-at-least-32-bytes"),
            ("HERALD__AUTH__USER_TOKEN_SECRET", "a-user-token-secret-of-some-length"),
        ];
        vars.retain(|(k, _)| !overrides.iter().any(|(o, _)| o == k));
        vars.extend_from_slice(overrides);
        let config = Config::load(
            Some(std::path::Path::new(&example())),
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
        .expect("loads");
        let refused = production::check(&config, true).expect_err(key_named);
        assert!(refused.to_string().contains(key_named), "{refused}");
    }
    // The same plain-http channel is accepted when the operator says the network is theirs.
    let text = std::fs::read_to_string(example()).expect("example.toml").replacen(
        "url = \"http://127.0.0.1:9001\"",
        "url = \"http://push.internal.example\"\nallow_plain_http = true",
        1,
    );
    let file = std::env::temp_dir().join(format!("herald-plain-http-{}.toml", std::process::id()));
    std::fs::write(&file, text).expect("write");
    let vars = [
        ("HERALD__KEYS__K1", key.1),
        ("HERALD__KEYS__K2", key.1),
        ("HERALD__AUTH__SERVICE_TOKENS", "a-service-token-of-at-least-32-bytes"),
        ("HERALD__AUTH__ADMIN_TOKENS", "an-admin-token-of-at-least-32-bytes"),
        ("HERALD__AUTH__USER_TOKEN_SECRET", "a-user-token-secret-of-some-length"),
    ];
    let config =
        Config::load(Some(&file), vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))).expect("loads");
    let _ = std::fs::remove_file(&file);
    assert!(config.channels.iter().any(|c| c.allow_plain_http), "the setting was read");
    production::check(&config, true).expect("accepted with allow_plain_http");
}

#[test]
fn herald_init_writes_a_configuration_that_passes_with_private_secret_files() {
    let dir = std::env::temp_dir().join(format!("herald-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = herald(&["init", "--dir", dir.to_str().expect("utf-8")], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for secret in ["service-tokens", "admin-tokens", "user-token-secret", "k1.key"] {
        let mode = std::fs::metadata(dir.join("secrets").join(secret)).expect(secret).permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{secret}");
    }
    let config =
        Config::load(Some(&dir.join("herald.toml")), std::iter::empty()).expect("the written configuration loads");
    production::check(&config, true).expect("and passes the production checks");
    let text = std::fs::read_to_string(dir.join("herald.toml")).expect("herald.toml");
    let token = std::fs::read_to_string(dir.join("secrets/service-tokens")).expect("token");
    assert!(!text.contains(token.trim()), "the configuration file holds no secret");
    let again = herald(&["init", "--dir", dir.to_str().expect("utf-8")], &[]);
    assert!(!again.status.success(), "never overwrites");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker whose keys cannot open what is stored refuses to start, naming the missing key ids (before,
/// it started and failed each delivery as "not sent").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_a_key_in_use_refuses_to_start_naming_it() {
    use herald_channels::cipher::Keyring;
    use herald_domain::{ChannelName, UserId};
    use herald_ports::PreferenceStore as _;
    use secrecy::SecretString;

    let db = herald_tests::TestDb::fresh().await.expect("database");
    let old = Keyring::new([("k0".to_owned(), Keyring::generate_key())], "k0").expect("k0");
    let sealed = old.encrypt("alice", "push", &SecretString::from("alice-phone")).expect("encrypt");
    db.store.put(&UserId::from("alice"), &ChannelName::from("push"), true, Some(sealed)).await.expect("put");
    let key = Keyring::generate_key();
    let out = herald(
        &["--config", &example(), "worker"],
        &[
            ("HERALD__DATABASE__URL", db.url.as_str()),
            ("HERALD__KEYS__CURRENT", "k9"),
            ("HERALD__KEYS__K1", secrecy::ExposeSecret::expose_secret(&key)),
            ("HERALD__KEYS__K2", secrecy::ExposeSecret::expose_secret(&key)),
            ("HERALD__KEYS__K9", secrecy::ExposeSecret::expose_secret(&key)),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("k0") && stderr.contains("not loaded"), "{stderr}");
}

/// Variables that make `example.toml` pass every production check but the one a case is about.
const GOOD_SECRETS: [(&str, &str); 5] = [
    ("HERALD__KEYS__K1", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="),
    ("HERALD__KEYS__K2", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="),
    ("HERALD__AUTH__SERVICE_TOKENS", "a-service-token-of-at-least-32-bytes"),
    ("HERALD__AUTH__ADMIN_TOKENS", "an-admin-token-of-at-least-32-bytes"),
    ("HERALD__AUTH__USER_TOKEN_SECRET", "a-user-token-secret-of-some-length"),
];

fn example_with(overrides: &[(&str, &str)]) -> Config {
    let mut vars: Vec<(&str, &str)> = GOOD_SECRETS.to_vec();
    vars.retain(|(k, _)| !overrides.iter().any(|(o, _)| o.eq_ignore_ascii_case(k)));
    vars.extend_from_slice(overrides);
    Config::load(Some(std::path::Path::new(&example())), vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())))
        .expect("loads")
}

// Defect (issue 40): only the spelling "change-me" was a placeholder; "ChangeMe…" passed.
#[test]
fn placeholders_are_refused_in_any_case_and_spelling() {
    production::check(&example_with(&[]), true).expect("the good secrets pass");
    let cases = [
        ("HERALD__AUTH__SERVICE_TOKENS", "ChangeMe-0123456789abcdef0123456789", "auth.service_tokens[0]"),
        ("HERALD__AUTH__ADMIN_TOKENS", "CHANGE_ME_0123456789abcdef0123456789", "auth.admin_tokens[0]"),
        ("HERALD__AUTH__USER_TOKEN_SECRET", "please Change Me before use", "auth.user_token_secret"),
        ("HERALD__AUTH__USER_TOKEN_SECRET", "Placeholder-user-token-secret", "auth.user_token_secret"),
        ("HERALD__AUTH__SERVICE_TOKENS", "ReplaceMe-0123456789abcdef0123456789", "auth.service_tokens[0]"),
        ("HERALD__AUTH__ADMIN_TOKENS", "an-EXAMPLE-admin-token-0123456789abcdef", "auth.admin_tokens[0]"),
        ("HERALD__AUTH__METRICS_TOKENS", "Change.Me.metrics", "auth.metrics_tokens[0]"),
    ];
    for (variable, value, key) in cases {
        let refused = production::check(&example_with(&[(variable, value)]), true).expect_err(value);
        let text = refused.to_string();
        assert!(text.contains(key) && text.contains("placeholder"), "{value}: {text}");
        assert!(!text.contains(value), "never the value: {text}");
    }
    let mail = [
        ("HERALD__CHANNEL__3__NAME", "mail"),
        ("HERALD__CHANNEL__3__KIND", "email"),
        ("HERALD__CHANNEL__3__HOST", "127.0.0.1"),
        ("HERALD__CHANNEL__3__TLS", "none"),
        ("HERALD__CHANNEL__3__FROM", "herald@notify.example.org"),
        ("HERALD__CHANNEL__3__USERNAME", "herald"),
        ("HERALD__CHANNEL__3__PASSWORD", "ChangeMe123"),
    ];
    let refused = production::check(&example_with(&mail), false).expect_err("a placeholder SMTP password");
    assert_eq!(refused.key, "channel.mail.password", "{refused}");
}

/// A Web Push channel that posts to this machine is for stand-ins: the production check refuses it, by its
/// key, in the real binary too, unless the process is started with `--stand-ins`.
#[test]
fn allow_loopback_endpoints_is_refused_outside_stand_ins() {
    let (private, _) = herald_channels::kinds::webpush::VapidKey::generate();
    let browser = [
        ("HERALD__CHANNEL__3__NAME", "browser"),
        ("HERALD__CHANNEL__3__KIND", "webpush"),
        ("HERALD__CHANNEL__3__VAPID_PRIVATE_KEY", private.as_str()),
        ("HERALD__CHANNEL__3__VAPID_SUBJECT", "mailto:ops@notify.example.org"),
    ];
    production::check(&example_with(&browser), true).expect("a Web Push channel as such passes");
    let mut stand_in = browser.to_vec();
    stand_in.push(("HERALD__CHANNEL__3__ALLOW_LOOPBACK_ENDPOINTS", "true"));
    let config = example_with(&stand_in);
    let refused = production::check(&config, false).expect_err("refused");
    assert_eq!(refused.key, "channel.browser.allow_loopback_endpoints", "{refused}");
    assert!(refused.reason.contains("--stand-ins") && refused.reason.contains("allow_private"), "{refused}");
    production::check_with(&config, false, true).expect("a process started with --stand-ins may keep it");

    let mut env = GOOD_SECRETS.to_vec();
    env.extend_from_slice(&stand_in);
    let out = herald(&["--config", &example(), "worker"], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("channel.browser.allow_loopback_endpoints"), "{stderr}");
}
