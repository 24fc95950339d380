-- Each task gets a reference that is unique beyond this database (SPEC §5: the idempotency key is
-- "ntf-" + the task's reference). A task id is unique only within one database: two installations, or
-- one database recreated, sharing a channel would otherwise send keys that collide, and an idempotent
-- channel would answer a new notification with the replay of an old one — a silent loss.
ALTER TABLE delivery_task ADD COLUMN reference uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE delivery_task ADD CONSTRAINT delivery_task_reference UNIQUE (user_id, reference);
