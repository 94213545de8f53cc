//! The report of a soak: its samples, the thirds it compares, and the
//! pure judgement of the run.

use super::*;

/// One sample of the run.
#[derive(Debug, Clone, Serialize)]
pub struct SoakSample {
    /// Seconds since the measured span began (negative: warm-up).
    pub t_s: f64,
    pub tables_mb: f64,
    /// The claim statement's p99 over this interval, in milliseconds.
    pub claim_p99_ms: Option<f64>,
    /// Resident memory of the workers, mean per worker, in MiB.
    pub worker_rss_mb: f64,
    /// Actions in the table (all states), and pending among them.
    pub actions: i64,
    pub pending: i64,
    /// Intents without a final status: the provider's webhooks not merged yet.
    pub open_intents: i64,
    pub load_average: String,
    /// Cumulative claim histogram (`le` seconds, count), summed over workers.
    #[serde(skip)]
    pub claim_buckets: Vec<(f64, u64)>,
    /// Cores used since the sample before, by role.
    pub cores: Option<Cores>,
    #[serde(skip)]
    pub ticks: Ticks,
}

/// A run is a soak at its offered load only while the fleet keeps up: no
/// sample of the last third may hold more pending actions, nor more intents
/// without a final status, than this many seconds of the offered load. (A
/// fleet that falls behind measures a queue: session 13's fourth run grew
/// to 161,887 pending at 703/s; webhooks 10 s late also set the reconciler
/// looking up what they would have merged, `final_overdue_ms`.)
pub const KEPT_UP_S: f64 = 10.0;

/// A third of the measured span.
#[derive(Debug, Clone, Serialize)]
pub struct Third {
    pub tables_mb: f64,
    pub claim_p99_ms: Option<f64>,
    pub worker_rss_mb: f64,
    /// The most pending actions, and open intents, at one sample.
    pub pending_max: i64,
    pub open_intents_max: i64,
    /// Cores used, by role, mean over the intervals that end at the third's
    /// samples.
    pub cores: Cores,
    /// Actions enqueued during the third, and the costliest statements
    /// (empty unless `statements`).
    pub enqueued: u64,
    pub statements: Vec<StatementStat>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub rate_per_s: f64,
    pub capacity_per_s: Option<f64>,
    /// Cores used, by role, while the probe ran.
    pub probe_cores: Option<Cores>,
    pub enqueued: u64,
    pub samples: Vec<SoakSample>,
    pub first: Third,
    pub last: Third,
    pub tables_ratio: f64,
    pub claim_p99_ratio: Option<f64>,
    pub rss_ratio: f64,
    /// The most pending actions (and open intents) the last third may hold at a sample
    /// ([`KEPT_UP_S`] of the offered load), and whether it held no more.
    pub pending_limit: f64,
    pub kept_up: bool,
    /// Whether no third's mean steal exceeded [`STEAL_MAX_CORES`].
    pub host_steady: bool,
    pub passed: bool,
    pub wall_time_s: f64,
}

impl SoakReport {
    pub fn table(&self) -> String {
        let mut out = format!("| t (s) | tables MB | claim p99 ms | worker RSS MB | actions | pending | open intents | load average | {CORES_HEAD} |\n|---:|---:|---:|---:|---:|---:|---:|---|---|\n");
        for s in &self.samples {
            out.push_str(&format!(
                "| {:.0} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} |\n",
                s.t_s,
                s.tables_mb,
                s.claim_p99_ms.map_or("-".into(), |v| format!("{v:.2}")),
                s.worker_rss_mb,
                s.actions,
                s.pending,
                s.open_intents,
                s.load_average,
                s.cores.as_ref().map_or("-".into(), cores_cell),
            ));
        }
        let p99 = |t: &Third| t.claim_p99_ms.map_or("-".into(), |v| format!("{v:.2}"));
        out.push_str(&format!(
            "\noffered {:.0} actions/s{} ({} enqueued)\n\n| measure | first third | last third | ratio | target |\n|---|---:|---:|---:|---:|\n| tables + indexes (MB, mean) | {:.1} | {:.1} | {:.2}x | <= 1.10x |\n| claim p99 (ms) | {} | {} | {} | <= 1.20x |\n| worker RSS (MB, mean) | {:.1} | {:.1} | {:.2}x | <= 1.10x |\n| pending (most at a sample) | {} | {} | - | <= {:.0} ({KEPT_UP_S:.0} s of the load) |\n| open intents (most at a sample) | {} | {} | - | <= {:.0} |\n\nkept up with the load: {}\nthe host gave the same CPU: {}\nwithin target: {}\n",
            self.rate_per_s,
            self.capacity_per_s.map_or(String::new(), |c| format!(" of a probed capacity of {c:.0}/s")),
            self.enqueued,
            self.first.tables_mb, self.last.tables_mb, self.tables_ratio,
            p99(&self.first), p99(&self.last),
            self.claim_p99_ratio.map_or("-".into(), |r| format!("{r:.2}x")),
            self.first.worker_rss_mb, self.last.worker_rss_mb, self.rss_ratio,
            self.first.pending_max, self.last.pending_max, self.pending_limit,
            self.first.open_intents_max, self.last.open_intents_max, self.pending_limit,
            if self.kept_up { "yes" } else { "NO: the figures measure a queue" },
            if self.host_steady {
                "yes".to_string()
            } else {
                format!(
                    "NO: the host took CPU (steal {:.2} and {:.2} cores in the thirds, at most {STEAL_MAX_CORES:.2}); the thirds do not compare the courier alone",
                    self.first.cores.steal, self.last.cores.steal
                )
            },
            self.passed
        ));
        for (name, t) in [("first third", &self.first), ("last third", &self.last)] {
            if !t.statements.is_empty() {
                out.push_str(&crate::stats::statement_lines(
                    name,
                    &t.statements,
                    t.enqueued,
                ));
            }
        }
        out.push_str(&format!(
            "\n| cores used ({CORES_HEAD}) | total |\n|---|---:|\n| probe | {} | {} |\n| first third | {} | {:.2} |\n| last third | {} | {:.2} |\n",
            self.probe_cores.as_ref().map_or("-".into(), cores_cell),
            self.probe_cores.map_or("-".into(), |c| format!("{:.2}", c.total())),
            cores_cell(&self.first.cores),
            self.first.cores.total(),
            cores_cell(&self.last.cores),
            self.last.cores.total(),
        ));
        out
    }
}

const CORES_HEAD: &str = "cores: workers / serve / postgres / bench / other, steal";

pub(super) fn cores_cell(c: &Cores) -> String {
    format!(
        "{:.2} / {:.2} / {:.2} / {:.2} / {:.2}, {:.2}",
        c.workers, c.serve, c.postgres, c.bench, c.other, c.steal
    )
}

/// The 99th percentile, in milliseconds, of the observations between two
/// cumulative histograms, interpolated linearly inside its bucket; `None`
/// without observations.
pub fn p99_between(before: &[(f64, u64)], after: &[(f64, u64)]) -> Option<f64> {
    let count = |h: &[(f64, u64)], le: f64| h.iter().find(|(l, _)| *l == le).map_or(0, |(_, n)| *n);
    let delta: Vec<(f64, u64)> = after
        .iter()
        .map(|(le, n)| (*le, n.saturating_sub(count(before, *le))))
        .collect();
    let total = delta.last()?.1;
    if total == 0 {
        return None;
    }
    let rank = total as f64 * 0.99;
    let mut lower = (0.0, 0u64);
    for (le, n) in &delta {
        if *n as f64 >= rank {
            if le.is_infinite() {
                return Some(lower.0 * 1e3);
            }
            let inside = (*n - lower.1).max(1) as f64;
            let frac = (rank - lower.1 as f64) / inside;
            return Some((lower.0 + (le - lower.0) * frac) * 1e3);
        }
        lower = (*le, *n);
    }
    None
}

/// Each sample's claim p99 and cores since the sample before.
pub(super) fn with_intervals(samples: &mut [SoakSample]) {
    for i in 1..samples.len() {
        samples[i].claim_p99_ms =
            p99_between(&samples[i - 1].claim_buckets, &samples[i].claim_buckets);
        samples[i].cores = Cores::between(
            &samples[i - 1].ticks,
            &samples[i].ticks,
            samples[i].t_s - samples[i - 1].t_s,
        );
    }
}

/// The means and worsts of the samples within `[lo, hi)` seconds.
pub(super) fn third_of(samples: &[SoakSample], lo: f64, hi: f64) -> Third {
    let idx: Vec<usize> = (0..samples.len())
        .filter(|&i| samples[i].t_s >= lo && samples[i].t_s < hi)
        .collect();
    let mean_of = |f: fn(&SoakSample) -> f64| {
        idx.iter().map(|&i| f(&samples[i])).sum::<f64>() / idx.len().max(1) as f64
    };
    let p99 = match (idx.first(), idx.last()) {
        (Some(&a), Some(&b)) if a > 0 => {
            p99_between(&samples[a - 1].claim_buckets, &samples[b].claim_buckets)
        }
        _ => None,
    };
    Third {
        tables_mb: mean_of(|s| s.tables_mb),
        claim_p99_ms: p99,
        worker_rss_mb: mean_of(|s| s.worker_rss_mb),
        pending_max: idx.iter().map(|&i| samples[i].pending).max().unwrap_or(0),
        open_intents_max: idx
            .iter()
            .map(|&i| samples[i].open_intents)
            .max()
            .unwrap_or(0),
        cores: Cores::mean(idx.iter().filter_map(|&i| samples[i].cores.as_ref())),
        enqueued: 0,
        statements: Vec::new(),
    }
}

pub(super) fn judge(
    cfg: &SoakConfig,
    mut samples: Vec<SoakSample>,
    rate: f64,
    capacity: Option<f64>,
    enqueued: u64,
) -> SoakReport {
    with_intervals(&mut samples);
    let span = cfg.duration_s as f64;
    let third = |lo: f64, hi: f64| third_of(&samples, lo, hi);
    let first = third(0.0, span / 3.0);
    let last = third(span * 2.0 / 3.0, span + 1.0);
    let tables_ratio = crate::stats::ratio(last.tables_mb, first.tables_mb);
    let rss_ratio = crate::stats::ratio(last.worker_rss_mb, first.worker_rss_mb);
    let claim_p99_ratio = match (first.claim_p99_ms, last.claim_p99_ms) {
        (Some(a), Some(b)) => Some(crate::stats::ratio(b, a)),
        _ => None,
    };
    let pending_limit = rate * KEPT_UP_S;
    let kept_up = (last.pending_max.max(last.open_intents_max) as f64) <= pending_limit;
    let host_steady = [&first, &last]
        .iter()
        .all(|t| t.cores.steal <= STEAL_MAX_CORES);
    let passed = kept_up
        && host_steady
        && tables_ratio <= 1.10
        && rss_ratio <= 1.10
        && claim_p99_ratio.is_some_and(|r| r <= 1.20);
    SoakReport {
        rate_per_s: rate,
        capacity_per_s: capacity,
        probe_cores: None,
        enqueued,
        samples,
        first,
        last,
        tables_ratio,
        claim_p99_ratio,
        rss_ratio,
        pending_limit,
        kept_up,
        host_steady,
        passed,
        wall_time_s: 0.0,
    }
}
