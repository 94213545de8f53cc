//! The benchmarks in smoke mode, each against a real PostgreSQL cluster of
//! its own (and, for fairness, the fake provider over HTTP). These tests
//! check the structure of the output, never a timing: every scenario and
//! claim mode is present, percentiles are ordered, work was done, and the
//! chart was written.

use courier_bench::fairness::{self, FairnessConfig};
use courier_bench::scale::{self, ScaleConfig};
use courier_bench::schedule::Scenario;
use courier_bench::throughput::{self, ThroughputConfig};
use courier_store::ClaimMode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fairness_smoke_reports_every_scenario_and_writes_the_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("img/fairness.svg");
    let mut cfg = FairnessConfig::smoke(7);
    cfg.progress = false;
    let mut r = fairness::run(&cfg).await.expect("the smoke run completes");
    courier_bench::chart::write_fairness(&mut r, &chart).expect("the chart is drawn");

    assert_eq!(r.seed, 7);
    assert_eq!(r.runs.len(), 6, "three scenarios, two claim modes");
    for scenario in Scenario::ALL {
        for claim in [ClaimMode::Fair, ClaimMode::Fifo] {
            let run = r
                .run(scenario, claim)
                .unwrap_or_else(|| panic!("{scenario:?} {claim:?} is missing"));
            let q = run.quiet;
            assert!(q.count > 0, "{scenario:?} {claim:?}: no quiet actions");
            assert!(q.is_monotone(), "{scenario:?} {claim:?}: {q:?}");
            assert!(q.p50_ms > 0.0, "{scenario:?} {claim:?}: {q:?}");
            let noisy = run.noisy.expect("the noisy store has actions");
            assert!(noisy.is_monotone(), "{noisy:?}");
            assert!(run.throughput_per_s > 0.0);
            assert!(run.utilisation_measured > 0.0);
            assert!(run.quiet_p95_ratio.is_finite() && run.quiet_p95_ratio > 0.0);
            assert!(
                !run.timeline.is_empty(),
                "{scenario:?} {claim:?}: no timeline"
            );
            assert!(run.actions >= q.count + noisy.count);
        }
    }
    let base = r.run(Scenario::Baseline, ClaimMode::Fair).unwrap();
    assert_eq!(
        base.quiet_p95_ratio, 1.0,
        "the fair baseline is the reference"
    );
    // Bulk: the noisy store sends exactly the steady scenario's expected
    // total (5/s x 10 x 3 s), in bursts, at the same instants in both modes.
    for claim in [ClaimMode::Fair, ClaimMode::Fifo] {
        let bulk = r.run(Scenario::Bulk, claim).unwrap();
        assert_eq!(bulk.noisy.unwrap().count, 150, "{claim:?}");
        assert!(!bulk.bursts_s.is_empty());
    }
    // The same quiet arrivals in every scenario of a round (warm-up 0 in the
    // smoke: every quiet action is measured).
    let quiet = |scenario| r.run(scenario, ClaimMode::Fair).unwrap().quiet.count;
    assert_eq!(quiet(Scenario::Baseline), quiet(Scenario::Steady));
    assert_eq!(quiet(Scenario::Baseline), quiet(Scenario::Bulk));
    // The same schedule for both claim modes of a scenario.
    for scenario in Scenario::ALL {
        assert_eq!(
            r.run(scenario, ClaimMode::Fair).unwrap().actions,
            r.run(scenario, ClaimMode::Fifo).unwrap().actions,
            "{scenario:?}"
        );
    }

    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    for needle in ["every store equal", "one store 10x, bulk", "fair", "FIFO"] {
        assert!(svg.contains(needle), "the chart lacks {needle:?}");
    }
    assert_eq!(r.chart.as_deref(), Some(chart.as_path()));

    let table = r.table();
    for needle in [
        "every store equal",
        "one store 10x, steady",
        "one store 10x, bulk",
        "quiet p95",
        "target",
    ] {
        assert!(
            table.contains(needle),
            "the table lacks {needle:?}:\n{table}"
        );
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["runs"].as_array().unwrap().len(), 6);
    assert_eq!(json["settings"]["synchronous_commit"], "off");
    assert!(json["runs"][0]["quiet"]["p95_ms"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_smoke_reports_both_paths_and_the_ceiling() {
    let mut cfg = ThroughputConfig::smoke(7);
    cfg.progress = false;
    let r = throughput::run(&cfg)
        .await
        .expect("the smoke run completes");

    let modes: Vec<bool> = r.results.iter().map(|x| x.synchronous_commit).collect();
    assert_eq!(modes, vec![true, false]);
    for x in &r.results {
        let sc = x.synchronous_commit;
        assert!(x.pgbench.tps > 0.0 && x.pgbench.transactions > 0, "{sc}");
        for (name, p) in [
            ("claim to settle", &x.claim_to_settle),
            ("end to end", &x.end_to_end),
        ] {
            assert_eq!(p.actions, u64::from(cfg.actions), "{name} {sc}");
            assert!(p.actions_per_s > 0.0, "{name} {sc}");
            // The commits were counted, and batching shows: the claim writes
            // the intent and the first attempt, settles commit in groups, so
            // claim to settle costs fewer than the three commits (intent,
            // attempt, settle) of one-at-a-time writes. End to end adds the
            // webhook merges, and every checkout of a pooled connection
            // checks that its node takes writes (`SHOW
            // transaction_read_only`, counted as a transaction of its own:
            // 3.17 per action in a smoke run), so its bound is one higher.
            let bound = if name == "end to end" { 4.0 } else { 3.0 };
            assert!(
                p.transactions > 0 && p.transactions_per_action < bound,
                "{name} {sc}: {} transactions, {} per action",
                p.transactions,
                p.transactions_per_action
            );
            assert!(p.peak_rss_kib.is_some_and(|k| k > 0), "{name} {sc}");
        }
        // End to end adds the webhook merges (sent, delivered) to the same path.
        assert!(
            x.end_to_end.transactions_per_action > x.claim_to_settle.transactions_per_action,
            "{sc}: {} vs {}",
            x.end_to_end.transactions_per_action,
            x.claim_to_settle.transactions_per_action
        );
        assert!(x.claim_to_settle_vs_pgbench > 0.0);
        if r.settings.statement_statistics {
            assert!(!x.claim_to_settle.statements.is_empty());
        }
    }
    assert!(r.targets.worker_rss_kib.is_some());
    let table = r.table();
    for needle in [
        "pgbench",
        "claim to settle",
        "end to end",
        "targets",
        "tx/action",
    ] {
        assert!(
            table.contains(needle),
            "the table lacks {needle:?}:\n{table}"
        );
    }
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["results"].as_array().unwrap().len(), 2);
}

/// A row measured after its backlog ran out would time idle claims, not
/// draining ones: the run refuses it and says which flag to raise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_fails_when_a_backlog_runs_out_before_its_slices_end() {
    let mut cfg = ScaleConfig::smoke(7);
    cfg.progress = false;
    cfg.registered = vec![10];
    cfg.many_active = 0;
    cfg.actions = 10;
    cfg.slice_ms = 1_000;
    let err = scale::run(&cfg)
        .await
        .expect_err("10 actions cannot last a 1 s slice");
    assert!(err.to_string().contains("raise --actions"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_smoke_drains_every_shape_and_writes_the_chart() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("scale.svg");
    let mut cfg = ScaleConfig::smoke(7);
    cfg.progress = false;
    let mut r = scale::run(&cfg).await.expect("the smoke run completes");
    courier_bench::chart::write_scale(&mut r, &chart).expect("the chart is drawn");
    let shapes: Vec<(u32, u32, u32)> = r
        .rows
        .iter()
        .map(|x| (x.registered, x.active, x.scheduled))
        .collect();
    assert_eq!(
        shapes,
        vec![(10, 10, 0), (2_000, 10, 0), (200, 200, 0), (10, 10, 2_000)]
    );
    assert!(r.scheduled_ratio.is_some_and(|s| s > 0.0), "{r:?}");
    for row in &r.rows {
        assert!(
            row.actions > 0 && row.actions < u64::from(cfg.actions),
            "{row:?}"
        );
        assert!(
            row.slice_per_s_min <= row.drain_per_s && row.drain_per_s <= row.slice_per_s_max,
            "{row:?}"
        );
        assert!(row.claims > 0 && row.claim.is_monotone(), "{row:?}");
        assert!(row.drain_per_s > 0.0, "{row:?}");
    }
    assert!(r.registered_ratio.is_finite() && r.registered_ratio > 0.0);
    assert!(r.active_ratio.is_some_and(|a| a.is_finite() && a > 0.0));
    let svg = std::fs::read_to_string(&chart).expect("the chart was written");
    assert!(svg.starts_with("<svg") && svg.contains("stores registered"));
    let table = r.table();
    for needle in [
        "stores registered",
        "claim p99 ms",
        "drained per s",
        "target",
    ] {
        assert!(
            table.contains(needle),
            "the table lacks {needle:?}:\n{table}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_smoke_runs_every_path_and_counts_what_it_enqueued() {
    use courier_bench::enqueue::{self, EnqueueConfig, Path};
    let cfg = EnqueueConfig::smoke(7);
    let r = enqueue::run(&cfg, &Path::ALL)
        .await
        .expect("the smoke run completes");
    assert_eq!(r.rates.len(), Path::ALL.len());
    for rate in &r.rates {
        // The run itself checked the database holds exactly these.
        assert!(rate.actions > 0 && rate.actions_per_s > 0.0, "{rate:?}");
        assert!(rate.call_ms.is_some(), "{rate:?}");
    }
    assert!(r.storm_p99_ratio.is_some_and(|x| x > 0.0));
    assert!(r.table().contains("http single storm"));
}
