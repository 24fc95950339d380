-- The audit trail (issue 43, SPEC §14): every human act — a decision on a parked task, a test send on a
-- user's behalf, a key rotation, an operator's sign-in and sign-out — one row, written in the transaction
-- of the act. Append-only: the trigger below refuses UPDATE, DELETE and TRUNCATE for every role that
-- does not first disable triggers (which needs the table's owner or a superuser — the application role
-- should be neither; see README "Audit trail").
CREATE TABLE audit_event (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    actor_kind text NOT NULL CHECK (actor_kind IN ('operator', 'token', 'cli')),
    actor_name text NOT NULL CHECK (length(actor_name) BETWEEN 1 AND 128),
    actor_role text NOT NULL CHECK (actor_role IN ('viewer', 'resolver', 'admin')),
    action     text NOT NULL,
    target     text NOT NULL,
    detail     text NOT NULL
);

-- The audit page's filters, newest first.
CREATE INDEX audit_event_actor ON audit_event (actor_name, id);
CREATE INDEX audit_event_action ON audit_event (action, id);
CREATE INDEX audit_event_at ON audit_event (at);

CREATE FUNCTION audit_event_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_event is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_event_no_update_or_delete BEFORE UPDATE OR DELETE ON audit_event
    FOR EACH ROW EXECUTE FUNCTION audit_event_append_only();
CREATE TRIGGER audit_event_no_truncate BEFORE TRUNCATE ON audit_event
    FOR EACH STATEMENT EXECUTE FUNCTION audit_event_append_only();

-- Who made a human decision, on its attempt row (the timeline's "marked sent by NAME", the API's
-- resolution.by). NULL on every other row.
ALTER TABLE delivery_attempt ADD COLUMN decided_by text;
