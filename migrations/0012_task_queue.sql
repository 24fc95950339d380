-- The schedule in a table of its own, so that a task's routine updates can be HOT.
--
-- A claim and a finish rewrite a task row (state, lease, due time, updated_at). While any of those
-- columns is in an index of `delivery_task` (the claim's index on `next_attempt_at`; the review list's
-- partial indexes on `updated_at`, whose predicate reads `state`, `needs_review` and `next_attempt_at`),
-- no such update is HOT: each new row version gets an entry in every index of the table, about a third
-- of PostgreSQL's work in a drain. After this migration no index of `delivery_task` holds a column that
-- those updates change:
--
-- * `task_queue` holds one row per scheduled task (`next_attempt_at IS NOT NULL`) with its channel and
--   due time. The claim picks and locks queue rows, then locks their tasks (adapters-postgres/src/claim.rs).
--   The rows are kept by statement triggers on `delivery_task`, in the writer's transaction: every
--   statement that inserts, updates or deletes tasks — the claim's, the finish's, a resolution's, a
--   test's — keeps the queue equal to its tasks without knowing it exists.
--   Invariant: in every snapshot, `task_queue` = {(user_id, id, channel, next_attempt_at) of
--   `delivery_task` | next_attempt_at IS NOT NULL} (checked by tests/tests/it/tally.rs and the model test).
-- * `parked_at` is the moment a parked task (SPEC §6) parked, NULL for every other task: a generated
--   column, so it is right by construction, and it stays NULL through the claims and finishes of tasks
--   that are not parked. The review list's indexes move onto it.
--
-- Lock order: a writer of a task locks the task row, then (in the trigger) its queue row; the claim locks
-- queue rows, then task rows, both `SKIP LOCKED`, so it never waits for a writer holding either.

CREATE TABLE task_queue (
    user_id text        NOT NULL,
    task_id bigint      NOT NULL,
    channel text        NOT NULL,
    due_at  timestamptz NOT NULL,
    PRIMARY KEY (user_id, task_id)
) WITH (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
-- Serves the claim: due tasks, oldest first, ties by id.
CREATE INDEX task_queue_due ON task_queue (due_at, task_id);

-- One statement per branch, whatever the number of rows. An update that leaves a task's due time as it
-- was writes nothing (the WHERE of the upsert), so a digest joining its task or a lease refresh costs an
-- index probe, not a new row version.
CREATE FUNCTION herald_task_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_queue (user_id, task_id, channel, due_at)
        SELECT user_id, id, channel, next_attempt_at FROM new_rows WHERE next_attempt_at IS NOT NULL;
    ELSIF TG_OP = 'UPDATE' THEN
        DELETE FROM task_queue q USING new_rows n
         WHERE n.next_attempt_at IS NULL AND q.user_id = n.user_id AND q.task_id = n.id;
        INSERT INTO task_queue (user_id, task_id, channel, due_at)
        SELECT user_id, id, channel, next_attempt_at FROM new_rows WHERE next_attempt_at IS NOT NULL
            ON CONFLICT (user_id, task_id) DO UPDATE SET due_at = EXCLUDED.due_at
            WHERE task_queue.due_at IS DISTINCT FROM EXCLUDED.due_at;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM task_queue q USING old_rows o WHERE q.user_id = o.user_id AND q.task_id = o.id;
    ELSE
        -- TRUNCATE: no task left, nothing scheduled.
        DELETE FROM task_queue;
    END IF;
    RETURN NULL;
END
$$;

-- As in 0010: writers wait from here to the commit, so the copy below is exact.
LOCK TABLE delivery_task IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER delivery_task_queue_insert AFTER INSERT ON delivery_task
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_queue();
CREATE TRIGGER delivery_task_queue_update AFTER UPDATE ON delivery_task
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_queue();
CREATE TRIGGER delivery_task_queue_delete AFTER DELETE ON delivery_task
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_queue();
CREATE TRIGGER delivery_task_queue_truncate AFTER TRUNCATE ON delivery_task
    FOR EACH STATEMENT EXECUTE FUNCTION herald_task_queue();

INSERT INTO task_queue (user_id, task_id, channel, due_at)
SELECT user_id, id, channel, next_attempt_at FROM delivery_task WHERE next_attempt_at IS NOT NULL;

DROP INDEX delivery_task_runnable;

-- The review list's key: when a parked task parked (its last update, which parked it), NULL otherwise.
-- `herald_task_parked` is the one SQL spelling of "parked" (0010). Adding a stored column rewrites the
-- table once.
ALTER TABLE delivery_task ADD COLUMN parked_at timestamptz
    GENERATED ALWAYS AS (CASE WHEN herald_task_parked(state, needs_review, next_attempt_at) THEN updated_at END) STORED;
DROP INDEX delivery_task_parked;
DROP INDEX delivery_task_parked_by_channel;
CREATE INDEX delivery_task_parked ON delivery_task (parked_at, id) WHERE parked_at IS NOT NULL;
CREATE INDEX delivery_task_parked_by_channel ON delivery_task (channel, parked_at, id) WHERE parked_at IS NOT NULL;
