-- Herald's own statements for one batch, as pgbench runs them (scripts/bench.sh: the database's limit
-- for this shape of work). Mirrors adapters-postgres/src/claim.rs (CLAIM_QUERY, then WRITE_DECISIONS in
-- the same transaction) and a batched fenced finish (one UPDATE … FROM unnest for the tasks and one for
-- the attempts), every decision being "send now" and every call accepted. Run with -M prepared and
-- -D batch=N. Each statement is one round trip, as for the worker. The claim picks from `task_queue`
-- (migration 0012), which the triggers on `delivery_task` keep in step with the writes below.
BEGIN;
WITH due AS MATERIALIZED (
    SELECT q.user_id, q.task_id FROM task_queue q
    WHERE q.due_at <= now() AND q.channel = ANY('{push,sms}'::text[])
      AND CASE WHEN (q.due_at < now() OR (SELECT s.state FROM delivery_task s
            WHERE s.user_id = q.user_id AND s.id = q.task_id) IS DISTINCT FROM 'SENDING')
        THEN EXISTS (SELECT 1 FROM delivery_task l WHERE l.user_id = q.user_id AND l.id = q.task_id
            FOR NO KEY UPDATE SKIP LOCKED)
        ELSE false END
    ORDER BY q.due_at, q.task_id
    LIMIT :batch
    FOR NO KEY UPDATE OF q SKIP LOCKED),
  picked AS MATERIALIZED (
    SELECT t.user_id, t.id, t.notification_id, t.channel, t.state, t.attempt_count, t.max_attempts,
           t.next_attempt_at, t.reference::text AS reference, t.expires_at AS task_expires_at
    FROM due JOIN delivery_task t ON t.user_id = due.user_id AND t.id = due.task_id
    WHERE t.next_attempt_at <= now() AND (t.state <> 'SENDING' OR t.lease_until < now())
    FOR NO KEY UPDATE OF t SKIP LOCKED),
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
    RETURNING t.user_id, f.token)
UPDATE delivery_attempt a SET outcome = 'ACCEPTED', finished_at = now()
FROM held h WHERE a.user_id = h.user_id AND a.attempt_token = h.token;
