-- Herald core schema (SPEC §2).
--
-- Every per-user table carries user_id, and every unique key and foreign key of such a table includes
-- it, so the schema can later be distributed by user_id (SPEC §1). Identity columns are unique by
-- construction; lookups by id alone use plain indexes.

CREATE TABLE channel_pref (
    user_id      text        NOT NULL,
    channel      text        NOT NULL,
    enabled      boolean     NOT NULL,
    -- key id || nonce || AES-256-GCM ciphertext, bound to (user_id, channel) (SPEC §8). Never plaintext.
    destination  bytea,
    verified_at  timestamptz,
    version      bigint      NOT NULL DEFAULT 1,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, channel)
);

CREATE TABLE notification (
    id           bigint GENERATED ALWAYS AS IDENTITY,
    user_id      text        NOT NULL,
    event_key    text        NOT NULL,
    body         text        NOT NULL,
    thread_key   text,
    max_attempts integer     CHECK (max_attempts IS NULL OR max_attempts > 0),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (user_id, id),
    -- The only basis of logical deduplication.
    CONSTRAINT notification_user_event_key UNIQUE (user_id, event_key)
);
CREATE INDEX notification_by_id ON notification (id);

-- Written in the same transaction as the notification, before any external call.
CREATE TABLE inbox_item (
    user_id         text        NOT NULL,
    notification_id bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    read_at         timestamptz,
    PRIMARY KEY (user_id, notification_id),
    FOREIGN KEY (user_id, notification_id) REFERENCES notification (user_id, id)
);
CREATE INDEX inbox_item_newest ON inbox_item (user_id, created_at DESC, notification_id DESC);

CREATE TABLE delivery_task (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    user_id           text        NOT NULL,
    notification_id   bigint      NOT NULL,
    channel           text        NOT NULL,
    state             text        NOT NULL
        CHECK (state IN ('PENDING', 'SENDING', 'SENT', 'FAILED', 'SUPPRESSED', 'UNKNOWN')),
    -- The current holder: set while SENDING, cleared when an attempt finishes.
    attempt_token     uuid,
    lease_owner       text,
    lease_until       timestamptz,
    -- An earlier attempt may have been accepted.
    outcome_uncertain boolean     NOT NULL DEFAULT false,
    -- Start of the latest attempt that may have been accepted (query consistency, SPEC §5).
    uncertain_since   timestamptz,
    -- Automatic scheduling stopped; waiting for a human.
    needs_review      boolean     NOT NULL DEFAULT false,
    -- When a worker should look at the task next; NULL = never picked again. While SENDING it is the
    -- end of the lease, so one index serves both halves of the claim predicate.
    next_attempt_at   timestamptz,
    attempt_count     integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    -- The budget: the notification's max_attempts when given, else the channel's, fixed at creation.
    max_attempts      integer     NOT NULL CHECK (max_attempts > 0),
    -- Attempt rows written so far (calls, claim-time decisions and manual resolutions).
    last_attempt_no   integer     NOT NULL DEFAULT 0,
    provider_msg_id   text,
    last_error        text,
    -- Digests (SPEC §7): thread_key of the notification; digest_count is NULL for ordinary tasks and
    -- the number of merged events for a digest task.
    thread_key        text,
    digest_count      integer     CHECK (digest_count IS NULL OR digest_count > 0),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    PRIMARY KEY (user_id, id),
    CONSTRAINT delivery_task_one_per_channel UNIQUE (user_id, notification_id, channel),
    FOREIGN KEY (user_id, notification_id) REFERENCES notification (user_id, id),
    CONSTRAINT sending_holds_lease_and_token
        CHECK (state <> 'SENDING' OR (attempt_token IS NOT NULL AND lease_until IS NOT NULL AND lease_owner IS NOT NULL)),
    CONSTRAINT terminal_is_never_scheduled
        CHECK (state NOT IN ('SENT', 'FAILED', 'SUPPRESSED') OR next_attempt_at IS NULL),
    CONSTRAINT review_only_when_unknown CHECK (NOT needs_review OR state = 'UNKNOWN')
);
CREATE INDEX delivery_task_by_id ON delivery_task (id);
CREATE INDEX delivery_task_by_notification ON delivery_task (notification_id);
-- Serves the claim query: runnable (or lease-expiring) tasks only, in due order.
CREATE INDEX delivery_task_runnable ON delivery_task (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
-- Serves the review list.
CREATE INDEX delivery_task_parked ON delivery_task (updated_at)
    WHERE state = 'UNKNOWN' AND needs_review AND next_attempt_at IS NULL;
-- Serves the digest window look-up.
CREATE INDEX delivery_task_thread ON delivery_task (user_id, thread_key, channel, created_at)
    WHERE thread_key IS NOT NULL;

-- One row per attempt, never overwritten: the task says how much Herald knows, the attempts keep every
-- observation as it was seen.
CREATE TABLE delivery_attempt (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    user_id       text        NOT NULL,
    task_id       bigint      NOT NULL,
    attempt_no    integer     NOT NULL,
    attempt_token uuid        NOT NULL,
    -- NULL for claim-time decisions and manual resolutions, which call no channel.
    action        text        CHECK (action IN ('SEND', 'QUERY')),
    lease_owner   text,
    outcome       text,
    -- An observation that arrived after the attempt had been superseded.
    late_outcome  text,
    detail        text,
    late_detail   text,
    note          text,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    late_at       timestamptz,
    PRIMARY KEY (user_id, id),
    CONSTRAINT delivery_attempt_token UNIQUE (user_id, attempt_token),
    CONSTRAINT delivery_attempt_number UNIQUE (user_id, task_id, attempt_no),
    FOREIGN KEY (user_id, task_id) REFERENCES delivery_task (user_id, id),
    CONSTRAINT outcome_code CHECK (outcome IS NULL OR outcome IN (
        'ACCEPTED', 'ACCEPTED_REPLAY', 'QUERY_FOUND', 'QUERY_NOT_FOUND', 'TIMEOUT', 'IO_ERROR', 'QUERY_FAILED',
        'RETRYABLE_REJECT', 'REJECTED', 'PREF_DISABLED', 'TTL_EXPIRED', 'PREF_DISABLED_UNCERTAIN',
        'TTL_EXPIRED_UNCERTAIN', 'LEASE_EXPIRED', 'MANUAL_SENT', 'MANUAL_FAILED')),
    CONSTRAINT late_outcome_code CHECK (late_outcome IS NULL OR late_outcome IN (
        'ACCEPTED', 'ACCEPTED_REPLAY', 'QUERY_FOUND', 'QUERY_NOT_FOUND', 'TIMEOUT', 'IO_ERROR', 'QUERY_FAILED',
        'RETRYABLE_REJECT', 'REJECTED'))
);

-- A notification whose external prompt on a channel was merged into another notification's digest task.
CREATE TABLE digest_member (
    user_id         text   NOT NULL,
    notification_id bigint NOT NULL,
    channel         text   NOT NULL,
    digest_task_id  bigint NOT NULL,
    PRIMARY KEY (user_id, notification_id, channel),
    FOREIGN KEY (user_id, notification_id) REFERENCES notification (user_id, id),
    FOREIGN KEY (user_id, digest_task_id) REFERENCES delivery_task (user_id, id)
);

-- Global egress interval (SPEC §7): the last actual call per channel, locked in the claim transaction.
-- Not per user: one row per channel for the whole installation.
CREATE TABLE channel_egress (
    channel      text PRIMARY KEY,
    last_call_at timestamptz
);
