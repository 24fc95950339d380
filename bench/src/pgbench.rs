//! The pgbench script of Herald's own SQL (`herald-bench` runs it as a peer; `--pgbench-script` prints
//! it): one batch per transaction as a worker runs it — the claim query and the claim's write in one
//! transaction, then one batched fenced finish — every decision "send now" and every call accepted.
//!
//! The statements are not copied here: the script is made, when the benchmark runs, from the texts the
//! store runs (`herald_postgres::claim_text`, `WRITE_DECISIONS_WITH`, `FINISH_BATCH_QUERY`). Each `$n`
//! becomes what the worker would bind — a pgbench variable set by the step before (`\gset`, which holds one
//! row, so each step ends in a `SELECT` of arrays) or a literal — and a statement that gains a parameter
//! the script does not bind fails the run instead of drifting from Herald's.

use std::collections::BTreeMap;

use anyhow::{bail, Context as _};

/// Replaces every `$n` of `sql` by `bind[n]`; fails on a parameter with no value.
fn bind(sql: &str, what: &str, values: &BTreeMap<u32, String>) -> anyhow::Result<String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..].chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            out.push('$');
            rest = &rest[at + 1..];
            continue;
        }
        let n: u32 = digits.parse()?;
        let value = values.get(&n).with_context(|| format!("{what}: the script binds no value to ${n}"))?;
        out.push_str(value);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

fn values(pairs: &[(u32, &str)]) -> BTreeMap<u32, String> {
    pairs.iter().map(|(n, v)| (*n, (*v).to_owned())).collect()
}

/// One line per statement: pgbench reads a statement to its `;` (or a `\gset`) but keeps every line.
fn one_line(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The script for batches of `batch` tasks of the channels `push` and `sms`, with a lease of 60 s.
///
/// # Errors
/// When a statement has a parameter the script does not bind.
pub fn script(batch: u32) -> anyhow::Result<String> {
    if batch == 0 {
        bail!("a batch of no tasks");
    }
    // The claim query as the claim runs it (its limit written in); its rows become the arrays of the
    // claim's write, each task held for one SEND.
    let claim = bind(
        &herald_postgres::claim_text(batch),
        "the claim query",
        &values(&[(1, "now()"), (2, "'{push,sms}'::text[]"), (3, "NULL"), (4, "'{}'::text[]"), (5, "'{}'::bigint[]")]),
    )?;
    let decisions = format!(
        "SELECT COALESCE(array_agg(c.user_id), '{{}}') AS w_user, COALESCE(array_agg(c.id), '{{}}') AS w_id, \
           COALESCE(array_agg('SENDING'::text), '{{}}') AS w_state, COALESCE(array_agg(true), '{{}}') AS w_hold, \
           COALESCE(array_agg(now() + interval '60 seconds'), '{{}}') AS w_next, \
           COALESCE(array_agg(1), '{{}}') AS w_count, COALESCE(array_agg(1), '{{}}') AS w_no, \
           COALESCE(array_agg(c.outcome_uncertain), '{{}}') AS w_uncertain, \
           COALESCE(array_agg(c.uncertain_since), '{{}}') AS w_since, COALESCE(array_agg(false), '{{}}') AS w_review, \
           COALESCE(array_agg(NULL::text), '{{}}') AS w_msg, COALESCE(array_agg(false), '{{}}') AS w_set_error, \
           COALESCE(array_agg(NULL::text), '{{}}') AS w_error, COALESCE(array_agg('SEND'::text), '{{}}') AS w_action, \
           COALESCE(array_agg(NULL::text), '{{}}') AS w_outcome \
         FROM ({claim}) c"
    );
    // The claim's write, followed by the arrays of the batched finish: every call accepted.
    let write = bind(
        herald_postgres::WRITE_DECISIONS_WITH,
        "the claim's write",
        &values(&[
            (1, ":w_user"),
            (2, ":w_id"),
            (3, ":w_state"),
            (4, ":w_hold"),
            (5, ":w_next"),
            (6, ":w_count"),
            (7, ":w_no"),
            (8, ":w_uncertain"),
            (9, ":w_since"),
            (10, ":w_review"),
            (11, ":w_msg"),
            (12, ":w_set_error"),
            (13, ":w_error"),
            (14, ":w_action"),
            (15, ":w_outcome"),
            (16, "'pgbench'"),
            (17, "now()"),
        ]),
    )?;
    let write = format!(
        "{write} SELECT COALESCE(array_agg(user_id), '{{}}') AS f_user, COALESCE(array_agg(id), '{{}}') AS f_id, \
           COALESCE(array_agg(attempt_token), '{{}}') AS f_token, COALESCE(array_agg('SENT'::text), '{{}}') AS f_state, \
           COALESCE(array_agg(false), '{{}}') AS f_uncertain, COALESCE(array_agg(false), '{{}}') AS f_review, \
           COALESCE(array_agg(NULL::timestamptz), '{{}}') AS f_next, COALESCE(array_agg(NULL::timestamptz), '{{}}') AS f_since, \
           COALESCE(array_agg('pgbench-' || id), '{{}}') AS f_msg, COALESCE(array_agg(NULL::text), '{{}}') AS f_error, \
           COALESCE(array_agg(now()), '{{}}') AS f_now, COALESCE(array_agg('ACCEPTED'::text), '{{}}') AS f_outcome, \
           COALESCE(array_agg('ok'::text), '{{}}') AS f_detail \
         FROM held WHERE attempt_token IS NOT NULL"
    );
    let finish = bind(
        herald_postgres::FINISH_BATCH_QUERY,
        "the batched finish",
        &values(&[
            (1, ":f_user"),
            (2, ":f_id"),
            (3, ":f_token"),
            (4, ":f_state"),
            (5, ":f_uncertain"),
            (6, ":f_review"),
            (7, ":f_next"),
            (8, ":f_since"),
            (9, ":f_msg"),
            (10, ":f_error"),
            (11, ":f_now"),
            (12, ":f_outcome"),
            (13, ":f_detail"),
        ]),
    )?;
    Ok(format!(
        "-- Herald's own statements for one batch of {batch}, as pgbench runs them (herald-bench, made from the\n\
         -- texts herald-postgres runs: the claim query and the claim's write in one transaction, then one\n\
         -- batched fenced finish; every decision \"send now\", every call accepted). Run with -M prepared.\n\
         BEGIN;\n{}\n\\gset\n{}\n\\gset\nCOMMIT;\n{};\n",
        one_line(&decisions),
        one_line(&write),
        one_line(&finish)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_of_herald_s_statements_is_bound() {
        let text = script(32).expect("script");
        assert!(!text.chars().zip(text.chars().skip(1)).any(|(a, b)| a == '$' && b.is_ascii_digit()), "{text}");
        assert!(text.contains("LIMIT 32"), "the claim's limit is written in");
        assert!(bind("SELECT $1, $2", "test", &values(&[(1, "a")])).is_err(), "an unbound parameter fails");
        assert_eq!(bind("SELECT $10, $1", "test", &values(&[(1, "a"), (10, "b")])).expect("bind"), "SELECT b, a");
    }
}
