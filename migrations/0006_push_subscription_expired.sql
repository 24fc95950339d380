-- Web Push (SPEC §9, issue 13): a push service answers 404 or 410 when a subscription no longer exists
-- (RFC 8030 §7.3). Such a destination can never be reached again, so the user's channel is switched off
-- and marked "subscription expired" until the user gives a new subscription (`PUT …/channels/{c}` with a
-- new destination clears the mark; adapters-postgres/src/prefs.rs).
--
-- The domain decides (herald_domain::classify::classify_webpush: REJECTED with the detail
-- WEBPUSH_SUBSCRIPTION_EXPIRED, "subscription expired …"); this trigger stores the consequence when the
-- fenced finish writes that observation on the attempt row — as its outcome, or as a late outcome of a
-- superseded attempt (the subscription is gone either way). `herald-tests` checks that the text below is
-- the domain's constant.
--
-- A subscription stored after the attempt started is not the one the push service refused: only a
-- preference last changed before the attempt's start is switched off.
ALTER TABLE channel_pref ADD COLUMN destination_expired_at timestamptz;

CREATE FUNCTION herald_push_subscription_expired() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE channel_pref p
       SET enabled = false,
           destination_expired_at = COALESCE(p.destination_expired_at, now()),
           version = p.version + 1,
           updated_at = now()
      FROM delivery_task t
     WHERE t.user_id = NEW.user_id AND t.id = NEW.task_id
       AND p.user_id = t.user_id AND p.channel = t.channel
       AND p.destination IS NOT NULL
       AND p.updated_at <= NEW.started_at;
    RETURN NULL;
END
$$;

CREATE TRIGGER delivery_attempt_push_subscription_expired
    AFTER UPDATE OF outcome, late_outcome ON delivery_attempt
    FOR EACH ROW
    WHEN ((NEW.outcome = 'REJECTED' AND OLD.outcome IS DISTINCT FROM NEW.outcome
           AND NEW.detail LIKE 'subscription expired%')
       OR (NEW.late_outcome = 'REJECTED' AND OLD.late_outcome IS DISTINCT FROM NEW.late_outcome
           AND NEW.late_detail LIKE 'subscription expired%'))
    EXECUTE FUNCTION herald_push_subscription_expired();
