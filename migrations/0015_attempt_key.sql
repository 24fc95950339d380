-- An attempt is known by its task and its number: `(user_id, task_id, attempt_no)` becomes the primary key,
-- and the serial `id` (0001), which nothing reads, goes.
--
-- Every attempt row wrote four index entries: the serial key, the token, the number and the start time.
-- The serial key served no query: attempts are found by their task and number (the views, the last
-- outcome) or by their token (the finish). One entry fewer per attempt, and no sequence, on the hottest
-- insert Herald has. Measured with pgbench running Herald's claim and finish (`bench/pgbench/`), three
-- alternating pairs of 20 s runs: 1.04-1.06x the tasks per second, the claim's write 0.070-0.073 ms per
-- task against 0.074-0.082.
--
-- Building the new key reads the whole table once, under this migration's lock: on a table of millions
-- of attempts, seconds to a minute, during which no attempt is written.
ALTER TABLE delivery_attempt DROP CONSTRAINT delivery_attempt_pkey;
ALTER TABLE delivery_attempt DROP COLUMN id;
ALTER TABLE delivery_attempt DROP CONSTRAINT delivery_attempt_number;
ALTER TABLE delivery_attempt ADD CONSTRAINT delivery_attempt_pkey PRIMARY KEY (user_id, task_id, attempt_no);
