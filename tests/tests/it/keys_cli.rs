//! `herald keys …` as an operator runs it: the real binary, its standard output and exit status.

use std::process::{Command, Output};

use herald_channels::cipher::Keyring;
use secrecy::SecretString;

fn herald(args: &[&str]) -> Output {
    Command::new(herald_tests::bins::binary("herald"))
        .args(args)
        .env_remove("HERALD_CONFIG")
        .output()
        .expect("the herald binary runs")
}

#[test]
fn keys_generate_prints_one_fresh_key_the_keyring_accepts() {
    let first = herald(&["keys", "generate"]);
    assert!(first.status.success(), "{first:?}");
    let key = String::from_utf8(first.stdout).expect("UTF-8");
    assert_eq!(key.lines().count(), 1, "one line: {key:?}");
    // As it would be pasted into `[keys]` (or a `k2_file`, trailing newline included).
    let ring = Keyring::new([("k2".to_owned(), SecretString::from(key.clone()))], "k2").expect("a valid key");
    assert_eq!(ring.current_key_id(), "k2");

    let second = herald(&["keys", "generate"]);
    assert_ne!(String::from_utf8_lossy(&second.stdout), key, "every key is new");
}

#[test]
fn keys_rotate_without_a_keys_section_is_a_configuration_error_naming_it() {
    let out = herald(&["keys", "rotate"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("keys") && stderr.contains("herald keys rotate"), "{stderr}");
}
