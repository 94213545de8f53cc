//! The flow scenarios' report: what each scenario carries, its figures and
//! verdicts computed from a run's samples (pure), and its text table.

use super::*;
use crate::fairness::pacing::{
    judge_pacing, pass, rate_holds, rate_over, Band, Pacing, SendLine, PACING_TOLERANCE,
};
use courier_verify::Report;

/// The flow scenarios of one run, each present when it ran.
#[derive(Debug, Clone, Serialize)]
pub struct FlowReport {
    /// The machine's 1-minute load average before the flow runs and after
    /// them: a figure read on a machine busy with other work says so.
    pub load_average_1m: (f64, f64),
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limited: Option<RateLimitedStore>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_429: Option<ProviderThrottled>,
}

impl FlowReport {
    /// Every verdict of every scenario that ran.
    pub fn met(&self) -> bool {
        self.rate_limited
            .as_ref()
            .is_none_or(|r| r.pacing.met && r.quiet_met)
            && self
                .provider_429
                .as_ref()
                .is_none_or(|p| p.throughput_met && p.exactly_once_met)
    }

    /// The scenarios' tables, PASS or MISS per verdict.
    pub fn table(&self) -> String {
        let (before, after) = self.load_average_1m;
        let mut out = format!(
            "\nflow scenarios: load average (1 min) {before:.2} before, {after:.2} after\n"
        );
        if let Some(r) = &self.rate_limited {
            out.push_str(&r.lines());
        }
        if let Some(p) = &self.provider_429 {
            out.push_str(&p.lines());
        }
        out
    }
}

/// One store given a rate and sent a burst, beside the quiet stores.
#[derive(Debug, Clone, Serialize)]
pub struct RateLimitedStore {
    pub store: String,
    pub rate_per_s: f64,
    /// Its bucket's size: sends that may leave at once.
    pub burst: u32,
    /// Actions enqueued for it at once as the load began.
    pub burst_actions: u32,
    pub window_s: u64,
    /// Its messages created in each window from its first, per round, from
    /// the provider's log.
    pub windows_by_round: Vec<Vec<u64>>,
    /// Every window after each round's first, against the rate.
    pub pacing: Pacing,
    /// The quiet stores' latency (enqueue to accepted, after the warm-up)
    /// in the baseline runs and beside the limited store: each figure the
    /// median over the rounds.
    pub quiet_baseline: Percentiles,
    pub quiet_limited: Percentiles,
    /// Each round's quiet p95 beside the limited store over its baseline's.
    pub ratio_by_round: Vec<f64>,
    /// The median of the rounds' ratios.
    pub quiet_p95_ratio: f64,
    pub quiet_ratio_max: f64,
    pub quiet_met: bool,
}

/// One round of the rate-limited scenario's pair.
pub(in crate::fairness) struct PairedRound {
    pub baseline_quiet_us: Vec<u64>,
    pub limited_quiet_us: Vec<u64>,
    pub windows: Vec<u64>,
}

/// The rate-limited scenario's figures and verdicts from its rounds.
pub(in crate::fairness) fn rate_limited_figures(
    cfg: &FairnessConfig,
    rounds: Vec<PairedRound>,
) -> Result<RateLimitedStore, BenchError> {
    let f = &cfg.flow;
    let quiet = |us: &[u64]| {
        Percentiles::from_us(us.iter().copied()).ok_or_else(|| {
            BenchError::Settings(
                "a rate-limited round measured no quiet-store action; raise --rate-per-store"
                    .into(),
            )
        })
    };
    let mut base = Vec::new();
    let mut limited = Vec::new();
    for r in &rounds {
        base.push(quiet(&r.baseline_quiet_us)?);
        limited.push(quiet(&r.limited_quiet_us)?);
    }
    let ratio_by_round: Vec<f64> = base
        .iter()
        .zip(&limited)
        .map(|(b, l)| ratio(l.p95_ms, b.p95_ms))
        .collect();
    let quiet_p95_ratio = median(ratio_by_round.iter().copied());
    let windows_by_round: Vec<Vec<u64>> = rounds.into_iter().map(|r| r.windows).collect();
    let band = Band::new(f.store_rate_per_s, f.window_s as f64, PACING_TOLERANCE);
    let no_round = || BenchError::Settings("--flow-rounds: no round ran".into());
    Ok(RateLimitedStore {
        store: store_name(LIMITED_STORE),
        rate_per_s: f.store_rate_per_s,
        burst: f.store_burst,
        burst_actions: f.store_burst_actions,
        window_s: f.window_s,
        pacing: judge_pacing(&windows_by_round, band),
        windows_by_round,
        quiet_baseline: Percentiles::median_of(&base).ok_or_else(no_round)?,
        quiet_limited: Percentiles::median_of(&limited).ok_or_else(no_round)?,
        ratio_by_round,
        quiet_p95_ratio,
        quiet_ratio_max: FAIR_RATIO_MAX,
        quiet_met: quiet_p95_ratio <= FAIR_RATIO_MAX,
    })
}

impl RateLimitedStore {
    fn lines(&self) -> String {
        let mut out = format!(
            "\nrate-limited store: {} at {}/s, burst {}, sent {} actions at once beside the quiet stores' load ({} round(s))\n",
            self.store,
            self.rate_per_s,
            self.burst,
            self.burst_actions,
            self.windows_by_round.len()
        );
        out.push_str(&format!(
            "  its messages created per {} s window from its first (the provider's log):\n",
            self.window_s
        ));
        for (i, w) in self.windows_by_round.iter().enumerate() {
            let counts: Vec<String> = w.iter().map(u64::to_string).collect();
            out.push_str(&format!("    round {}: {}\n", i + 1, counts.join(" | ")));
        }
        let p = &self.pacing;
        out.push_str(&format!(
            "  pacing, every window after the first within {}..={} ({:.0} ± {:.0}%): {} of {} within: {}\n",
            p.band.low,
            p.band.high,
            p.band.expected,
            PACING_TOLERANCE * 100.0,
            p.judged - p.outside,
            p.judged,
            pass(p.met)
        ));
        let (b, l) = (&self.quiet_baseline, &self.quiet_limited);
        let rounds: Vec<String> = self
            .ratio_by_round
            .iter()
            .map(|r| format!("{r:.2}x"))
            .collect();
        out.push_str(&format!(
            "  quiet stores p50/p95/p99 ms: baseline {:.1}/{:.1}/{:.1}, beside the limited store {:.1}/{:.1}/{:.1}\n\
             \x20 quiet p95 over the baseline's: {:.2}x (rounds {}; target <= {:.2}x): {}\n",
            b.p50_ms,
            b.p95_ms,
            b.p99_ms,
            l.p50_ms,
            l.p95_ms,
            l.p99_ms,
            self.quiet_p95_ratio,
            rounds.join(", "),
            self.quiet_ratio_max,
            pass(self.quiet_met)
        ));
        out
    }
}

/// The fake provider limited below the offered load, courier's ceiling
/// above it, every worker naming the provider's gate.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderThrottled {
    pub fake_limit_per_s: f64,
    pub fake_burst: u32,
    pub ceiling_per_s: f64,
    pub gate: &'static str,
    pub offered_per_s: f64,
    pub load_s: u64,
    /// The seconds judged, counted from the first message created.
    pub steady_from_s: u64,
    pub steady_to_s: u64,
    /// Actions enqueued.
    pub actions: u64,
    /// From the provider's log: messages created, and sends answered 429.
    pub created: u64,
    pub rate_limited: u64,
    /// Messages created in each second from the first.
    pub created_per_s: Vec<u64>,
    /// Over the steady part: messages created a second, and its slowest
    /// and fastest second.
    pub steady_per_s: f64,
    pub steady_second_min: u64,
    pub steady_second_max: u64,
    pub throughput_met: bool,
    /// The verifier's report: the provider's log against the database.
    pub verifier: Report,
    pub verifier_violations: u64,
    /// The verifier passed, and every action had exactly one effect.
    pub exactly_once_met: bool,
}

/// The provider-429 scenario's figures and verdicts from the provider's
/// log and the verifier's report.
pub(in crate::fairness) fn throttled_figures(
    f: &FlowConfig,
    fake_burst: u32,
    actions: u64,
    lines: &[SendLine],
    verifier: Report,
) -> ProviderThrottled {
    let times = created_ms(lines, |_| true);
    let origin = times.first().copied().unwrap_or(0);
    let seconds = times
        .last()
        .map_or(0, |t| usize::try_from((t - origin) / 1000 + 1).unwrap_or(0));
    let created_per_s = per_window(&times, origin, 1000, seconds);
    let (from, to) = (f.steady_from_s, f.throttled_load_s);
    let steady: Vec<u64> = created_per_s
        .iter()
        .skip(from as usize)
        .take((to - from) as usize)
        .copied()
        .collect();
    let steady_per_s = rate_over(&times, origin, from, to);
    ProviderThrottled {
        fake_limit_per_s: f.fake_limit_per_s,
        fake_burst,
        ceiling_per_s: f.ceiling_per_s,
        gate: GATE,
        offered_per_s: f.offered_per_s,
        load_s: f.throttled_load_s,
        steady_from_s: from,
        steady_to_s: to,
        actions,
        created: times.len() as u64,
        rate_limited: lines.iter().filter(|l| l.rate_limited).count() as u64,
        created_per_s,
        steady_per_s,
        steady_second_min: steady.iter().copied().min().unwrap_or(0),
        steady_second_max: steady.iter().copied().max().unwrap_or(0),
        throughput_met: rate_holds(steady_per_s, f.fake_limit_per_s, PACING_TOLERANCE),
        exactly_once_met: verifier.passed()
            && verifier.actions == actions
            && verifier.exactly_one == actions,
        verifier_violations: verifier.violations(),
        verifier,
    }
}

impl ProviderThrottled {
    fn lines(&self) -> String {
        let mut out = format!(
            "\nprovider 429: the fake limited to {}/s (burst {}), courier's ceiling {}/s on gate {:?} named by every worker, \
             {}/s offered for {} s: {} actions\n",
            self.fake_limit_per_s,
            self.fake_burst,
            self.ceiling_per_s,
            self.gate,
            self.offered_per_s,
            self.load_s,
            self.actions
        );
        let per_s: Vec<String> = self.created_per_s.iter().map(u64::to_string).collect();
        out.push_str(&format!(
            "  messages created per second from the first (the provider's log): {}\n",
            per_s.join(" ")
        ));
        let (low, high) = (
            self.fake_limit_per_s * (1.0 - PACING_TOLERANCE),
            self.fake_limit_per_s * (1.0 + PACING_TOLERANCE),
        );
        out.push_str(&format!(
            "  steady part ({}..{} s): {:.1} per s (slowest second {}, fastest {}); target {low:.1}..={high:.1} per s: {}\n",
            self.steady_from_s,
            self.steady_to_s,
            self.steady_per_s,
            self.steady_second_min,
            self.steady_second_max,
            pass(self.throughput_met)
        ));
        out.push_str(&format!(
            "  {} messages created; {} sends answered 429\n",
            self.created, self.rate_limited
        ));
        out.push_str(&format!(
            "  the verifier, the provider's log against the database ({}): {} violation(s), {} of {} actions with exactly one effect: {}\n",
            self.verifier.promise,
            self.verifier_violations,
            self.verifier.exactly_one,
            self.actions,
            pass(self.exactly_once_met)
        ));
        for line in self.verifier.table().lines() {
            out.push_str(&format!("  {line}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::pacing::send_lines;
    use courier_verify::{verify_reader, ReadLimits};

    /// A provider log: `keys` keys, one every 20 ms (50/s) from 0; every
    /// fourth first refused with a 429, then looked up (when `lookup`) and
    /// sent again.
    fn throttled_log(keys: u32, lookup: bool) -> String {
        let mut out = Vec::new();
        let mut seq = 0;
        let mut push = |at_ms: i64, rest: String| {
            seq += 1;
            let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + at_ms)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            out.push(format!(r#"{{"seq":{seq},"at":"{at}",{rest}}}"#));
        };
        for i in 0..keys {
            let at = i64::from(i) * 20;
            let key = format!("courier-k{i}");
            if i % 4 == 0 {
                let refused = r#""result":"rejected","fault":"rate_limited""#;
                push(at - 5, format!(r#""op":"send","key":"{key}",{refused}"#));
                if lookup {
                    push(
                        at - 3,
                        format!(r#""op":"lookup","key":"{key}","result":"not_found""#),
                    );
                }
            }
            let created = format!(r#""result":"created","message_id":"m{i}""#);
            push(at, format!(r#""op":"send","key":"{key}",{created}"#));
        }
        out.join("\n") + "\n"
    }

    fn judged(log: &str, f: &FlowConfig, actions: u64) -> ProviderThrottled {
        let verifier = verify_reader(log.as_bytes(), &ReadLimits::default(), None).unwrap();
        throttled_figures(f, 50, actions, &send_lines(log), verifier)
    }

    #[test]
    fn a_throttled_run_at_the_fakes_limit_with_lookups_before_resends_passes() {
        let f = FlowConfig::new();
        // 30 s at 50/s.
        let p = judged(&throttled_log(1_500, true), &f, 1_500);
        assert_eq!((p.created, p.rate_limited), (1_500, 375));
        assert_eq!(p.created_per_s.len(), 30);
        assert!((p.steady_per_s - 50.0).abs() < 1e-9, "{}", p.steady_per_s);
        assert_eq!((p.steady_second_min, p.steady_second_max), (50, 50));
        assert!(p.throughput_met && p.exactly_once_met, "{}", p.verifier);
        let text = p.lines();
        assert!(text.contains("5..30 s): 50.0 per s"), "{text}");
        assert!(!text.contains("MISS"), "{text}");
    }

    #[test]
    fn an_action_sent_twice_or_never_misses_exactly_once() {
        let f = FlowConfig::new();
        // A refused send creates nothing: a resend after it needs no lookup.
        let unlooked = judged(&throttled_log(1_500, false), &f, 1_500);
        assert!(unlooked.exactly_once_met, "{}", unlooked.verifier);
        // The first action created a second time, after a lookup found it.
        let mut log = throttled_log(1_500, true);
        let at = |ms: i64| {
            chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + ms)
                .unwrap()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        };
        let seq = log.lines().count();
        log.push_str(&format!(
            "{{\"seq\":{},\"at\":\"{}\",\"op\":\"lookup\",\"key\":\"courier-k0\",\"result\":\"found\"}}\n\
             {{\"seq\":{},\"at\":\"{}\",\"op\":\"send\",\"key\":\"courier-k0\",\"result\":\"created\",\"message_id\":\"m-again\"}}\n",
            seq + 1,
            at(30_001),
            seq + 2,
            at(30_002)
        ));
        let twice = judged(&log, &f, 1_500);
        assert!(twice.throughput_met);
        assert_eq!(twice.verifier.more_than_one.count, 1, "{}", twice.verifier);
        assert!(!twice.exactly_once_met);
        assert!(twice.lines().contains(": MISS"), "{}", twice.lines());
        // An action enqueued that the provider never created.
        let lost = judged(&throttled_log(1_500, true), &f, 1_501);
        assert!(!lost.exactly_once_met);
    }

    #[test]
    fn a_throttled_run_above_the_fakes_limit_misses_the_throughput_target() {
        let f = FlowConfig {
            fake_limit_per_s: 40.0,
            ..FlowConfig::new()
        };
        let p = judged(&throttled_log(1_500, true), &f, 1_500);
        assert!(!p.throughput_met, "50/s against 40/s ± 10%");
        assert!(p.exactly_once_met);
    }

    fn round(base_ms: u64, limited_ms: u64, windows: Vec<u64>) -> PairedRound {
        // 100 latencies each, the slowest ten at `ms`: the p95.
        let spread = |ms: u64| {
            (0..100)
                .map(|i| if i < 90 { 20_000 } else { ms * 1000 })
                .collect()
        };
        PairedRound {
            baseline_quiet_us: spread(base_ms),
            limited_quiet_us: spread(limited_ms),
            windows,
        }
    }

    #[test]
    fn the_rate_limited_verdicts_take_the_median_round_and_every_window() {
        let mut cfg = FairnessConfig::new(1);
        cfg.flow.rounds = 3;
        let paced = vec![55, 50, 49, 51, 50, 50];
        let rounds = vec![
            round(100, 100, paced.clone()),
            round(100, 105, paced.clone()),
            round(100, 150, paced.clone()),
        ];
        let r = rate_limited_figures(&cfg, rounds).unwrap();
        assert_eq!(r.ratio_by_round.len(), 3);
        assert!(
            (r.quiet_p95_ratio - 1.05).abs() < 0.01,
            "{}",
            r.quiet_p95_ratio
        );
        assert!(r.quiet_met && r.pacing.met);
        assert_eq!((r.pacing.judged, r.pacing.outside), (15, 0));
        assert!(r.lines().contains("45..=55"), "{}", r.lines());
        // A store paced at 7/s, and quiet stores slowed by 20% in most rounds.
        let rounds = vec![
            round(100, 120, vec![75, 70, 70]),
            round(100, 120, vec![75, 70, 70]),
        ];
        let r = rate_limited_figures(&cfg, rounds).unwrap();
        assert!(!r.pacing.met && !r.quiet_met);
        let report = FlowReport {
            load_average_1m: (0.5, 0.7),
            rate_limited: Some(r),
            provider_429: None,
        };
        assert!(!report.met());
        assert_eq!(
            report.table().matches("MISS").count(),
            2,
            "{}",
            report.table()
        );
    }

    #[test]
    fn flow_settings_are_valid_by_default_and_bad_ones_name_their_flag() {
        assert_eq!(FlowConfig::new().validate(), Ok(()));
        assert_eq!(FlowConfig::smoke().validate(), Ok(()));
        assert_eq!(FlowConfig::new().paced_load_s(), 62);
        let (rate, burst) = FlowConfig::new().fake_limit().unwrap();
        assert_eq!((rate.milli_per_s(), burst), (50_000, 50));
        let base = FlowConfig::new();
        let cases = [
            (
                FlowConfig {
                    store_rate_per_s: -1.0,
                    ..base.clone()
                },
                "--store-rate",
            ),
            (
                FlowConfig {
                    windows: 1,
                    ..base.clone()
                },
                "--windows",
            ),
            (
                FlowConfig {
                    fake_limit_per_s: 0.0,
                    ..base.clone()
                },
                "--fake-rate-limit",
            ),
            (
                FlowConfig {
                    steady_from_s: 30,
                    ..base.clone()
                },
                "--throttled-load-s",
            ),
            (
                FlowConfig {
                    rounds: 0,
                    ..base.clone()
                },
                "--flow-rounds",
            ),
        ];
        for (f, flag) in cases {
            let err = f.validate().expect_err(flag);
            assert!(err.contains(flag), "{err:?} does not name {flag}");
        }
        let mut cfg = FairnessConfig::new(1);
        cfg.scenarios = Scenarios {
            classic: false,
            rate_limited_store: false,
            provider_429: false,
        };
        assert!(cfg.validate().unwrap_err().contains("--scenarios"));
        cfg.scenarios = Scenarios::ALL;
        cfg.flow.windows = 0;
        assert!(cfg.validate().unwrap_err().contains("--windows"));
    }
}
