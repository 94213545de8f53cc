//! The fairness benchmark's flow scenarios in smoke mode, against a real
//! PostgreSQL cluster and the fake provider over HTTP: a rate-limited store
//! under a burst, and the fake's own rate limit below the offered load.
//! These tests check the structure of the report and what must hold
//! whatever the timing (every action of the 429 run has exactly one
//! effect; the limited store never exceeds its bucket); no pacing or
//! latency target is judged.

use courier_bench::fairness::{self, FairnessConfig, Scenarios};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_smoke_reports_both_scenarios_and_the_verifier_passes() {
    let mut cfg = FairnessConfig::smoke(7);
    cfg.progress = false;
    cfg.scenarios = Scenarios {
        classic: false,
        ..Scenarios::ALL
    };
    let r = fairness::run(&cfg).await.expect("the smoke run completes");
    assert!(r.runs.is_empty(), "the classic scenarios did not run");
    let flow = r.flow.as_ref().expect("the flow scenarios ran");

    let limited = flow
        .rate_limited
        .as_ref()
        .expect("the rate-limited store ran");
    assert_eq!(limited.store, "store-000");
    assert_eq!(limited.windows_by_round.len(), 1);
    let windows = &limited.windows_by_round[0];
    assert_eq!(windows.len(), cfg.flow.windows as usize);
    // Whatever the timing, no window holds more than the bucket allows
    // (its burst plus its rate over the window, one more for a window's
    // edges), and the store sent something.
    let f = &cfg.flow;
    let bound = f64::from(f.store_burst) + f.store_rate_per_s * f.window_s as f64 + 1.0;
    assert!(windows.iter().all(|w| *w as f64 <= bound), "{windows:?}");
    assert!(windows[0] > 0, "{windows:?}");
    assert!(limited.quiet_baseline.count > 0 && limited.quiet_limited.count > 0);
    assert!(limited.quiet_p95_ratio.is_finite() && limited.quiet_p95_ratio > 0.0);

    let throttled = flow
        .provider_429
        .as_ref()
        .expect("the provider-429 run ran");
    assert!(throttled.actions > 0);
    assert_eq!(
        throttled.created, throttled.actions,
        "one message per action"
    );
    assert!(throttled.verifier.passed(), "{}", throttled.verifier);
    assert!(throttled.exactly_once_met, "{}", throttled.verifier);
    assert_eq!(throttled.fake_burst, 50, "one second's worth of 50/s");

    let table = r.table();
    for needle in [
        "rate-limited store",
        "provider 429",
        "the verifier",
        "| check | result |",
    ] {
        assert!(
            table.contains(needle),
            "the table lacks {needle:?}:\n{table}"
        );
    }
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["flow"]["rate_limited"]["windows_by_round"][0].is_array());
    assert!(json["flow"]["provider_429"]["verifier"]["exactly_one"].is_number());
}
