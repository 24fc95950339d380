// The pg-boss peer of scripts/bench.sh: N no-op jobs inserted in bulk into its own database, then drained
// by WORKERS `work` loops fetching BATCH jobs each (completed as a batch when the handler returns).
// Prints `draining` when the clock starts and `drained N jobs in S s` at the end, the lines herald-bench
// reads.
//
//   node pgboss.mjs DATABASE_URL JOBS WORKERS BATCH
import PgBoss from "pg-boss";

const [url, jobsArg, workersArg, batchArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const workers = Number(workersArg);
const batchSize = Number(batchArg);
const queue = "bench";

const boss = new PgBoss({ connectionString: url, max: workers + 4, supervise: false, schedule: false });
boss.on("error", (e) => console.error(`pg-boss: ${e.message}`));
await boss.start();
await boss.createQueue(queue);
const chunk = 10_000;
for (let added = 0; added < jobs; added += chunk) {
  const n = Math.min(chunk, jobs - added);
  await boss.insert(Array.from({ length: n }, () => ({ name: queue, data: {} })));
}
const db = boss.getDb();
const done = async () =>
  Number(
    (await db.executeSql("SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'", [queue]))
      .rows[0].n,
  );
console.error(`pg-boss: ${jobs} jobs queued`);

// herald-bench measures the CPU from this line on.
console.log("draining");
const started = process.hrtime.bigint();
for (let w = 0; w < workers; w++) {
  await boss.work(queue, { batchSize, pollingIntervalSeconds: 0.5 }, async () => {});
}
const deadline = Date.now() + 600_000;
let finished = 0;
while (finished < jobs && Date.now() < deadline) {
  await new Promise((r) => setTimeout(r, 20));
  finished = await done();
}
const secs = Number(process.hrtime.bigint() - started) / 1e9;
await boss.stop({ graceful: false, wait: false });
console.log(`drained ${finished} jobs in ${secs.toFixed(3)} s`);
process.exit(0);
