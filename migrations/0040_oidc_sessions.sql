-- Console sessions opened by signing in with the identity provider (OpenID Connect, issue 43). Such a
-- session is bound to the person's subject at the provider (`operator_subject`; `credential_digest` is the
-- SHA-256 of `oidc\0{subject}`, so one person's sessions are found together), keeps the name and role they
-- signed in with (`operator_name`, `operator_role`: what the session list shows; the console asks the
-- provider again at every request and acts on its answer) and the access token it asks with
-- (`provider_grant`). That token lets its holder read the person's claims at the provider until it expires;
-- it signs nobody in to Herald (the cookie's id is only here as its SHA-256).
ALTER TABLE console_session
    ADD COLUMN operator_subject text,
    ADD COLUMN operator_name text,
    ADD COLUMN operator_role text CHECK (operator_role IN ('viewer', 'resolver', 'admin')),
    ADD COLUMN provider_grant text;

ALTER TABLE console_session DROP CONSTRAINT console_session_credential_kind_check;
ALTER TABLE console_session ADD CONSTRAINT console_session_credential_kind_check
    CHECK (credential_kind IN ('admin_token', 'user_token', 'sign_in_link', 'oidc'));
ALTER TABLE console_session ADD CONSTRAINT console_session_oidc_check
    CHECK ((credential_kind = 'oidc') = (operator_subject IS NOT NULL AND operator_name IS NOT NULL
        AND operator_role IS NOT NULL AND provider_grant IS NOT NULL));
ALTER TABLE console_session ADD CONSTRAINT console_session_oidc_operator_check
    CHECK (credential_kind <> 'oidc' OR role = 'operator');
