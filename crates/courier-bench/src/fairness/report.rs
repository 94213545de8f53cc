//! The report of a fairness run: what it carries, the pure verdict over
//! its runs, the pooling of rounds, and its text table.

use super::*;

/// The settings a report was produced with.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessSettings {
    pub stores: u32,
    pub noisy_stores: u32,
    pub noise_factor: u32,
    pub rate_per_store_hz: f64,
    pub duration_s: u64,
    pub rounds: u32,
    pub warmup_s: u64,
    pub store_in_flight_max: u32,
    pub claim_batch_max: u32,
    pub idle_poll_ms: u64,
    pub provider_latency: String,
    pub provider_latency_mean_ms: f64,
    pub synchronous_commit: &'static str,
    /// The time an action holds a slot as assumed before calibrating.
    pub service_ms_assumed: f64,
    /// The mean claim-to-settle time measured by the calibration run, from
    /// which the capacity was sized (None: no calibration run).
    pub service_ms_measured: Option<f64>,
    pub calibration_s: u64,
    /// The capacity every scenario ran with.
    pub calibration: Calibration,
}

/// One scenario with one claim mode, every round pooled.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessRun {
    pub scenario: Scenario,
    pub label: String,
    pub claim: ClaimMode,
    /// Every store but the noisy ones, enqueued after the warm-up: each
    /// figure the median of that figure over the rounds.
    pub quiet: Percentiles,
    /// The same actions' wait from enqueue to claim (the part of the
    /// latency the claim decides), medians over the rounds.
    pub quiet_wait: Option<Percentiles>,
    /// The first round's costliest statements (empty without
    /// pg_stat_statements).
    pub statements: Vec<StatementStat>,
    /// The quiet stores' p95 over the fair baseline's of the same round,
    /// the median over the rounds: a round that a busy machine slowed is
    /// outvoted instead of averaged in.
    pub quiet_p95_ratio: f64,
    /// The quiet stores' figures of each round, in round order.
    pub quiet_by_round: Vec<Percentiles>,
    /// The p95 ratio of each round, in round order.
    pub ratio_by_round: Vec<f64>,
    /// Each round's quiet p95 of its last third over its first third (by
    /// enqueue time, after the warm-up), in round order.
    pub trend_by_round: Vec<f64>,
    /// Each round's thirds (those the trend compares): the quiet p95,
    /// whole and split at the claim, in round order.
    pub thirds_by_round: Vec<Vec<Option<ThirdP95>>>,
    /// Sequential scans of `actions` per second during each round's load,
    /// one figure per poll interval, in round order (the scans probe).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seq_scans_per_s_by_round: Vec<Vec<f64>>,
    /// The machine's and the server's CPU in each round's measured load
    /// (the CPU probe).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpu_by_round: Vec<RoundCpu>,
    /// Where each round stalled: its worst second and how late the bench's
    /// runtime woke, in round order (the CPU or the lateness probe).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalls_by_round: Vec<RoundStalls>,
    /// The noisy stores' own latency (in the baseline: the same stores,
    /// sending like everyone else), medians over the rounds.
    pub noisy: Option<Percentiles>,
    pub actions: u64,
    /// Arrivals per second offered (actions enqueued over the load's length).
    pub offered_per_s: f64,
    /// Actions accepted per second, first enqueue to last acceptance.
    pub throughput_per_s: f64,
    /// Claim-to-settle time over worker capacity during the run.
    pub utilisation_measured: f64,
    /// Mean claim-to-settle time of an action.
    pub hold_mean_ms: f64,
    /// The latest an arrival was enqueued after its scheduled time.
    pub enqueue_lag_max_ms: f64,
    /// The quiet stores' p95 over time, by enqueue time, in the first round.
    pub timeline: Vec<crate::stats::TimePoint>,
    /// When the bursts were enqueued (bulk scenario), seconds after the start.
    pub bursts_s: Vec<f64>,
}

/// Sequential scans of `actions` per second in fair rounds: the highest
/// poll interval, and the worst round's mean over its first and its last
/// third of intervals.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SeqScans {
    pub per_s_max: f64,
    pub first_third: f64,
    pub last_third: f64,
}

/// The verdict against the targets; the figures decide, not this crate.
#[derive(Debug, Clone, Serialize)]
pub struct FairnessVerdict {
    /// Fair claiming kept the quiet stores' p95 within 10% of the fair
    /// baseline in every noisy scenario.
    pub fair_within_target: bool,
    /// The worst fair ratio of a noisy scenario.
    pub fair_ratio_worst: f64,
    /// FIFO's ratio in the bulk scenario (the harm fair claiming prevents).
    pub fifo_bulk_ratio: f64,
    /// Single rounds of fair claiming in a noisy scenario whose ratio to
    /// their own round's baseline is above the target, of all such rounds:
    /// the medians above can hide a round that collapsed.
    pub fair_rounds_above_target: usize,
    pub fair_rounds: usize,
    /// The worst single fair round of a noisy scenario.
    pub fair_round_ratio_worst: f64,
    /// The fair baseline's quiet p95 over FIFO's baseline (medians).
    pub baseline_vs_fifo: f64,
    /// The worst trend of a fair round (any scenario): last third's p95
    /// over the first third's.
    pub fair_trend_worst: f64,
    /// Sequential scans of `actions` per second in fair rounds (the scans
    /// probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fair_seq_scans: Option<SeqScans>,
    /// Every target of a judged shape: the fair ratios, the baseline
    /// against FIFO, no upward trend.
    pub within_targets: bool,
    /// The fair baseline could not keep up (accepted under 90% of the
    /// offered rate, or busier than 85%): the machine was too slow or too
    /// loaded for the planned load, and no figure of this run means much.
    pub overloaded: bool,
}

impl FairnessVerdict {
    /// The baseline against FIFO, the trend and the sequential scans.
    pub fn more_lines(&self) -> String {
        let scans = self.fair_seq_scans.map_or(String::new(), |s| {
            format!(
                "sequential scans of actions per s in fair rounds: max {:.1}; worst round's first third {:.1}, last third {:.1}\n",
                s.per_s_max, s.first_third, s.last_third
            )
        });
        format!(
            "fair baseline p95 over FIFO's: {:.2}x (target <= {BASELINE_VS_FIFO_MAX:.2}x)\n\
             worst fair round, last third's p95 over the first third's: {:.2}x (target <= {TREND_MAX:.2}x)\n\
             {scans}every target: {}\n",
            self.baseline_vs_fifo,
            self.fair_trend_worst,
            if self.within_targets { "met" } else { "NOT met" }
        )
    }

    /// The line that shows single rounds, which the medians can hide.
    pub fn rounds_line(&self) -> String {
        format!(
            "fair claiming, single rounds: {} of {} noisy rounds above {:.2}x (worst round {:.2}x)\n",
            self.fair_rounds_above_target,
            self.fair_rounds,
            FAIR_RATIO_MAX,
            self.fair_round_ratio_worst
        )
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FairnessReport {
    pub seed: u64,
    pub settings: FairnessSettings,
    /// The classic scenarios' runs (empty when they did not run).
    pub runs: Vec<FairnessRun>,
    pub verdict: FairnessVerdict,
    /// The flow scenarios, when any ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<FlowReport>,
    pub chart: Option<PathBuf>,
    pub wall_time_s: f64,
}

impl FairnessReport {
    pub fn run(&self, scenario: Scenario, claim: ClaimMode) -> Option<&FairnessRun> {
        self.runs
            .iter()
            .find(|r| r.scenario == scenario && r.claim == claim)
    }

    /// One line per fair round that trended above [`TREND_MAX`].
    pub fn trending_lines(&self) -> String {
        trending_lines(&self.runs)
    }

    /// The results as a text table: the classic scenarios' when they ran,
    /// then the flow scenarios'.
    pub fn table(&self) -> String {
        let mut out = self.settings_lines();
        if !self.runs.is_empty() {
            out.push_str(&self.runs_lines());
            out.push_str(&self.verdict_lines());
        }
        if let Some(flow) = &self.flow {
            out.push_str(&flow.table());
        }
        out
    }

    /// The capacity and the settings the runs had.
    fn settings_lines(&self) -> String {
        let mut out = String::new();
        let s = &self.settings;
        let c = &s.calibration;
        out.push_str(&format!(
            "capacity: {} workers x {} = {} slots · {:.0}/s offered x {:.1} ms per action ({}) = {:.0}% planned utilisation\n",
            c.workers,
            c.concurrency,
            c.slots,
            c.offered_hz,
            c.service_ms,
            match s.service_ms_measured {
                Some(_) => format!("measured by a {} s calibration run", s.calibration_s),
                None => format!("provider mean + {DB_ALLOWANCE_MS} ms allowance"),
            },
            c.utilisation_planned * 100.0
        ));
        out.push_str(&format!(
            "store_in_flight_max {} · claim batch {} · idle poll {} ms · synchronous_commit {}\n",
            s.store_in_flight_max, s.claim_batch_max, s.idle_poll_ms, s.synchronous_commit
        ));
        if !self.runs.is_empty() {
            out.push_str(&format!(
                "{} round(s) of {} s per scenario and claim mode; latencies are the median over rounds, \
                 ratios the median of each round's ratio to that round's fair baseline\n\n",
                s.rounds, s.duration_s
            ));
        }
        out
    }

    /// One row per scenario and claim mode.
    fn runs_lines(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "{:<26} {:<5} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>9} {:>6}\n",
            "scenario",
            "claim",
            "quiet p50",
            "quiet p95",
            "quiet p99",
            "p95 vs",
            "to claim",
            "noisy p95",
            "accepted",
            "busy"
        ));
        out.push_str(&format!(
            "{:<26} {:<5} {:>9} {:>9} {:>9} {:>8} {:>11} {:>10} {:>9} {:>6}\n",
            "", "", "ms", "ms", "ms", "fair base", "p50/p95 ms", "ms", "per s", ""
        ));
        for r in &self.runs {
            out.push_str(&format!(
                "{:<26} {:<5} {:>9.1} {:>9.1} {:>9.1} {:>7.2}x {:>11} {:>10} {:>9.0} {:>5.0}%\n",
                r.label,
                claim_name(r.claim),
                r.quiet.p50_ms,
                r.quiet.p95_ms,
                r.quiet.p99_ms,
                r.quiet_p95_ratio,
                r.quiet_wait.map_or("-".to_string(), |w| format!(
                    "{:.1}/{:.1}",
                    w.p50_ms, w.p95_ms
                )),
                r.noisy
                    .map_or("-".to_string(), |n| format!("{:.1}", n.p95_ms)),
                r.throughput_per_s,
                r.utilisation_measured * 100.0
            ));
        }
        out
    }

    /// The verdict, the trends and the statements.
    fn verdict_lines(&self) -> String {
        let mut out = String::new();
        let v = &self.verdict;
        if v.overloaded {
            out.push_str(
                "\nWARNING: the fair baseline did not keep up with its load (overloaded): \
                 lower --rate-per-store or raise --concurrency; these figures measure a queue, not fairness\n",
            );
        }
        out.push_str(&format!(
            "\nfair claiming, noisy scenarios: worst quiet p95 ratio {:.2}x (target <= {:.2}x): {}\n",
            v.fair_ratio_worst,
            FAIR_RATIO_MAX,
            if v.fair_within_target { "met" } else { "NOT met" }
        ));
        out.push_str(&v.rounds_line());
        out.push_str(&format!(
            "FIFO, bulk: quiet p95 ratio {:.2}x (the harm fair claiming prevents)\n",
            v.fifo_bulk_ratio
        ));
        out.push_str(&v.more_lines());
        out.push_str(&self.trending_lines());
        for r in self
            .runs
            .iter()
            .filter(|r| r.scenario == Scenario::Baseline && !r.statements.is_empty())
        {
            // Per round: the statements are the first round's.
            let actions = r.actions / u64::from(self.settings.rounds).max(1);
            out.push_str(&crate::stats::statement_lines(
                &format!("{} {}", r.label, claim_name(r.claim)),
                &r.statements,
                actions,
            ));
        }
        out
    }
}

pub fn claim_name(c: ClaimMode) -> &'static str {
    match c {
        ClaimMode::Fair => "fair",
        ClaimMode::Fifo => "FIFO",
    }
}

/// One line per fair round that trended above [`TREND_MAX`] (a NaN trend,
/// from a third without a quiet action, counts): its thirds and its worst
/// second, with the machine's stalls then.
pub(super) fn trending_lines(runs: &[FairnessRun]) -> String {
    let mut out = String::new();
    for r in runs.iter().filter(|r| r.claim == ClaimMode::Fair) {
        for (i, trend) in r.trend_by_round.iter().enumerate() {
            if *trend <= TREND_MAX {
                continue;
            }
            out.push_str(&format!("  {} round {}: trend {trend:.2}x", r.label, i + 1));
            let thirds = r.thirds_by_round.get(i).map(Vec::as_slice);
            if let Some([Some(a), _, Some(c)]) = thirds {
                out.push_str(&format!(
                    " (wait p95 {:.1} -> {:.1} ms, after the claim {:.1} -> {:.1} ms)",
                    a.wait_ms, c.wait_ms, a.after_claim_ms, c.after_claim_ms
                ));
            }
            if let Some(w) = r
                .stalls_by_round
                .get(i)
                .and_then(|s| s.worst_second.as_ref())
            {
                out.push_str(&format!(
                    "; worst second {:.0} s: p95 {:.1} ms (wait {:.1})",
                    w.at_s, w.p95_ms, w.wait_p95_ms
                ));
                if let Some(late) = w.runtime_late_max_ms {
                    out.push_str(&format!(", runtime late {late:.0} ms"));
                }
                if let Some(c) = w.cpu {
                    out.push_str(&format!(", CPUs {:.0}% busy", c.busy_share * 100.0));
                    if let Some(st) = c.stalls {
                        out.push_str(&format!(
                            ", stalled: cpu {:.0}%, io {:.0}% (full {:.0}%), memory {:.0}%",
                            st.cpu_some * 100.0,
                            st.io_some * 100.0,
                            st.io_full * 100.0,
                            st.memory_some * 100.0
                        ));
                    }
                }
            }
            out.push('\n');
        }
    }
    out
}

pub(super) fn verdict(runs: &[FairnessRun]) -> FairnessVerdict {
    let fair_noisy: Vec<f64> = runs
        .iter()
        .filter(|r| r.claim == ClaimMode::Fair && r.scenario != Scenario::Baseline)
        .map(|r| r.quiet_p95_ratio)
        .collect();
    let worst = fair_noisy.iter().copied().fold(f64::NAN, f64::max);
    let fair_rounds: Vec<f64> = runs
        .iter()
        .filter(|r| r.claim == ClaimMode::Fair && r.scenario != Scenario::Baseline)
        .flat_map(|r| r.ratio_by_round.iter().copied())
        .collect();
    let overloaded = runs
        .iter()
        .find(|r| r.scenario == Scenario::Baseline && r.claim == ClaimMode::Fair)
        .is_some_and(|r| {
            r.throughput_per_s < 0.9 * r.offered_per_s || r.utilisation_measured > 0.85
        });
    let fair_within_target =
        !fair_noisy.is_empty() && fair_noisy.iter().all(|r| *r <= FAIR_RATIO_MAX);
    let p95_of = |scenario, claim| {
        runs.iter()
            .find(|r| r.scenario == scenario && r.claim == claim)
            .map_or(f64::NAN, |r| r.quiet.p95_ms)
    };
    let baseline_vs_fifo = ratio(
        p95_of(Scenario::Baseline, ClaimMode::Fair),
        p95_of(Scenario::Baseline, ClaimMode::Fifo),
    );
    let fair_runs = runs.iter().filter(|r| r.claim == ClaimMode::Fair);
    let fair_trend_worst = fair_runs
        .clone()
        .flat_map(|r| r.trend_by_round.iter().copied())
        .fold(f64::NAN, f64::max);
    let mut scanned = fair_runs
        .flat_map(|r| r.seq_scans_per_s_by_round.iter())
        .peekable();
    let fair_seq_scans = scanned.peek().is_some().then(|| {
        let (per_s_max, first_third, last_third) = seq_scan_thirds(scanned);
        SeqScans {
            per_s_max,
            first_third,
            last_third,
        }
    });
    FairnessVerdict {
        overloaded,
        within_targets: fair_within_target
            && baseline_vs_fifo <= BASELINE_VS_FIFO_MAX
            && fair_trend_worst <= TREND_MAX,
        baseline_vs_fifo,
        fair_trend_worst,
        fair_seq_scans,
        fair_within_target,
        fair_ratio_worst: worst,
        fifo_bulk_ratio: runs
            .iter()
            .find(|r| r.claim == ClaimMode::Fifo && r.scenario == Scenario::Bulk)
            .map_or(f64::NAN, |r| r.quiet_p95_ratio),
        fair_rounds_above_target: fair_rounds.iter().filter(|x| **x > FAIR_RATIO_MAX).count(),
        fair_rounds: fair_rounds.len(),
        fair_round_ratio_worst: fair_rounds.iter().copied().fold(f64::NAN, f64::max),
    }
}

/// Of rounds' series of sequential scans per second: the highest figure,
/// and the first-third and last-third means of the round whose last third
/// rose most over its first.
pub(super) fn seq_scan_thirds<'a>(rounds: impl Iterator<Item = &'a Vec<f64>>) -> (f64, f64, f64) {
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    let mut out = (f64::NAN, f64::NAN, f64::NAN);
    for series in rounds {
        out.0 = series.iter().copied().fold(out.0, f64::max);
        let third = series.len() / 3;
        if third == 0 {
            continue;
        }
        let (first, last) = (
            mean(&series[..third]),
            mean(&series[series.len() - third..]),
        );
        if out.1.is_nan() || last - first > out.2 - out.1 {
            (out.1, out.2) = (first, last);
        }
    }
    out
}

impl FairnessRun {
    /// The machine's busy share (1.0: every core busy) during the measured
    /// load, the median over the rounds that read it; `None` if none did.
    pub fn machine_busy_share(&self) -> Option<f64> {
        let shares: Vec<f64> = self
            .cpu_by_round
            .iter()
            .filter_map(|r| r.load.map(|l| l.busy_share))
            .collect();
        (!shares.is_empty()).then(|| median(shares.iter().copied()))
    }
}

/// The CPU of one round's measured load (after the warm-up), whole and by
/// thirds (the thirds the trend compares); `None` where the readings did
/// not cover the span.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundCpu {
    pub load: Option<cpu::SpanCpu>,
    pub thirds: Vec<Option<cpu::SpanCpu>>,
}

/// Where a round's quiet latency stalled, so that a trend can be traced to
/// the disk, memory, the CPUs or the bench's own runtime.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RoundStalls {
    /// The second of the measured load (by enqueue time) with the highest
    /// quiet p95; `None` when no second had enough quiet actions.
    pub worst_second: Option<WorstSecond>,
    /// The latest the bench's runtime woke a timer asking every 10 ms, in
    /// each third of the measured load (0 when never more than 5 ms late;
    /// empty without the lateness probe).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtime_late_max_ms_by_third: Vec<f64>,
}

/// One second of a round, and what the machine did while its actions lived.
#[derive(Debug, Clone, Serialize)]
pub struct WorstSecond {
    /// Seconds after the load began.
    pub at_s: f64,
    pub count: usize,
    pub p95_ms: f64,
    /// Enqueue to claim.
    pub wait_p95_ms: f64,
    /// From the second's start to its end plus its p95: by then all but
    /// the slowest 5% of its actions were accepted (the span the next two
    /// figures cover).
    pub span_ms: f64,
    /// The machine's CPU and stalls over that span.
    pub cpu: Option<cpu::SpanCpu>,
    /// The latest the bench's runtime woke its timer in that span (with the
    /// lateness probe).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_late_max_ms: Option<f64>,
}

/// The worst second of `samples` (`(enqueued_ms, latency_us, wait_us)`)
/// within `[from_ms, to_ms)` by quiet p95, among seconds with at least
/// `samples_min` actions, with the machine's readings and the runtime's
/// lateness (`(at_ms, late_ms)`) over the span its actions lived.
pub(super) fn worst_second(
    samples: &[(f64, u64, u64)],
    from_ms: f64,
    to_ms: f64,
    samples_min: usize,
    readings: &[cpu::Reading],
    late: Option<&[(f64, f64)]>,
) -> Option<WorstSecond> {
    let mut bins: std::collections::BTreeMap<u64, Vec<(u64, u64)>> = Default::default();
    for &(at, us, wait) in samples {
        if at >= from_ms && at < to_ms {
            bins.entry((at / 1000.0) as u64)
                .or_default()
                .push((us, wait));
        }
    }
    let (second, p95, wait) = bins
        .into_iter()
        .filter(|(_, v)| v.len() >= samples_min.max(1))
        .filter_map(|(s, v)| {
            let p = Percentiles::from_us(v.iter().map(|x| x.0))?;
            let w = Percentiles::from_us(v.iter().map(|x| x.1))?;
            Some(((s, v.len()), p.p95_ms, w.p95_ms))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    let start = second.0 as f64 * 1000.0;
    let span_ms = 1000.0 + p95;
    Some(WorstSecond {
        at_s: second.0 as f64,
        count: second.1,
        p95_ms: p95,
        wait_p95_ms: wait,
        span_ms,
        cpu: cpu::span(readings, start, start + span_ms, cpu::machine_cores()),
        runtime_late_max_ms: late.map(|l| late_max(l, start, start + span_ms)),
    })
}

/// The most late of `late` (`(at_ms, late_ms)`) within `[from_ms, to_ms)`.
pub(super) fn late_max(late: &[(f64, f64)], from_ms: f64, to_ms: f64) -> f64 {
    late.iter()
        .filter(|(at, _)| *at >= from_ms && *at < to_ms)
        .map(|(_, l)| *l)
        .fold(0.0, f64::max)
}

/// Pools the rounds of one scenario and claim mode.
pub(super) fn summarise(
    cfg: &FairnessConfig,
    plan: &Plan,
    scenario: Scenario,
    claim: ClaimMode,
    rounds: Vec<Samples>,
) -> Result<FairnessRun, BenchError> {
    let label = scenario.label(cfg.noisy_stores, cfg.noise_factor);
    let bin_ms = (plan.duration_s as f64 * 1000.0 / 60.0).max(1000.0);
    let timeline = rounds
        .first()
        .map(|r| timeline_p95(&r.quiet_timeline, bin_ms, 5))
        .unwrap_or_default();
    let pooled = pool_percentiles(&label, claim, &rounds)?;
    let actions: u64 = rounds.iter().map(|r| r.actions).sum();
    let hold_us: u64 = rounds.iter().map(|r| r.hold_us_total).sum();
    let window_ms: f64 = rounds.iter().map(|r| r.window_ms).sum::<f64>().max(1.0);
    let load_s = (plan.duration_s * rounds.len().max(1) as u64) as f64;
    Ok(FairnessRun {
        scenario,
        label,
        claim,
        quiet: pooled.quiet,
        quiet_wait: pooled.quiet_wait,
        statements: rounds
            .first()
            .map(|r| r.statements.clone())
            .unwrap_or_default(),
        quiet_p95_ratio: f64::NAN,
        quiet_by_round: pooled.quiet_by_round,
        ratio_by_round: Vec::new(),
        trend_by_round: rounds.iter().map(|r| r.trend).collect(),
        thirds_by_round: rounds.iter().map(|r| r.thirds.clone()).collect(),
        seq_scans_per_s_by_round: rounds
            .iter()
            .filter_map(|r| r.seq_scans_per_s.clone())
            .collect(),
        cpu_by_round: rounds.iter().filter_map(|r| r.cpu.clone()).collect(),
        stalls_by_round: rounds.iter().filter_map(|r| r.stalls.clone()).collect(),
        noisy: pooled.noisy,
        actions,
        offered_per_s: actions as f64 / load_s,
        throughput_per_s: actions as f64 * 1000.0 / window_ms,
        utilisation_measured: hold_us as f64
            / 1000.0
            / (f64::from(plan.calibration.slots) * window_ms),
        hold_mean_ms: hold_us as f64 / 1000.0 / actions.max(1) as f64,
        enqueue_lag_max_ms: rounds.iter().map(|r| r.lag_max_ms).fold(0.0, f64::max),
        timeline,
        bursts_s: bursts_s(cfg, scenario),
    })
}

/// The rounds' percentiles, each figure the median over the rounds.
struct Pooled {
    quiet_by_round: Vec<Percentiles>,
    quiet: Percentiles,
    quiet_wait: Option<Percentiles>,
    noisy: Option<Percentiles>,
}

/// Pools the rounds' percentiles; a round without a quiet action fails.
fn pool_percentiles(
    label: &str,
    claim: ClaimMode,
    rounds: &[Samples],
) -> Result<Pooled, BenchError> {
    let quiet_by_round = rounds
        .iter()
        .map(|r| Percentiles::from_us(r.quiet_us.iter().copied()))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            BenchError::Settings(format!(
                "{label} ({}): a round measured no quiet-store action; lengthen --duration-s or raise the rate",
                claim_name(claim)
            ))
        })?;
    let quiet = Percentiles::median_of(&quiet_by_round).ok_or_else(|| {
        BenchError::Settings(format!("{label} ({}): no round ran", claim_name(claim)))
    })?;
    let wait_by_round: Vec<Percentiles> = rounds
        .iter()
        .filter_map(|r| Percentiles::from_us(r.quiet_wait_us.iter().copied()))
        .collect();
    let quiet_wait = Percentiles::median_of(&wait_by_round);
    let noisy_by_round: Vec<Percentiles> = rounds
        .iter()
        .filter_map(|r| Percentiles::from_us(r.noisy_us.iter().copied()))
        .collect();
    let noisy = Percentiles::median_of(&noisy_by_round);
    Ok(Pooled {
        quiet_by_round,
        quiet,
        quiet_wait,
        noisy,
    })
}

/// When the bursts were enqueued (the bulk scenario), seconds after the start.
fn bursts_s(cfg: &FairnessConfig, scenario: Scenario) -> Vec<f64> {
    if scenario == Scenario::Bulk {
        (0..cfg.noisy_stores)
            .flat_map(|i| cfg.shape().bursts(i))
            .map(|(at, _)| at / 1000.0)
            .collect()
    } else {
        Vec::new()
    }
}
