//! The relay on the cluster in small: 3 etcd members and 3 nats-servers
//! (stream replicas 3), every leader fault of the long run once, plus relay
//! and worker kills; the counter must be exact, the fault table whole, and
//! commits must resume while the stream leader's server is still stopped.
//! And its negative control: a consumer without its dedup record, hit only
//! by the cluster's faults, must double effects, and the checker must say so.
#![cfg(feature = "relay")]

use serde_json::Value;
use std::process::Command;

fn relay_run(extra: &[&str], tag: &str) -> (bool, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join(format!("relay-{tag}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args([
            "relay",
            "run",
            "--cluster",
            "--tasks",
            "300",
            "--no-progress",
        ])
        .args(["--deadline-s", "400", "--report"])
        .arg(&report)
        .args(extra)
        .output()
        .expect("courier runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = format!("{stdout}\n{stderr}");
    let json = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}); output:\n{text}"));
    (
        out.status.success(),
        serde_json::from_str(&json).unwrap(),
        text,
    )
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

#[test]
fn cluster_run_survives_every_leader_fault_with_an_exact_counter() {
    let (ok, r, out) = relay_run(&["--seed", "11"], "reference");
    assert!(out.starts_with("seed: 11\n"), "{out}");
    assert!(ok, "{out}");
    assert_eq!(r["passed"], true, "{out}");
    assert_eq!(u(&r, "counter"), u(&r, "expected_counter"), "{out}");
    assert_eq!(u(&r, "results"), 300, "{out}");
    assert_eq!(u(&r, "dedup_records"), 300, "{out}");
    assert_eq!(r["effects"]["doubled_amount"], 0, "{out}");
    assert_eq!(r["effects"]["lost_tasks"], 0, "{out}");
    let rows = r["fault_table"].as_array().unwrap();
    assert_eq!(rows.len(), 7, "{out}");
    for row in rows {
        assert!(u(row, "count") >= 1, "{row} never injected:\n{out}");
        assert!(
            row["recovery_ms_max"].is_u64(),
            "{row}: no commit followed:\n{out}"
        );
    }
    for f in r["faults"].as_array().unwrap() {
        let confirmed = f["confirmed"].as_str().unwrap();
        let by_stop = f["kind"] == "nats-stop";
        let expect = if by_stop { "SIGSTOP" } else { "SIGKILL" };
        assert!(confirmed.contains(expect), "{f}");
        assert_eq!(f["restored"], true, "{f}");
        if by_stop {
            // Stopped for its seeded time, past the others' election.
            let (down, leader) = (u(f, "down_ms"), u(f, "new_leader_ms"));
            assert!(down >= 12_000 && leader < down, "{f}");
        }
    }
    // Commits resumed while the stopped server was still stopped.
    let stop = rows.iter().find(|r| r["kind"] == "nats-stop").unwrap();
    assert_eq!(u(stop, "resumed_after_cont"), 0, "{stop}\n{out}");
    assert!(u(stop, "recovery_ms_max") < u(stop, "down_ms_max"), "{out}");
    assert!(out.contains("| SIGKILL etcd leader | 1 | 1 |"), "{out}");
}

/// Whether a leader change lands between a broken consumer's commit and its
/// ack (so that the message comes back and is applied again) depends on
/// timing: one fresh-machine run of seed 4 had 52 redeliveries, all of
/// messages not yet applied, and no doubled effect. Every run must fail the
/// checker (the missing dedup records are found whatever the timing); the
/// doubled effect, the harm itself, must show in one of up to three seeds.
const NO_DEDUP_SEEDS: [&str; 3] = ["4", "5", "6"];

#[test]
fn a_consumer_without_dedup_doubles_effects_across_leader_changes() {
    let mut outputs = Vec::new();
    for seed in NO_DEDUP_SEEDS {
        let (ok, r, out) = relay_run(
            &[
                "--seed",
                seed,
                "--protocol",
                "no-dedup",
                "--no-process-kills",
            ],
            "no-dedup",
        );
        assert!(!ok, "the broken consumer passed:\n{out}");
        assert_eq!(r["passed"], false);
        assert_eq!(u(&r, "relay_kills") + u(&r, "worker_kills"), 0, "{out}");
        assert!(out.contains("VIOLATED dedup-per-result"), "{out}");
        if u(&r["effects"], "doubled_amount") > 0 {
            assert!(u(&r, "counter") > u(&r, "expected_counter"), "{out}");
            assert!(out.contains("effects: DOUBLED"), "{out}");
            assert!(out.contains("VIOLATED single-effect"), "{out}");
            return;
        }
        outputs.push(out);
    }
    panic!(
        "no seed of {NO_DEDUP_SEEDS:?} doubled an effect of the consumer without dedup:\n{}",
        outputs.join("\n---\n")
    );
}
