//! The near name of a misspelt one, for "did you mean …?": used by the configuration's errors (an unknown
//! key) and the API's (an unknown JSON field), so both suggest alike.

/// The candidate closest to `word`, when it is close enough to be what was meant: equal but for case and
/// `_`/`-`, or at most two edits away (insert, delete, replace or swap two neighbours) — one for words
/// of up to four letters. Ties go to the first candidate. `None` for an exact match: nothing to suggest.
#[must_use]
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let folded = |text: &str| -> String {
        text.chars().filter(|c| !matches!(c, '_' | '-')).flat_map(char::to_lowercase).collect()
    };
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        if candidate == word {
            return None;
        }
        let distance = if folded(candidate) == folded(word) { 0 } else { edits(word, candidate) };
        if distance <= limit && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of neighbours.
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::nearest;

    const SUBMIT: [&str; 5] = ["user_id", "event_key", "body", "ttl_seconds", "thread"];

    #[test]
    fn a_near_name_is_suggested() {
        assert_eq!(nearest("userid", SUBMIT), Some("user_id"));
        assert_eq!(nearest("UserId", SUBMIT), Some("user_id"));
        assert_eq!(nearest("event-key", SUBMIT), Some("event_key"));
        assert_eq!(nearest("ttl_secnods", SUBMIT), Some("ttl_seconds"));
        assert_eq!(nearest("bdy", SUBMIT), Some("body"));
        assert_eq!(nearest("postgress", ["postgres", "postgresql"]), Some("postgres"));
        assert_eq!(nearest("leases", ["lease_ms", "concurrency", "batch", "poll_ms"]), Some("lease_ms"));
        assert_eq!(nearest("timeout", ["lease_ms", "concurrency", "batch", "poll_ms"]), None);
    }

    #[test]
    fn a_far_or_exact_name_is_not() {
        assert_eq!(nearest("colour", SUBMIT), None);
        assert_eq!(nearest("mysql", ["postgres", "postgresql"]), None);
        assert_eq!(nearest("user_id", SUBMIT), None);
        assert_eq!(nearest("ab", ["body"]), None);
        assert_eq!(nearest("x", std::iter::empty()), None);
    }
}
