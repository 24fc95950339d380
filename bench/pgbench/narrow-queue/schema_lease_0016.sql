-- An experiment, not a migration: the lease (token, holder, attempt number) in the queue row, over Herald's
-- schema since migration 0016 (`task_queue` kept by triggers). Applied after `herald migrate`, before the
-- backlog; with `claim_finish_lease_0016.sql`. See README.md.
ALTER TABLE task_queue ADD COLUMN attempt_token uuid, ADD COLUMN lease_owner text,
    ADD COLUMN attempt_no int NOT NULL DEFAULT 0;
