-- The name a notification is known by outside Herald (API, console, CLI): a random UUID, so that ids in
-- answers cannot be counted through. The serial `id` stays the internal key (joins, task rows). Existing
-- rows get a value when the column is added (the default is evaluated per row).
ALTER TABLE notification ADD COLUMN public_id uuid NOT NULL DEFAULT gen_random_uuid();

-- Every outside lookup goes through it.
CREATE UNIQUE INDEX notification_public_id ON notification (public_id);
