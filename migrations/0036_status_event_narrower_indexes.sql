-- Status events (issue 46): fewer index entries per event, for the drain. Until now every event entered two
-- indexes when written (the primary key on `id`, the pending index on `seq`) and two more when delivered (a
-- new primary-key entry for the non-HOT update, and since `0035` the index of delivered events). The primary
-- key is dropped: `id` (the `webhook-id`, `herald_uuid_v7()`) and `seq` (an identity) are unique by
-- construction, the dispatcher addresses a pending event by `seq` through the pending index (or by its row
-- while it holds it locked), and nothing looks an event up by `id`. Now an event enters one index when
-- written (pending) and one when delivered (delivered) or parked (parked).
ALTER TABLE status_event DROP CONSTRAINT status_event_pkey;
