-- The task gauges (`herald_tasks`, `herald_parked_tasks`, the console overview:
-- `NotificationStore::task_counts`) without counting `delivery_task`, a table that keeps every finished
-- task. The database keeps a tally of its rows per (channel, state, parked): every statement that
-- writes `delivery_task` appends, in its own transaction, one signed delta per group it changed (+1 per
-- new row version, -1 per old one, groups whose sum is 0 left out). Nothing is ever updated in place,
-- so concurrent writers never wait on a shared counter row; the reader sums the deltas, and compacts
-- them now and then (adapters-postgres/src/views.rs, `COMPACT_TASK_TALLY`).
--
-- Invariant: in every snapshot, sum(n) per group equals count(*) of `delivery_task` per group — the
-- deltas commit or roll back with the rows they describe. Checked against the exact count by
-- tests/tests/it/tally.rs, the model test after every step, and the soak's ledger.

CREATE TABLE task_tally (
    channel text    NOT NULL,
    state   text    NOT NULL,
    parked  boolean NOT NULL,
    n       bigint  NOT NULL
);

-- "Parked" (SPEC §6), the one SQL spelling the tally uses. Rust spells it as `PARKED`
-- (adapters-postgres/src/rows.rs), which the review list, the partial indexes and the exact count of the
-- tests use; a unit test there checks that this text is the same predicate, and tests/tests/it/tally.rs
-- compares the tally with `PARKED` over every combination of the three columns.
CREATE FUNCTION herald_task_parked(state text, needs_review boolean, next_attempt_at timestamptz)
    RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT (state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL) $$;

-- One INSERT … SELECT per statement, whatever the number of rows: the claim and the finish write a whole
-- batch in one UPDATE, so this runs once per batch. A statement that changes no group (a digest joining
-- its task, a lease refresh) writes nothing.
CREATE FUNCTION herald_task_tally() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_tally (channel, state, parked, n)
        SELECT channel, state, herald_task_parked(state, needs_review, next_attempt_at), count(*)
          FROM new_rows GROUP BY 1, 2, 3;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO task_tally (channel, state, parked, n)
        SELECT channel, state, parked, sum(d)
          FROM (SELECT channel, state, herald_task_parked(state, needs_review, next_attempt_at) AS parked, 1 AS d
                  FROM new_rows
                UNION ALL
                SELECT channel, state, herald_task_parked(state, needs_review, next_attempt_at), -1
                  FROM old_rows) delta
         GROUP BY 1, 2, 3 HAVING sum(d) <> 0;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO task_tally (channel, state, parked, n)
        SELECT channel, state, herald_task_parked(state, needs_review, next_attempt_at), -count(*)
          FROM old_rows GROUP BY 1, 2, 3;
    ELSE
        -- TRUNCATE: no rows left, nothing to count.
        DELETE FROM task_tally;
    END IF;
    RETURN NULL;
END
$$;

-- Creating a trigger takes a SHARE ROW EXCLUSIVE lock on `delivery_task`, which waits for the writers in
-- flight and then holds off every new one until this migration's transaction commits (sqlx runs each
-- migration file in one transaction). The lock comes first and explicitly: from here on no task row
-- changes, so the count below is exact, and every write after the commit goes through the triggers.
LOCK TABLE delivery_task IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER delivery_task_tally_insert AFTER INSERT ON delivery_task
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_tally();
CREATE TRIGGER delivery_task_tally_update AFTER UPDATE ON delivery_task
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_tally();
CREATE TRIGGER delivery_task_tally_delete AFTER DELETE ON delivery_task
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_tally();
CREATE TRIGGER delivery_task_tally_truncate AFTER TRUNCATE ON delivery_task
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_tally();

-- The tasks that exist already: one full count, once (writers wait for it, see above).
INSERT INTO task_tally (channel, state, parked, n)
SELECT channel, state, herald_task_parked(state, needs_review, next_attempt_at), count(*)
  FROM delivery_task GROUP BY 1, 2, 3;
