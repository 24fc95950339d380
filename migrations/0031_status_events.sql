-- Status events (issue 46): what happened to each delivery, told to the calling service's endpoints.
--
-- `status_subscription` holds what the database must know of the configured subscriptions to write their
-- events: a name and the kinds each wants. `herald serve` and `herald worker` replace its rows with their
-- configuration's at start (`StatusEventStore::set_subscriptions`); the URL and the signing secret stay in
-- the configuration and never reach the database.
--
-- `status_event` is an outbox: one row per (event, subscription), written by a trigger in the transaction
-- of the task change it tells, so an event exists exactly when its change committed. A dispatcher claims
-- due rows (`due_at`), posts them, and marks them delivered (`delivered_at`), due again later, or parked
-- (`parked_at`) after too many failures. `id` is the event's `webhook-id`; `seq` orders the events of a
-- delivery: every event of one task is written after the previous one committed (the task row is
-- locked by each change), so a later event always has a larger `seq`.

CREATE TABLE status_subscription (
    name  text   PRIMARY KEY,
    kinds text[] NOT NULL
);

CREATE TABLE status_event (
    id                 uuid        NOT NULL DEFAULT herald_uuid_v7() PRIMARY KEY,
    seq                bigint      GENERATED ALWAYS AS IDENTITY,
    subscription       text        NOT NULL,
    user_id            text        NOT NULL,
    notification_id    bigint      NOT NULL,
    task_id            bigint      NOT NULL,
    channel            text        NOT NULL,
    attempt_no         integer     NOT NULL,
    kind               text        NOT NULL
        CHECK (kind IN ('accepted', 'refused', 'parked', 'resolved', 'sent_again', 'suppressed', 'expired')),
    -- The reason class of `refused` and `suppressed`, the decision of `resolved`.
    reason             text,
    -- The channel's id for the message, with `accepted`.
    channel_message_id text,
    occurred_at        timestamptz NOT NULL,
    -- Next post due; NULL once delivered or parked. While a dispatcher holds the row, the end of its hold.
    due_at             timestamptz,
    tries              integer     NOT NULL DEFAULT 0,
    last_error         text,
    delivered_at       timestamptz,
    parked_at          timestamptz
) WITH (fillfactor = 50);
-- The events still to post, oldest first. `due_at` is in no index, so the claim's update (a new due time,
-- one more try) stays on its page (HOT: fill factor 50 leaves the room); only the final update, delivered
-- or parked, leaves the index.
CREATE INDEX status_event_pending ON status_event (seq) WHERE delivered_at IS NULL AND parked_at IS NULL;
CREATE INDEX status_event_parked ON status_event (parked_at, seq) WHERE parked_at IS NOT NULL;

-- One INSERT … SELECT per statement, like the tally's triggers, and nothing at all while no subscription
-- is configured. The kinds, from each task's row before and after the statement:
-- * `sent_again`: a holding of a SEND that was not the task's first call ended (a finish, or a takeover of
--   an expired lease): the call was made, or may have been. A given-back attempt (no call) is deleted by
--   the same statement, so it is not found and tells nothing.
-- * `resolved`: the task left the parked set (only a person resolves a parked task); the decision from
--   the new state.
-- * `parked`: the task entered the parked set (its outcome is unknown and a person must decide).
-- * `accepted`: the task became SENT on its own (the channel accepted, or a query found the message).
-- * `suppressed`: the task became SUPPRESSED (the user switched the channel off before it was sent:
--   `preference_off`; or was erased: `erased`); also a task an erasure closed while its outcome was unknown
--   and it was parked (`erased_outcome_unknown`). One left parked by anything but a person's decision (its last
--   attempt is no MANUAL_ row) tells no `resolved`.
-- * `expired` / `refused`: the task became FAILED; which, and the reason class, from the outcome of its
--   last attempt (TTL_EXPIRED: expired; REJECTED: refused, `rejected`; otherwise refused,
--   `attempts_exhausted`).
CREATE FUNCTION herald_status_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM status_subscription) THEN
        RETURN NULL;
    END IF;
    INSERT INTO status_event (subscription, user_id, notification_id, task_id, channel, attempt_no, kind,
                              reason, channel_message_id, occurred_at, due_at)
    SELECT s.name, e.user_id, e.notification_id, e.task_id, e.channel, e.attempt_no, e.kind,
           e.reason, e.channel_message_id, e.occurred_at, e.occurred_at
      FROM (
        SELECT n.user_id, n.notification_id, n.id AS task_id, n.channel, ev.*
          FROM new_rows n
          JOIN old_rows o ON o.user_id = n.user_id AND o.id = n.id
          CROSS JOIN LATERAL (
            SELECT 1 AS ord, 'sent_again'::text AS kind, a.attempt_no, NULL::text AS reason,
                   NULL::text AS channel_message_id, a.started_at AS occurred_at
              FROM delivery_attempt a
             WHERE o.state = 'SENDING' AND o.last_attempt_no > 1
               AND (n.state <> 'SENDING' OR n.attempt_token IS DISTINCT FROM o.attempt_token)
               AND a.user_id = o.user_id AND a.task_id = o.id AND a.attempt_no = o.last_attempt_no
               AND a.action = 'SEND'
            UNION ALL
            SELECT 2, k.kind, n.last_attempt_no, k.reason,
                   CASE WHEN k.kind = 'accepted' THEN n.provider_msg_id END, n.updated_at
              FROM (SELECT
                      herald_task_parked(o.state, o.needs_review, o.next_attempt_at) AS was_parked,
                      herald_task_parked(n.state, n.needs_review, n.next_attempt_at) AS is_parked) p
              CROSS JOIN LATERAL (
                SELECT CASE
                         WHEN p.was_parked AND NOT p.is_parked THEN 'resolved'
                         WHEN p.is_parked AND NOT p.was_parked THEN 'parked'
                         WHEN n.state = o.state THEN NULL
                         WHEN n.state = 'SENT' THEN 'accepted'
                         WHEN n.state = 'SUPPRESSED' THEN 'suppressed'
                         WHEN n.state = 'FAILED' THEN 'failed'
                       END AS change) c
              CROSS JOIN LATERAL (
                SELECT CASE WHEN last.outcome = 'USER_ERASED' THEN 'suppressed'
                            WHEN c.change = 'resolved' AND last.outcome NOT LIKE 'MANUAL%' THEN NULL
                            WHEN c.change = 'failed' AND last.outcome = 'TTL_EXPIRED' THEN 'expired'
                            WHEN c.change = 'failed' THEN 'refused'
                            ELSE c.change END AS kind,
                       CASE
                         WHEN last.outcome = 'USER_ERASED' THEN CASE WHEN n.state = 'SUPPRESSED' THEN 'erased'
                                                                     ELSE 'erased_outcome_unknown' END
                         WHEN c.change = 'resolved' THEN CASE n.state WHEN 'SENT' THEN 'marked_sent'
                                                                      WHEN 'FAILED' THEN 'marked_not_sent'
                                                                      ELSE 'send_again' END
                         WHEN c.change = 'suppressed' THEN 'preference_off'
                         WHEN c.change = 'failed' THEN CASE last.outcome WHEN 'TTL_EXPIRED' THEN NULL
                                                                         WHEN 'REJECTED' THEN 'rejected'
                                                                         ELSE 'attempts_exhausted' END
                       END AS reason
                  FROM (SELECT (SELECT a.outcome FROM delivery_attempt a
                                 WHERE c.change IN ('failed', 'suppressed', 'resolved')
                                   AND a.user_id = n.user_id AND a.task_id = n.id
                                   AND a.attempt_no = n.last_attempt_no) AS outcome) last) k
             WHERE k.kind IS NOT NULL
          ) ev
      ) e
      JOIN status_subscription s ON e.kind = ANY (s.kinds)
     ORDER BY e.task_id, e.ord, s.name;
    RETURN NULL;
END
$$;

CREATE TRIGGER delivery_task_status_events AFTER UPDATE ON delivery_task
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION herald_status_events();
