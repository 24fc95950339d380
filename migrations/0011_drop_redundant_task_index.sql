-- `delivery_task_by_notification (notification_id)` serves no query: every look-up of a notification's
-- tasks names its user, and `delivery_task_one_per_channel (user_id, notification_id, channel)` serves
-- those and the foreign key's checks. Task rows are updated twice per delivery and those updates cannot
-- be HOT (they change `next_attempt_at`, which the claim index holds), so each one wrote an entry into
-- this index too.
DROP INDEX delivery_task_by_notification;
