-- The ciphertext a test send was accepted for (SPEC §9). Confirming verifies the destination only while
-- it is still the stored one, so a confirmation can never verify a destination that was changed after
-- the test prompt went out.
ALTER TABLE channel_pref ADD COLUMN tested_destination bytea;
