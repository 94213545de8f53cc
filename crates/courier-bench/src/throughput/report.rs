//! The report of a throughput run: what it carries, the pure verdict
//! against the targets, and its text.

use super::*;

/// One path's figures.
#[derive(Debug, Clone, Serialize)]
pub struct PathResult {
    pub actions: u64,
    pub elapsed_s: f64,
    pub actions_per_s: f64,
    /// Commits in the database during the path, the benchmark's own
    /// progress reads taken out.
    pub transactions: i64,
    pub rollbacks: i64,
    pub transactions_per_action: f64,
    /// Where the database time went (empty without pg_stat_statements).
    pub statements: Vec<StatementStat>,
    /// Execution time of all statements of the path, per action.
    pub db_exec_us_per_action: Option<f64>,
    /// Peak resident memory of this process during the path.
    pub peak_rss_kib: Option<u64>,
}

/// Everything measured with one `synchronous_commit` setting.
#[derive(Debug, Clone, Serialize)]
pub struct SyncResult {
    pub synchronous_commit: bool,
    pub pgbench: PgbenchResult,
    /// True when pgbench ran out of pending jobs (its figure is then too high).
    pub pgbench_exhausted: bool,
    pub claim_to_settle: PathResult,
    pub end_to_end: PathResult,
    /// Claim-to-settle actions per second over pgbench transactions per second.
    pub claim_to_settle_vs_pgbench: f64,
    pub end_to_end_vs_pgbench: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputSettings {
    pub actions: u32,
    pub stores: u32,
    pub workers: u32,
    pub concurrency: u32,
    pub claim_batch_max: u32,
    pub store_in_flight_max: u32,
    pub pool_size_max: usize,
    pub claim: ClaimMode,
    pub pgbench_clients: u32,
    pub pgbench_seconds: u64,
    pub statement_statistics: bool,
}

/// The targets, met or not; the lead decides what to change.
#[derive(Debug, Clone, Serialize)]
pub struct ThroughputTargets {
    pub claim_to_settle_sync_on_per_s: Option<f64>,
    pub claim_to_settle_met: Option<bool>,
    pub end_to_end_best_per_s: f64,
    pub end_to_end_met: bool,
    /// The peak resident memory of the claim-to-settle path, all workers of
    /// this process together.
    pub worker_rss_kib: Option<u64>,
    pub worker_rss_met: Option<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputReport {
    pub seed: u64,
    pub settings: ThroughputSettings,
    pub results: Vec<SyncResult>,
    pub targets: ThroughputTargets,
    /// The largest peak resident memory of any path.
    pub peak_rss_kib_run: Option<u64>,
    pub wall_time_s: f64,
}

impl ThroughputReport {
    /// The results as text: figures, ratios, where the time goes, targets.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        out.push_str(&format!(
            "{} actions over {} stores · {} workers x {} (claim {:?}, batch {}, pool {}) · pgbench {} clients x {} s\n\n",
            s.actions, s.stores, s.workers, s.concurrency, s.claim, s.claim_batch_max,
            s.pool_size_max, s.pgbench_clients, s.pgbench_seconds
        ));
        out.push_str(&format!(
            "{:<22} {:<26} {:>11} {:>10} {:>9} {:>10}\n",
            "synchronous_commit", "path", "per s", "vs ceiling", "tx/action", "peak RSS"
        ));
        for r in &self.results {
            let sc = if r.synchronous_commit { "on" } else { "off" };
            out.push_str(&format!(
                "{:<22} {:<26} {:>11.0} {:>10} {:>9} {:>10}\n",
                sc, "pgbench claim+complete", r.pgbench.tps, "1.00x", "1", "-"
            ));
            for (name, p, vs) in [
                (
                    "claim to settle (stub)",
                    &r.claim_to_settle,
                    r.claim_to_settle_vs_pgbench,
                ),
                (
                    "end to end (HTTP+hooks)",
                    &r.end_to_end,
                    r.end_to_end_vs_pgbench,
                ),
            ] {
                out.push_str(&format!(
                    "{:<22} {:<26} {:>11.0} {:>9.2}x {:>9.3} {:>10}\n",
                    "",
                    name,
                    p.actions_per_s,
                    vs,
                    p.transactions_per_action,
                    p.peak_rss_kib
                        .map_or("-".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0))
                ));
            }
            if r.pgbench_exhausted {
                out.push_str("  (pgbench ran out of pending jobs: its figure is too high)\n");
            }
        }
        out.push_str(&self.where_time_goes());
        out.push_str(&self.targets_lines());
        out
    }

    /// Where the database time goes, per path that read its statements.
    fn where_time_goes(&self) -> String {
        let mut out = String::new();
        for r in &self.results {
            let sc = if r.synchronous_commit { "on" } else { "off" };
            for (name, p) in [
                ("claim to settle", &r.claim_to_settle),
                ("end to end", &r.end_to_end),
            ] {
                if p.statements.is_empty() {
                    continue;
                }
                out.push_str(&format!(
                    "\nwhere the database time goes: {name}, synchronous_commit {sc} ({}):\n",
                    p.db_exec_us_per_action.map_or("-".into(), |u| format!(
                        "{u:.0} us of statement time per action"
                    ))
                ));
                out.push_str(&format!(
                    "  {:>8} {:>9} {:>9}  statement\n",
                    "calls/act", "mean us", "share"
                ));
                let total: f64 = p.statements.iter().map(|s| s.total_exec_ms).sum();
                for st in &p.statements {
                    let q: String = st.query.chars().take(88).collect();
                    out.push_str(&format!(
                        "  {:>8.2} {:>9.0} {:>8.0}%  {}\n",
                        st.calls as f64 / p.actions.max(1) as f64,
                        st.mean_exec_us,
                        100.0 * st.total_exec_ms / total.max(1e-9),
                        q
                    ));
                }
            }
        }
        out
    }

    /// The targets, met or not.
    fn targets_lines(&self) -> String {
        let mut out = String::new();
        let t = &self.targets;
        let met = |m: Option<bool>| match m {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        out.push_str("\ntargets:\n");
        out.push_str(&format!(
            "  claim to settle >= {:.0}/s with synchronous commit on: {} ({})\n",
            CLAIM_TO_SETTLE_TARGET_PER_S,
            t.claim_to_settle_sync_on_per_s
                .map_or("-".into(), |v| format!("{v:.0}/s")),
            met(t.claim_to_settle_met)
        ));
        out.push_str(&format!(
            "  end to end >= {:.0}/s: {:.0}/s best ({})\n",
            END_TO_END_TARGET_PER_S,
            t.end_to_end_best_per_s,
            met(Some(t.end_to_end_met))
        ));
        out.push_str(&format!(
            "  worker resident memory < {} MiB: {} ({}; all {} in-process workers of this process together, with the benchmark itself)\n",
            WORKER_RSS_TARGET_KIB / 1024,
            t.worker_rss_kib
                .map_or("-".into(), |k| format!("{:.1} MiB peak", k as f64 / 1024.0)),
            met(t.worker_rss_met),
            self.settings.workers
        ));
        out
    }
}

/// The verdict against the targets: a pure function of the results.
pub(super) fn targets(results: &[SyncResult]) -> ThroughputTargets {
    let on = results.iter().find(|r| r.synchronous_commit);
    let c2s_on = on.map(|r| r.claim_to_settle.actions_per_s);
    let e2e_best = results
        .iter()
        .map(|r| r.end_to_end.actions_per_s)
        .fold(0.0, f64::max);
    let worker_rss = results
        .iter()
        .filter_map(|r| r.claim_to_settle.peak_rss_kib)
        .max();
    ThroughputTargets {
        claim_to_settle_sync_on_per_s: c2s_on,
        claim_to_settle_met: c2s_on.map(|v| v >= CLAIM_TO_SETTLE_TARGET_PER_S),
        end_to_end_best_per_s: e2e_best,
        end_to_end_met: e2e_best >= END_TO_END_TARGET_PER_S,
        worker_rss_kib: worker_rss,
        worker_rss_met: worker_rss.map(|k| k < WORKER_RSS_TARGET_KIB),
    }
}
