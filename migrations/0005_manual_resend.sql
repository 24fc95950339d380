-- A third manual resolution (SPEC §3, §6): RESEND — a person checked that a parked task's message did not
-- arrive and asked for it to be sent again. It is recorded as an attempt row like the other two, so the
-- outcome CHECK of 0001 is widened by one code. (0001 is never edited: this replaces its constraint.)
ALTER TABLE delivery_attempt DROP CONSTRAINT outcome_code;
ALTER TABLE delivery_attempt ADD CONSTRAINT outcome_code CHECK (outcome IS NULL OR outcome IN (
    'ACCEPTED', 'ACCEPTED_REPLAY', 'QUERY_FOUND', 'QUERY_NOT_FOUND', 'TIMEOUT', 'IO_ERROR', 'QUERY_FAILED',
    'RETRYABLE_REJECT', 'REJECTED', 'PREF_DISABLED', 'TTL_EXPIRED', 'PREF_DISABLED_UNCERTAIN',
    'TTL_EXPIRED_UNCERTAIN', 'LEASE_EXPIRED', 'MANUAL_SENT', 'MANUAL_FAILED', 'MANUAL_RESEND'));

-- The console's review queue filters parked tasks by channel, oldest first.
CREATE INDEX delivery_task_parked_by_channel ON delivery_task (channel, updated_at)
    WHERE state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL;
-- The console's delivery log finds a task by its reference.
CREATE INDEX IF NOT EXISTS delivery_task_by_reference ON delivery_task (reference);
-- The console's overview counts attempts by outcome over the last hour.
CREATE INDEX delivery_attempt_recent ON delivery_attempt (started_at);
