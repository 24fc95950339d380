-- Erasure of a user (SPEC §13): the one record kept of the request, the attempt outcome that settles a
-- task because its user was erased, and the guard that keeps an erased user's data from coming back.
--
-- `user_erasure` holds one row per erased user: who asked and when, what each boundary removed and when.
-- `user_id` is the user's own name until the tombstone boundary, which blanks it; `user_digest` (SHA-256
-- of the id) stays, so a later submission for the same id is still recognised and refused, while the
-- record no longer names the person (pseudonymous: whoever already knows the id can recognise it).
CREATE TABLE user_erasure (
    user_digest bytea PRIMARY KEY CHECK (length(user_digest) = 32),
    user_id text UNIQUE,
    requested_at timestamptz NOT NULL,
    requested_by text NOT NULL,
    -- What the erasure's own transaction did.
    settled_tasks integer NOT NULL DEFAULT 0,
    released_reviews integer NOT NULL DEFAULT 0,
    destroyed_destinations integer NOT NULL DEFAULT 0,
    -- The three boundaries (issue 42 step 2): when each ran and what it removed.
    content_removed_at timestamptz,
    content_removed integer,
    records_removed_at timestamptz,
    records_removed integer,
    tombstoned_at timestamptz,
    CHECK ((tombstoned_at IS NULL) = (user_id IS NOT NULL))
);

ALTER TABLE delivery_attempt DROP CONSTRAINT outcome_code;
ALTER TABLE delivery_attempt ADD CONSTRAINT outcome_code CHECK (outcome IS NULL OR outcome IN (
    'ACCEPTED', 'ACCEPTED_REPLAY', 'QUERY_FOUND', 'QUERY_NOT_FOUND', 'TIMEOUT', 'IO_ERROR', 'QUERY_FAILED',
    'RETRYABLE_REJECT', 'REJECTED', 'PREF_DISABLED', 'TTL_EXPIRED', 'PREF_DISABLED_UNCERTAIN',
    'TTL_EXPIRED_UNCERTAIN', 'LEASE_EXPIRED', 'MANUAL_SENT', 'MANUAL_FAILED', 'MANUAL_RESEND',
    'USER_ERASED')) NOT VALID;
ALTER TABLE delivery_attempt VALIDATE CONSTRAINT outcome_code;

-- The guard. Every statement that writes notifications or channel preferences takes, per user it writes
-- for, a shared advisory lock that the erasure takes exclusively before it records itself; then, in a
-- statement of its own (a fresh snapshot), it looks for an erasure of those users — by digest, so a
-- tombstone still refuses — and refuses with SQLSTATE HR410. Either the writer came first (the erasure waits for its commit and then sees and
-- settles what it wrote), or the erasure came first (the writer waits, then sees the erasure and writes
-- nothing): no interleaving leaves a notification, task or destination written after an erasure
-- committed. One statement-level trigger per table: a batch of submissions pays it once.
CREATE FUNCTION herald_refuse_erased() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('herald erasure/' || u.user_id, 0))
       FROM (SELECT DISTINCT user_id FROM new_rows ORDER BY user_id) u;
    IF EXISTS (SELECT 1 FROM new_rows n JOIN user_erasure e ON e.user_digest = sha256(convert_to(n.user_id, 'UTF8'))) THEN
        RAISE EXCEPTION 'the user is erased' USING ERRCODE = 'HR410';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER notification_refuse_erased AFTER INSERT ON notification
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION herald_refuse_erased();
CREATE TRIGGER channel_pref_refuse_erased_insert AFTER INSERT ON channel_pref
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION herald_refuse_erased();
CREATE TRIGGER channel_pref_refuse_erased_update AFTER UPDATE ON channel_pref
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION herald_refuse_erased();
