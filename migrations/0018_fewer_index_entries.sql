-- Fewer index entries per notification: each write of a row costs one entry in every index of its table
-- (an insert always; an update whenever it is not HOT), and the write account (`herald-bench --account`,
-- docs/BENCHMARKS.md "What one notification writes") showed index entries to be most of what a submission
-- and a claim write. Three kinds of entry go:
--
-- * A primary key `(user_id, id)` beside a plain index on `(id)` for look-ups by id alone: one index on
--   `(id, user_id)` serves both (its leading column finds an id; with the user it is the same key), keeps
--   `user_id` in the key as SPEC §1 asks, and is unique as the old key was — an id is unique by
--   construction, so the pair is too. Its new entries land at the right-hand end of the index (ids only
--   grow), where the old key's landed wherever the user's range was. For `notification` and
--   `delivery_task`; `notification_by_id` and `delivery_task_by_id` go.
-- * `delivery_task_reference UNIQUE (user_id, reference)` beside `delivery_task_by_reference (reference)`
--   for the console's look-up by reference: one unique index on `(reference, user_id)`, named as the
--   look-up's index was, does both.
-- * The queue's primary key `(user_id, task_id)`: its trigger found a task's queue row by it. The row is
--   found as well by the claim's own index `(due_at, task_id)`, since its due time is the task's
--   `next_attempt_at` before the write (the invariant of migration 0012, which the trigger keeps). A queue
--   row is inserted by every submission and moved by every claim: one entry fewer each time.
--
-- And the foreign keys from `inbox_item` and `delivery_task` to `notification` go, as the one from the
-- attempts to their tasks went in 0016: PostgreSQL checks a foreign key with a query per inserted row (an
-- index probe and a share lock on the notification's row, a WAL record), although every statement that
-- inserts inbox items or tasks inserts them with, and from, their notification:
-- * `AT_ONCE`, `AT_ONCE_MANY` and the event's statements (adapters-postgres/src/create.rs,
--   create_batch.rs) join them to the notification insert's `RETURNING`; `create_task`'s digest decision
--   inserts a task for a notification inserted earlier in the same transaction;
-- * Herald deletes no notification.
-- `herald_tests::tally` checks the invariant (every inbox item and every task has its notification) after
-- every step of the model test, while writers run, and at the end of the soak, as it checks 0016's.
-- The digest memberships keep their keys (a rare path).
--
-- Rebuilding the keys reads each table once under this migration's lock: on an installation with millions
-- of rows, seconds to minutes during which nothing is written.

ALTER TABLE inbox_item DROP CONSTRAINT inbox_item_user_id_notification_id_fkey;
ALTER TABLE delivery_task DROP CONSTRAINT delivery_task_user_id_notification_id_fkey;
ALTER TABLE digest_member DROP CONSTRAINT digest_member_user_id_notification_id_fkey;
ALTER TABLE digest_member DROP CONSTRAINT digest_member_user_id_digest_task_id_fkey;

ALTER TABLE notification DROP CONSTRAINT notification_pkey;
ALTER TABLE notification ADD CONSTRAINT notification_pkey PRIMARY KEY (id, user_id);
DROP INDEX notification_by_id;

ALTER TABLE delivery_task DROP CONSTRAINT delivery_task_pkey;
ALTER TABLE delivery_task ADD CONSTRAINT delivery_task_pkey PRIMARY KEY (id, user_id);
DROP INDEX delivery_task_by_id;
ALTER TABLE delivery_task DROP CONSTRAINT delivery_task_reference;
DROP INDEX delivery_task_by_reference;
ALTER TABLE delivery_task ADD CONSTRAINT delivery_task_by_reference UNIQUE (reference, user_id);

ALTER TABLE digest_member ADD CONSTRAINT digest_member_user_id_notification_id_fkey
    FOREIGN KEY (user_id, notification_id) REFERENCES notification (user_id, id);
ALTER TABLE digest_member ADD CONSTRAINT digest_member_user_id_digest_task_id_fkey
    FOREIGN KEY (user_id, digest_task_id) REFERENCES delivery_task (user_id, id);

ALTER TABLE task_queue DROP CONSTRAINT task_queue_pkey;

-- The queue's trigger (0012), finding rows by `(due_at, task_id)`: a task's queue row, if it has one, is
-- due at the `next_attempt_at` of the task's version before the statement (`old_rows`). One statement per
-- branch; an update that leaves a task's due time as it was writes nothing.
CREATE OR REPLACE FUNCTION herald_task_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO task_queue (user_id, task_id, channel, due_at)
        SELECT user_id, id, channel, next_attempt_at FROM new_rows WHERE next_attempt_at IS NOT NULL;
    ELSIF TG_OP = 'UPDATE' THEN
        WITH moved AS (
            SELECT n.user_id, n.id, n.channel, o.next_attempt_at AS was, n.next_attempt_at AS due
              FROM new_rows n JOIN old_rows o ON o.id = n.id AND o.user_id = n.user_id
             WHERE o.next_attempt_at IS DISTINCT FROM n.next_attempt_at),
        gone AS (
            DELETE FROM task_queue q USING moved m
             WHERE m.due IS NULL AND q.due_at = m.was AND q.task_id = m.id AND q.user_id = m.user_id),
        kept AS (
            UPDATE task_queue q SET due_at = m.due FROM moved m
             WHERE m.due IS NOT NULL AND q.due_at = m.was AND q.task_id = m.id AND q.user_id = m.user_id)
        INSERT INTO task_queue (user_id, task_id, channel, due_at)
        SELECT user_id, id, channel, due FROM moved WHERE was IS NULL AND due IS NOT NULL;
    ELSIF TG_OP = 'DELETE' THEN
        DELETE FROM task_queue q USING old_rows o
         WHERE q.due_at = o.next_attempt_at AND q.task_id = o.id AND q.user_id = o.user_id;
    ELSE
        -- TRUNCATE: no task left, nothing scheduled.
        DELETE FROM task_queue;
    END IF;
    RETURN NULL;
END
$$;
