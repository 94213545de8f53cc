//! The chaos run in small: real worker processes SIGKILLed, PostgreSQL
//! crash-restarted, a worker frozen past its lease; the verifier must pass.
//! And its negative controls: broken workers (blind resends, new keys) must
//! make the same verifier fail, or a green table would prove nothing. They
//! need the binary built with the `negative-controls` feature, as
//! scripts/test.sh builds it (`cargo nextest run -p courier-cli --features
//! negative-controls --test chaos`).

use serde_json::Value;
use std::process::Command;

fn chaos(extra: &[&str], tag: &str) -> (bool, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join(format!("chaos-{tag}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args([
            "chaos",
            "--actions",
            "300",
            "--stores",
            "30",
            "--workers",
            "3",
            "--kills",
            "30",
            "--pg-restarts",
            "1",
            "--freezes",
            "1",
            "--duration-s",
            "12",
            "--seed",
            "7",
            "--timeout-s",
            "240",
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
fn a_small_chaos_run_passes_from_the_providers_log() {
    let (ok, r, stdout) = chaos(&[], "safe");
    assert!(ok, "{stdout}");
    assert_eq!(r["passed"], true);
    assert!(
        stdout.starts_with("courier chaos: seed 7"),
        "the seed comes first: {stdout}"
    );
    let done = &r["done"];
    assert_eq!(done["kills_confirmed"], 30, "{done}");
    assert_eq!(done["kills_sent"], 30);
    assert_eq!(done["pg_restarts"], 1);
    assert_eq!(done["freezes"], 1);
    let v = &r["verify"];
    assert_eq!(v["actions"], 300);
    assert_eq!(v["exactly_one"], 300);
    assert_eq!(v["violations"], 0);
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_blind_resends_of_a_broken_worker() {
    let (ok, r, stdout) = chaos(&["--unsafe-resend", "no-lookup"], "no-lookup");
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    assert_eq!(r["passed"], false);
    let blind = r["verify"]["blind_resends"]["count"].as_u64().unwrap();
    assert!(blind > 0, "{}", r["verify"]);
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_second_messages_of_a_broken_worker() {
    let (ok, r, stdout) = chaos(&["--unsafe-resend", "new-key"], "new-key");
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    let extra = r["verify"]["effects_for_unknown_keys"]["count"]
        .as_u64()
        .unwrap();
    assert!(extra > 0, "{}", r["verify"]);
}
