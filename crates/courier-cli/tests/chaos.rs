//! The chaos run in small: real worker processes SIGKILLed, PostgreSQL
//! crash-restarted, a worker frozen past its lease, a share of the actions
//! scheduled, expiring or cancelled; the verifier must pass, at every
//! guarantee tier by that tier's promise. And its negative controls: broken
//! workers (blind resends, new keys, sends past expires_at, a tier-c worker
//! that resends, a tier-b worker that trusts a "not found" at once) must
//! make the same verifier fail, or a green table would prove nothing. They need the binary built with the `negative-controls`
//! feature, as scripts/test.sh builds it (`cargo nextest run -p courier-cli
//! --features negative-controls --test chaos`).

use serde_json::Value;
use std::process::Command;

/// The small run's flags, then `extra`.
fn chaos(extra: &[&str], tag: &str) -> (bool, Value, String) {
    chaos_killing("30", extra, tag)
}

/// The small run with `kills` SIGKILLs. The broken resend modes act on a
/// time-out their worker lives through: under thirty kills in twelve
/// seconds (a worker lives about a second, a held answer takes one) a
/// loaded machine can kill every such worker first, and the control then
/// has nothing to catch (seen once in a full test run); their runs kill
/// fewer.
fn chaos_killing(kills: &str, extra: &[&str], tag: &str) -> (bool, Value, String) {
    let small = [
        "--actions",
        "300",
        "--stores",
        "30",
        "--workers",
        "3",
        "--kills",
        kills,
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
    ];
    let args: Vec<&str> = small.iter().chain(extra).copied().collect();
    chaos_with(&args, tag)
}

/// `courier chaos` with `args` and a report: whether it exited 0, the
/// report, and its stdout.
fn chaos_with(args: &[&str], tag: &str) -> (bool, Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join(format!("chaos-{tag}.json"));
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg("chaos")
        .args(args)
        .arg("--report")
        .arg(&report)
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

fn count(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v["count"].as_u64())
        .unwrap_or_else(|| panic!("not a count: {v}"))
}

/// One worker working two actions at a time, 150 actions enqueued within a
/// second, half of them expiring 0.2 to 0.6 s after their enqueue, no
/// faults but the provider's own: a backlog of seconds, so most expiring
/// actions are still pending past their deadline plus the verifier's clock
/// margin.
const BACKLOG: [&str; 30] = [
    "--actions",
    "150",
    "--stores",
    "10",
    "--workers",
    "1",
    "--concurrency",
    "2",
    "--kills",
    "0",
    "--pg-restarts",
    "0",
    "--freezes",
    "0",
    "--duration-s",
    "1",
    "--seed",
    "7",
    "--timeout-s",
    "120",
    "--scheduled-share",
    "0",
    "--expiring-share",
    "0.5",
    "--cancel-share",
    "0",
    "--expires-min-ms",
    "200",
    "--expires-max-ms",
    "600",
];

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
    assert_eq!(v["violations"], 0);
    assert_eq!(v["exactly_one"], v["actions"]);
    // The intent rows are judged (not left to the database) and pass.
    for row in [
        "cancelled_with_effect",
        "sent_before_not_before",
        "sent_after_expires_at",
    ] {
        assert_eq!(count(&v[row]), 0, "{row}: {v}");
    }
    assert_eq!(v["expiry_clock_margin_ms"], 1000);
    for row in [
        "cancelled actions the provider created anyway | 0 |",
        "actions sent before their not_before | 0 |",
        "actions sent more than 1000 ms after their expires_at | 0 |",
    ] {
        assert!(stdout.contains(row), "{row}: {stdout}");
    }
    // The load asked for each kind, and the verifier saw what the
    // database ended.
    let intent = &done["intent"];
    let asked = |k: &str| count(&intent[k]);
    assert!(asked("scheduled") > 0 && asked("expiring") > 0, "{intent}");
    assert!(asked("cancels_sent") > 0, "{intent}");
    assert_eq!(
        asked("cancels_sent"),
        asked("cancels_accepted") + asked("cancels_refused"),
        "each cancel was answered 200 or 409: {intent}"
    );
    let stats = &v["stats"];
    assert_eq!(count(&stats["actions_cancelled"]), asked("cancelled"));
    assert_eq!(count(&stats["actions_expired"]), asked("expired"));
    assert!(asked("cancelled") >= asked("cancels_accepted"), "{intent}");
    assert_eq!(count(&stats["actions_scheduled"]), asked("scheduled"));
}

/// The backlog with correct workers: expiring actions still pending past
/// their deadline end expired, unsent, and the run passes. The same load
/// is the expiry's negative control below.
#[test]
fn a_backlog_of_expiring_actions_ends_them_expired_and_unsent() {
    let (ok, r, stdout) = chaos_with(&BACKLOG, "backlog");
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(count(&v["sent_after_expires_at"]), 0);
    let expired = count(&r["done"]["intent"]["expired"]);
    assert!(expired > 0, "the backlog expired nothing: {}", r["done"]);
    assert_eq!(count(&v["stats"]["actions_expired_unsent"]), expired);
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_sends_after_expires_at_of_a_worker_that_ignores_it() {
    let mut args = BACKLOG.to_vec();
    args.push("--unsafe-ignore-expiry");
    let (ok, r, stdout) = chaos_with(&args, "ignore-expiry");
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    assert_eq!(r["passed"], false);
    assert_eq!(r["unsafe_ignore_expiry"], true);
    let v = &r["verify"];
    let late = count(&v["sent_after_expires_at"]);
    assert!(late > 0, "{v}");
    assert_eq!(
        count(&v["violations"]),
        late,
        "the late sends are the only violation: {v}"
    );
    assert_eq!(count(&r["done"]["intent"]["expired"]), 0, "{}", r["done"]);
    assert!(stdout.contains(&format!(
        "| actions sent more than 1000 ms after their expires_at | {late} |"
    )));
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_blind_resends_of_a_broken_worker() {
    let (ok, r, stdout) = chaos_killing("3", &["--unsafe-resend", "no-lookup"], "no-lookup");
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    assert_eq!(r["passed"], false);
    let blind = r["verify"]["blind_resends"]["count"].as_u64().unwrap();
    assert!(blind > 0, "{}", r["verify"]);
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_second_messages_of_a_broken_worker() {
    let (ok, r, stdout) = chaos_killing("3", &["--unsafe-resend", "new-key"], "new-key");
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    let extra = r["verify"]["effects_for_unknown_keys"]["count"]
        .as_u64()
        .unwrap();
    assert!(extra > 0, "{}", r["verify"]);
}

/// The small run at a lower guarantee tier: the fake leaves out what the
/// tier lacks, and the verdict is the tier's promise.
fn tier_run(tier: &str, extra: &[&str]) -> (bool, Value, String) {
    let mut args = vec!["--tier", tier];
    args.extend_from_slice(extra);
    // A negative control acts on a time-out its worker lives through:
    // fewer kills, as for the broken resend modes (`chaos_killing`).
    let kills = if extra.contains(&"--unsafe-worker-tier") {
        "3"
    } else {
        "30"
    };
    chaos_killing(kills, &args, &format!("tier-{tier}"))
}

#[test]
fn tier_a_minus_resends_with_the_same_key_and_keeps_exactly_one_effect() {
    let (ok, r, stdout) = tier_run("a-", &[]);
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(
        (r["tier"].as_str(), v["promise"].as_str()),
        (Some("a-"), Some("exactly-once-by-resend")),
        "{r}"
    );
    assert_eq!(v["violations"], 0, "{v}");
    // No lookup was asked of a provider that has none.
    assert_eq!(count(&v["stats"]["lookup_lines"]), 0, "{v}");
    assert_eq!(count(&v["more_than_one"]), 0);
}

#[test]
fn tier_b_trusts_a_not_found_only_after_the_lag_and_keeps_exactly_one_effect() {
    let (ok, r, stdout) = tier_run("b", &[]);
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(v["promise"], "exactly-once");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["exactly_one"], v["actions"]);
    assert!(count(&v["stats"]["lookup_lines"]) > 0, "{v}");
}

#[test]
fn tier_c_holds_what_it_cannot_know_and_never_sends_twice() {
    let (ok, r, stdout) = tier_run("c", &[]);
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(v["promise"], "at-most-once");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(count(&v["more_than_one"]), 0);
    assert_eq!(count(&v["stats"]["lookup_lines"]), 0, "{v}");
    // The kills leave counted attempts nobody can look up: held, listed.
    let held = count(&r["done"]["held_unknown"]);
    assert!(held > 0, "{}", r["done"]);
    assert!(count(&v["unknown_held"]["actions"]) >= held, "{v}");
}

#[test]
fn tier_c_resend_sends_again_and_counts_its_duplicates() {
    let (ok, r, stdout) = tier_run("c-resend", &[]);
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(v["promise"], "at-least-once");
    assert_eq!(v["violations"], 0, "{v}");
    // Every action has an effect, but for those held past their deadline
    // (a resend there would go out late).
    assert_eq!(count(&v["no_effect"]), 0, "{v}");
    assert!(v["duplicates_allowed"].is_object(), "{v}");
    assert!(count(&v["stats"]["lookup_lines"]) == 0, "{v}");
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_a_tier_c_worker_that_resends_under_hold() {
    let (ok, r, stdout) = tier_run("c", &["--unsafe-worker-tier", "c-resend"]);
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    let v = &r["verify"];
    assert_eq!(v["promise"], "at-most-once");
    assert!(
        count(&v["more_than_one"]) + count(&v["blind_resends"]) > 0,
        "{v}"
    );
}

#[cfg(feature = "negative-controls")]
#[test]
fn the_verifier_catches_a_tier_b_worker_that_trusts_a_not_found_at_once() {
    let (ok, r, stdout) = tier_run("b", &["--unsafe-worker-tier", "a"]);
    assert!(!ok, "a broken worker must fail the run:\n{stdout}");
    let v = &r["verify"];
    assert!(count(&v["more_than_one"]) > 0, "{v}");
}

/// The small run through a named provider's adapter, against its double:
/// its wire format, its signed callbacks, judged by its tier's promise.
fn named_run(provider: &str) -> (bool, Value, String) {
    chaos(&["--provider", provider], &format!("provider-{provider}"))
}

#[test]
fn twilio_through_its_double_keeps_tier_c_s_promise() {
    let (ok, r, stdout) = named_run("twilio");
    assert!(ok, "{stdout}");
    assert_eq!(
        (r["named"].as_str(), r["tier"].as_str()),
        (Some("twilio"), Some("c"))
    );
    let v = &r["verify"];
    assert_eq!(v["promise"], "at-most-once");
    assert_eq!(v["violations"], 0, "{v}");
    // Statuses reached courier through Twilio's signed callbacks.
    assert_eq!(count(&v["outcomes_differ"]), 0, "{v}");
    assert!(count(&v["exactly_one"]) > 0, "{v}");
}

#[test]
fn telnyx_through_its_double_keeps_tier_c_s_promise() {
    let (ok, r, stdout) = named_run("telnyx");
    assert!(ok, "{stdout}");
    let v = &r["verify"];
    assert_eq!(v["promise"], "at-most-once");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(count(&v["outcomes_differ"]), 0, "{v}");
}

#[test]
fn infobip_through_its_double_keeps_tier_a_s_promise() {
    let (ok, r, stdout) = named_run("infobip");
    assert!(ok, "{stdout}");
    assert_eq!(r["tier"], "a");
    let v = &r["verify"];
    assert_eq!(v["promise"], "exactly-once");
    assert_eq!(v["violations"], 0, "{v}");
    assert_eq!(v["exactly_one"], v["actions"]);
    // Its lookup by messageId was asked after unknown outcomes.
    assert!(count(&v["stats"]["lookup_lines"]) > 0, "{v}");
}

/// A run with nothing done to it (no kills, restarts or freezes, the fake
/// without faults, no scheduled, expiring or cancelled actions): flow
/// control is judged from the provider's log, not only reported.
fn clean_flow_run(extra: &[&str], tag: &str) -> (bool, Value, String) {
    let clean = [
        "--actions",
        "300",
        "--stores",
        "4",
        "--noisy-factor",
        "1",
        "--workers",
        "3",
        "--kills",
        "0",
        "--pg-restarts",
        "0",
        "--freezes",
        "0",
        "--duration-s",
        "2",
        "--scheduled-share",
        "0",
        "--expiring-share",
        "0",
        "--cancel-share",
        "0",
        "--provider-faults-off",
        "--seed",
        "3",
        "--timeout-s",
        "180",
    ];
    let args: Vec<&str> = clean.iter().chain(extra).copied().collect();
    chaos_with(&args, tag)
}

/// A store's bucket lives in PostgreSQL: three worker processes claiming
/// at once share it, and the provider's log shows it. At 10/s with a
/// burst of 5, no 1 s window holds more than 15 of the store's messages,
/// and its ~75 messages take at least (n - 5) / 10 s.
#[test]
fn a_stores_bucket_holds_across_worker_processes_by_the_providers_log() {
    let (ok, r, out) = clean_flow_run(
        &[
            "--store-rate",
            "10",
            "--store-burst",
            "5",
            "--rated-stores",
            "1",
        ],
        "bucket",
    );
    assert!(ok, "{out}");
    let flow = &r["done"]["flow"];
    assert_eq!(flow["judged"], true, "{flow}");
    let p = &flow["pacing"][0];
    assert_eq!(p["store"], "store-000");
    let created = p["created"].as_f64().unwrap();
    assert!(created >= 50.0, "the store's share of the load: {p}");
    assert!(
        p["max_1s"].as_f64().unwrap() <= 15.0 + 1.0,
        "more than the bucket allows in a second: {p}"
    );
    let least_s = (created - 5.0) / 10.0;
    assert!(
        p["span_s"].as_f64().unwrap() >= least_s - 0.3,
        "faster than 10/s: {p}"
    );
}

/// The fake answers 429 over 20 sends a second; the worker that gets one
/// pauses every worker process (provider_gates), and (but for a straggler
/// of a loaded machine) no request reaches the provider from 500 ms after a
/// 429 until its Retry-After ends. Every
/// 429'd action is looked up before it is sent again, and sent once.
#[test]
fn a_429_pauses_every_worker_process() {
    let (ok, r, out) = clean_flow_run(&["--provider-rate-limit", "20"], "pause");
    assert!(ok, "{out}");
    let flow = &r["done"]["flow"];
    let limited = count(&flow["rate_limited"]);
    assert!(limited > 0, "no 429 to pause for: {flow}");
    // A straggler a loaded machine sends late is let pass, one for every
    // 20 429s (courier_rig::flow::FlowDone::passed); the negative control
    // below puts in about one for every 1.5.
    assert!(count(&flow["pause_breaches"]) * 20 <= limited, "{flow}");
    assert_eq!(r["verify"]["passed"], true);
}

/// The negative control of the shared pause: workers naming gates of their
/// own keep sending while another is paused, and the count sees it. Only
/// the count is asserted, not the run's verdict: each such worker soon
/// meets a 429 of its own, which the count takes as a pause of its own, so
/// the broken runs put 3 to 84 requests inside pauses beside 131 to 144
/// 429s, sometimes under the verdict's one for every 20: a weak separation.
#[cfg(feature = "negative-controls")]
#[test]
fn the_pause_check_catches_workers_that_do_not_share_a_pause() {
    let (_, r, _) = clean_flow_run(
        &["--provider-rate-limit", "20", "--unsafe-unshared-gates"],
        "unshared",
    );
    let flow = &r["done"]["flow"];
    assert!(count(&flow["pause_breaches"]) > 0, "{flow}");
    // Exactly one effect still: the shared pause is about the provider's
    // limits, not about duplicates.
    assert_eq!(r["verify"]["passed"], true);
}

/// The small chaos run with two stores rate-limited and a provider that
/// answers 429 over 40 sends a second: exactly one effect per action under
/// the kills, the restart and the freeze (the pacing is reported, not
/// judged, under faults).
#[test]
fn chaos_passes_with_rated_stores_and_a_provider_answering_429() {
    let (ok, r, out) = chaos(
        &[
            "--store-rate",
            "5",
            "--rated-stores",
            "2",
            "--provider-rate-limit",
            "40",
        ],
        "flow",
    );
    assert!(ok, "{out}");
    let flow = &r["done"]["flow"];
    assert_eq!(flow["judged"], false);
    assert_eq!(flow["pacing"].as_array().map(Vec::len), Some(2), "{flow}");
}
