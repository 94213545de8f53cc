//! The three crash scenarios against real etcd and JetStream (started by each
//! test), for the reference protocol and for each broken variant. The broken
//! variants are tests of the checker: the same assertions must catch them.

use courier_relay::lab::{run_lab, LabConfig, Scenario, ScenarioReport};
use courier_relay::trace::Step;
use courier_relay::{Invariant, Protocol};

async fn lab(protocol: Protocol, scenario: Scenario) -> ScenarioReport {
    let cfg = LabConfig::new(protocol, vec![scenario]);
    let mut report = run_lab(&cfg)
        .await
        .expect("the lab starts etcd and nats-server");
    assert_eq!(report.scenarios.len(), 1);
    report.scenarios.remove(0)
}

fn invariants(r: &ScenarioReport) -> Vec<Invariant> {
    let mut v: Vec<Invariant> = r.violations.iter().map(|v| v.invariant).collect();
    v.dedup();
    v
}

/// The counts every reference run ends with: three results, counter 10.
fn assert_single_effects(r: &ScenarioReport) {
    assert!(r.passed, "{r:#?}");
    assert_eq!(r.error, None);
    assert_eq!(r.results, 3, "{r:#?}");
    assert_eq!(r.dedup_records, 3, "{r:#?}");
    assert_eq!(r.counter, 10, "{r:#?}");
    assert_eq!(r.pending_outbox, 0);
    assert_eq!(r.ack_pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublished_outbox_completes_after_the_relay_restarts() {
    let r = lab(Protocol::Reference, Scenario::UnpublishedOutbox).await;
    assert_single_effects(&r);
    assert_eq!(
        r.evidence,
        vec![
            "after the relay crash: 3 pending intents in etcd, 0 messages in the stream"
                .to_string()
        ]
    );
    assert_eq!(r.stream_messages, 3);
    assert_eq!(r.deliveries, 3);
    let chain = r.chain.expect("t1 has a chain");
    let steps: Vec<&Step> = chain.entries.iter().map(|e| &e.step).collect();
    assert!(matches!(steps[0], Step::Created { .. }), "{steps:?}");
    assert!(
        steps.iter().any(|s| matches!(s, Step::RelayCrashed)),
        "{steps:?}"
    );
    assert!(steps.iter().any(|s| matches!(
        s,
        Step::Committed {
            counter_after: _,
            ..
        }
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_publish_ack_leaves_two_copies_and_one_effect() {
    let r = lab(Protocol::Reference, Scenario::LostPublishAck).await;
    assert_single_effects(&r);
    assert_eq!(r.stream_messages, 4, "{r:#?}");
    assert_eq!(r.copies.get("evt-t1"), Some(&2), "{:?}", r.copies);
    assert_eq!(r.copies.get("evt-t2"), Some(&1));
    assert_eq!(r.deliveries, 4);
    assert_eq!(r.commits, 3);
    assert_eq!(r.suppressed, 1);
    let chain = r.chain.expect("t1 has a chain");
    let steps: Vec<&Step> = chain.entries.iter().map(|e| &e.step).collect();
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, Step::PublishUnknown { attempt: 1, .. })),
        "{steps:?}"
    );
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, Step::Published { attempt: 2, .. })),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|s| matches!(s, Step::Suppressed)),
        "{steps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_consumer_ack_is_redelivered_and_suppressed() {
    let r = lab(Protocol::Reference, Scenario::LostConsumerAck).await;
    assert_single_effects(&r);
    assert_eq!(r.stream_messages, 3);
    assert_eq!(r.deliveries, 4, "{r:#?}");
    assert_eq!(r.redeliveries, 1);
    assert_eq!(r.suppressed, 1);
    // The chain in order: delivery -> commit -> crash -> redelivery -> suppression -> ACK.
    let chain = r.chain.expect("t1 has a chain");
    let worker_steps: Vec<&Step> = chain
        .entries
        .iter()
        .filter(|e| e.actor.starts_with("worker"))
        .map(|e| &e.step)
        .collect();
    assert!(
        matches!(
            worker_steps.as_slice(),
            [
                Step::Delivered { delivery: 1, .. },
                Step::Committed {
                    counter_after: 2,
                    ..
                },
                Step::WorkerCrashed,
                Step::Delivered { delivery: 2, .. },
                Step::Suppressed,
                Step::Acked,
            ]
        ),
        "{worker_steps:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_ack_before_commit_losing_a_task() {
    let r = lab(Protocol::AckBeforeCommit, Scenario::LostConsumerAck).await;
    assert!(!r.passed);
    assert_eq!(r.error, None);
    assert_eq!(invariants(&r), vec![Invariant::NoLostTask], "{r:#?}");
    assert!(
        r.violations[0].detail.contains("task t1"),
        "{:?}",
        r.violations
    );
    assert_eq!(r.counter, 8);
    assert_eq!(r.results, 2);
    assert_eq!(
        r.redeliveries, 0,
        "an acknowledged message is never redelivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_no_dedup_doubling_the_counter() {
    let r = lab(Protocol::NoDedup, Scenario::LostConsumerAck).await;
    assert!(!r.passed);
    assert!(invariants(&r).contains(&Invariant::SingleEffect), "{r:#?}");
    assert_eq!(r.counter, 12, "t1's amount 2 applied twice");
    // The result key is unique per task, and yet the effect repeated.
    assert_eq!(r.results, 3);
    assert_eq!(r.dedup_records, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_catches_mark_before_ack_losing_publications() {
    let r = lab(Protocol::MarkBeforeAck, Scenario::UnpublishedOutbox).await;
    assert!(!r.passed);
    assert_eq!(invariants(&r), vec![Invariant::NoLostPublication], "{r:#?}");
    assert_eq!(r.violations.len(), 3);
    assert_eq!(r.stream_messages, 0);
    assert_eq!(r.counter, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_starter_names_the_missing_step() {
    let r = lab(Protocol::Starter, Scenario::UnpublishedOutbox).await;
    assert!(!r.passed);
    let error = r.error.expect("the starter stops");
    assert!(error.contains("`create` step is not written"), "{error}");
    assert!(error.contains("starter.rs"), "{error}");
}
