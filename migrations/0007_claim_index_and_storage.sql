-- The hot path's storage (the throughput work).
--
-- The claim orders runnable tasks by (next_attempt_at, id): with the id in the index the order is read
-- from it directly, with no sort of equal due times (a backlog created in one burst shares them).
DROP INDEX delivery_task_runnable;
CREATE INDEX delivery_task_runnable ON delivery_task (next_attempt_at, id) WHERE next_attempt_at IS NOT NULL;

-- Every task row is updated two or more times in its life (claim, finish, retries). Free space in each
-- page lets a new row version stay on its page (a HOT update, when no indexed column changes, and a
-- cheaper one when it does); frequent vacuum keeps the dead versions from piling up under load.
ALTER TABLE delivery_task SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);
-- Attempt rows are inserted once and updated once (the finish): vacuum also after inserts, so the
-- visibility map stays current for index-only reads of the recent-outcomes view.
ALTER TABLE delivery_attempt SET (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.05,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);
