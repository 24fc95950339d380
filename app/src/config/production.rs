//! What `herald serve` and `herald worker` refuse before they touch a network: secrets anyone can read
//! (the examples shipped in `example.toml`, or anything still saying "change me", "example", "placeholder"
//! or "replace me", in any case and spelling), tokens too short to resist guessing, channels that would
//! send destinations in the clear off this machine, and Web Push channels that let users' subscriptions
//! reach this machine (`allow_loopback_endpoints`, for local stand-ins only: allowed with `--stand-ins`).
//! `herald demo` makes its own secrets and is not checked; `herald init` writes a configuration that
//! passes.

use secrecy::ExposeSecret as _;

use super::{Config, ConfigError};

/// The shortest service or admin token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 32;

/// The keys shipped in `example.toml`: public, so never a real key.
const EXAMPLE_KEYS: [&str; 2] =
    ["RiVDe6SbChsap9UdVGLSOi9XcCRdZeuvjTVR526lLkI=", "D4j39hnmP/PhK95xUzCtHFSUO7LbZnJthreWJ/kO4Eg="];

/// Words that mark a placeholder secret, compared with letters and digits only, in lower case: `change-me`,
/// `ChangeMe`, `CHANGE_ME` and `change me` are one word.
const PLACEHOLDERS: [&str; 4] = ["changeme", "example", "placeholder", "replaceme"];

fn placeholder(secret: &str) -> bool {
    let folded: String = secret.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect();
    PLACEHOLDERS.iter().any(|word| folded.contains(word))
}

/// Refuses what is unsafe for a service on a network, naming the key (never the value). `with_api`:
/// the tokens matter too (`serve`).
///
/// # Errors
/// The first unsafe setting found.
pub fn check(config: &Config, with_api: bool) -> Result<(), ConfigError> {
    check_with(config, with_api, false)
}

/// As [`check`]; `stand_ins` (`--stand-ins`: this process posts to local stand-in channels, as the tests
/// and the soak do) lets `allow_loopback_endpoints` through.
///
/// # Errors
/// The first unsafe setting found.
pub fn check_with(config: &Config, with_api: bool, stand_ins: bool) -> Result<(), ConfigError> {
    let fix =
        "run `herald init` for a fresh configuration, or replace it (herald keys generate; openssl rand -base64 32)";
    if let Some(keys) = &config.keys {
        for (id, key) in &keys.keys {
            let key = key.expose_secret().trim();
            if EXAMPLE_KEYS.contains(&key) || placeholder(key) {
                return Err(ConfigError::new(
                    format!("keys.{id}"),
                    format!("is the example key from example.toml: {fix}"),
                ));
            }
        }
    }
    if let (true, Some(auth)) = (with_api, &config.auth) {
        let named: Vec<secrecy::SecretString> = auth.operator_tokens.iter().map(|t| t.token.clone()).collect();
        let services: Vec<secrecy::SecretString> = auth.named_service_tokens.iter().map(|t| t.token.clone()).collect();
        for (list, tokens) in [
            ("auth.service_tokens", &auth.service_tokens),
            ("auth.admin_tokens", &auth.admin_tokens),
            ("operators.tokens", &named),
            ("services.tokens", &services),
        ] {
            for (i, token) in tokens.iter().enumerate() {
                let token = token.expose_secret();
                if placeholder(token) {
                    return Err(ConfigError::new(format!("{list}[{i}]"), format!("is a placeholder: {fix}")));
                }
                if token.len() < MIN_TOKEN_BYTES {
                    return Err(ConfigError::new(
                        format!("{list}[{i}]"),
                        format!("is shorter than {MIN_TOKEN_BYTES} bytes: {fix}"),
                    ));
                }
            }
        }
        for (i, token) in auth.metrics_tokens.iter().enumerate() {
            if placeholder(token.expose_secret()) {
                return Err(ConfigError::new(format!("auth.metrics_tokens[{i}]"), format!("is a placeholder: {fix}")));
            }
        }
        for (i, key) in auth.user_token_keys.iter().enumerate() {
            if placeholder(key.secret.expose_secret()) {
                return Err(ConfigError::new(auth.user_key_name(i), format!("is a placeholder: {fix}")));
            }
        }
    }
    // What each channel's kind refuses on a network (a placeholder password, stand-in-only settings), and
    // destinations in the clear off this machine.
    for channel in &config.channels {
        channel.check_production(placeholder, stand_ins).map_err(|error| ConfigError::new(error.key, error.reason))?;
    }
    if config.oidc.as_ref().is_some_and(|oidc| oidc.allow_http_issuer) && !stand_ins {
        return Err(ConfigError::new(
            "operators.oidc.allow_http_issuer",
            "accepts an identity provider over plain http, where its answers (who signed in, with which role) can be \
             read and changed on the way; it is for a local provider only (tests: start with --stand-ins). Remove it \
             and give an https issuer",
        ));
    }
    for subscription in &config.status.subscriptions {
        if subscription.allow_loopback_endpoint && !stand_ins {
            return Err(ConfigError::new(
                format!("status_subscription.{}.allow_loopback_endpoint", subscription.name),
                "lets Herald post status events to the services of its own machine; it is for a local receiver only \
                 (tests, the soak: start with --stand-ins). Remove it; for an internal endpoint, list its range in \
                 [egress] allow_private",
            ));
        }
    }
    Ok(())
}
