-- Console sessions, server-side (issue 40): the cookie holds a random id; this table holds its SHA-256
-- (`id_digest`), never the id, so a copy of the table signs nobody in. A session is bound to the
-- credential that opened it (`credential_kind`, its digest, a user token's key id and expiry): the console
-- ends it at the next request once that credential is no longer accepted (herald_domain::judge_session).
-- An ended session keeps its row, with when and why (`ended_at`, `ended_reason`), until it is removed a
-- week later by the next sign-in.
CREATE TABLE console_session (
    id_digest             bytea PRIMARY KEY CHECK (length(id_digest) = 32),
    user_id               text,
    role                  text NOT NULL CHECK (role IN ('operator', 'user')),
    credential_kind       text NOT NULL CHECK (credential_kind IN ('admin_token', 'user_token', 'sign_in_link')),
    credential_digest     bytea NOT NULL CHECK (length(credential_digest) = 32),
    credential_key        text,
    credential_expires_at timestamptz,
    csrf                  text NOT NULL,
    created_at            timestamptz NOT NULL,
    last_seen_at          timestamptz NOT NULL,
    expires_at            timestamptz NOT NULL,
    ended_at              timestamptz,
    ended_reason          text,
    CHECK ((role = 'user') = (user_id IS NOT NULL)),
    CHECK ((credential_kind = 'user_token') = (credential_key IS NOT NULL AND credential_expires_at IS NOT NULL)),
    CHECK ((ended_at IS NULL) = (ended_reason IS NULL))
);

-- A person's sessions (the list they see, and "end every session of this user").
CREATE INDEX console_session_user ON console_session (user_id, created_at) WHERE ended_at IS NULL;
-- An admin token's sessions.
CREATE INDEX console_session_credential ON console_session (credential_digest) WHERE ended_at IS NULL;
-- What the clean-up removes.
CREATE INDEX console_session_expiry ON console_session (expires_at);

-- One-time sign-in links (`/console/login/user?code=…`): the SHA-256 of the code, its user, when it
-- expires and when it was used. A link opens one session, once, before it expires.
CREATE TABLE console_sign_in_link (
    code_digest bytea PRIMARY KEY CHECK (length(code_digest) = 32),
    user_id     text NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);

CREATE INDEX console_sign_in_link_expiry ON console_sign_in_link (expires_at);
