-- Retention and the boundaries after an erasure (SPEC §13): one lease row per periodic job, so that of N
-- processes running workers one purges at a time. A holder keeps it until `until`; another takes it over
-- only after that, so a purge that dies leaves the job to the next process within one lease.
CREATE TABLE lifecycle_lease (
    job text PRIMARY KEY,
    holder text NOT NULL,
    until timestamptz NOT NULL
);
