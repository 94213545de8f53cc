//! The verdict under each promise, against hand-made logs: for every
//! promise a log that keeps it passes, and one that breaks it fails with the
//! exact count. `tests/verify.rs` holds the checks common to every promise,
//! judged as `exactly-once`.

use courier_core::Status;
use courier_verify::{
    read_expectations, read_log, verify_log_under, verify_reader_under, verify_under, Expectation,
    Promise, ReadLimits, Report, Verifier, VerifyError, NEEDS_DATABASE,
};

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
    format!(
        r#""op":"status","key":"{key}","message_id":"msg_{key}","status":"{status}","final":true"#
    )
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

/// An action the courier holds as unknown: no outcome of its own.
fn held(key: &str, id: u32) -> Expectation {
    Expectation {
        unknown: true,
        ..expect(key, id, None)
    }
}

fn judge(text: &str, expected: Option<&[Expectation]>, promise: Promise) -> Report {
    let log = read_log(text.as_bytes()).expect("the log reads");
    let r = verify_log_under(&log, expected, promise);
    assert_eq!(r.promise, promise);
    r
}

#[test]
fn promise_names_parse_and_print_back() {
    let names = [
        "exactly-once",
        "exactly-once-by-resend",
        "at-most-once",
        "at-least-once",
    ];
    for (p, name) in Promise::ALL.into_iter().zip(names) {
        assert_eq!(p.as_str(), name);
        assert_eq!(p.to_string(), name);
        assert_eq!(name.parse::<Promise>(), Ok(p));
        assert_eq!(serde_json::to_value(p).unwrap(), name);
        assert_eq!(serde_json::from_value::<Promise>(name.into()).unwrap(), p);
    }
    assert_eq!(Promise::default(), Promise::ExactlyOnce);
    let err = "exactly_once".parse::<Promise>().unwrap_err();
    assert!(err.to_string().contains("give exactly-once"), "{err}");
    assert!(
        "A".parse::<Promise>().is_err(),
        "tier names are not promises"
    );
}

#[test]
fn every_entry_point_judges_the_promise_given() {
    let text = log(&[send("k1", "created"), send("k1", "created")]);
    let entries = read_log(text.as_bytes()).unwrap().entries;
    for p in Promise::ALL {
        let in_memory = verify_under(&entries, None, p);
        let streamed = verify_reader_under(text.as_bytes(), &ReadLimits::default(), None, p);
        assert_eq!(streamed.unwrap(), in_memory);
        assert_eq!(judge(&text, None, p), in_memory);
        let mut v = Verifier::with_promise(p);
        assert_eq!(v.promise(), p);
        entries.iter().for_each(|e| v.observe(e));
        assert_eq!(v.finish(None), in_memory);
    }
    // The entry points without a promise judge exactly-once.
    assert_eq!(Verifier::new().promise(), Promise::ExactlyOnce);
    assert_eq!(
        courier_verify::verify(&entries, None).promise,
        Promise::ExactlyOnce
    );
}

/// k1 sent three times with no lookup, the provider deduplicating by key;
/// k2 once.
fn resent_by_key() -> (String, Vec<Expectation>) {
    let text = log(&[
        send("k1", "faulted"),
        send("k1", "faulted"),
        send("k1", "created"),
        send("k1", "replayed"),
        send("k2", "created"),
        status("k1", "delivered"),
        status("k2", "delivered"),
    ]);
    let expected = vec![
        expect("k1", 1, Some(Status::Delivered)),
        expect("k2", 2, Some(Status::Delivered)),
    ];
    (text, expected)
}

#[test]
fn exactly_once_by_resend_passes_resends_without_lookups_and_counts_them() {
    let (text, expected) = resent_by_key();
    for e in [None, Some(expected.as_slice())] {
        let r = judge(&text, e, Promise::ExactlyOnceByResend);
        assert!(r.passed(), "{r}");
        let resends = r.resends_without_lookup.as_ref().unwrap();
        assert_eq!(
            (resends.count, resends.samples.clone()),
            (3, vec!["k1".to_string()])
        );
        assert_eq!(r.blind_resends.count, 0);
        assert_eq!((r.exactly_one, r.actions), (2, 2));
        assert!(r.table().contains(
            "| sends after an earlier send with no lookup in between \
             (by design under exactly-once-by-resend) | 3 |"
        ));
    }
    // The same log breaks exactly-once, one violation per resend.
    let r = judge(&text, Some(&expected), Promise::ExactlyOnce);
    assert_eq!(r.blind_resends.count, 3);
    assert!(r.resends_without_lookup.is_none());
    assert_eq!(r.violations(), 3, "{r}");
}

#[test]
fn exactly_once_by_resend_catches_a_duplicate_effect() {
    let text = log(&[
        send("k1", "created"),
        send("k1", "created"),
        send("k2", "created"),
        status("k1", "delivered"),
        status("k2", "delivered"),
    ]);
    let expected = [
        expect("k1", 1, Some(Status::Delivered)),
        expect("k2", 2, Some(Status::Delivered)),
    ];
    let r = judge(&text, Some(&expected), Promise::ExactlyOnceByResend);
    assert_eq!(
        (r.more_than_one.count, r.more_than_one.samples.clone()),
        (1, vec!["k1".to_string()])
    );
    assert_eq!(r.resends_without_lookup.as_ref().map(|c| c.count), Some(1));
    assert!(r.duplicates_allowed.is_none());
    assert_eq!((r.exactly_one, r.actions), (1, 2));
    assert_eq!(r.violations(), 1, "{r}");
}

/// k1 delivered as usual; k2 and k3 held as unknown, k2 never created, k3
/// created and delivered by the provider.
fn held_as_unknown() -> (String, Vec<Expectation>) {
    let text = log(&[
        send("k1", "created"),
        send("k2", "faulted"),
        send("k3", "created"),
        status("k1", "delivered"),
        status("k3", "delivered"),
    ]);
    let expected = vec![
        expect("k1", 1, Some(Status::Delivered)),
        held("k2", 2),
        held("k3", 3),
    ];
    (text, expected)
}

#[test]
fn at_most_once_passes_actions_held_as_unknown_with_no_effect_and_with_one() {
    let (text, expected) = held_as_unknown();
    let r = judge(&text, Some(&expected), Promise::AtMostOnce);
    assert!(r.passed(), "{r}");
    let u = r.unknown_held.as_ref().unwrap();
    assert_eq!(
        (u.actions.count, u.no_effect, u.one_effect, u.more_than_one),
        (2, 1, 1, 0)
    );
    assert_eq!(u.actions.samples, vec!["k2".to_string(), "k3".to_string()]);
    assert_eq!(u.provider_final, 1, "k3's delivered is not compared");
    assert_eq!(r.outcomes_differ.as_ref().map(|c| c.count), Some(0));
    assert_eq!((r.exactly_one, r.actions), (2, 3));
    let table = r.table();
    assert!(
        table.contains("| actions with no effect, not held as unknown | 0 |"),
        "{table}"
    );
    assert!(
        table.contains(
            "| actions the courier holds as unknown | 2 (1 with no effect, 1 with one, \
             0 with more; 1 with a provider final, not compared) |"
        ),
        "{table}"
    );
}

#[test]
fn exactly_once_counts_an_action_held_as_unknown_with_no_effect_as_missing() {
    let (text, expected) = held_as_unknown();
    // By resend, a hold past the key's window is the promise's own limit.
    let r = judge(&text, Some(&expected), Promise::ExactlyOnceByResend);
    assert_eq!(r.violations(), 0, "{r}");
    assert_eq!(r.unknown_held.as_ref().map(|u| u.no_effect), Some(1));
    {
        let r = judge(&text, Some(&expected), Promise::ExactlyOnce);
        assert_eq!(r.no_effect.samples, vec!["k2".to_string()]);
        assert_eq!(r.violations(), 1, "{r}");
        assert_eq!(r.unknown_held.as_ref().map(|u| u.no_effect), Some(1));
        assert!(r.table().contains("| actions with no effect | 1 |"));
        assert!(r
            .table()
            .contains("| actions the courier holds as unknown | 2 ("));
    }
}

#[test]
fn at_most_once_catches_a_duplicate_held_as_unknown_or_not() {
    let text = log(&[
        send("k1", "created"),
        lookup("k1", "not_found"),
        send("k1", "created"),
        send("k2", "created"),
        lookup("k2", "not_found"),
        send("k2", "created"),
        status("k1", "delivered"),
    ]);
    let expected = [expect("k1", 1, Some(Status::Delivered)), held("k2", 2)];
    let r = judge(&text, Some(&expected), Promise::AtMostOnce);
    assert_eq!(
        r.more_than_one.samples,
        vec!["k1".to_string(), "k2".to_string()]
    );
    assert_eq!(r.unknown_held.as_ref().map(|u| u.more_than_one), Some(1));
    assert_eq!(r.blind_resends.count, 0);
    assert_eq!(r.violations(), 2, "{r}");
}

#[test]
fn at_most_once_catches_an_unlisted_action_with_no_effect() {
    let text = log(&[send("k1", "faulted"), send("k2", "faulted")]);
    let expected = [expect("k1", 1, None), held("k2", 2)];
    let r = judge(&text, Some(&expected), Promise::AtMostOnce);
    assert_eq!(
        (r.no_effect.count, r.no_effect.samples.clone()),
        (1, vec!["k1".to_string()])
    );
    assert_eq!(r.unknown_held.as_ref().map(|u| u.no_effect), Some(1));
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn at_most_once_catches_a_resend_without_lookup() {
    let text = log(&[
        send("k1", "faulted"),
        send("k1", "created"),
        status("k1", "delivered"),
    ]);
    let r = judge(
        &text,
        Some(&[expect("k1", 1, Some(Status::Delivered))]),
        Promise::AtMostOnce,
    );
    assert_eq!(r.blind_resends.count, 1);
    assert!(r.resends_without_lookup.is_none());
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn at_most_once_without_expectations_cannot_excuse_no_effect() {
    let text = log(&[send("k1", "faulted"), send("k2", "created")]);
    let r = judge(&text, None, Promise::AtMostOnce);
    assert!(r.unknown_held.is_none());
    assert_eq!(r.no_effect.count, 1);
    assert_eq!(r.violations(), 1);
    assert!(
        r.warnings.iter().any(|w| w.contains("holds as unknown")),
        "{:?}",
        r.warnings
    );
    let table = r.table();
    assert!(table.contains(&format!(
        "| actions the courier holds as unknown | {NEEDS_DATABASE} |"
    )));
    assert!(table.contains("| actions with no effect | 1 |"), "{table}");
}

/// k1 created three times and k2 twice, each resend with no lookup; k3
/// once. The courier's final for k1 is not the provider's last one.
fn duplicated() -> (String, Vec<Expectation>) {
    let text = log(&[
        send("k1", "created"),
        send("k1", "created"),
        send("k2", "created"),
        send("k1", "created"),
        send("k2", "created"),
        send("k3", "created"),
        status("k1", "delivered"),
        status("k2", "failed"),
        status("k3", "delivered"),
    ]);
    let expected = vec![
        expect("k1", 1, Some(Status::Failed)),
        expect("k2", 2, Some(Status::Failed)),
        expect("k3", 3, Some(Status::Delivered)),
    ];
    (text, expected)
}

#[test]
fn at_least_once_passes_duplicates_and_counts_them_exactly() {
    let (text, expected) = duplicated();
    let r = judge(&text, Some(&expected), Promise::AtLeastOnce);
    assert!(r.passed(), "{r}");
    let d = r.duplicates_allowed.as_ref().unwrap();
    assert_eq!(
        (d.actions.count, d.extra_effects, d.outcomes_not_compared),
        (2, 3, 2)
    );
    assert_eq!(d.actions.samples, vec!["k1".to_string(), "k2".to_string()]);
    assert_eq!(r.more_than_one.count, 0);
    assert_eq!(r.resends_without_lookup.as_ref().map(|c| c.count), Some(3));
    assert_eq!(r.blind_resends.count, 0);
    assert_eq!(r.outcomes_differ.as_ref().map(|c| c.count), Some(0));
    assert_eq!((r.exactly_one, r.actions), (1, 3));
    assert!(r.table().contains(
        "| actions with more than one effect (allowed by at-least-once) | \
         2 (extra effects: 3; outcomes not compared: 2) |"
    ));
    // Without expectations the duplicates are counted the same way.
    let r = judge(&text, None, Promise::AtLeastOnce);
    assert!(r.passed(), "{r}");
    let d = r.duplicates_allowed.as_ref().unwrap();
    assert_eq!((d.actions.count, d.extra_effects), (2, 3));
    assert!(r.table().contains(
        "| actions with more than one effect (allowed by at-least-once) | 2 (extra effects: 3) |"
    ));
    // The same log breaks exactly-once: two duplicated actions, three
    // resends with no lookup and k1's outcome.
    let r = judge(&text, Some(&expected), Promise::ExactlyOnce);
    assert!(r.duplicates_allowed.is_none());
    assert_eq!(
        (
            r.more_than_one.count,
            r.blind_resends.count,
            r.outcomes_differ.as_ref().map(|c| c.count)
        ),
        (2, 3, Some(1))
    );
    assert_eq!(r.violations(), 6, "{r}");
}

#[test]
fn at_least_once_catches_a_lost_action() {
    let text = log(&[
        send("k1", "created"),
        send("k1", "created"),
        send("k2", "faulted"),
        send("k2", "faulted"),
        status("k1", "delivered"),
    ]);
    let expected = [
        expect("k1", 1, Some(Status::Delivered)),
        expect("k2", 2, None),
        held("k3", 3),
    ];
    let r = judge(&text, Some(&expected), Promise::AtLeastOnce);
    assert_eq!(
        (r.no_effect.count, r.no_effect.samples.clone()),
        (1, vec!["k2".to_string()])
    );
    assert_eq!(r.unknown_held.as_ref().map(|u| u.no_effect), Some(1));
    assert_eq!(
        r.duplicates_allowed.as_ref().map(|d| d.extra_effects),
        Some(1)
    );
    assert_eq!(r.violations(), 1, "{r}");
}

#[test]
fn every_promise_still_judges_refused_and_cancelled_actions_and_stray_effects() {
    let text = log(&[
        send("k1", "created"),
        send("k2", "created"),
        send("stranger", "created"),
    ]);
    let refused = Expectation {
        refused: true,
        ..expect("k1", 1, None)
    };
    let cancelled = Expectation {
        cancelled: true,
        ..expect("k2", 2, None)
    };
    for p in Promise::ALL {
        let r = judge(&text, Some(&[refused.clone(), cancelled.clone()]), p);
        assert_eq!(r.refused_with_effect.as_ref().map(|c| c.count), Some(1));
        assert_eq!(r.cancelled_with_effect.as_ref().map(|c| c.count), Some(1));
        assert_eq!(r.effects_for_unknown_keys.count, 1);
        assert_eq!(r.violations(), 3, "{p}: {r}");
    }
}

#[test]
fn unknown_expectations_read_and_end_one_way() {
    let limits = ReadLimits::default();
    let text = r#"[{"key":"k","action_id":1,"unknown":true},{"key":"j","action_id":2}]"#;
    let e = read_expectations(text.as_bytes(), &limits).unwrap();
    assert_eq!(e, vec![held("k", 1), expect("j", 2, None)]);
    for other in ["refused", "cancelled", "expired"] {
        let text = format!(r#"[{{"key":"k","action_id":1,"unknown":true,"{other}":true}}]"#);
        match read_expectations(text.as_bytes(), &limits) {
            Err(VerifyError::Expectations(m)) => {
                assert!(m.contains("expired and unknown"), "{m}")
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

#[test]
fn report_json_and_text_name_the_promise() {
    let (text, expected) = duplicated();
    let r = judge(&text, Some(&expected), Promise::AtLeastOnce);
    let v = r.to_json();
    assert_eq!(v["promise"], "at-least-once");
    assert_eq!(v["passed"], true);
    assert_eq!(v["duplicates_allowed"]["extra_effects"], 3);
    assert_eq!(v["resends_without_lookup"]["count"], 3);
    assert_eq!(v["unknown_held"]["actions"]["count"], 0);
    let back: Report = serde_json::from_value(v).unwrap();
    assert_eq!(back, r);
    assert!(r.to_string().starts_with("promise: at-least-once ("), "{r}");
    // A report written before promises reads as exactly-once.
    let mut old = judge(&text, None, Promise::ExactlyOnce).to_json();
    let fields = old.as_object_mut().unwrap();
    for f in [
        "promise",
        "resends_without_lookup",
        "duplicates_allowed",
        "unknown_held",
    ] {
        fields.remove(f);
    }
    let back: Report = serde_json::from_value(old).unwrap();
    assert_eq!(back.promise, Promise::ExactlyOnce);
}
