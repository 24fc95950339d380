-- An experiment, not a migration: Herald's schema with the scheduling columns' index moved to a narrow
-- queue table, so that the updates of delivery_task change no indexed column and may be HOT. The parked
-- indexes go too (a parked task would be listed in a table of its own, written only when it parks).
-- Applied after `herald migrate` and a backlog; see README.md.
DROP INDEX delivery_task_runnable;
DROP INDEX delivery_task_parked;
DROP INDEX delivery_task_parked_by_channel;
CREATE TABLE task_queue (user_id text NOT NULL, task_id bigint NOT NULL, channel text NOT NULL,
  due_at timestamptz NOT NULL, PRIMARY KEY (user_id, task_id)) WITH (fillfactor = 70);
CREATE INDEX task_queue_due ON task_queue (due_at, task_id);
INSERT INTO task_queue SELECT user_id, id, channel, next_attempt_at FROM delivery_task WHERE next_attempt_at IS NOT NULL;
