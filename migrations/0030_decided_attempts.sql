-- The attempts a person wrote (manual resolutions, SPEC §6): the only attempt rows with a note. The console's
-- overview counts the tasks a person marked sent or not sent apart from the channel's own answers
-- (`ReadModels::decided_counts`, adapters-postgres/src/views.rs), and finds those rows here instead of
-- reading every attempt. Ordinary attempts have no note, so they add no entry; the finish's UPDATE never
-- writes `note` or `task_id`, so it stays a HOT update (0019).
CREATE INDEX delivery_attempt_decided ON delivery_attempt (task_id) WHERE note IS NOT NULL;
