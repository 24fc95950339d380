-- ../claim_finish.sql with the lease in the queue row, over Herald's schema since migration 0016 plus
-- schema_lease_0016.sql: the claim locks and leases queue rows and only reads their tasks; the finish
-- locks the queue rows that still hold its tokens (the fence) and writes each task once, and the queue's
-- trigger (migration 0012) deletes the queue row as the task leaves the schedule. Only for measuring
-- (README.md): every decision is "send now", every call accepted.
BEGIN;
WITH due AS MATERIALIZED (
    SELECT q.user_id, q.task_id FROM task_queue q
    WHERE q.due_at <= now() AND q.channel = ANY('{push,sms}'::text[])
    ORDER BY q.due_at, q.task_id
    LIMIT :batch
    FOR NO KEY UPDATE OF q SKIP LOCKED),
  picked AS MATERIALIZED (
    SELECT t.user_id, t.id, t.notification_id, t.channel, t.state, t.attempt_count, t.max_attempts,
           t.next_attempt_at, t.reference::text AS reference, t.expires_at AS task_expires_at
    FROM due JOIN delivery_task t ON t.user_id = due.user_id AND t.id = due.task_id),
  claimed AS (
    SELECT t.user_id, t.id, t.state, t.attempt_count, t.max_attempts, t.reference, n.body,
           COALESCE(t.task_expires_at, n.expires_at) AS expires_at, COALESCE(p.enabled, false) AS pref_enabled,
           p.destination
    FROM picked t
    JOIN notification n ON n.user_id = t.user_id AND n.id = t.notification_id
    LEFT JOIN channel_pref p ON p.user_id = t.user_id AND p.channel = t.channel)
SELECT COALESCE(array_agg(user_id), '{}') AS users, COALESCE(array_agg(id), '{}') AS ids FROM claimed
\gset
WITH arrays AS MATERIALIZED (SELECT :users::text[] AS user_id, :ids::bigint[] AS id),
  u AS (SELECT u.* FROM arrays a, unnest(a.user_id, a.id) AS u(user_id, id)),
  held AS (
    UPDATE task_queue q SET due_at = now() + interval '60 seconds', attempt_token = gen_random_uuid(),
      lease_owner = 'pgbench', attempt_no = q.attempt_no + 1
    FROM u WHERE q.user_id = u.user_id AND q.task_id = u.id
    RETURNING q.user_id, q.task_id, q.attempt_token, q.attempt_no),
  attempts AS (
    INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, started_at)
    SELECT user_id, task_id, attempt_no, attempt_token, 'SEND', 'pgbench', now() FROM held)
SELECT COALESCE(array_agg(user_id), '{}') AS users, COALESCE(array_agg(task_id), '{}') AS ids,
       COALESCE(array_agg(attempt_token), '{}') AS tokens FROM held
\gset
COMMIT;
BEGIN;
WITH f AS (SELECT * FROM unnest(:users::text[], :ids::bigint[], :tokens::uuid[]) AS f(user_id, id, token)),
  fenced AS MATERIALIZED (SELECT q.user_id, q.task_id, q.attempt_token AS token, q.attempt_no FROM task_queue q JOIN f
    ON q.user_id = f.user_id AND q.task_id = f.id AND q.attempt_token = f.token FOR NO KEY UPDATE OF q),
  held AS (
    UPDATE delivery_task t SET state = 'SENT', outcome_uncertain = false, needs_review = false,
      next_attempt_at = NULL, uncertain_since = NULL, provider_msg_id = 'pgbench-' || t.id, last_error = NULL,
      attempt_count = t.attempt_count + 1, last_attempt_no = g.attempt_no, updated_at = now()
    FROM fenced g WHERE t.user_id = g.user_id AND t.id = g.task_id
    RETURNING t.user_id, g.token)
UPDATE delivery_attempt a SET outcome = 'ACCEPTED', finished_at = now()
FROM held h WHERE a.user_id = h.user_id AND a.attempt_token = h.token;
COMMIT;
