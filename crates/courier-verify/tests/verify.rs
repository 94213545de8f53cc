//! The verifier against hand-made logs: a clean log passes, and each kind of
//! violation is caught with its exact count.

use courier_core::Status;
use courier_verify::{
    read_expectations, read_log, read_log_with, verify, verify_log, verify_reader, Expectation,
    ReadLimits, Report, VerifyError, NEEDS_DATABASE,
};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/verify")
        .join(name)
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

/// Numbers the given line bodies from seq 1 and joins them into a log.
fn log(bodies: &[String]) -> String {
    bodies
        .iter()
        .enumerate()
        .map(|(i, b)| format!(r#"{{"seq":{},"at":"2026-01-01T00:00:00Z",{b}}}"#, i + 1) + "\n")
        .collect()
}

fn send(key: &str, result: &str) -> String {
    let id = if result == "created" || result == "replayed" {
        format!(r#","message_id":"msg_{key}""#)
    } else {
        String::new()
    };
    format!(r#""op":"send","key":"{key}","result":"{result}"{id}"#)
}

fn lookup(key: &str, result: &str) -> String {
    format!(r#""op":"lookup","key":"{key}","result":"{result}""#)
}

fn status(key: &str, status: &str) -> String {
    let fin = status == "delivered" || status == "failed";
    format!(
        r#""op":"status","key":"{key}","message_id":"msg_{key}","status":"{status}","final":{fin}"#
    )
}

fn check(text: &str, expected: Option<&[Expectation]>) -> Report {
    let log = read_log(text.as_bytes()).expect("the log reads");
    verify_log(&log, expected)
}

fn expect(key: &str, id: u32, courier_final: Option<Status>) -> Expectation {
    Expectation {
        key: key.to_string(),
        action_id: id.to_string(),
        courier_final,
        refused: false,
        not_before: None,
        expires_at: None,
        cancelled: false,
        expired: false,
        unknown: false,
    }
}

/// Joins line bodies into a log from seq 1, each with its own `at`.
fn log_at(lines: &[(&str, String)]) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, (at, b))| format!(r#"{{"seq":{},"at":"{at}",{b}}}"#, i + 1) + "\n")
        .collect()
}

fn time(text: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    Some(text.parse().expect("an RFC 3339 time"))
}

#[test]
fn verify_clean_log_passes_and_prints_the_table() {
    let r = check(&fixture_text("clean.jsonl"), None);
    assert_eq!(r.entries, 13);
    assert_eq!((r.exactly_one, r.actions), (3, 3));
    assert_eq!(r.violations(), 0, "{r}");
    assert!(r.passed());
    assert!(r.outcomes_differ.is_none());
    assert_eq!(
        r.table(),
        format!(
            "| check | result |\n\
             |---|---|\n\
             | actions with exactly one provider effect | 3 of 3 |\n\
             | actions with more than one effect | 0 |\n\
             | actions with no effect | 0 |\n\
             | sends after an earlier send with no lookup in between | 0 |\n\
             | outcomes that differ from the provider's final status | {NEEDS_DATABASE} |\n\
             | refused actions the provider created anyway | {NEEDS_DATABASE} |\n\
             | cancelled actions the provider created anyway | {NEEDS_DATABASE} |\n\
             | actions sent before their not_before | {NEEDS_DATABASE} |\n\
             | actions sent more than 1000 ms after their expires_at | {NEEDS_DATABASE} |\n\
             | effects for unknown keys | 0 |\n\
             | log lines out of sequence (seq gaps or repeats) | 0 |\n"
        )
    );
    // The counts by kind of line are what the fixture holds.
    let s = &r.stats;
    assert_eq!(
        (
            s.send_lines,
            s.sends_created,
            s.sends_replayed,
            s.sends_faulted
        ),
        (5, 3, 1, 1)
    );
    assert_eq!(
        (s.lookup_lines, s.lookups_found, s.lookups_not_found),
        (2, 1, 1)
    );
    assert_eq!((s.status_lines, s.final_status_lines), (4, 3));
    assert_eq!(
        (s.webhook_lines, s.webhook_retries, s.webhooks_not_accepted),
        (2, 1, 1)
    );
}

#[test]
fn verify_clean_log_with_expectations_passes_every_row() {
    let file = std::fs::File::open(fixture("clean-expectations.json")).unwrap();
    let expected = read_expectations(file, &ReadLimits::default()).unwrap();
    assert_eq!(expected.len(), 4);
    assert_eq!(expected[0].action_id, "1", "integer ids read as text");
    let r = check(&fixture_text("clean.jsonl"), Some(&expected));
    assert_eq!(
        (r.exactly_one, r.actions),
        (3, 3),
        "the refused action expects no effect"
    );
    assert_eq!(r.outcomes_differ.as_ref().map(|c| c.count), Some(0));
    assert_eq!(r.refused_with_effect.as_ref().map(|c| c.count), Some(0));
    assert_eq!(r.stats.actions_refused, 1);
    assert!(r.passed(), "{r}");
    assert!(!r.table().contains(NEEDS_DATABASE));
}

#[test]
fn verify_duplicate_created_is_more_than_one_effect() {
    let r = check(&fixture_text("duplicate.jsonl"), None);
    assert_eq!(r.more_than_one.count, 1);
    assert_eq!(r.more_than_one.samples, vec!["courier-a".to_string()]);
    assert_eq!((r.exactly_one, r.actions), (1, 2));
    assert_eq!(
        r.blind_resends.count, 0,
        "each send was preceded by a lookup"
    );
    assert_eq!(r.violations(), 1);
    assert!(!r.passed());
    assert!(r
        .table()
        .contains("| actions with more than one effect | 1 |"));
}

#[test]
fn verify_no_effect_without_expectations_is_a_key_never_created() {
    let text = log(&[
        send("k1", "faulted"),
        lookup("k1", "not_found"),
        send("k1", "faulted"),
        send("k2", "created"),
        send("k3", "rejected"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.no_effect.count, 2);
    assert_eq!(
        r.no_effect.samples,
        vec!["k1".to_string(), "k3".to_string()]
    );
    assert_eq!(r.stats.keys_only_rejected, 1);
    assert_eq!((r.exactly_one, r.actions), (1, 3));
    assert!(r.warnings.iter().any(|w| w.contains("only ever rejected")));
}

#[test]
fn verify_no_effect_with_expectations_is_an_action_missing_from_the_log() {
    let text = log(&[send("k1", "created"), status("k1", "delivered")]);
    let mut refused = expect("k3", 3, None);
    refused.refused = true;
    let expected = vec![
        expect("k1", 1, Some(Status::Delivered)),
        expect("k2", 2, None),
        refused,
    ];
    let r = check(&text, Some(&expected));
    assert_eq!(r.no_effect.count, 1);
    assert_eq!(r.no_effect.samples, vec!["k2".to_string()]);
    assert_eq!((r.exactly_one, r.actions), (1, 2));
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn verify_blind_resend_counts_each_offending_send() {
    let text = log(&[
        send("k1", "faulted"),
        send("k1", "faulted"),
        send("k1", "created"),
        lookup("k1", "found"),
        send("k1", "replayed"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.blind_resends.count, 2);
    assert_eq!(r.blind_resends.samples, vec!["k1".to_string()]);
    assert_eq!(r.more_than_one.count, 0);
    assert_eq!(r.violations(), 2);
}

#[test]
fn verify_lookup_of_another_key_does_not_count() {
    let text = log(&[
        send("k1", "faulted"),
        lookup("k2", "not_found"),
        send("k1", "created"),
        send("k2", "created"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.blind_resends.count, 1);
    assert_eq!(r.blind_resends.samples, vec!["k1".to_string()]);
}

#[test]
fn verify_any_lookup_result_counts_as_a_lookup() {
    let text = log(&[
        send("k1", "faulted"),
        lookup("k1", "faulted"),
        send("k1", "created"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.blind_resends.count, 0);
    assert_eq!(r.stats.resends_after_faulted_lookup, 1);
}

#[test]
fn verify_replayed_or_conflict_send_without_lookup_is_a_blind_resend() {
    let text = log(&[
        send("k1", "created"),
        send("k1", "replayed"),
        send("k1", "conflict"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.blind_resends.count, 2, "the rule is about send lines");
    assert_eq!(r.more_than_one.count, 0, "a replay is not an effect");
    assert_eq!((r.exactly_one, r.actions), (1, 1));
}

#[test]
fn verify_a_resend_after_refusals_only_is_not_blind() {
    // Refused (a 401, a 400): nothing existed to look up, so sending again
    // at once is safe; once a send may have created, the rule is back.
    let text = log(&[
        send("k1", "rejected"),
        send("k1", "rejected"),
        send("k1", "created"),
        send("k1", "replayed"),
        send("k2", "faulted"),
        send("k2", "rejected"),
        send("k2", "created"),
    ]);
    let r = check(&text, None);
    assert_eq!(r.blind_resends.count, 3, "{r}");
    assert_eq!(
        r.blind_resends.samples,
        vec!["k1".to_string(), "k2".to_string()]
    );
}

#[test]
fn verify_outcome_is_the_last_final_status_line() {
    let text = log(&[
        send("k1", "created"),
        status("k1", "delivered"),
        status("k1", "failed"),
        send("k2", "created"),
        status("k2", "delivered"),
        send("k3", "created"),
        send("k4", "created"),
        status("k4", "sent"),
    ]);
    // k1: the provider's last final is failed, the courier says delivered.
    // k2 agrees. k3: the courier has a final the provider never logged.
    // k4: the provider has no final and neither has the courier.
    let expected = vec![
        expect("k1", 1, Some(Status::Delivered)),
        expect("k2", 2, Some(Status::Delivered)),
        expect("k3", 3, Some(Status::Failed)),
        expect("k4", 4, None),
    ];
    let r = check(&text, Some(&expected));
    let outcomes = r.outcomes_differ.clone().unwrap();
    assert_eq!(outcomes.count, 2, "{r}");
    assert!(outcomes.samples[0].starts_with("k1 (courier: delivered, provider: failed)"));
    assert!(outcomes.samples[1].starts_with("k3 (courier: failed, provider: none)"));
    assert_eq!(r.stats.keys_with_disagreeing_finals, 1);
    assert_eq!(r.violations(), 2);

    // The same log judged with the courier agreeing on the LAST final passes.
    let expected = vec![
        expect("k1", 1, Some(Status::Failed)),
        expect("k2", 2, Some(Status::Delivered)),
        expect("k3", 3, None),
        expect("k4", 4, None),
    ];
    let r = check(&text, Some(&expected));
    assert!(r.passed(), "{r}");
}

#[test]
fn verify_provider_final_without_a_courier_final_differs() {
    let text = log(&[send("k1", "created"), status("k1", "delivered")]);
    let r = check(&text, Some(&[expect("k1", 1, None)]));
    assert_eq!(r.outcomes_differ.unwrap().count, 1);
}

#[test]
fn verify_seq_gap_is_a_violation() {
    let text = "\
{\"seq\":1,\"at\":\"t\",\"op\":\"send\",\"key\":\"k1\",\"result\":\"created\"}
{\"seq\":2,\"at\":\"t\",\"op\":\"status\",\"key\":\"k1\",\"message_id\":\"m\",\"status\":\"sent\",\"final\":false}
{\"seq\":4,\"at\":\"t\",\"op\":\"status\",\"key\":\"k1\",\"message_id\":\"m\",\"status\":\"delivered\",\"final\":true}
";
    let r = check(text, None);
    assert_eq!(r.seq_out_of_order.count, 1);
    assert_eq!(
        r.seq_out_of_order.samples,
        vec!["entry 3: seq 4 where 3 was due (1 missing)".to_string()]
    );
    assert_eq!(r.violations(), 1);
}

#[test]
fn verify_seq_repeat_and_late_start_are_violations() {
    let line = |seq: u64, key: &str| {
        format!(r#"{{"seq":{seq},"at":"t","op":"send","key":"{key}","result":"created"}}"#) + "\n"
    };
    let repeat = [line(1, "a"), line(2, "b"), line(2, "c"), line(3, "d")].concat();
    let r = check(&repeat, None);
    assert_eq!(r.seq_out_of_order.count, 1, "{r}");
    assert!(r.seq_out_of_order.samples[0].contains("repeats"));
    let late = [line(2, "a"), line(3, "b")].concat();
    assert_eq!(check(&late, None).seq_out_of_order.count, 1);
    let zero = [line(0, "a"), line(1, "b")].concat();
    assert_eq!(check(&zero, None).seq_out_of_order.count, 1);
}

#[test]
fn verify_malformed_line_is_an_error_with_its_line_number() {
    let text = format!(
        "{}{{\"seq\":2,\"at\":\"t\",\"op\":\"send\",\"key\":\"k\",\"result\":\"maybe\"}}\n{}",
        log(&[send("k", "created")]),
        r#"{"seq":3,"at":"t","op":"lookup","key":"k","result":"found"}"#.to_string() + "\n"
    );
    match read_log(text.as_bytes()) {
        Err(VerifyError::Malformed { line, message }) => {
            assert_eq!(line, 2);
            assert!(message.contains("maybe"), "{message}");
        }
        other => panic!("expected a malformed line, got {other:?}"),
    }
    // Not JSON at all, in the middle of the log.
    let text = format!("{}garbage\n{}", log(&[send("k", "created")]), log(&[]));
    assert!(matches!(
        read_log(text.as_bytes()),
        Err(VerifyError::Malformed { line: 2, .. })
    ));
    // A missing required field.
    let text = "{\"seq\":1,\"at\":\"t\",\"op\":\"send\",\"key\":\"k\"}\n";
    assert!(matches!(
        read_log(text.as_bytes()),
        Err(VerifyError::Malformed { line: 1, .. })
    ));
}

#[test]
fn verify_torn_final_line_is_tolerated_with_a_warning() {
    let mut text = log(&[send("k1", "created"), send("k2", "created")]);
    text.push_str(r#"{"seq":3,"at":"t","op":"sen"#);
    let read = read_log(text.as_bytes()).unwrap();
    assert_eq!(read.entries.len(), 2);
    assert_eq!(read.torn_final_line, Some(3));
    let r = verify_log(&read, None);
    assert!(r.passed());
    assert!(
        r.warnings.iter().any(|w| w.contains("torn")),
        "{:?}",
        r.warnings
    );

    // The same bytes followed by a newline are a malformed line, not a tear.
    text.push('\n');
    assert!(matches!(
        read_log(text.as_bytes()),
        Err(VerifyError::Malformed { line: 3, .. })
    ));

    // A complete final line without its newline is read.
    let mut whole = log(&[send("k1", "created")]);
    whole.pop();
    assert_eq!(read_log(whole.as_bytes()).unwrap().entries.len(), 1);
}

#[test]
fn verify_effect_for_unknown_key_is_a_violation() {
    let text = log(&[
        send("k1", "created"),
        send("stranger", "created"),
        status("k1", "delivered"),
    ]);
    let r = check(&text, Some(&[expect("k1", 1, Some(Status::Delivered))]));
    assert_eq!(r.effects_for_unknown_keys.count, 1);
    assert_eq!(
        r.effects_for_unknown_keys.samples,
        vec!["stranger".to_string()]
    );
    assert_eq!((r.exactly_one, r.actions), (1, 1));
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn verify_created_send_without_a_key_is_an_unknown_effect() {
    let text = log(&[r#""op":"send","result":"created","message_id":"m""#.to_string()]);
    let r = check(&text, None);
    assert_eq!(r.effects_for_unknown_keys.count, 1);
    assert_eq!(r.stats.sends_without_key, 1);
    assert_eq!(r.actions, 0);
}

#[test]
fn verify_refused_action_with_an_effect_is_a_violation() {
    let text = log(&[send("k1", "created"), status("k1", "failed")]);
    let mut e = expect("k1", 1, Some(Status::Failed));
    e.refused = true;
    let r = check(&text, Some(&[e]));
    assert_eq!(r.refused_with_effect.as_ref().unwrap().count, 1);
    assert_eq!(r.actions, 0);
    assert_eq!(r.violations(), 1);
}

#[test]
fn verify_reads_another_providers_log_with_extra_fields() {
    let r = check(&fixture_text("other-provider.jsonl"), None);
    assert_eq!(r.entries, 6);
    assert_eq!((r.exactly_one, r.actions), (1, 1));
    assert_eq!(r.stats.webhooks_not_accepted, 1);
    assert!(r.passed(), "{r}");
    let expected = [expect("order-17", 17, Some(Status::Delivered))];
    assert!(check(&fixture_text("other-provider.jsonl"), Some(&expected)).passed());
}

#[test]
fn verify_limits_bound_the_reader() {
    let text = log(&[send("k1", "created"), send("k2", "created")]);
    let limits = ReadLimits {
        lines_max: 1,
        ..ReadLimits::default()
    };
    assert!(matches!(
        read_log_with(text.as_bytes(), &limits),
        Err(VerifyError::TooManyLines { lines_max: 1 })
    ));
    let limits = ReadLimits {
        line_bytes_max: 40,
        ..ReadLimits::default()
    };
    assert!(matches!(
        read_log_with(text.as_bytes(), &limits),
        Err(VerifyError::LineTooLong { line: 1, .. })
    ));
    let limits = ReadLimits {
        expectations_bytes_max: 10,
        ..ReadLimits::default()
    };
    assert!(read_expectations(&b"[{\"key\":\"k\",\"action_id\":\"1\"}]"[..], &limits).is_err());
}

#[test]
fn verify_bad_expectations_are_refused() {
    let limits = ReadLimits::default();
    let bad = [
        (
            r#"[{"key":"k","action_id":"1"},{"key":"k","action_id":"2"}]"#,
            "more than once",
        ),
        (
            r#"[{"key":"a","action_id":"1"},{"key":"b","action_id":1}]"#,
            "more than once",
        ),
        (
            r#"[{"key":"k","action_id":"1","courier_final":"sent"}]"#,
            "not final",
        ),
        (
            r#"[{"key":"k","action_id":"1","refused_":true}]"#,
            "unknown field",
        ),
        (r#"[{"key":"","action_id":"1"}]"#, "empty"),
        (r#"{"key":"k"}"#, "JSON array"),
    ];
    for (text, why) in bad {
        match read_expectations(text.as_bytes(), &limits) {
            Err(VerifyError::Expectations(m)) => assert!(m.contains(why), "{text}: {m}"),
            other => panic!("{text}: expected an error, got {other:?}"),
        }
    }
}

#[test]
fn verify_streaming_and_in_memory_agree() {
    let text = fixture_text("duplicate.jsonl");
    let streamed = verify_reader(text.as_bytes(), &ReadLimits::default(), None).unwrap();
    let in_memory = verify(&read_log(text.as_bytes()).unwrap().entries, None);
    assert_eq!(streamed, in_memory);
}

#[test]
fn verify_json_carries_the_verdict() {
    let r = check(&fixture_text("duplicate.jsonl"), None);
    let v = r.to_json();
    assert_eq!(v["violations"], 1);
    assert_eq!(v["passed"], false);
    assert_eq!(v["more_than_one"]["count"], 1);
    assert_eq!(v["outcomes_differ"], serde_json::Value::Null);
    let back: Report = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
}

#[test]
fn verify_old_expectations_without_intent_fields_still_read() {
    let text = r#"[{"key":"courier-a","action_id":1,"courier_final":"delivered","refused":false}]"#;
    let e = read_expectations(text.as_bytes(), &ReadLimits::default()).unwrap();
    assert_eq!(e, vec![expect("courier-a", 1, Some(Status::Delivered))]);
    let text = r#"[{"key":"courier-a","action_id":1,"not_before":"2026-01-01T00:00:01Z",
        "expires_at":"2026-01-01T02:00:05.250+01:00","cancelled":true,"expired":false}]"#;
    let e = read_expectations(text.as_bytes(), &ReadLimits::default()).unwrap();
    assert_eq!(e[0].not_before, time("2026-01-01T00:00:01Z"));
    assert_eq!(e[0].expires_at, time("2026-01-01T01:00:05.250Z"));
    assert!(e[0].cancelled && !e[0].expired);
}

#[test]
fn verify_intent_expectations_that_contradict_themselves_are_refused() {
    let limits = ReadLimits::default();
    let bad = [
        (
            r#"[{"key":"k","action_id":"1","refused":true,"cancelled":true}]"#,
            "more than one of refused, cancelled, expired and unknown",
        ),
        (
            r#"[{"key":"k","action_id":"1","cancelled":true,"expired":true}]"#,
            "more than one of refused, cancelled, expired and unknown",
        ),
        (
            r#"[{"key":"k","action_id":"1","not_before":"2026-01-01T00:00:02Z","expires_at":"2026-01-01T00:00:01Z"}]"#,
            "is before not_before",
        ),
        (
            r#"[{"key":"k","action_id":"1","not_before":"tomorrow"}]"#,
            "JSON array of expectations",
        ),
    ];
    for (text, why) in bad {
        match read_expectations(text.as_bytes(), &limits) {
            Err(VerifyError::Expectations(m)) => assert!(m.contains(why), "{text}: {m}"),
            other => panic!("{text}: expected an error, got {other:?}"),
        }
    }
}

/// A log where every action keeps to its intent: the scheduled one is sent
/// at its not_before, the expiring one before its deadline, the cancelled
/// one never, and the expired one never.
fn well_behaved_intent() -> (String, Vec<Expectation>) {
    let text = log_at(&[
        ("2026-01-01T00:00:01.000Z", send("courier-s", "created")),
        ("2026-01-01T00:00:01.500Z", send("courier-e", "faulted")),
        ("2026-01-01T00:00:01.600Z", lookup("courier-e", "not_found")),
        // The deadline plus the whole margin: still within it.
        ("2026-01-01T00:00:03.000Z", send("courier-e", "created")),
        ("2026-01-01T00:00:03.100Z", status("courier-s", "delivered")),
        ("2026-01-01T00:00:03.200Z", status("courier-e", "delivered")),
    ]);
    let mut scheduled = expect("courier-s", 1, Some(Status::Delivered));
    scheduled.not_before = time("2026-01-01T00:00:01.000Z");
    let mut expiring = expect("courier-e", 2, Some(Status::Delivered));
    expiring.not_before = time("2026-01-01T00:00:00.500Z");
    expiring.expires_at = time("2026-01-01T00:00:02.000Z");
    let mut cancelled = expect("courier-c", 3, None);
    cancelled.cancelled = true;
    let mut expired = expect("courier-x", 4, None);
    expired.expires_at = time("2026-01-01T00:00:02.000Z");
    expired.expired = true;
    (text, vec![scheduled, expiring, cancelled, expired])
}

#[test]
fn verify_actions_that_keep_to_their_intent_pass_the_intent_rows() {
    let (text, expected) = well_behaved_intent();
    let r = check(&text, Some(&expected));
    assert_eq!(r.cancelled_with_effect.as_ref().map(|c| c.count), Some(0));
    assert_eq!(r.sent_before_not_before.as_ref().map(|c| c.count), Some(0));
    assert_eq!(r.sent_after_expires_at.as_ref().map(|c| c.count), Some(0));
    assert_eq!(
        (r.exactly_one, r.actions),
        (2, 2),
        "neither the cancelled nor the expired action expects an effect"
    );
    assert_eq!(r.no_effect.count, 0);
    let s = &r.stats;
    assert_eq!(
        (
            s.actions_scheduled,
            s.actions_expiring,
            s.actions_cancelled,
            s.actions_expired,
            s.actions_expired_unsent
        ),
        (2, 2, 1, 1, 1)
    );
    assert_eq!(
        r.expiry_clock_margin_ms,
        courier_verify::EXPIRY_CLOCK_MARGIN_MS
    );
    assert!(r.passed(), "{r}");
    assert!(r
        .table()
        .contains("| actions sent more than 1000 ms after their expires_at | 0 |"));
    assert!(r.to_string().contains("cancelled: 1"), "{r}");
}

#[test]
fn verify_cancelled_action_with_an_effect_is_a_violation() {
    let (mut text, expected) = well_behaved_intent();
    text.push_str(
        &log_at(&[("2026-01-01T00:00:04Z", send("courier-c", "created"))])
            .replace(r#""seq":1,"#, r#""seq":7,"#),
    );
    let r = check(&text, Some(&expected));
    let c = r.cancelled_with_effect.as_ref().unwrap();
    assert_eq!(
        (c.count, c.samples.clone()),
        (1, vec!["courier-c".to_string()])
    );
    assert_eq!(r.violations(), 1, "{r}");
    assert_eq!(
        r.actions, 2,
        "a cancelled action is never counted as one to deliver"
    );
    assert!(r
        .table()
        .contains("| cancelled actions the provider created anyway | 1 |"));
}

#[test]
fn verify_send_before_not_before_is_a_violation_whatever_its_result() {
    let text = log_at(&[
        // One millisecond early, and only faulted: still a send.
        ("2026-01-01T00:00:00.999Z", send("courier-a", "faulted")),
        ("2026-01-01T00:00:01.000Z", lookup("courier-a", "not_found")),
        ("2026-01-01T00:00:01.000Z", send("courier-a", "created")),
        // Exactly at its not_before: allowed.
        ("2026-01-01T00:00:01.000Z", send("courier-b", "created")),
    ]);
    let mut a = expect("courier-a", 1, None);
    a.not_before = time("2026-01-01T00:00:01.000Z");
    let mut b = expect("courier-b", 2, None);
    // Sub-millisecond parts are below the log's precision.
    b.not_before = time("2026-01-01T00:00:01.000900Z");
    let r = check(&text, Some(&[a, b]));
    let early = r.sent_before_not_before.as_ref().unwrap();
    assert_eq!(early.count, 1, "{r}");
    assert_eq!(
        early.samples,
        vec![
            "courier-a (first send by 2026-01-01T00:00:00.999Z, not_before 2026-01-01T00:00:01.000Z)"
                .to_string()
        ]
    );
    assert_eq!(r.violations(), 1);
}

#[test]
fn verify_a_coarse_time_counts_only_when_all_it_may_stand_for_is_outside() {
    let text = log_at(&[
        // Whole seconds: 00:00:00 to 00:00:00.999, all before 00:00:01.
        ("2026-01-01T00:00:00Z", send("courier-a", "created")),
        // Tenths: 00:00:00.9 may stand for 00:00:00.950, not early.
        ("2026-01-01T00:00:00.9Z", send("courier-b", "created")),
        // Whole seconds: may stand for 00:00:01.400, not early.
        ("2026-01-01T00:00:01Z", send("courier-c", "created")),
    ]);
    let expected: Vec<Expectation> = [
        ("courier-a", "2026-01-01T00:00:01.000Z"),
        ("courier-b", "2026-01-01T00:00:00.950Z"),
        ("courier-c", "2026-01-01T00:00:01.400Z"),
    ]
    .iter()
    .zip(1..)
    .map(|((k, nb), id)| {
        let mut e = expect(k, id, None);
        e.not_before = time(nb);
        e
    })
    .collect();
    let r = check(&text, Some(&expected));
    let early = r.sent_before_not_before.as_ref().unwrap();
    assert_eq!(early.count, 1, "{r}");
    assert!(early.samples[0].starts_with("courier-a (first send by 2026-01-01T00:00:00.999Z"));
}

#[test]
fn verify_send_after_expires_at_beyond_the_margin_is_a_violation() {
    let text = log_at(&[
        // The deadline plus the margin plus one millisecond.
        ("2026-01-01T00:00:03.001Z", send("courier-a", "created")),
        // A replay is a send too.
        ("2026-01-01T00:00:01.000Z", send("courier-b", "created")),
        ("2026-01-01T00:00:01.100Z", lookup("courier-b", "found")),
        ("2026-01-01T00:00:09.000Z", send("courier-b", "replayed")),
        // At the deadline plus the whole margin: allowed.
        ("2026-01-01T00:00:03.000Z", send("courier-c", "created")),
    ]);
    let mut expected: Vec<Expectation> = ["courier-a", "courier-b", "courier-c"]
        .iter()
        .zip(1..)
        .map(|(k, id)| {
            let mut e = expect(k, id, None);
            e.expires_at = time("2026-01-01T00:00:02.000Z");
            e
        })
        .collect();
    let r = check(&text, Some(&expected));
    let late = r.sent_after_expires_at.as_ref().unwrap();
    assert_eq!(late.count, 2, "{r}");
    assert_eq!(
        late.samples[0],
        "courier-a (last send 2026-01-01T00:00:03.001Z, expires_at 2026-01-01T00:00:02.000Z)"
    );
    assert!(late.samples[1].starts_with("courier-b "), "{late:?}");
    assert_eq!(r.violations(), 2);
    assert!(r
        .table()
        .contains("| actions sent more than 1000 ms after their expires_at | 2 |"));
    // The courier's end state does not excuse a late send.
    expected[0].expired = true;
    let r = check(&text, Some(&expected));
    assert_eq!(r.sent_after_expires_at.map(|c| c.count), Some(2));
}

#[test]
fn verify_expired_action_with_an_effect_is_judged_like_any_action() {
    let text = log_at(&[
        ("2026-01-01T00:00:01.000Z", send("courier-a", "created")),
        ("2026-01-01T00:00:01.100Z", status("courier-a", "delivered")),
    ]);
    let mut a = expect("courier-a", 1, None);
    a.expires_at = time("2026-01-01T00:00:02.000Z");
    a.expired = true;
    let r = check(&text, Some(&[a]));
    assert_eq!((r.exactly_one, r.actions), (1, 1));
    assert_eq!(r.stats.actions_expired_unsent, 0);
    let differ = r.outcomes_differ.as_ref().unwrap();
    assert_eq!(
        differ.samples,
        vec!["courier-a (courier: none, provider: delivered)".to_string()]
    );
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn verify_send_lines_without_a_time_are_counted_and_not_judged() {
    let text = log_at(&[("yesterday", send("courier-a", "created"))]);
    let mut a = expect("courier-a", 1, None);
    a.not_before = time("2026-01-01T00:00:01.000Z");
    let r = check(&text, Some(&[a]));
    assert_eq!(r.stats.send_lines_without_time, 1);
    assert_eq!(r.sent_before_not_before.as_ref().map(|c| c.count), Some(0));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.contains("not checked against those times")),
        "{r}"
    );
}
