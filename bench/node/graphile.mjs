// The graphile-worker peer of scripts/bench.sh: N no-op jobs added in bulk to its own database, then
// drained by one runner with batching on (a local queue, batched completions and failures).
// Prints `draining` when the clock starts and `drained N jobs in S s` at the end, the lines herald-bench
// reads.
//
//   node graphile.mjs DATABASE_URL JOBS CONCURRENCY LOCAL_QUEUE
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const [url, jobsArg, concurrencyArg, localQueueArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const localQueue = Number(localQueueArg);

const utils = await makeWorkerUtils({ connectionString: url });
await utils.migrate();
// In bulk, as herald-bench inserts Herald's tasks: one statement per 10,000 jobs.
const chunk = 10_000;
for (let added = 0; added < jobs; added += chunk) {
  const n = Math.min(chunk, jobs - added);
  await utils.withPgClient((client) =>
    client.query(
      `SELECT graphile_worker.add_jobs(array(
         SELECT ROW('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
         FROM generate_series(1, $1)))`,
      [n],
    ),
  );
}
const count = async () =>
  Number(
    (await utils.withPgClient((c) => c.query("SELECT count(*) AS n FROM graphile_worker._private_jobs"))).rows[0].n,
  );
console.error(`graphile-worker: ${await count()} jobs queued`);

// herald-bench measures the CPU from this line on.
console.log("draining");
const started = process.hrtime.bigint();
const runner = await run({
  connectionString: url,
  concurrency,
  noHandleSignals: true,
  pollInterval: 1000,
  taskList: { noop: async () => {} },
  logger: new Logger(() => () => {}),
  preset: {
    worker: {
      localQueue: { size: localQueue },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
});
const deadline = Date.now() + 600_000;
let left = jobs;
while (left > 0 && Date.now() < deadline) {
  await new Promise((r) => setTimeout(r, 20));
  left = await count();
}
const secs = Number(process.hrtime.bigint() - started) / 1e9;
await runner.stop();
await utils.release();
console.log(`drained ${jobs - left} jobs in ${secs.toFixed(3)} s`);
