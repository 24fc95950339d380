//! `herald token user` as an operator runs it: the real binary with a configuration file listing two
//! user-token keys, the token it prints checked by the API's own verifier.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use herald_core::auth::{Authenticator, Caller};
use herald_core::auth::{UserTokenError, UserTokenKey};
use secrecy::SecretString;

const K2: &str = "the second user token secret, signing now";
const K1: &str = "the first user token secret, still verifying";

fn key(id: &str, secret: &str) -> UserTokenKey {
    UserTokenKey { id: id.to_owned(), secret: SecretString::from(secret) }
}

/// Runs `herald token user ARGS` with a configuration of its own: a directory per call, since the tests
/// of this file run at once and a file rewritten while another call's process reads it is read empty.
fn herald_token(args: &[&str]) -> Output {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("herald-token-cli-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("k1.secret"), format!("{K1}\n")).unwrap();
    let config = dir.join("herald.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nuser_token_keys = [{{ id = \"k2\", secret = \"{K2}\" }}, {{ id = \"k1\", secret_file = \"k1.secret\" }}]\n"
        ),
    )
    .unwrap();
    Command::new(herald_tests::bins::binary("herald"))
        .arg("--config")
        .arg(&config)
        .args(["token", "user"])
        .args(args)
        .env_remove("HERALD_CONFIG")
        .output()
        .expect("the herald binary runs")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[test]
fn token_user_signs_with_the_first_key_and_expires_after_its_ttl() {
    let before = now();
    let out = herald_token(&["alice", "--ttl", "1h"]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(token.starts_with("u2.k2."), "signed by the first key: {token}");
    let expires: u64 = token.split('.').nth(3).unwrap().parse().unwrap();
    assert!((before + 3600..=now() + 3600).contains(&expires), "an hour from now: {expires}");

    // Every listed key verifies; a server that dropped k2 refuses it as a removed key; it expires.
    let both = Authenticator::with_user_keys(&[], &[], vec![key("k2", K2), key("k1", K1)]);
    assert_eq!(both.identify(&token), Some(Caller::User("alice".into())));
    let only_k1 = Authenticator::with_user_keys(&[], &[], vec![key("k1", K1)]);
    assert_eq!(only_k1.authenticate(&token), Err(UserTokenError::UnknownKey));
    assert_eq!(both.verify_user_token(&token, expires), Err(UserTokenError::Expired(expires)));

    // Without --ttl: the documented default, a day.
    let out = herald_token(&["bob"]);
    assert!(out.status.success(), "{out:?}");
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let expires: u64 = token.split('.').nth(3).unwrap().parse().unwrap();
    assert!((before + 86_400..=now() + 86_400).contains(&expires), "a day from now: {expires}");
}

#[test]
fn token_user_refuses_a_bad_ttl_or_user_id_naming_the_argument() {
    for (args, named) in [
        (&["alice", "--ttl", "0s"][..], "--ttl"),
        (&["alice", "--ttl", "1 hour"][..], "--ttl"),
        (&["alice", "--ttl", "400d"][..], "--ttl"),
        (&[" alice"][..], "USER_ID"),
        (&["ali\u{200b}ce"][..], "USER_ID"),
        (&["alice\u{202e}"][..], "USER_ID"),
        (&["a/b"][..], "USER_ID"),
    ] {
        let out = herald_token(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(named), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "no token printed for {args:?}");
    }
}
