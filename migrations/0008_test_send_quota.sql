-- The test-send quota (SPEC §9): every test send that was allowed to call a channel, per (user, channel),
-- kept for a day. The store decides under a transaction-scoped advisory lock of the pair
-- (herald_domain::quota::decide_test_send over the rows of the last day), inserts the new row and deletes
-- the pair's rows older than a day, so the table holds at most a day's presses.
CREATE TABLE test_send_log (
    user_id text NOT NULL,
    channel text NOT NULL,
    sent_at timestamptz NOT NULL
);

CREATE INDEX test_send_log_pair ON test_send_log (user_id, channel, sent_at);
