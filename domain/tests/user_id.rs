//! The user-id rule (`check_user_id`) over generated texts: what it accepts is exactly the documented set,
//! and no whitespace, control, zero-width or bidi character gets through, wherever it is placed.

use herald_domain::ids::{check_user_id, user_id_char, UserIdProblem, MAX_USER_ID_CHARS, USER_ID_PUNCTUATION};
use proptest::prelude::*;

/// Characters a spoofed or unprintable id would use: whitespace, controls, zero-width and bidi marks,
/// the word joiner, the byte-order mark, a soft hyphen, a tag character, and a look-alike Cyrillic "а".
const HOSTILE: &[char] = &[
    ' ',
    '\t',
    '\n',
    '\r',
    '\u{0}',
    '\u{7}',
    '\u{1b}',
    '\u{7f}',
    '\u{85}',
    '\u{a0}',
    '\u{ad}',
    '\u{200b}',
    '\u{200c}',
    '\u{200d}',
    '\u{200e}',
    '\u{200f}',
    '\u{202a}',
    '\u{202b}',
    '\u{202c}',
    '\u{202d}',
    '\u{202e}',
    '\u{2060}',
    '\u{2066}',
    '\u{2067}',
    '\u{2068}',
    '\u{2069}',
    '\u{2028}',
    '\u{2029}',
    '\u{3000}',
    '\u{feff}',
    '\u{e0041}',
    '\u{430}',
    '/',
    '%',
    '?',
    '#',
];

fn allowed() -> impl Strategy<Value = char> {
    let set: Vec<char> = ('a'..='z').chain('A'..='Z').chain('0'..='9').chain(USER_ID_PUNCTUATION.chars()).collect();
    proptest::sample::select(set)
}

/// The documented rule, spelled independently of the implementation.
fn oracle(text: &str) -> bool {
    let n = text.chars().count();
    (1..=128).contains(&n)
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@' | ':' | '+'))
}

proptest! {
    #[test]
    fn accepts_exactly_the_documented_set(text in any::<String>()) {
        prop_assert_eq!(check_user_id(&text).is_ok(), oracle(&text), "{:?}", text);
    }

    #[test]
    fn every_id_of_the_set_is_accepted(chars in proptest::collection::vec(allowed(), 1..=MAX_USER_ID_CHARS)) {
        let text: String = chars.into_iter().collect();
        prop_assert_eq!(check_user_id(&text), Ok(()));
    }

    #[test]
    fn a_hostile_character_anywhere_is_refused_and_located(
        chars in proptest::collection::vec(allowed(), 0..=MAX_USER_ID_CHARS),
        at in any::<proptest::sample::Index>(),
        bad in proptest::sample::select(HOSTILE),
    ) {
        let mut chars = chars;
        let at = at.index(chars.len() + 1);
        chars.insert(at, bad);
        let text: String = chars.into_iter().collect();
        prop_assert!(!user_id_char(bad));
        prop_assert_eq!(check_user_id(&text), Err(UserIdProblem::Character(at + 1)), "{:?}", text);
    }

    #[test]
    fn whitespace_at_either_end_is_refused(core in "[a-z0-9]{1,20}", ws in proptest::sample::select(vec![' ', '\t', '\u{a0}', '\u{3000}'])) {
        let (leading, trailing) = (format!("{ws}{core}"), format!("{core}{ws}"));
        prop_assert!(check_user_id(&leading).is_err());
        prop_assert!(check_user_id(&trailing).is_err());
    }

    #[test]
    fn too_long_is_refused(chars in proptest::collection::vec(allowed(), MAX_USER_ID_CHARS + 1..=MAX_USER_ID_CHARS + 50)) {
        let text: String = chars.into_iter().collect();
        prop_assert_eq!(check_user_id(&text), Err(UserIdProblem::TooLong));
    }
}

#[test]
fn the_empty_text_is_refused() {
    assert_eq!(check_user_id(""), Err(UserIdProblem::Empty));
}

#[test]
fn the_words_never_repeat_the_text() {
    let secret_looking = "alice\u{202e}moc.evil";
    let words = check_user_id(secret_looking).unwrap_err().to_string();
    assert!(!words.contains("alice") && words.contains("character 6"), "{words}");
}
