//! Every refusal names its key; every override and `_file` form works.

use super::*;

fn key() -> String {
    Keyring::generate_key().expose_secret().to_owned()
}

fn full() -> String {
    format!(
        r#"
[database]
url = "postgres://herald:pw@127.0.0.1:5432/herald"
[server]
listen = "127.0.0.1:9090"
[auth]
service_tokens = ["svc-1"]
admin_tokens = ["adm-1"]
user_token_secret = "0123456789abcdef0123"
[keys]
current = "k2"
k1 = "{}"
k2 = "{}"
[worker]
concurrency = 4
lease_ms = 5000
[[channel]]
name = "push"
kind = "webhook"
url = "http://127.0.0.1:9001"
timeout_ms = 400
[log]
format = "json"
"#,
        key(),
        key()
    )
}

fn load(text: &str, env: &[(&str, &str)]) -> Result<Config> {
    Config::from_toml(text, env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())), Path::new("."))
}

#[track_caller]
fn refused(text: &str, env: &[(&str, &str)], key: &str, reason_part: &str) {
    match load(text, env) {
        Ok(_) => panic!("accepted, expected an error about {key}"),
        Err(error) => {
            assert_eq!(error.key, key, "{error}");
            assert!(error.reason.contains(reason_part), "{error} lacks {reason_part:?}");
        }
    }
}

#[test]
fn a_full_file_loads_with_its_values_and_defaults() {
    let config = load(&full(), &[]).expect("valid");
    assert_eq!(config.server.listen, "127.0.0.1:9090".parse().unwrap());
    assert_eq!(config.server.body_limit_bytes, 64 * 1024);
    assert_eq!(config.database.max_connections, DEFAULT_MAX_CONNECTIONS);
    assert_eq!(
        config.worker,
        WorkerSettings {
            enabled: true,
            concurrency: 4,
            lease_ms: 5000,
            batch: 16,
            poll_ms: 1000,
            metrics_listen: None
        }
    );
    assert_eq!(config.channels[0].name, "push");
    assert_eq!(config.log, LogConfig { format: LogFormat::Json, level: "info".into() });
    let auth = config.auth.as_ref().unwrap();
    assert_eq!(auth.service_tokens.len(), 1);
    assert_eq!(config.keys.as_ref().unwrap().keyring().unwrap().current_key_id(), "k2");
}

#[test]
fn an_empty_configuration_has_the_documented_defaults() {
    let config = load("", &[]).expect("valid");
    assert_eq!(config.server.listen, DEFAULT_LISTEN.parse().unwrap());
    assert!(config.database.url.is_none() && config.auth.is_none() && config.keys.is_none());
    assert_eq!(config.worker.lease_ms, DEFAULT_LEASE_MS);
    assert_eq!(
        config.require_auth("serve").unwrap_err().to_string(),
        "configuration: auth: is required by `herald serve`"
    );
    assert_eq!(config.require_keys("worker").unwrap_err().key, "keys");
    assert_eq!(config.require_database_url("migrate").unwrap_err().key, "database.url");
}

#[test]
fn unknown_keys_are_refused_by_name() {
    refused("[worker]\nleases = 3\n", &[], "worker.leases", "unknown field `leases`");
    refused("[serverr]\n", &[], "serverr", "unknown field `serverr`");
    refused("[auth]\nuser_token_secret = \"0123456789abcdef\"\ntokens = []\n", &[], "auth.tokens", "unknown field");
    let text = "[[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"http://x\"\ncolour = 1\n";
    refused(text, &[], "channel.push.colour", "unknown field");
}

#[test]
fn wrong_types_are_refused_without_quoting_the_value() {
    let error = load("[worker]\nconcurrency = \"hunter2\"\n", &[]).unwrap_err();
    assert_eq!(error.key, "worker.concurrency");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    refused("[log]\nformat = \"xml\"\n", &[], "log.format", "human");
    refused("[log]\nlevel = \"=[\"\n", &[], "log.level", "not a valid filter");
}

#[test]
fn invalid_toml_names_the_line_not_the_content() {
    let error = load("[database]\nurl = \"postgres://user:secretpw@host\n", &[]).unwrap_err();
    assert_eq!(error.key, "file");
    assert!(error.reason.contains("line 2"), "{error}");
    assert!(!error.to_string().contains("secretpw"), "{error}");
}

#[test]
fn ranges_are_enforced() {
    refused("[worker]\nconcurrency = 0\n", &[], "worker.concurrency", "between 1 and 1024");
    refused("[worker]\nbatch = 0\n", &[], "worker.batch", "between");
    refused("[worker]\npoll_ms = 0\n", &[], "worker.poll_ms", "between");
    refused("[worker]\nlease_ms = 10\n", &[], "worker.lease_ms", "between");
    refused("[database]\nmax_connections = 0\n", &[], "database.max_connections", "between");
    refused("[database]\nurl = \"\"\n", &[], "database.url", "must not be empty");
    refused("[server]\nbody_limit_bytes = 10\n", &[], "server.body_limit_bytes", "between");
    refused("[server]\nlisten = \"localhost\"\n", &[], "server.listen", "IP address and port");
}

#[test]
fn the_lease_must_outlast_every_channel_timeout_plus_the_margin() {
    let channel =
        "[[channel]]\nname = \"sms\"\nkind = \"queryable\"\nurl = \"http://127.0.0.1:9002\"\ntimeout_ms = 4000\n";
    refused(
        &format!("[worker]\nlease_ms = 5999\n{channel}"),
        &[],
        "worker.lease_ms",
        "channel `sms`'s timeout_ms (4000 ms)",
    );
    assert!(load(&format!("[worker]\nlease_ms = 6000\n{channel}"), &[]).is_ok());
    // The overlap of two holders (P2) is reproduced by tests in code; no configuration can ask for it.
    let refused = load(&format!("[worker]\nlease_ms = 500\nallow_lease_overlap = true\n{channel}"), &[])
        .expect_err("not a configuration key");
    assert!(refused.to_string().contains("allow_lease_overlap"), "{refused}");
    let refused =
        load(&format!("[worker]\nlease_ms = 500\n{channel}"), &[("HERALD__WORKER__ALLOW_LEASE_OVERLAP", "true")])
            .expect_err("not an environment key either");
    assert!(
        refused.to_string().contains("ALLOW_LEASE_OVERLAP") || refused.to_string().contains("lease_ms"),
        "{refused}"
    );
}

#[test]
fn channel_names_are_unique_and_channel_errors_name_their_key() {
    let one = "[[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"http://127.0.0.1:1\"\n";
    refused(&format!("{one}{one}"), &[], "channel.push.name", "more than one");
    refused("[[channel]]\nname = \"push\"\nkind = \"webhook\"\nurl = \"ftp://x\"\n", &[], "channel.push.url", "http");
    refused("[[channel]]\nkind = \"webhook\"\nurl = \"http://x\"\n", &[], "channel[0]", "missing field `name`");
    refused(
        "[[channel]]\nname = \"p\"\nkind = \"fax\"\nurl = \"http://x\"\n",
        &[],
        "channel.p.kind",
        "unknown variant",
    );
}

#[test]
fn keys_must_be_present_and_current_among_them() {
    refused("[keys]\n", &[], "keys.current", "is required");
    refused("[keys]\ncurrent = \"k1\"\n", &[], "keys", "has no key");
    refused(&format!("[keys]\ncurrent = \"k9\"\nk1 = \"{}\"\n", key()), &[], "keys.current", "not among the keys (k1)");
    refused("[keys]\ncurrent = \"k1\"\nk1 = \"c2hvcnQ=\"\n", &[], "keys", "32");
    refused("[keys]\ncurrent = \"k1\"\nk1 = 5\n", &[], "keys.k1", "must be a string");
}

#[test]
fn auth_tokens_and_secret_are_checked() {
    let secret = "user_token_secret = \"0123456789abcdef\"\n";
    refused(&format!("[auth]\nservice_tokens = [\"\"]\n{secret}"), &[], "auth.service_tokens[0]", "must not be empty");
    refused(&format!("[auth]\nadmin_tokens = [\"a b\"]\n{secret}"), &[], "auth.admin_tokens[0]", "spaces");
    refused(
        &format!("[auth]\nservice_tokens = [\"same\"]\nadmin_tokens = [\"same\"]\n{secret}"),
        &[],
        "auth.admin_tokens",
        "also listed",
    );
    refused("[auth]\n", &[], "auth.user_token_secret", "is required");
    refused("[auth]\nuser_token_secret = \"short\"\n", &[], "auth.user_token_secret", "at least 16 bytes");
}

#[test]
fn user_token_keys_are_listed_in_order_and_checked() {
    let dir = TempDir::new("user-keys");
    dir.write("k1.secret", "the first user token secret\n");
    let path = dir.write(
        "herald.toml",
        "[auth]\nuser_token_keys = [{ id = \"k2\", secret = \"the second user token secret\" }, \
         { id = \"k1\", secret_file = \"k1.secret\" }]\n",
    );
    let auth = Config::load(Some(&path), std::iter::empty()).expect("valid").auth.unwrap();
    let ids: Vec<&str> = auth.user_token_keys.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(ids, ["k2", "k1"], "the first signs");
    assert_eq!(auth.user_token_keys[1].secret.expose_secret(), "the first user token secret");

    let long = "0123456789abcdef";
    refused("[auth]\nuser_token_keys = []\n", &[], "auth.user_token_keys", "at least one");
    refused(
        &format!("[auth]\nuser_token_keys = [{{ id = \"k 1\", secret = \"{long}\" }}]\n"),
        &[],
        "auth.user_token_keys[0].id",
        "ASCII letters",
    );
    refused(
        &format!("[auth]\nuser_token_keys = [{{ id = \"a\", secret = \"{long}\" }}, {{ id = \"a\", secret = \"{long}\" }}]\n"),
        &[],
        "auth.user_token_keys[1].id",
        "listed twice",
    );
    refused(
        "[auth]\nuser_token_keys = [{ id = \"a\", secret = \"short\" }]\n",
        &[],
        "auth.user_token_keys[0].secret",
        "at least 16",
    );
    refused("[auth]\nuser_token_keys = [{ id = \"a\" }]\n", &[], "auth.user_token_keys[0].secret", "is required");
    refused(
        &format!("[auth]\nuser_token_secret = \"{long}\"\nuser_token_keys = [{{ id = \"a\", secret = \"{long}\" }}]\n"),
        &[],
        "auth.user_token_keys",
        "give one",
    );
}

#[test]
fn environment_overrides_every_section() {
    let config = load(
        &full(),
        &[
            ("HERALD__DATABASE__URL", "postgres://other/db"),
            ("HERALD__WORKER__CONCURRENCY", "16"),
            // Long enough for the sms channel's default 5 s timeout plus the start and finish margins.
            ("HERALD__WORKER__LEASE_MS", "7000"),
            ("HERALD__AUTH__ADMIN_TOKENS", "a1, a2,,"),
            ("HERALD__AUTH__SERVICE_TOKENS", "[\"s1\",\"s2\",\"s3\"]"),
            ("HERALD__SERVER__LISTEN", "0.0.0.0:80"),
            ("HERALD__LOG__FORMAT", "human"),
            ("HERALD__CHANNEL__0__TIMEOUT_MS", "250"),
            ("HERALD__CHANNEL__PUSH__TEXT", "You have news"),
            ("HERALD__CHANNEL__1__NAME", "sms"),
            ("HERALD__CHANNEL__1__KIND", "queryable"),
            ("HERALD__CHANNEL__1__URL", "http://127.0.0.1:9002"),
            ("HERALD__CHANNEL__1__QUERY_CONSISTENCY", "immediate"),
            ("HERALD__CHANNEL__1__DIGEST__INSTANT_PER_HOUR", "3"),
            ("UNRELATED", "x"),
        ],
    )
    .expect("valid");
    assert_eq!(config.database.url.unwrap().expose_secret(), "postgres://other/db");
    assert_eq!(config.worker.concurrency, 16);
    let auth = config.auth.unwrap();
    assert_eq!(auth.admin_tokens.iter().map(|t| t.expose_secret()).collect::<Vec<_>>(), ["a1", "a2"]);
    assert_eq!(auth.service_tokens.len(), 3);
    assert_eq!(config.server.listen.port(), 80);
    assert_eq!(config.log.format, LogFormat::Human);
    assert_eq!(config.channels[0].timeout_ms, 250);
    assert_eq!(config.channels[0].text.as_deref(), Some("You have news"));
    assert_eq!(config.channels[1].name, "sms");
    assert_eq!(config.channels[1].digest.unwrap().instant_per_hour, 3);
}

#[test]
fn environment_errors_name_the_variable() {
    refused("", &[("HERALD__WORKER__LEASE_MS", "soon")], "HERALD__WORKER__LEASE_MS", "an integer");
    refused("", &[("HERALD__AUTH__ADMIN_TOKENS", "[1]")], "HERALD__AUTH__ADMIN_TOKENS", "JSON array");
    refused("", &[("HERALD__WORKER__LEASES", "1")], "HERALD__WORKER__LEASES", "not a configuration key");
    refused("", &[("HERALD__NOPE__X", "1")], "HERALD__NOPE__X", "not a configuration key");
    refused("", &[("HERALD__WORKER", "1")], "HERALD__WORKER", "HERALD__SECTION__KEY");
    refused("", &[("HERALD__CHANNEL__3__URL", "http://x")], "HERALD__CHANNEL__3__URL", "next index is 0");
    refused("", &[("HERALD__CHANNEL__PAGER__URL", "http://x")], "HERALD__CHANNEL__PAGER__URL", "no [[channel]]");
    refused("", &[("HERALD__CHANNEL__0", "x")], "HERALD__CHANNEL__0", "HERALD__CHANNEL__");
    // A value set from the environment and refused later says which variable set it.
    refused("", &[("HERALD__WORKER__CONCURRENCY", "0")], "worker.concurrency", "between");
    refused("", &[("HERALD__LOG__FORMAT", "xml")], "log.format", "(set by HERALD__LOG__FORMAT)");
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("herald-config-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn secrets_can_come_from_files() {
    let dir = TempDir::new("files");
    let k1 = key();
    dir.write("k1.key", &format!("{k1}\n"));
    dir.write("url", "postgres://from-file/db\n");
    dir.write("secret", "0123456789abcdef-from-file\n");
    dir.write("admins", "# admins\nadm-1\n\nadm-2\n");
    let path = dir.write(
        "herald.toml",
        "[database]\nurl_file = \"url\"\n[auth]\nuser_token_secret_file = \"secret\"\nadmin_tokens_file = \"admins\"\n\
         [keys]\ncurrent = \"k1\"\nk1_file = \"k1.key\"\n",
    );
    let config = Config::load(Some(&path), std::iter::empty()).expect("valid");
    assert_eq!(config.database.url.unwrap().expose_secret(), "postgres://from-file/db");
    let auth = config.auth.unwrap();
    assert_eq!(auth.user_token_keys[0].secret.expose_secret(), "0123456789abcdef-from-file");
    assert_eq!(auth.admin_tokens.len(), 2);
    let keys = config.keys.unwrap();
    assert_eq!(keys.keys[0].1.expose_secret(), k1);

    // A key file can also be named from the environment.
    let config =
        load("", &[("HERALD__KEYS__CURRENT", "k1"), ("HERALD__KEYS__K1_FILE", dir.0.join("k1.key").to_str().unwrap())])
            .expect("valid");
    assert_eq!(config.keys.unwrap().current, "k1");
}

#[test]
fn channel_secret_files_are_found_beside_the_configuration() {
    let dir = TempDir::new("channel-files");
    let path = dir.write(
        "herald.toml",
        "[[channel]]\nname = \"mail\"\nkind = \"email\"\nhost = \"127.0.0.1\"\nport = 2525\ntls = \"none\"\n\
         from = \"herald@notify.example.org\"\nusername = \"herald\"\npassword_file = \"smtp.pw\"\n\
         [[channel]]\nname = \"push\"\nkind = \"webpush\"\nvapid_private_key_file = \"secrets/vapid.key\"\n\
         vapid_subject = \"mailto:ops@notify.example.org\"\n",
    );
    let config = Config::load(Some(&path), std::iter::empty()).expect("valid");
    let base = path.parent().expect("folder");
    let mut channels = config.channels;
    let [mail, push] = channels.as_mut_slice() else { panic!("two channels") };
    assert_eq!(mail.files_mut(), [&mut base.join("smtp.pw")]);
    assert_eq!(push.files_mut(), [&mut base.join("secrets/vapid.key")]);
    // An absolute path stays as given.
    let config = load(
        "[[channel]]\nname = \"push\"\nkind = \"webpush\"\nvapid_private_key_file = \"/etc/herald/vapid.key\"\n\
         vapid_subject = \"mailto:ops@notify.example.org\"\n",
        &[],
    )
    .expect("valid");
    let mut channels = config.channels;
    assert_eq!(channels[0].files_mut(), [&mut std::path::PathBuf::from("/etc/herald/vapid.key")]);
}

#[test]
fn file_errors_name_the_key() {
    let dir = TempDir::new("errors");
    let path = dir.write("a.toml", "[database]\nurl_file = \"missing\"\n");
    let error = Config::load(Some(&path), std::iter::empty()).unwrap_err();
    assert_eq!(error.key, "database.url_file");
    assert!(error.reason.contains("cannot read"));
    let path = dir.write("b.toml", "[database]\nurl = \"x\"\nurl_file = \"y\"\n");
    assert_eq!(Config::load(Some(&path), std::iter::empty()).unwrap_err().key, "database.url");
    let path = dir.write("c.toml", &format!("[keys]\ncurrent = \"k1\"\nk1 = \"{}\"\nk1_file = \"k\"\n", key()));
    dir.write("k", &key());
    assert_eq!(Config::load(Some(&path), std::iter::empty()).unwrap_err().key, "keys.k1");
    let error = Config::load(Some(&dir.0.join("none.toml")), std::iter::empty()).unwrap_err();
    assert!(error.reason.contains("cannot be read"), "{error}");
}

#[test]
fn debug_output_holds_no_secret() {
    let config = load(&full(), &[]).unwrap();
    let text = format!("{config:?}");
    assert!(!text.contains("pw@") && !text.contains("svc-1") && !text.contains("0123456789abcdef0123"), "{text}");
}

#[test]
fn any_error_about_a_value_a_variable_set_names_the_variable() {
    refused("", &[("HERALD__WORKER__CONCURRENCY", "0")], "worker.concurrency", "(set by HERALD__WORKER__CONCURRENCY)");
    refused(
        "",
        &[("HERALD__DATABASE__URL_FILE", "missing")],
        "database.url_file",
        "(set by HERALD__DATABASE__URL_FILE)",
    );
    // The file's own values name no variable, also in a section a variable touched.
    let error = load("[worker]\nconcurrency = 0\n", &[("HERALD__WORKER__BATCH", "2")]).unwrap_err();
    assert_eq!(error.key, "worker.concurrency");
    assert!(!error.reason.contains("set by"), "{error}");
    refused("[keys]\ncurrent = \"k1\"\n", &[("HERALD__KEYS__CURRENT", "k1")], "keys", "has no key");
    assert!(!load("[keys]\n", &[("HERALD__KEYS__CURRENT", "k1")]).unwrap_err().reason.contains("set by"));
}

#[test]
fn environment_values_are_typed_by_their_key_not_by_their_look() {
    let config =
        load("", &[("HERALD__AUTH__USER_TOKEN_SECRET", "12345678901234567890"), ("HERALD__AUTH__ADMIN_TOKENS", "123")])
            .expect("valid");
    let auth = config.auth.unwrap();
    assert_eq!(auth.user_token_keys[0].secret.expose_secret(), "12345678901234567890");
    assert_eq!(auth.admin_tokens[0].expose_secret(), "123");
    // A value that looks like a TOML string keeps its quotes: `"json"` is not the format `json`.
    refused("", &[("HERALD__LOG__FORMAT", "\"json\"")], "log.format", "unknown variant");
}

#[test]
fn no_refused_value_is_quoted() {
    let error = load("[log]\nformat = \"hunter2\"\n", &[]).unwrap_err();
    assert_eq!(error.key, "log.format");
    assert!(!error.to_string().contains("hunter2") && error.reason.contains("`human` or `json`"), "{error}");
    let error = load("[[channel]]\nname = \"p\"\nkind = \"hunter2\"\nurl = \"http://x\"\n", &[]).unwrap_err();
    assert_eq!(error.key, "channel.p.kind");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    let error = load("[database]\nmax_connections = -7777\n", &[]).unwrap_err();
    assert_eq!(error.key, "database.max_connections");
    assert!(!error.to_string().contains("7777"), "{error}");
    let error = load("[auth]\nservice_tokens = [\"a\", 7777]\n", &[]).unwrap_err();
    assert_eq!(error.key, "auth.service_tokens[1]");
    assert!(!error.to_string().contains("7777"), "{error}");
}

#[test]
fn channel_overrides_apply_in_the_order_given() {
    // An entry added by index can be addressed by its name afterwards; nested tables are made on the way.
    let config = load(
        "",
        &[
            ("HERALD__WORKER__LEASE_MS", "7000"),
            ("HERALD__CHANNEL__0__NAME", "sms"),
            ("HERALD__CHANNEL__0__KIND", "queryable"),
            ("HERALD__CHANNEL__SMS__URL", "http://127.0.0.1:9002"),
            ("HERALD__CHANNEL__SMS__DIGEST__INSTANT_PER_HOUR", "3"),
            ("HERALD__CHANNEL__1__NAME", "push"),
            ("HERALD__CHANNEL__1__KIND", "webhook"),
            ("HERALD__CHANNEL__1__URL", "http://127.0.0.1:9001"),
        ],
    )
    .expect("valid");
    let names: Vec<&str> = config.channels.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["sms", "push"]);
    assert_eq!(config.channels[0].digest.unwrap().instant_per_hour, 3);
    // The file's shapes are kept: channels are an array of tables, sections are tables.
    refused("channel = 5\n", &[("HERALD__CHANNEL__0__URL", "x")], "HERALD__CHANNEL__0__URL", "array of tables");
    refused("worker = 5\n", &[("HERALD__WORKER__BATCH", "2")], "HERALD__WORKER__BATCH", "not a table");
}

#[test]
fn a_relative_file_named_by_a_variable_is_taken_from_the_configuration_folder() {
    let dir = TempDir::new("relative");
    dir.write("url", "postgres://from-file/db\n");
    let path = dir.write("herald.toml", "");
    let env = [("HERALD__DATABASE__URL_FILE".to_owned(), "url".to_owned())];
    let config = Config::load(Some(&path), env).expect("valid");
    assert_eq!(config.database.url.unwrap().expose_secret(), "postgres://from-file/db");
}

#[test]
fn client_bounds_pools_and_the_metrics_listener_load_with_defaults_and_name_their_key() {
    let config = load(&full(), &[]).expect("valid");
    assert_eq!(config.server.limits, herald_http::api::limits::Limits::default());
    assert_eq!(
        (config.database.api_max_connections, config.database.worker_max_connections),
        (DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS),
        "both pools default to max_connections"
    );
    assert_eq!(config.worker.metrics_listen, None);
    assert!(config.worker.enabled, "herald serve runs the workers unless told otherwise");
    let api_only = load(&full(), &[("HERALD__WORKER__ENABLED", "false")]).expect("valid");
    assert!(!api_only.worker.enabled);
    refused(&full(), &[("HERALD__WORKER__ENABLED", "no")], "HERALD__WORKER__ENABLED", "true or false");
    let text = full().replace(
        "[server]\n",
        "[server]\nheader_read_timeout_ms = 2000\nrate_per_second = 5\nrate_burst = 7\nmax_in_flight = 9\n",
    );
    let env = [
        ("HERALD__DATABASE__API_MAX_CONNECTIONS", "3"),
        ("HERALD__DATABASE__WORKER_MAX_CONNECTIONS", "6"),
        ("HERALD__SERVER__REQUEST_TIMEOUT_MS", "4000"),
        ("HERALD__SERVER__BODY_TIMEOUT_MS", "1500"),
        ("HERALD__WORKER__METRICS_LISTEN", "127.0.0.1:9464"),
    ];
    let config = load(&text, &env).expect("valid");
    let limits = config.server.limits;
    assert_eq!(limits.header_read_timeout, std::time::Duration::from_secs(2));
    assert_eq!(limits.request_timeout, std::time::Duration::from_secs(4));
    assert_eq!(limits.body_timeout, std::time::Duration::from_millis(1500));
    assert_eq!((limits.rate_per_second, limits.rate_burst, limits.max_in_flight), (5, 7, 9));
    assert_eq!(limits.anonymous_max_in_flight, 1, "an eighth of the authenticated budget, at least one");
    assert_eq!((config.database.api_max_connections, config.database.worker_max_connections), (3, 6));
    assert_eq!(config.worker.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));

    refused(&full(), &[("HERALD__SERVER__HEADER_READ_TIMEOUT_MS", "5")], "server.header_read_timeout_ms", "between");
    refused(&full(), &[("HERALD__SERVER__RATE_PER_SECOND", "0")], "server.rate_per_second", "between");
    refused(&full(), &[("HERALD__SERVER__MAX_IN_FLIGHT", "0")], "server.max_in_flight", "between");
    refused(
        &full(),
        &[("HERALD__SERVER__MAX_IN_FLIGHT", "10"), ("HERALD__SERVER__ANONYMOUS_MAX_IN_FLIGHT", "11")],
        "server.anonymous_max_in_flight",
        "smaller budget",
    );
    refused(&full(), &[("HERALD__SERVER__HTTPS", "yes")], "HERALD__SERVER__HTTPS", "true or false");
    refused(&full(), &[("HERALD__CONSOLE__SESSION_IDLE_MINUTES", "0")], "console.session_idle_minutes", "between");
    let https =
        load(&full(), &[("HERALD__SERVER__HTTPS", "true"), ("HERALD__SERVER__FORWARDED_FOR", "true")]).expect("valid");
    assert!(https.server.https && https.server.limits.forwarded_for);
    let console =
        load(&full().replace("[server]\n", "[console]\nsession_hours = 2\nsession_idle_minutes = 5\n[server]\n"), &[])
            .expect("valid");
    assert_eq!(console.console.policy.lifetime, herald_domain::Millis(2 * 3_600_000));
    assert_eq!(console.console.policy.idle, herald_domain::Millis(5 * 60_000));
    refused(&full(), &[("HERALD__DATABASE__API_MAX_CONNECTIONS", "0")], "database.api_max_connections", "between");
    refused(&full(), &[("HERALD__WORKER__METRICS_LISTEN", "everywhere")], "worker.metrics_listen", "IP address");
}

#[test]
fn the_test_send_quota_has_defaults_and_bounds() {
    assert_eq!(load("", &[]).expect("valid").test_send, herald_domain::TestSendQuota { per_minute: 1, per_day: 10 });
    let config = load("[test_send]\nper_minute = 2\n", &[("HERALD__TEST_SEND__PER_DAY", "30")]).expect("valid");
    assert_eq!(config.test_send, herald_domain::TestSendQuota { per_minute: 2, per_day: 30 });
    refused("[test_send]\nper_minute = 0\n", &[], "test_send.per_minute", "between 1 and 1000");
    refused("[test_send]\nper_minute = 5\nper_day = 2\n", &[], "test_send.per_day", "at least");
    refused("[test_send]\nper_hour = 5\n", &[], "test_send.per_hour", "unknown field");
}

#[test]
fn egress_allow_private_lists_ranges_and_names_the_bad_entry() {
    use herald_channels::egress::Cidr;
    assert_eq!(load(&full(), &[]).expect("valid").egress.allow_private, Vec::<Cidr>::new(), "nothing open by default");
    let text = format!("{}\n[egress]\nallow_private = [\"10.1.2.0/24\", \"fd00::/8\"]\n", full());
    let config = load(&text, &[]).expect("valid");
    let expected: Vec<Cidr> = vec!["10.1.2.0/24".parse().unwrap(), "fd00::/8".parse().unwrap()];
    assert_eq!(config.egress.allow_private, expected);
    let from_env = load(&full(), &[("HERALD__EGRESS__ALLOW_PRIVATE", "10.1.2.0/24, fd00::/8")]).expect("valid");
    assert_eq!(from_env.egress.allow_private, expected, "a comma-separated variable");

    let bad = |entries: &str| format!("{}\n[egress]\nallow_private = [{entries}]\n", full());
    refused(&bad("\"10.1.2.0/24\", \"10.1.2.0/33\""), &[], "egress.allow_private[1]", "address range");
    refused(&bad("\"intranet\""), &[], "egress.allow_private[0]", "such as 10.1.2.0/24");
    refused(&bad("\"10.1.2.5/24\""), &[], "egress.allow_private[0]", "beyond its prefix");
    refused(&bad("\"127.0.0.0/8\""), &[], "egress.allow_private[0]", "loopback");
    refused(&bad("\"0.0.0.0/0\""), &[], "egress.allow_private[0]", "allow_loopback_endpoints");
    refused(&bad("\"::1\""), &[], "egress.allow_private[0]", "loopback");
    refused(&format!("{}\n[egress]\nallow_public = []\n", full()), &[], "egress.allow_public", "unknown field");
    refused(&full(), &[("HERALD__EGRESS__ALLOW_PRIVATE", "10.0.0.0/8,::/0")], "egress.allow_private[1]", "loopback");
}

#[test]
fn an_unknown_key_near_a_known_one_is_suggested() {
    refused("[worker]\nlease_sm = 3\n", &[], "worker.lease_sm", "did you mean `lease_ms`?");
    let error = load("[worker]\ncolour = 3\n", &[]).unwrap_err();
    assert!(!error.reason.contains("did you mean"), "{error}");
}

#[test]
fn a_database_url_must_be_postgresql() {
    for url in ["postgres://h/db", "postgresql://u:p@h:5433/db", "POSTGRES://h/db"] {
        let text = format!("[database]\nurl = \"{url}\"\n");
        assert!(load(&text, &[]).is_ok(), "{url}");
    }
    let refused_url = |url: &str, part: &str| refused("", &[("HERALD__DATABASE__URL", url)], "database.url", part);
    refused_url("postgress://u:hunter2@h/db", "did you mean `postgres://`?");
    refused_url("mysql://u:hunter2@h/db", "`mysql://` is not a PostgreSQL URL");
    refused_url("u:hunter2@h/db", "must be a PostgreSQL URL");
    refused_url("postgres://u:hunter2@h:port/db", "is not a valid PostgreSQL URL");
    // The scheme is all it may quote, and the variable that set it is named.
    let error = load("", &[("HERALD__DATABASE__URL", "mysql://u:hunter2@h/db")]).unwrap_err();
    assert!(!error.to_string().contains("hunter2"), "{error}");
    assert!(error.to_string().contains("HERALD__DATABASE__URL"), "{error}");
    assert_eq!(error.to_string().matches("database.url").count(), 1, "the key once: {error}");
}

#[test]
fn rust_log_overrides_the_log_level() {
    let config = load("[log]\nlevel = \"warn\"\n", &[]).expect("valid");
    assert_eq!(config.log.level, "warn");
    let config = load("[log]\nlevel = \"warn\"\n", &[("RUST_LOG", "herald_app=debug,info")]).expect("valid");
    assert_eq!(config.log.level, "herald_app=debug,info");
    let config = load("[log]\nlevel = \"warn\"\n", &[("RUST_LOG", " ")]).expect("an empty RUST_LOG is unset");
    assert_eq!(config.log.level, "warn");
    refused("", &[("RUST_LOG", "=[")], "RUST_LOG", "not a valid filter");
}

#[test]
fn the_retention_windows_have_defaults_an_order_and_name_the_key() {
    let policy = load("", &[]).expect("valid").retention;
    assert_eq!(policy, herald_core::retention::RetentionPolicy::default());
    let config = load("[retention]\ncontent_after_erasure = \"0s\"\n", &[("HERALD__RETENTION__FINISHED_AFTER", "30d")])
        .expect("valid");
    assert_eq!(config.retention.content_after_erasure, herald_domain::Millis(0));
    assert_eq!(config.retention.finished_after, herald_domain::Millis(30 * 86_400_000));
    refused("[retention]\nfinished_after = \"90\"\n", &[], "retention.finished_after", "followed by s, m, h or d");
    refused("[retention]\nrecords_after_erasure = \"1h\"\n", &[], "retention.records_after_erasure", "at least");
    refused("[retention]\ninterval = \"0s\"\n", &[], "retention.interval", "at least 1s");
    refused("[retention]\nforever = true\n", &[], "retention.forever", "unknown field");
}

#[test]
fn status_subscriptions_load_and_every_refusal_names_its_key() {
    let dir = std::env::temp_dir().join(format!("herald-config-status-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = "whsec_c3RhdHVzLWV2ZW50cy10ZXN0LXNlY3JldC0zMmJ5dGU=";
    std::fs::write(dir.join("good.secret"), format!("{good}\n")).unwrap();
    std::fs::write(dir.join("bare.secret"), "c3RhdHVzLWV2ZW50cy10ZXN0LXNlY3JldC0zMmJ5dGU=").unwrap();
    let secret = |name: &str| dir.join(name).display().to_string();
    let entry = |fields: &str| format!("{}\n[[status_subscription]]\n{fields}\n", full());
    let ok = entry(&format!(
        "name = \"billing\"\nurl = \"https://hooks.example.com/herald\"\nsecret_file = \"{}\"",
        secret("good.secret")
    ));
    let config = load(&ok, &[]).expect("valid");
    let s = &config.status.subscriptions[0];
    assert_eq!((s.name.as_str(), s.url.as_str()), ("billing", "https://hooks.example.com/herald"));
    assert_eq!(s.kinds, herald_domain::StatusKind::ALL.to_vec(), "every kind by default");
    assert!(!s.include_body && !s.allow_loopback_endpoint);
    assert_eq!(s.secret.expose_secret(), good);
    assert!(!format!("{config:?}").contains(good), "the secret never shows in Debug");
    assert_eq!(config.status.dispatch.retry.max_attempts, 8);
    let filtered = format!("{ok}events = [\"accepted\", \"parked\"]\ninclude_body = true\n");
    let s = &load(&filtered, &[]).expect("valid").status.subscriptions[0];
    assert_eq!(s.kinds, vec![herald_domain::StatusKind::Accepted, herald_domain::StatusKind::Parked]);
    assert!(s.include_body);

    let with = |extra: &str| format!("{ok}{extra}\n");
    refused(&with("events = [\"delivered\"]"), &[], "status_subscription.billing.events[0]", "accepted, refused");
    refused(&with("events = []"), &[], "status_subscription.billing.events", "at least one");
    refused(&with("timeout_ms = 5"), &[], "status_subscription.billing.timeout_ms", "between");
    refused(&with("colour = \"red\""), &[], "status_subscription[0].colour", "unknown field");
    let url =
        |u: &str| entry(&format!("name = \"billing\"\nurl = \"{u}\"\nsecret_file = \"{}\"", secret("good.secret")));
    refused(&url("not a url"), &[], "status_subscription.billing.url", "not a URL");
    refused(&url("http://hooks.example.com/"), &[], "status_subscription.billing.url", "https");
    refused(&url("https://127.0.0.1/"), &[], "status_subscription.billing.url", "egress guard");
    refused(&url("https://10.0.0.5/"), &[], "status_subscription.billing.url", "egress guard");
    let secret_entry = |file: &str| {
        entry(&format!("name = \"billing\"\nurl = \"https://hooks.example.com/\"\nsecret_file = \"{file}\""))
    };
    refused(&secret_entry(&secret("bare.secret")), &[], "status_subscription.billing.secret_file", "whsec_");
    refused(&secret_entry(&secret("missing.secret")), &[], "status_subscription.billing.secret_file", "cannot read");
    refused(&entry("url = \"https://hooks.example.com/\""), &[], "status_subscription[0].name", "required");
    refused(&format!("{ok}\n{}", &ok[full().len()..]), &[], "status_subscription.billing.name", "more than one");
    refused(&format!("{}\n[status_events]\nmax_posts = 0\n", full()), &[], "status_events.max_posts", "between");

    // Per service token: the names of auth.service_tokens (`service`, …) and of [[services.tokens]].
    let billing = "\n[[services.tokens]]\nname = \"billing\"\ntoken = \"billing-token\"\n";
    let per_service = format!("{ok}service_tokens = [\"billing\", \"service\"]\n{billing}");
    let config = load(&per_service, &[]).expect("valid");
    assert_eq!(config.status.subscriptions[0].service_tokens, Some(vec!["billing".to_owned(), "service".to_owned()]));
    assert_eq!(config.auth.as_ref().unwrap().service_token_names(), ["service", "billing"]);
    assert_eq!(load(&ok, &[]).unwrap().status.subscriptions[0].service_tokens, None, "every service by default");
    refused(
        &format!("{ok}service_tokens = [\"billing\", \"shipping\"]\n{billing}"),
        &[],
        "status_subscription.billing.service_tokens[1]",
        "not the name of a service token",
    );
    refused(&with("service_tokens = []"), &[], "status_subscription.billing.service_tokens", "at least one");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn service_tokens_have_names_of_their_own() {
    use herald_core::auth::Caller;
    let named = |fields: &str| format!("{}\n[[services.tokens]]\n{fields}\n", full());
    let config = load(&named("name = \"billing\"\ntoken = \"billing-token\""), &[]).expect("valid");
    let auth = config.auth.as_ref().unwrap().authenticator();
    assert_eq!(auth.identify("billing-token"), Some(Caller::Service("billing".into())));
    assert_eq!(auth.identify("svc-1"), Some(Caller::Service("service".into())), "the legacy list is named");
    refused(&named("token = \"t-1\""), &[], "services.tokens[0].name", "required");
    refused(&named("name = \"a b\"\ntoken = \"t-1\""), &[], "services.tokens[0].name", "letters");
    refused(&named("name = \"service\"\ntoken = \"t-1\""), &[], "services.tokens[0].name", "another service token");
    refused(&named("name = \"x\"\ntoken = \"svc-1\""), &[], "services.tokens[0]", "another token");
    refused(&named("name = \"x\""), &[], "services.tokens[0].file", "required");
    refused(&named("name = \"x\"\ntoken = \"a b\""), &[], "services.tokens[0].token", "spaces");
}

#[test]
fn operator_tokens_have_a_name_a_role_and_a_token_of_their_own() {
    use herald_core::auth::Caller;
    use herald_domain::operators::Role;
    let dir = std::env::temp_dir().join(format!("herald-operators-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("night"), "night-shift-token\n").expect("write");
    let text = format!(
        "{}\n[[operators.tokens]]\nname = \"night shift\"\nrole = \"viewer\"\nfile = \"night\"\n\n\
         [[operators.tokens]]\nname = \"deploy\"\nrole = \"resolver\"\ntoken = \"deploy-token\"\n",
        full()
    );
    let config = Config::from_toml(&text, Vec::new(), &dir).expect("valid");
    let auth = config.auth.as_ref().expect("auth");
    assert_eq!(
        auth.operator_tokens.iter().map(|t| (t.name.as_str(), t.role)).collect::<Vec<_>>(),
        [("night shift", Role::Viewer), ("deploy", Role::Resolver)]
    );
    let authenticator = auth.authenticator();
    let name_and_role = |token: &str| match authenticator.identify(token) {
        Some(Caller::Operator(actor)) => Some((actor.name, actor.role)),
        _ => None,
    };
    assert_eq!(name_and_role("night-shift-token"), Some(("night shift".to_owned(), Role::Viewer)));
    assert_eq!(
        name_and_role("adm-1"),
        Some(("admin".to_owned(), Role::Admin)),
        "auth.admin_tokens: admins named admin"
    );
    let one = |body: &str| format!("{}\n[[operators.tokens]]\n{body}\n", full());
    refused(&one("role = \"viewer\"\ntoken = \"t-1\""), &[], "operators.tokens[0].name", "is required");
    refused(&one("name = \"a\"\ntoken = \"t-1\""), &[], "operators.tokens[0].role", "is required");
    refused(
        &one("name = \"a\"\nrole = \"owner\"\ntoken = \"t-1\""),
        &[],
        "operators.tokens[0].role",
        "viewer, resolver or admin",
    );
    refused(&one("name = \"a\"\nrole = \"admin\""), &[], "operators.tokens[0].file", "is required");
    refused(&one("name = \"a\"\nrole = \"admin\"\ntoken = \"svc-1\""), &[], "operators.tokens[0]", "another token");
    refused(
        &format!("{}\n[[operators.tokens]]\nname = \"a\"\nrole = \"admin\"\ntoken = \"t-1\"\n[[operators.tokens]]\nname = \"a\"\nrole = \"viewer\"\ntoken = \"t-2\"\n", full()),
        &[],
        "operators.tokens[1].name",
        "another operator token",
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn operators_oidc_loads_checked_and_an_http_issuer_needs_the_explicit_flag() {
    let dir = TempDir::new("oidc");
    dir.write("client-secret", "s3cr3t-of-the-client\n");
    let section = |issuer: &str, extra: &str| {
        format!(
            "[operators.oidc]\nissuer = \"{issuer}\"\nclient_id = \"herald\"\nclient_secret_file = \"client-secret\"\n\
             redirect_url = \"https://herald.example.net/console/oidc/callback\"\n{extra}\n\
             [operators.oidc.roles]\nherald-admins = \"admin\"\nherald-ops = \"resolver\"\n"
        )
    };
    let at = |text: String| dir.write("herald.toml", &text);
    let config =
        Config::load(Some(&at(section("https://id.example.net/realms/ops", ""))), std::iter::empty()).expect("valid");
    let oidc = config.oidc.expect("[operators.oidc]");
    assert_eq!(oidc.client_secret.expose_secret(), "s3cr3t-of-the-client");
    assert_eq!(oidc.role_claim, "roles", "the default claim");
    assert_eq!(oidc.scopes, ["profile"]);
    assert!(oidc.roles.contains(&("herald-ops".to_owned(), herald_domain::operators::Role::Resolver)));
    assert!(!format!("{oidc:?}").contains("s3cr3t"), "no secret in Debug");

    let refused_at = |text: String, key: &str, part: &str| {
        let error = Config::load(Some(&at(text)), std::iter::empty()).expect_err(key);
        assert_eq!(error.key, key, "{error}");
        assert!(error.reason.contains(part), "{error} lacks {part:?}");
    };
    refused_at(section("http://127.0.0.1:9000", ""), "operators.oidc.issuer", "must be https");
    let http =
        Config::load(Some(&at(section("http://127.0.0.1:9000", "allow_http_issuer = true"))), std::iter::empty())
            .expect("http with the explicit flag");
    // …which the production check refuses unless the process runs against local stand-ins.
    let refused = super::production::check_with(&http, false, false).expect_err("refused in production");
    assert_eq!(refused.key, "operators.oidc.allow_http_issuer");
    super::production::check_with(&http, false, true).expect("allowed with --stand-ins");
    refused_at(
        section("https://id.example.net", "")
            .replace("herald.example.net/console/oidc/callback", "herald.example.net/"),
        "operators.oidc.redirect_url",
        "/console/oidc/callback",
    );
    refused_at(
        section("https://id.example.net", "").replace("herald-ops = \"resolver\"", "herald-ops = \"root\""),
        "operators.oidc.roles.herald-ops",
        "viewer, resolver or admin",
    );
    let no_roles = section("https://id.example.net", "");
    let no_roles = no_roles.split("[operators.oidc.roles]").next().expect("head").to_owned();
    refused_at(no_roles, "operators.oidc.roles", "maps no claim value");
    refused_at(
        section("https://id.example.net", "").replace("client_secret_file = \"client-secret\"\n", ""),
        "operators.oidc.client_secret_file",
        "is required",
    );
}
