//! `courier bench scale`: does a claim cost the same with a million stores?
//!
//! Against a PostgreSQL cluster of its own (`synchronous_commit=off`: the
//! claim's cost, not the disk's), one database per row: idle stores
//! registered by SQL (served a day ago, no work) and a backlog spread over
//! the active stores. Claimers claim (fair, with the intent written) and
//! settle what they claimed at once, as a worker whose provider answers at
//! once would. Each claim's round trip is timed (the claim statement and,
//! when it has stores to sweep, the sweep).
//!
//! Rows: stores registered 100, 10,000, 100,000 and 1,000,000 with 100
//! active; then 10,000 active stores, each with a backlog, and the same
//! number of actions; then the first row's shape holding 1,000,000 more
//! actions scheduled for tomorrow (spread over its active stores). Targets:
//! the drain rate with the most stores registered is at least 0.9x the rate
//! with the fewest, with 10,000 active at least 0.9x the rate with 100
//! active, and with the scheduled actions at least 0.9x the rate without.
//!
//! **Time slices.** On a shared machine the load from other work comes and
//! goes in bursts of seconds to minutes, so draining one row after another
//! compares each row's luck (runs on this machine swung one row 3x against
//! the next). Every row is seeded first; then the claimers drain the rows
//! in turn, one slice (a second by default) each, round after round, each
//! round starting one row later. A row's drain rate is its settled actions
//! over its slices' summed time, so a burst of load falls on every row
//! alike. Each slice ends with every claimed action settled.
//!
//! **Where the time goes.** When the server has `pg_stat_statements`, the
//! cluster loads it (top-level statements only, so a function's inner
//! statements are not counted twice; planning tracked too) and each row
//! also reports its database's statement time (planning and execution) per
//! settled action, and its costliest
//! statements, over the drain alone: if a row is slower while its database
//! time is the same, the time went elsewhere.
//!
//! # Invariants
//! - Every row is measured while its backlog lasts: a row whose backlog
//!   runs out before the last slice fails the run (raise `--actions`).
//! - Every row gets the same number of slices of the same length.
//! - Ratios compare rows of one run.

use crate::harness::server::{with_cluster, Statements};
use crate::stats::{ratio, Percentiles};
use crate::views::BenchViews;
use crate::views::{statements_enable, statements_reset, statements_top, StatementStat};
use crate::{bar, run_dir, BenchError};
use courier_core::Status;
use courier_dispatch::worker::pacing::ReclaimPacing;
use courier_store::cluster::Cluster;
use courier_store::{ClaimMode, ClaimReq, PgStore, SettleReq, StoreConfig};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The drain rate at the largest shape must be at least this share of the
/// rate at the smallest.
pub const DRAIN_RATIO_MIN: f64 = 0.9;

const DATABASE: &str = "courier_bench_scale";
const LEASE_TTL_MS: u64 = 600_000;
const FINAL_OVERDUE_MS: u64 = 600_000;
/// How long a slice may run past its end (its last claims settling) before
/// the run fails.
const SLICE_OVERRUN_MAX: Duration = Duration::from_secs(60);
/// Statements read back per row (all of a drain's fit: claim, sweep,
/// settle's few); the costliest [`STATEMENTS_SHOWN`] are kept.
const STATEMENTS_MAX: i64 = 50;
const STATEMENTS_SHOWN: usize = 4;

/// Everything a scale run needs; checked by [`ScaleConfig::validate`].
#[derive(Debug, Clone)]
pub struct ScaleConfig {
    /// Stores registered in each row with `active` stores with work.
    pub registered: Vec<u32>,
    pub active: u32,
    /// Active stores of the many-active row (each with a backlog); 0 leaves
    /// it out.
    pub many_active: u32,
    /// Actions scheduled for tomorrow in the last row (the first row's
    /// shape); 0 leaves it out.
    pub scheduled: u32,
    /// Each row's backlog, enough to outlast its slices.
    pub actions: u32,
    /// Concurrent claimers, each with its own connection pool.
    pub claimers: u32,
    pub claim_batch_max: u32,
    pub store_in_flight_max: u32,
    pub seed: u64,
    /// Slices each row is drained for.
    pub slices: u32,
    /// One slice's length.
    pub slice_ms: u64,
    pub progress: bool,
}

impl ScaleConfig {
    pub fn new(seed: u64) -> Self {
        ScaleConfig {
            registered: vec![100, 10_000, 100_000, 1_000_000],
            active: 100,
            many_active: 10_000,
            scheduled: 1_000_000,
            actions: 200_000,
            claimers: 2,
            claim_batch_max: 16,
            store_in_flight_max: 4,
            seed,
            slices: 20,
            slice_ms: 1_000,
            progress: true,
        }
    }

    /// Seconds, a tiny load: checks that everything runs, judges nothing.
    pub fn smoke(seed: u64) -> Self {
        ScaleConfig {
            registered: vec![10, 2_000],
            active: 10,
            many_active: 200,
            scheduled: 2_000,
            actions: 4_000,
            slices: 2,
            slice_ms: 200,
            ..ScaleConfig::new(seed)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.registered.is_empty() || self.registered.len() > 8 {
            return Err("--registered takes 1 to 8 store counts".into());
        }
        if !(1..=100_000).contains(&self.active) {
            return Err("--active must be within 1..=100000".into());
        }
        if self
            .registered
            .iter()
            .any(|r| *r < self.active || *r > 2_000_000)
        {
            return Err("--registered counts must be within --active..=2000000".into());
        }
        if self.many_active > 100_000 {
            return Err("--many-active must be within 0..=100000".into());
        }
        if self.scheduled > 2_000_000 {
            return Err("--scheduled must be within 0..=2000000".into());
        }
        let most = self.active.max(self.many_active);
        if self.actions < most || self.actions > 1_000_000 {
            return Err("--actions must be within the active stores' count..=1000000".into());
        }
        if !(1..=16).contains(&self.claimers) {
            return Err("--claimers must be within 1..=16".into());
        }
        if !(1..=1000).contains(&self.claim_batch_max) {
            return Err("--claim-batch-max must be within 1..=1000".into());
        }
        if !(1..=10_000).contains(&self.store_in_flight_max) {
            return Err("--store-in-flight-max must be within 1..=10000".into());
        }
        if !(1..=1000).contains(&self.slices) {
            return Err("--slices must be within 1..=1000".into());
        }
        if !(100..=60_000).contains(&self.slice_ms) {
            return Err("--slice-ms must be within 100..=60000".into());
        }
        Ok(())
    }

    /// (registered, active, scheduled) of each row.
    fn shapes(&self) -> Vec<(u32, u32, u32)> {
        let mut v: Vec<(u32, u32, u32)> = self
            .registered
            .iter()
            .map(|r| (*r, self.active, 0))
            .collect();
        if self.many_active > 0 {
            v.push((self.many_active, self.many_active, 0));
        }
        if self.scheduled > 0 {
            v.push((self.registered[0], self.active, self.scheduled));
        }
        v
    }
}

/// One shape, drained.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    pub registered: u32,
    pub active: u32,
    /// Actions scheduled for tomorrow beside the backlog.
    pub scheduled: u32,
    pub actions: u64,
    /// Claims that took at least one action.
    pub claims: u64,
    /// Round trip of a claim that took at least one action.
    pub claim: Percentiles,
    /// Settled actions over the summed time of the row's slices.
    pub drain_per_s: f64,
    /// The row's slices' summed time.
    pub drain_s: f64,
    /// The slowest and fastest slice's rate: how much the machine moved.
    pub slice_per_s_min: f64,
    pub slice_per_s_max: f64,
    /// Seeding the stores and the backlog.
    pub seed_s: f64,
    /// One claim before the drain, under `EXPLAIN (ANALYZE, BUFFERS)`:
    /// shared buffers it touched and its execution time (the database's
    /// side alone; buffers do not depend on the machine's load).
    pub claim_buffers: u64,
    pub claim_exec_ms: f64,
    /// Statement time of the row's database over its drain, per settled
    /// action (None without pg_stat_statements).
    pub db_us_per_action: Option<f64>,
    /// The row's costliest statements over its drain.
    pub statements: Vec<StatementStat>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    pub seed: u64,
    pub claimers: u32,
    pub claim_batch_max: u32,
    pub store_in_flight_max: u32,
    pub slices: u32,
    pub slice_ms: u64,
    pub rows: Vec<ScaleRow>,
    /// Drain rate with the most stores registered over the fewest (same active).
    pub registered_ratio: f64,
    /// Drain rate with many active stores over the first row's.
    pub active_ratio: Option<f64>,
    /// Drain rate with the scheduled actions over the first row's (the same
    /// shape without them).
    pub scheduled_ratio: Option<f64>,
    pub within_target: bool,
    pub chart: Option<PathBuf>,
    pub wall_time_s: f64,
}

impl ScaleReport {
    pub fn table(&self) -> String {
        let mut out = format!(
            "seed {} · {} claimers · claims of {} (fair, intent written) · {} per store in flight · synchronous_commit off · {} slices of {} ms per row\n\n",
            self.seed, self.claimers, self.claim_batch_max, self.store_in_flight_max, self.slices, self.slice_ms
        );
        out.push_str("| stores registered | active | scheduled | settled | claims | claim p50 ms | claim p99 ms | drained per s | slices: slowest - fastest per s | database us per action | one claim: buffers | one claim: execution ms | seeding s |\n");
        out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} - {:.0} | {} | {} | {:.2} | {:.1} |\n",
                r.registered,
                r.active,
                r.scheduled,
                r.actions,
                r.claims,
                r.claim.p50_ms,
                r.claim.p99_ms,
                r.drain_per_s,
                r.slice_per_s_min,
                r.slice_per_s_max,
                r.db_us_per_action.map_or("-".into(), |u| format!("{u:.0}")),
                r.claim_buffers,
                r.claim_exec_ms,
                r.seed_s
            ));
        }
        out.push_str(&format!(
            "\ndrain rate, most stores registered vs fewest: {:.2}x (target >= {DRAIN_RATIO_MIN:.2}x)\n",
            self.registered_ratio
        ));
        if let Some(a) = self.active_ratio {
            out.push_str(&format!(
                "drain rate, many active stores vs {} active: {a:.2}x (target >= {DRAIN_RATIO_MIN:.2}x)\n",
                self.rows.first().map_or(0, |r| r.active)
            ));
        }
        if let Some(s) = self.scheduled_ratio {
            out.push_str(&format!(
                "drain rate, with {} actions scheduled for tomorrow vs without: {s:.2}x (target >= {DRAIN_RATIO_MIN:.2}x)\n",
                self.rows.last().map_or(0, |r| r.scheduled)
            ));
        }
        for r in self.rows.iter().filter(|r| !r.statements.is_empty()) {
            out.push_str(&crate::stats::statement_lines(
                &format!(
                    "{} registered, {} active, {} scheduled",
                    r.registered, r.active, r.scheduled
                ),
                &r.statements,
                r.actions,
            ));
        }
        out.push_str(&format!(
            "within target: {}\n",
            if self.within_target { "yes" } else { "NO" }
        ));
        out
    }
}

/// Runs every shape and writes the chart.
pub async fn run(cfg: &ScaleConfig) -> Result<ScaleReport, BenchError> {
    cfg.validate().map_err(BenchError::Settings)?;
    let started = Instant::now();
    let dir = run_dir("courier-bench-scale-")?;
    let cluster = Cluster::new(dir.path().join("pg")).setting("synchronous_commit", "off");
    let track = Statements::Top { planning: true };
    let rows = with_cluster(cluster, track, async |server| {
        let url = server.url.clone();
        let statements = server.statements_loaded && statements_enable(&url).await?;
        let shapes = cfg.shapes();
        let mut rows = Vec::new();
        for (k, shape) in shapes.iter().enumerate() {
            rows.push(Row::seed(cfg, &url, k, *shape).await?);
        }
        if statements {
            statements_reset(&url).await?;
        }
        drain_in_slices(cfg, &mut rows).await?;
        let mut out = Vec::new();
        for (k, row) in rows.into_iter().enumerate() {
            let stats = if statements {
                statements_top(&url, &format!("{DATABASE}_{k}"), STATEMENTS_MAX).await?
            } else {
                Vec::new()
            };
            out.push(row.finish(stats)?);
        }
        Ok::<_, BenchError>(out)
    })
    .await?;
    let n = cfg.registered.len();
    let first = rows.first().map_or(f64::NAN, |r| r.drain_per_s);
    let registered_ratio = ratio(rows[n - 1].drain_per_s, first);
    let active_ratio = (cfg.many_active > 0).then(|| ratio(rows[n].drain_per_s, first));
    let scheduled_ratio =
        (cfg.scheduled > 0).then(|| ratio(rows.last().map_or(f64::NAN, |r| r.drain_per_s), first));
    let within_target = registered_ratio >= DRAIN_RATIO_MIN
        && active_ratio.is_none_or(|a| a >= DRAIN_RATIO_MIN)
        && scheduled_ratio.is_none_or(|s| s >= DRAIN_RATIO_MIN);
    let mut report = ScaleReport {
        seed: cfg.seed,
        claimers: cfg.claimers,
        claim_batch_max: cfg.claim_batch_max,
        store_in_flight_max: cfg.store_in_flight_max,
        slices: cfg.slices,
        slice_ms: cfg.slice_ms,
        rows,
        registered_ratio,
        active_ratio,
        scheduled_ratio,
        within_target,
        chart: None,
        wall_time_s: 0.0,
    };
    report.wall_time_s = started.elapsed().as_secs_f64();
    Ok(report)
}

fn active_names(n: u32) -> Vec<String> {
    (0..n).map(|i| format!("active-{i:06}")).collect()
}

/// One row being measured: its database, its claimers' stores, and what
/// its slices have measured so far.
struct Row {
    registered: u32,
    active: u32,
    scheduled: u32,
    seed_s: f64,
    claim_buffers: u64,
    claim_exec_ms: f64,
    claimers: Vec<PgStore>,
    settled: u64,
    drained: Duration,
    rtts: Vec<u64>,
    slice_rates: Vec<f64>,
}

impl Row {
    /// Seeds a shape on a database of its own (`{DATABASE}_{k}`), explains
    /// one claim, and opens its claimers' pools.
    async fn seed(
        cfg: &ScaleConfig,
        server_url: &str,
        k: usize,
        (registered, active, scheduled): (u32, u32, u32),
    ) -> Result<Row, BenchError> {
        let seeding = Instant::now();
        let url = courier_store::database_recreate(server_url, &format!("{DATABASE}_{k}")).await?;
        let mut sc = StoreConfig::new(&url);
        sc.pool_size_max = 2;
        let store = PgStore::connect(&sc).await?;
        store.stores_seed_idle("idle", registered - active).await?;
        store
            .actions_enqueue_bulk(&active_names(active), cfg.actions)
            .await?;
        if scheduled > 0 {
            store
                .actions_seed_scheduled(&active_names(active), scheduled)
                .await?;
        }
        store.tables_analyze().await?;
        let seed_s = seeding.elapsed().as_secs_f64();
        let batch = i64::from(cfg.claim_batch_max);
        let cap = i32::try_from(cfg.store_in_flight_max).unwrap_or(i32::MAX);
        let (claim_buffers, claim_exec_ms) = store.claim_explained(batch, cap).await?;
        let mut claimers = Vec::new();
        for _ in 0..cfg.claimers {
            let mut wc = StoreConfig::new(&url);
            wc.migrate = false;
            wc.pool_size_max = 2;
            claimers.push(PgStore::connect(&wc).await?);
        }
        Ok(Row {
            registered,
            active,
            scheduled,
            seed_s,
            claim_buffers,
            claim_exec_ms,
            claimers,
            settled: 0,
            drained: Duration::ZERO,
            rtts: Vec::new(),
            slice_rates: Vec::new(),
        })
    }

    /// Every claimer claims and settles until the slice ends; the slice's
    /// time runs until the last claimer has settled what it claimed.
    async fn slice(&mut self, cfg: &ScaleConfig, slice: usize) -> Result<(), BenchError> {
        let started = Instant::now();
        let until = started + Duration::from_millis(cfg.slice_ms);
        let mut tasks = tokio::task::JoinSet::new();
        for (i, store) in self.claimers.iter().enumerate() {
            let owner: Arc<str> = Arc::from(format!("scale-{i}"));
            let (store, cfg) = (store.clone(), cfg.clone());
            tasks.spawn(async move { claimer(&store, &owner, &cfg, until).await });
        }
        let limit = Duration::from_millis(cfg.slice_ms) + SLICE_OVERRUN_MAX;
        let mut settled = 0;
        let joined = tokio::time::timeout(limit, async {
            while let Some(r) = tasks.join_next().await {
                let (n, rtts) = r??;
                settled += n;
                self.rtts.extend(rtts);
            }
            Ok::<_, BenchError>(())
        })
        .await;
        match joined {
            Ok(r) => r?,
            Err(_) => {
                return Err(BenchError::Timeout {
                    what: format!(
                        "slice {slice} of {} registered, {} active",
                        self.registered, self.active
                    ),
                    limit,
                    detail: format!("{settled} settled in it"),
                })
            }
        }
        let took = started.elapsed();
        if settled == 0 || self.settled + settled >= u64::from(cfg.actions) {
            return Err(BenchError::Settings(format!(
                "the backlog of {} registered, {} active ran out in slice {slice} \
                 ({} of {} settled): raise --actions",
                self.registered,
                self.active,
                self.settled + settled,
                cfg.actions
            )));
        }
        self.settled += settled;
        self.drained += took;
        self.slice_rates
            .push(settled as f64 / took.as_secs_f64().max(1e-9));
        Ok(())
    }

    /// The row's figures; `stats` are its database's statements over the
    /// drain (empty without pg_stat_statements).
    fn finish(self, mut stats: Vec<StatementStat>) -> Result<ScaleRow, BenchError> {
        let db_us_per_action = (!stats.is_empty()).then(|| {
            stats
                .iter()
                .map(|s| s.total_exec_ms + s.total_plan_ms)
                .sum::<f64>()
                * 1000.0
                / self.settled.max(1) as f64
        });
        stats.truncate(STATEMENTS_SHOWN);
        let claim = Percentiles::from_us(self.rtts.iter().copied())
            .ok_or_else(|| BenchError::Task("no claim took an action".into()))?;
        let drain_s = self.drained.as_secs_f64();
        let fold = |f: fn(f64, f64) -> f64, init| self.slice_rates.iter().copied().fold(init, f);
        Ok(ScaleRow {
            registered: self.registered,
            active: self.active,
            scheduled: self.scheduled,
            actions: self.settled,
            claims: self.rtts.len() as u64,
            claim,
            drain_per_s: self.settled as f64 / drain_s.max(1e-9),
            drain_s,
            slice_per_s_min: fold(f64::min, f64::INFINITY),
            slice_per_s_max: fold(f64::max, 0.0),
            seed_s: self.seed_s,
            claim_buffers: self.claim_buffers,
            claim_exec_ms: self.claim_exec_ms,
            db_us_per_action,
            statements: stats,
        })
    }
}

/// Drains the rows in turn, a slice each, round after round; each round
/// starts one row later than the one before.
async fn drain_in_slices(cfg: &ScaleConfig, rows: &mut [Row]) -> Result<(), BenchError> {
    let total = u64::from(cfg.slices) * rows.len() as u64;
    let b = bar(
        cfg.progress,
        total,
        "{prefix} [{bar:30}] {pos}/{len} slices",
    );
    b.set_prefix("draining");
    for round in 0..cfg.slices as usize {
        for k in 0..rows.len() {
            let i = (round + k) % rows.len();
            rows[i].slice(cfg, round).await?;
            b.inc(1);
        }
    }
    b.finish();
    Ok(())
}

/// Claims and settles until `until`; returns how many it settled and the
/// round trips (us) of the claims that took something, each with the sweep
/// it named (run at once). Its claims look for expired leases as a
/// worker's do (`courier_dispatch::worker::pacing`).
async fn claimer(
    store: &PgStore,
    owner: &Arc<str>,
    cfg: &ScaleConfig,
    until: Instant,
) -> Result<(u64, Vec<u64>), BenchError> {
    let mut rtts = Vec::new();
    let mut settled = 0;
    let mut reclaims = ReclaimPacing::default();
    while Instant::now() < until {
        let t = Instant::now();
        let sent = tokio::time::Instant::now();
        let look = reclaims.look(sent);
        let req = ClaimReq {
            provider: None,
            owner: owner.clone(),
            n: cfg.claim_batch_max,
            lease_ttl_ms: LEASE_TTL_MS,
            store_in_flight_max: cfg.store_in_flight_max,
            mode: ClaimMode::Fair,
            intents: true,
            reclaim: look,
        };
        let taken = store.action_claim(&req).await?;
        reclaims.claimed(sent, look, req.n as usize, taken.claimed.len());
        if !taken.sweep.is_empty() {
            if let Err(e) = store.store_work_sweep(&taken.sweep).await {
                tracing::warn!(error = %e, "store_work sweep failed; the claim stands");
            }
        }
        let got = taken.claimed;
        if got.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        rtts.push(t.elapsed().as_micros() as u64);
        let reqs: Vec<SettleReq> = got
            .iter()
            .map(|c| SettleReq {
                lease: c.lease.clone(),
                report: Status::Accepted,
                message_id: Some(format!("m-{}", c.lease.action_id)),
                from_lookup: false,
            })
            .collect();
        settled += store.actions_settle(&reqs, FINAL_OVERDUE_MS).await?.len() as u64;
    }
    Ok((settled, rtts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_smoke_settings_are_valid() {
        assert_eq!(ScaleConfig::new(1).validate(), Ok(()));
        assert_eq!(ScaleConfig::smoke(1).validate(), Ok(()));
        let shapes = ScaleConfig::new(1).shapes();
        assert_eq!(shapes.len(), 6);
        // The last row is the first one's shape with the scheduled actions.
        assert_eq!(shapes[5], (shapes[0].0, shapes[0].1, 1_000_000));
        assert!(shapes[..5].iter().all(|s| s.2 == 0));
    }

    #[test]
    fn bad_settings_name_their_flag() {
        let base = ScaleConfig::new(1);
        let cases = [
            (
                ScaleConfig {
                    registered: vec![10],
                    ..base.clone()
                },
                "--registered",
            ),
            (
                ScaleConfig {
                    actions: 10,
                    ..base.clone()
                },
                "--actions",
            ),
            (
                ScaleConfig {
                    scheduled: 2_000_001,
                    ..base.clone()
                },
                "--scheduled",
            ),
            (
                ScaleConfig {
                    claimers: 0,
                    ..base.clone()
                },
                "--claimers",
            ),
        ];
        for (cfg, flag) in cases {
            let err = cfg.validate().expect_err(flag);
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
    }
}
