-- Status events: an erasure's close of an uncertain delivery is told whoever closes it.
--
-- 0035 told `suppressed`, `erased_outcome_unknown` when a delivery whose outcome was unknown went from
-- UNKNOWN (a retry or a query scheduled) to UNKNOWN, unparked and no longer due. The claim closes such a
-- delivery too when it takes over an expired lease (the holder died mid-call) and finds the user erased:
-- SENDING to UNKNOWN, unparked, no longer due, with a USER_ERASED attempt — and that change told nothing
-- (the soak's ledger found it: a settled task without the event of its outcome). No other change leads
-- from SENDING to an UNKNOWN task that is neither parked nor due: a lease takeover otherwise schedules a
-- query or a resend, or parks. The function is 0035's with that one condition widened.
CREATE OR REPLACE FUNCTION herald_status_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM status_subscription) THEN
        RETURN NULL;
    END IF;
    INSERT INTO status_event (subscription, user_id, notification_id, task_id, channel, attempt_no, kind,
                              reason, actor, channel_message_id, occurred_at, due_at)
    SELECT s.name, e.user_id, e.notification_id, e.task_id, e.channel, e.attempt_no, e.kind,
           e.reason, e.actor, e.channel_message_id, e.occurred_at, e.occurred_at
      FROM (
        SELECT n.user_id, n.notification_id, n.id AS task_id, n.channel, ev.*
          FROM new_rows n
          JOIN old_rows o ON o.user_id = n.user_id AND o.id = n.id
          CROSS JOIN LATERAL (
            SELECT 1 AS ord, 'sent_again'::text AS kind, a.attempt_no, NULL::text AS reason, NULL::text AS actor,
                   NULL::text AS channel_message_id, a.started_at AS occurred_at
              FROM delivery_attempt a
             WHERE o.state = 'SENDING' AND o.last_attempt_no > 1
               AND (n.state <> 'SENDING' OR n.attempt_token IS DISTINCT FROM o.attempt_token)
               AND a.user_id = o.user_id AND a.task_id = o.id AND a.attempt_no = o.last_attempt_no
               AND a.action = 'SEND'
            UNION ALL
            SELECT 2, k.kind, n.last_attempt_no, k.reason, k.actor,
                   CASE WHEN k.kind = 'accepted' THEN n.provider_msg_id END, n.updated_at
              FROM (SELECT
                      herald_task_parked(o.state, o.needs_review, o.next_attempt_at) AS was_parked,
                      herald_task_parked(n.state, n.needs_review, n.next_attempt_at) AS is_parked) p
              CROSS JOIN LATERAL (
                SELECT CASE
                         WHEN p.was_parked AND NOT p.is_parked THEN 'resolved'
                         WHEN p.is_parked AND NOT p.was_parked THEN 'parked'
                         WHEN n.state = 'UNKNOWN' AND o.state IN ('UNKNOWN', 'SENDING') AND NOT p.is_parked
                              AND n.next_attempt_at IS NULL AND o.next_attempt_at IS NOT NULL THEN 'closed'
                         WHEN n.state = o.state THEN NULL
                         WHEN n.state = 'SENT' THEN 'accepted'
                         WHEN n.state = 'SUPPRESSED' THEN 'suppressed'
                         WHEN n.state = 'FAILED' THEN 'failed'
                       END AS change) c
              CROSS JOIN LATERAL (
                SELECT CASE WHEN last.outcome = 'USER_ERASED' THEN 'suppressed'
                            WHEN c.change = 'closed' THEN NULL
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
                       END AS reason,
                       CASE WHEN c.change = 'resolved' AND last.outcome LIKE 'MANUAL%' THEN last.decided_by END AS actor
                  FROM (SELECT 1) one
                  LEFT JOIN LATERAL (
                    SELECT a.outcome, a.decided_by FROM delivery_attempt a
                     WHERE c.change IN ('failed', 'suppressed', 'resolved', 'closed')
                       AND a.user_id = n.user_id AND a.task_id = n.id
                       AND a.attempt_no = n.last_attempt_no) last ON true) k
             WHERE k.kind IS NOT NULL
          ) ev
      ) e
      JOIN status_subscription s
        ON e.kind = ANY (s.kinds)
       AND (s.service_tokens IS NULL
            OR (SELECT nt.submitted_by FROM notification nt
                 WHERE nt.user_id = e.user_id AND nt.id = e.notification_id) = ANY (s.service_tokens))
     ORDER BY e.task_id, e.ord, s.name;
    RETURN NULL;
END
$$;
