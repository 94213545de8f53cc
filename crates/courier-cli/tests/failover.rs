//! The failover run in small, as CI runs it: a local HA cluster (3 etcd
//! members, Patroni with a primary and two synchronous standbys), a few
//! hundred actions, worker SIGKILLs and one node death of the primary
//! (Patroni and PostgreSQL SIGKILLed together): every acknowledged enqueue
//! is still there, nothing went backwards, one effect per action. And its
//! negative control: asynchronous replication and a failover that loses the
//! tail of the WAL must make the same checker fail.
//!
//! Needs Patroni and etcd (`scripts/install-deps.sh` installs them).

use serde_json::Value;
use std::process::Command;

fn failover_run(extra: &[&str], tag: &str) -> (bool, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join(format!("failover-{tag}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args([
            "chaos",
            "--actions",
            "300",
            "--stores",
            "30",
            "--workers",
            "3",
        ])
        .args(["--kills", "10", "--freezes", "0", "--duration-s", "20"])
        .args([
            "--seed",
            "7",
            "--timeout-s",
            "150",
            "--stall-s",
            "15",
            "--report",
        ])
        .arg(&report)
        .args(extra)
        .output()
        .expect("run courier chaos");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
        panic!(
            "no report ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        out.status.success(),
        serde_json::from_str(&text).unwrap(),
        stdout,
    )
}

#[test]
fn a_node_death_of_the_synchronous_primary_loses_nothing() {
    // One failover only: a node death (no pause, switchover or postmaster kill).
    let one = ["--failover", "--node-deaths", "1", "--pauses", "0"];
    let (ok, r, stdout) = failover_run(
        &[&one[..], &["--switchovers", "0", "--postmaster-kills", "0"]].concat(),
        "sync",
    );
    assert!(ok, "{stdout}");
    let f = &r["done"]["failover"];
    assert_eq!(f["node_deaths"], 1, "{f}");
    // The dead node rejoins after the failover: the run saw the cluster
    // unhealthy for a while, and its stall clock stood still meanwhile.
    assert!(f["unhealthy_ms"].as_u64().unwrap() > 0, "{f}");
    assert!(
        f["timeline"].as_u64().unwrap() >= 2,
        "the timeline moved on: {f}"
    );
    // Every enqueue was acknowledged, but an expiring one the server
    // refused because its deadline passed while the cluster failed over.
    let intent = &r["done"]["intent"];
    let expired_at_enqueue = intent["expired_at_enqueue"].as_u64().unwrap();
    assert_eq!(
        f["acked"].as_u64().unwrap() + expired_at_enqueue,
        300,
        "{f} {intent}"
    );
    assert_eq!(f["acked_missing"], 0, "{f}");
    assert_eq!(f["went_backwards"], 0, "{f}");
    let v = &r["verify"];
    assert_eq!(v["exactly_one"], v["actions"], "{v}");
    assert_eq!(v["violations"], 0, "{v}");
}

#[test]
fn the_checker_fails_when_an_asynchronous_failover_loses_acknowledged_writes() {
    let (ok, r, stdout) = failover_run(&["--failover-control"], "control");
    assert!(!ok, "the control must fail:\n{stdout}");
    assert_eq!(r["passed"], false);
    let f = &r["done"]["failover"];
    assert_eq!(f["lossy_deaths"], 1, "{f}");
    let missing = f["acked_missing"].as_u64().unwrap();
    assert!(missing > 0, "acknowledged enqueues were lost: {f}");
    // A failed run keeps its directory for the post-mortem; this failure
    // is the expected one.
    let kept = stdout
        .lines()
        .find_map(|l| l.strip_prefix("run directory kept: "));
    if let Some(dir) = kept {
        std::fs::remove_dir_all(dir.trim()).ok();
    }
}
