-- An experiment, not a migration: as schema.sql, and the lease moves into the queue row too (token, holder,
-- attempt number), so the claim writes only task_queue and the attempt, and delivery_task is updated once
-- per attempt, by the finish. The task table is rewritten at fill factor 50 so that every such update finds
-- room on its page (HOT). Applied after `herald migrate` and a backlog; see README.md.
DROP INDEX delivery_task_runnable;
DROP INDEX delivery_task_parked;
DROP INDEX delivery_task_parked_by_channel;
CREATE TABLE task_queue (user_id text NOT NULL, task_id bigint NOT NULL, channel text NOT NULL,
  due_at timestamptz NOT NULL, attempt_token uuid, lease_owner text, attempt_no int NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, task_id)) WITH (fillfactor = 70);
CREATE INDEX task_queue_due ON task_queue (due_at, task_id);
INSERT INTO task_queue (user_id, task_id, channel, due_at, attempt_no)
  SELECT user_id, id, channel, next_attempt_at, last_attempt_no FROM delivery_task WHERE next_attempt_at IS NOT NULL;
ALTER TABLE delivery_task SET (fillfactor = 50); VACUUM FULL delivery_task;
