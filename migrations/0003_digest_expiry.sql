-- A digest task stands for several events; it expires with the last of them, not with the event that
-- happened to open it (whose TTL may end long before the digest is due). NULL for ordinary tasks: they
-- expire with their notification.
ALTER TABLE delivery_task ADD COLUMN expires_at timestamptz;
