//! The provider's benchmark as a test: a small run in the suite (it must
//! finish without errors and its log must hold every send), and the full
//! measurement behind `--ignored` for a release build:
//! `cargo nextest run --release -p courier-bench --test provider --run-ignored only --no-capture`.

use courier_bench::provider::{run, BenchConfig};

fn sends_from_env(default: u64) -> u64 {
    std::env::var("COURIER_BENCH_SENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_bench_run_has_no_errors_and_logs_every_send() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("bench.jsonl");
    let r = run(BenchConfig {
        sends: 2_000,
        concurrency: 16,
        seconds: None,
        log_path: Some(log.clone()),
    })
    .await
    .unwrap();
    assert_eq!((r.sends, r.errors), (2_000, 0));
    let created = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(r#""result":"created""#))
        .count();
    assert_eq!(created, 2_000);
    assert!(r.log_lines >= 2_000 && r.p50_us <= r.p99_us && r.p99_us <= r.max_us);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run it in a release build"]
async fn bench_full() {
    let r = run(BenchConfig {
        sends: sends_from_env(200_000),
        concurrency: 64,
        seconds: None,
        log_path: None,
    })
    .await
    .unwrap();
    eprintln!(
        "sends {} in {:.2} s: {:.0} sends/s; errors {}; p50 {:.2} ms p99 {:.2} ms max {:.2} ms; log lines {}",
        r.sends,
        r.elapsed.as_secs_f64(),
        r.sends_per_s,
        r.errors,
        r.p50_us as f64 / 1e3,
        r.p99_us as f64 / 1e3,
        r.max_us as f64 / 1e3,
        r.log_lines
    );
    assert_eq!(r.errors, 0);
}
