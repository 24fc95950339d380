-- Time-ordered UUIDs for the keys a delivery writes into big indexes.
--
-- A task's reference (0002) and an attempt's token were random UUIDs (version 4). Every task update that
-- is not HOT adds an entry for the reference to `delivery_task_by_reference`, and with the table holding
-- millions of finished tasks that entry lands on a random leaf of a big index: after each checkpoint the
-- first change of such a leaf writes the whole page to the WAL. Measured by `herald-bench --history`
-- (bench/src/wal.rs names the relations whose pages were imaged): with 10 M finished tasks that index was
-- the largest source of full-page images of a drain.
--
-- A version 7 UUID (RFC 9562) starts with the Unix time in milliseconds and keeps 74 random bits, so
-- values minted together sort together: the entries of the tasks being delivered now share the right-hand
-- leaves of the index, as with a serial key, and stay as unguessable and as unique beyond one database as
-- before. Existing values are kept: a reference is a channel's idempotency key and never changes.
--
-- PostgreSQL 18 has `uuidv7()`; this is the same layout for the versions Herald supports: a version 4
-- UUID with its first 48 bits replaced by the time and its version nibble set to 7 (0100 -> 0111; the
-- variant bits are already those of RFC 9562).
CREATE FUNCTION herald_uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

ALTER TABLE delivery_task ALTER COLUMN reference SET DEFAULT herald_uuid_v7();
