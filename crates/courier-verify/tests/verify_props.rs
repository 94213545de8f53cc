//! Property tests of the verifier: random well-behaved histories pass, and
//! one injected fault is always caught exactly once.

use courier_core::Status;
use courier_provider::wire::{LogEntry, LogOp, LookupResult, SendResult, WebhookAnswer};
use courier_verify::{verify, verify_under, Expectation, Promise};
use proptest::prelude::*;

/// One key's well-behaved history, in order.
#[derive(Debug, Clone)]
struct KeyHistory {
    ops: Vec<LogOp>,
    provider_final: Status,
}

fn send(key: &str, result: SendResult) -> LogOp {
    LogOp::Send {
        key: Some(key.to_string()),
        result,
        message_id: matches!(result, SendResult::Created | SendResult::Replayed)
            .then(|| format!("msg_{key}")),
    }
}

fn lookup(key: &str, result: LookupResult) -> LogOp {
    LogOp::Lookup {
        key: key.to_string(),
        result,
        status: (result == LookupResult::Found).then_some(Status::Accepted),
    }
}

fn status(key: &str, status: Status) -> LogOp {
    LogOp::Status {
        key: key.to_string(),
        message_id: format!("msg_{key}"),
        status,
        is_final: status.is_final(),
    }
}

/// Per key: faulted sends each followed by a lookup, one created send, maybe
/// replays each after a found lookup, then statuses and webhooks.
fn key_history(key: String) -> impl Strategy<Value = KeyHistory> {
    (
        prop::collection::vec(any::<bool>(), 0..4),
        0..3usize,
        any::<bool>(),
        0..3u32,
        any::<bool>(),
    )
        .prop_map(
            move |(faults, replays, delivered, webhook_attempts, sent_first)| {
                let k = key.as_str();
                let mut ops = Vec::new();
                for lookup_faulted in faults {
                    ops.push(send(k, SendResult::Faulted));
                    let r = if lookup_faulted {
                        LookupResult::Faulted
                    } else {
                        LookupResult::NotFound
                    };
                    ops.push(lookup(k, r));
                }
                ops.push(send(k, SendResult::Created));
                for _ in 0..replays {
                    ops.push(lookup(k, LookupResult::Found));
                    ops.push(send(k, SendResult::Replayed));
                }
                if sent_first {
                    ops.push(status(k, Status::Sent));
                }
                let fin = if delivered {
                    Status::Delivered
                } else {
                    Status::Failed
                };
                ops.push(status(k, fin));
                for attempt in 1..=webhook_attempts {
                    ops.push(LogOp::Webhook {
                        key: k.to_string(),
                        event_id: format!("evt_{k}"),
                        status: fin,
                        attempt,
                        answer: if attempt == webhook_attempts {
                            WebhookAnswer::Code(200)
                        } else {
                            WebhookAnswer::timeout()
                        },
                    });
                }
                KeyHistory {
                    ops,
                    provider_final: fin,
                }
            },
        )
}

/// Several keys' histories interleaved at random, each key's order kept.
fn histories() -> impl Strategy<Value = (Vec<KeyHistory>, Vec<LogOp>)> {
    (1..12usize)
        .prop_flat_map(|n| {
            let keys: Vec<_> = (0..n)
                .map(|i| key_history(format!("courier-{i}")))
                .collect();
            (keys, prop::collection::vec(any::<u32>(), 256))
        })
        .prop_map(|(hs, choices)| {
            let mut cursors = vec![0usize; hs.len()];
            let mut out = Vec::new();
            let mut c = choices.iter().cycle();
            loop {
                let open: Vec<usize> = (0..hs.len())
                    .filter(|&i| cursors[i] < hs[i].ops.len())
                    .collect();
                if open.is_empty() {
                    break;
                }
                let pick = open[*c.next().unwrap() as usize % open.len()];
                out.push(hs[pick].ops[cursors[pick]].clone());
                cursors[pick] += 1;
            }
            (hs, out)
        })
}

fn numbered(ops: &[LogOp]) -> Vec<LogEntry> {
    ops.iter()
        .enumerate()
        .map(|(i, op)| LogEntry {
            seq: i as u64 + 1,
            at: "2026-01-01T00:00:00Z".to_string(),
            op: op.clone(),
        })
        .collect()
}

fn expectations(hs: &[KeyHistory]) -> Vec<Expectation> {
    hs.iter()
        .enumerate()
        .map(|(i, h)| Expectation {
            key: format!("courier-{i}"),
            action_id: i.to_string(),
            courier_final: Some(h.provider_final),
            refused: false,
            not_before: None,
            expires_at: None,
            cancelled: false,
            expired: false,
            unknown: false,
        })
        .collect()
}

/// The time of line `i` (0-based) of [`timed`]: 10 ms apart.
fn line_ms(i: usize) -> i64 {
    1_767_225_600_000 + 10 * i as i64
}

/// As [`numbered`], each line 10 ms after the previous one.
fn timed(ops: &[LogOp]) -> Vec<LogEntry> {
    let mut entries = numbered(ops);
    for (i, e) in entries.iter_mut().enumerate() {
        e.at = ms_time(line_ms(i)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    }
    entries
}

fn ms_time(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap()
}

/// Each key's window: `not_before` at its first `send` line, `expires_at`
/// at its last one (so each send is inside it, on the edges).
fn windows(hs: &[KeyHistory], ops: &[LogOp]) -> Vec<Expectation> {
    let mut expected = expectations(hs);
    for e in &mut expected {
        let sends: Vec<i64> = ops
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op, LogOp::Send { key: Some(k), .. } if *k == e.key))
            .map(|(i, _)| line_ms(i))
            .collect();
        e.not_before = sends.first().copied().map(ms_time);
        e.expires_at = sends.last().copied().map(ms_time);
    }
    expected
}

/// Text round trip: what the verifier reads is what a provider writes.
fn through_text(entries: &[LogEntry]) -> Vec<LogEntry> {
    let text: String = entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect();
    courier_verify::read_log(text.as_bytes()).unwrap().entries
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn verify_well_behaved_histories_pass((hs, ops) in histories()) {
        let entries = through_text(&numbered(&ops));
        let r = verify(&entries, None);
        prop_assert!(r.passed(), "{}", r);
        prop_assert_eq!((r.exactly_one, r.actions), (hs.len() as u64, hs.len() as u64));
        let expected = expectations(&hs);
        let r = verify(&entries, Some(&expected));
        prop_assert!(r.passed(), "{}", r);
        prop_assert_eq!(r.outcomes_differ.map(|c| c.count), Some(0));
    }

    #[test]
    fn verify_well_behaved_histories_keep_every_promise((hs, ops) in histories()) {
        let entries = numbered(&ops);
        let expected = expectations(&hs);
        for p in Promise::ALL {
            let r = verify_under(&entries, Some(&expected), p);
            prop_assert!(r.passed(), "{}", r);
            prop_assert_eq!(r.exactly_one, hs.len() as u64);
            let resends = r.resends_without_lookup.as_ref().map(|c| c.count);
            prop_assert_eq!(resends, p.allows_resend_without_lookup().then_some(0));
        }
    }

    #[test]
    fn verify_one_injected_created_line_is_a_duplicate_each_promise_judges_its_way(
        (hs, ops) in histories(),
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let key = format!("courier-{}", which.index(hs.len()));
        let mut ops = ops;
        let pos = at.index(ops.len() + 1);
        // With a lookup of its key on each side, so that neither it nor the
        // key's next send breaks the resend rule.
        ops.insert(pos, lookup(&key, LookupResult::NotFound));
        ops.insert(pos, send(&key, SendResult::Created));
        ops.insert(pos, lookup(&key, LookupResult::NotFound));
        let entries = numbered(&ops);
        let expected = expectations(&hs);
        for p in Promise::ALL {
            let r = verify_under(&entries, Some(&expected), p);
            prop_assert_eq!(r.exactly_one, hs.len() as u64 - 1);
            if p.allows_duplicates() {
                let d = r.duplicates_allowed.clone().unwrap();
                prop_assert_eq!((d.actions.count, d.extra_effects), (1, 1));
                prop_assert_eq!(r.more_than_one.count, 0);
                prop_assert!(r.passed(), "{}", r);
            } else {
                prop_assert_eq!(&r.more_than_one.samples, &vec![key.clone()]);
                prop_assert_eq!(r.violations(), 1, "{}", r);
            }
        }
    }

    #[test]
    fn verify_one_injected_created_line_is_exactly_one_duplicate(
        (hs, ops) in histories(),
        which in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
    ) {
        let key = format!("courier-{}", which.index(hs.len()));
        let mut ops = ops;
        let pos = at.index(ops.len() + 1);
        ops.insert(pos, send(&key, SendResult::Created));
        let entries = numbered(&ops);
        let expected = expectations(&hs);
        for r in [verify(&entries, None), verify(&entries, Some(&expected))] {
            prop_assert_eq!(r.more_than_one.count, 1, "{}", r);
            prop_assert_eq!(&r.more_than_one.samples, &vec![key.clone()]);
            prop_assert_eq!(r.exactly_one, hs.len() as u64 - 1);
            prop_assert!(!r.passed());
        }
    }

    #[test]
    fn verify_one_send_right_after_a_send_is_exactly_one_blind_resend(
        (hs, ops) in histories(),
        which in any::<prop::sample::Index>(),
    ) {
        // Right after some send of a key, before anything else about it.
        let sends: Vec<usize> = ops
            .iter()
            .enumerate()
            .filter(|(_, op)| matches!(op, LogOp::Send { .. }))
            .map(|(i, _)| i)
            .collect();
        let after = sends[which.index(sends.len())];
        let LogOp::Send { key: Some(key), .. } = &ops[after] else { unreachable!() };
        let key = key.clone();
        let mut ops = ops;
        ops.insert(after + 1, send(&key, SendResult::Faulted));
        let r = verify(&numbered(&ops), Some(&expectations(&hs)));
        prop_assert_eq!(r.blind_resends.count, 1, "{}", r);
        prop_assert_eq!(r.violations(), 1);
        for p in Promise::ALL {
            let r = verify_under(&numbered(&ops), Some(&expectations(&hs)), p);
            let counted = r.resends_without_lookup.as_ref().map(|c| c.count);
            if p.allows_resend_without_lookup() {
                prop_assert_eq!((counted, r.blind_resends.count), (Some(1), 0));
                prop_assert!(r.passed(), "{}", r);
            } else {
                prop_assert_eq!((counted, r.blind_resends.count), (None, 1));
                prop_assert_eq!(r.violations(), 1);
            }
        }
    }

    #[test]
    fn verify_sends_inside_their_windows_pass_and_one_shifted_edge_is_caught_once(
        (hs, ops) in histories(),
        which in any::<prop::sample::Index>(),
        early in any::<bool>(),
    ) {
        let entries = through_text(&timed(&ops));
        let mut expected = windows(&hs, &ops);
        let r = verify(&entries, Some(&expected));
        prop_assert!(r.passed(), "{}", r);
        prop_assert_eq!(r.sent_before_not_before.as_ref().map(|c| c.count), Some(0));
        prop_assert_eq!(r.sent_after_expires_at.as_ref().map(|c| c.count), Some(0));
        // One key's window narrowed by a millisecond past its edge: on the
        // late side, past the clock margin too.
        let e = &mut expected[which.index(hs.len())];
        let margin = chrono::TimeDelta::milliseconds(
            courier_verify::EXPIRY_CLOCK_MARGIN_MS as i64 + 1,
        );
        if early {
            e.not_before = e.not_before.map(|t| t + chrono::TimeDelta::milliseconds(1));
            e.expires_at = None;
        } else {
            e.expires_at = e.expires_at.map(|t| t - margin);
            e.not_before = None;
        }
        let r = verify(&entries, Some(&expected));
        let (hit, other) = if early {
            (&r.sent_before_not_before, &r.sent_after_expires_at)
        } else {
            (&r.sent_after_expires_at, &r.sent_before_not_before)
        };
        prop_assert_eq!(hit.as_ref().map(|c| c.count), Some(1), "{}", r);
        prop_assert_eq!(other.as_ref().map(|c| c.count), Some(0));
        prop_assert_eq!(r.violations(), 1);
    }

    #[test]
    fn verify_one_dropped_line_is_exactly_one_seq_gap(
        (_hs, ops) in histories(),
        which in any::<prop::sample::Index>(),
    ) {
        let mut entries = numbered(&ops);
        // Dropping the last line leaves no gap behind it, so drop another.
        prop_assume!(entries.len() >= 2);
        entries.remove(which.index(entries.len() - 1));
        let r = verify(&entries, None);
        prop_assert_eq!(r.seq_out_of_order.count, 1, "{}", r);
    }
}
