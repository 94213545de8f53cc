//! `courier bench soak --smoke`: real `serve` and `worker` processes pruning
//! with windows of seconds; checks that it runs, prints its series and its
//! thirds, writes the chart, and that the pruner kept the table from
//! growing without bound, and that each third reports its cores by role and
//! its statements (it judges no timing).

use std::process::Command;

#[test]
fn the_soak_smoke_runs_prunes_and_draws() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("soak.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args([
            "bench",
            "soak",
            "--smoke",
            "--statements",
            "--json",
            "--chart",
        ])
        .arg(&chart)
        .output()
        .expect("run courier bench soak");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let samples = report["samples"].as_array().expect("samples");
    assert!(samples.len() >= 6, "{report}");
    let enqueued = report["enqueued"].as_u64().unwrap();
    let last_actions = samples.last().unwrap()["actions"].as_i64().unwrap();
    // Retention 3 s: the table holds a few seconds of actions, not the run.
    assert!(
        (last_actions as u64) < enqueued,
        "nothing was pruned: {last_actions} actions of {enqueued} enqueued"
    );
    assert!(std::fs::metadata(&chart).unwrap().len() > 1_000);
    // Each third: the cores by role, and what the database spent its time
    // on (claims, settles and merges all write `actions` or `outbox`).
    for third in ["first", "last"] {
        let t = &report[third];
        assert!(t["cores"]["postgres"].as_f64().unwrap() > 0.0, "{t}");
        assert!(t["enqueued"].as_u64().unwrap() > 0, "{t}");
        let statements = t["statements"].as_array().expect("statements");
        assert!(
            statements.iter().any(|s| {
                let q = s["query"].as_str().unwrap();
                s["calls"].as_i64().unwrap() > 0 && (q.contains("actions") || q.contains("outbox"))
            }),
            "{third}: {statements:?}"
        );
    }
}
