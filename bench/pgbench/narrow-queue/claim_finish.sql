-- bench/pgbench/claim_finish.sql over the narrow queue of schema.sql: the claim locks queue rows, then
-- their tasks; the claim's write moves the queue row's due time to the lease's end, the finish deletes it.
-- Only for measuring (README.md): the finish takes the task before the queue row, the reverse of the
-- claim's order, which a real implementation would not do.
BEGIN;
WITH q AS MATERIALIZED (
    SELECT q.user_id, q.task_id FROM task_queue q
    WHERE q.due_at <= now() AND q.channel = ANY('{push,sms}'::text[])
    ORDER BY q.due_at, q.task_id
    LIMIT :batch
    FOR UPDATE OF q SKIP LOCKED),
  picked AS MATERIALIZED (
    SELECT t.user_id, t.id, t.notification_id, t.channel, t.state, t.attempt_count, t.max_attempts,
           t.next_attempt_at, t.reference::text AS reference, t.expires_at AS task_expires_at
    FROM q JOIN delivery_task t ON t.user_id = q.user_id AND t.id = q.task_id
    FOR NO KEY UPDATE OF t),
  claimed AS (
    SELECT t.user_id, t.id, t.state, t.attempt_count, t.max_attempts, t.reference, n.body,
           COALESCE(t.task_expires_at, n.expires_at) AS expires_at, COALESCE(p.enabled, false) AS pref_enabled,
           p.destination
    FROM picked t
    JOIN notification n ON n.user_id = t.user_id AND n.id = t.notification_id
    LEFT JOIN channel_pref p ON p.user_id = t.user_id AND p.channel = t.channel)
SELECT COALESCE(array_agg(user_id), '{}') AS users, COALESCE(array_agg(id), '{}') AS ids FROM claimed
\gset
WITH u AS (SELECT * FROM unnest(:users::text[], :ids::bigint[]) AS u(user_id, id)),
  leased AS (
    UPDATE task_queue q SET due_at = now() + interval '60 seconds' FROM u WHERE q.user_id = u.user_id AND q.task_id = u.id),
  held AS (
    UPDATE delivery_task t SET state = 'SENDING', attempt_token = gen_random_uuid(), lease_owner = 'pgbench',
      lease_until = now() + interval '60 seconds', next_attempt_at = now() + interval '60 seconds',
      attempt_count = t.attempt_count + 1, last_attempt_no = t.last_attempt_no + 1, updated_at = now()
    FROM u WHERE t.user_id = u.user_id AND t.id = u.id
    RETURNING t.user_id, t.id, t.attempt_token, t.last_attempt_no),
  attempts AS (
    INSERT INTO delivery_attempt (user_id, task_id, attempt_no, attempt_token, action, lease_owner, started_at)
    SELECT user_id, id, last_attempt_no, attempt_token, 'SEND', 'pgbench', now() FROM held)
SELECT COALESCE(array_agg(user_id), '{}') AS users, COALESCE(array_agg(id), '{}') AS ids,
       COALESCE(array_agg(attempt_token), '{}') AS tokens FROM held
\gset
COMMIT;
WITH f AS (SELECT * FROM unnest(:users::text[], :ids::bigint[], :tokens::uuid[]) AS f(user_id, id, token)),
  held AS (
    UPDATE delivery_task t SET state = 'SENT', outcome_uncertain = false, needs_review = false,
      next_attempt_at = NULL, uncertain_since = NULL, provider_msg_id = 'pgbench-' || t.id, last_error = NULL,
      attempt_token = NULL, lease_owner = NULL, lease_until = NULL, updated_at = now()
    FROM f WHERE t.user_id = f.user_id AND t.id = f.id AND t.state = 'SENDING' AND t.attempt_token = f.token
    RETURNING t.user_id, t.id, f.token),
  gone AS (DELETE FROM task_queue q USING held h WHERE q.user_id = h.user_id AND q.task_id = h.id)
UPDATE delivery_attempt a SET outcome = 'ACCEPTED', finished_at = now()
FROM held h WHERE a.user_id = h.user_id AND a.attempt_token = h.token;
