//! WAL written over a phase: its size from the insert position (`pg_current_wal_insert_lsn`), and what it
//! held by resource manager from `pg_walinspect` (PostgreSQL 15 and later) where the extension can be
//! created — in particular how much of it were full-page images, which the first change of each page after
//! a checkpoint writes, and which a drain touching many different pages (a big table, an index keyed by a
//! random value) pays for with every such page.

use sqlx::PgPool;

/// A WAL position, as text (`0/1A2B3C4D`).
#[derive(Clone, Debug)]
pub struct Mark(String);

/// Where WAL insertion is now.
///
/// # Errors
/// When the query fails.
pub async fn mark(pool: &PgPool) -> anyhow::Result<Mark> {
    Ok(Mark(sqlx::query_scalar("SELECT pg_current_wal_insert_lsn()::text").fetch_one(pool).await?))
}

/// WAL bytes of one resource manager (`Heap`, `Btree`, `Transaction`, …).
#[derive(Clone, Debug)]
pub struct Kind {
    pub name: String,
    pub records: i64,
    /// The records without their full-page images.
    pub record_bytes: f64,
    pub fpi_bytes: f64,
}

/// The full-page images of one relation of the measured database.
#[derive(Clone, Debug)]
pub struct Imaged {
    /// The table or index (its relfilenode when it no longer exists).
    pub relation: String,
    pub pages: i64,
    /// Image bytes: the page less its unused middle (the "hole" PostgreSQL leaves out).
    pub bytes: f64,
    /// Where the imaged pages lie in the relation as it is at the end, as fractions of its size (the 10th,
    /// 50th and 90th percentile: near 1 for pages added lately, spread for pages all over it).
    pub position: [f64; 3],
}

/// WAL written between two marks.
#[derive(Clone, Debug)]
pub struct Use {
    pub bytes: f64,
    /// By resource manager, largest first; empty when `pg_walinspect` is not available.
    pub kinds: Vec<Kind>,
    /// Full-page images by relation, largest first (at most [`RELATIONS`]); empty when not available.
    pub imaged: Vec<Imaged>,
}

/// A row of [`IMAGED`]: relation, pages, bytes, and the three percentiles of the pages' positions.
type ImageRow = (String, i64, f64, Vec<f64>);

/// How many relations [`Use::imaged`] names.
pub const RELATIONS: i64 = 6;

impl Use {
    /// Bytes of full-page images, when known.
    #[must_use]
    pub fn fpi_bytes(&self) -> Option<f64> {
        (!self.kinds.is_empty()).then(|| self.kinds.iter().map(|k| k.fpi_bytes).sum())
    }

    /// One line: bytes per `unit`, and how they split.
    #[must_use]
    pub fn describe(&self, per: u64, unit: &str) -> String {
        let per = per.max(1) as f64;
        let mut line = format!("{:.0} bytes of WAL per {unit}", self.bytes / per);
        if let Some(fpi) = self.fpi_bytes() {
            line.push_str(&format!(" ({:.0} of them full-page images)", fpi / per));
            let kinds: Vec<String> = self
                .kinds
                .iter()
                .take(4)
                .map(|k| {
                    format!(
                        "{} {:.1} records, {:.0} + {:.0} B",
                        k.name,
                        k.records as f64 / per,
                        k.record_bytes / per,
                        k.fpi_bytes / per
                    )
                })
                .collect();
            line.push_str(&format!("; by kind per {unit} (records, record + page bytes): {}", kinds.join("; ")));
        }
        if !self.imaged.is_empty() {
            let relations: Vec<String> = self
                .imaged
                .iter()
                .map(|r| {
                    let [p10, p50, p90] = r.position;
                    format!(
                        "{} {:.2} pages, {:.0} B (at {p10:.3}/{p50:.3}/{p90:.3} of it)",
                        r.relation,
                        r.pages as f64 / per,
                        r.bytes / per
                    )
                })
                .collect();
            line.push_str(&format!(
                "; full-page images by relation per {unit} (where in the relation, p10/p50/p90): {}",
                relations.join("; ")
            ));
        }
        line
    }
}

/// Full-page images between two positions, by relation of the current database: each image is a block
/// reference marked `(FPW…)` in `pg_get_wal_records_info`'s `block_ref` text (PostgreSQL 15's format:
/// `rel SPC/DB/FILENODE fork main blk N (FPW); hole: offset: O, length: L`).
const IMAGED: &str = "\
    WITH image AS ( \
      SELECT COALESCE(c.relname, m[2]) AS relation, 8192 - m[4]::int AS bytes, \
        m[3]::float8 / greatest(pg_relation_size(c.oid) / 8192, 1) AS position \
      FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) r \
      CROSS JOIN LATERAL regexp_matches(r.block_ref, \
        'rel \\d+/(\\d+)/(\\d+) fork \\w+ blk (\\d+) \\(FPW[^)]*\\); hole: offset: \\d+, length: (\\d+)', 'g') m \
      LEFT JOIN pg_class c ON c.relfilenode = m[2]::oid \
      WHERE r.fpi_length > 0 \
        AND m[1]::oid = (SELECT oid FROM pg_database WHERE datname = current_database())) \
    SELECT relation, count(*) AS pages, sum(bytes)::float8 AS bytes, \
      percentile_cont(ARRAY[0.1, 0.5, 0.9]) WITHIN GROUP (ORDER BY position) AS position \
    FROM image GROUP BY relation ORDER BY 3 DESC LIMIT $3";

/// Makes `pg_walinspect` available in the database of `pool` if it can; false when it cannot (an older
/// server, no contrib package, no right to create it), and then [`since`] reports only the size.
pub async fn inspect(pool: &PgPool) -> bool {
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_walinspect").execute(pool).await.is_ok()
}

/// WAL written from `start` to now. `inspected` asks `pg_walinspect` for the split; a failure there
/// leaves only the size.
///
/// # Errors
/// When the size cannot be read.
pub async fn since(pool: &PgPool, start: &Mark, inspected: bool) -> anyhow::Result<Use> {
    let (end, bytes): (String, f64) = sqlx::query_as(
        "SELECT pg_current_wal_flush_lsn()::text, \
                pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::text::pg_lsn)::float8",
    )
    .bind(&start.0)
    .fetch_one(pool)
    .await?;
    let mut kinds = Vec::new();
    if inspected {
        // pg_walinspect reads only flushed WAL: the split runs to the flush position, which trails the
        // insert position by at most what was written since the last commit.
        let rows: Result<Vec<(String, i64, i64, i64)>, _> = sqlx::query_as(
            "SELECT \"resource_manager/record_type\", count, record_size, fpi_size \
             FROM pg_get_wal_stats($1::text::pg_lsn, $2::text::pg_lsn) WHERE count > 0 \
             ORDER BY combined_size DESC",
        )
        .bind(&start.0)
        .bind(&end)
        .fetch_all(pool)
        .await;
        match rows {
            Ok(rows) => {
                kinds = rows
                    .into_iter()
                    .map(|(name, records, record, fpi)| Kind {
                        name,
                        records,
                        record_bytes: record as f64,
                        fpi_bytes: fpi as f64,
                    })
                    .collect();
            }
            Err(error) => eprintln!("herald-bench: cannot inspect the WAL ({error}); only its size is reported"),
        }
    }
    let mut imaged = Vec::new();
    if !kinds.is_empty() {
        let rows: Result<Vec<ImageRow>, _> =
            sqlx::query_as(IMAGED).bind(&start.0).bind(&end).bind(RELATIONS).fetch_all(pool).await;
        match rows {
            Ok(rows) => {
                imaged = rows
                    .into_iter()
                    .map(|(relation, pages, bytes, at)| {
                        let position = [0, 1, 2].map(|i| at.get(i).copied().unwrap_or(f64::NAN));
                        Imaged { relation, pages, bytes, position }
                    })
                    .collect();
            }
            Err(error) => eprintln!("herald-bench: cannot split the WAL's page images by relation ({error})"),
        }
    }
    Ok(Use { bytes, kinds, imaged })
}
