//! Actions held `unknown` against a real PostgreSQL (migration 25): a hold
//! is fenced and listed, a webhook carrying the key moves the action on,
//! an operator resolves it, and "not sent" is what a re-drive admits.

use courier_core::{ActionState, Status};
use courier_store::*;
use courier_testkit::{fixtures, fresh_db, TestDb};
use std::sync::Arc;

const OWNER: &str = "w1";
const LEASE_MS: u64 = 60_000;

async fn claim(store: &PgStore, n: u32) -> Vec<Claimed> {
    let owner: Arc<str> = Arc::from(OWNER);
    fixtures::claim_to_send(store, &owner, n, LEASE_MS, 1_000, ClaimMode::Fair)
        .await
        .unwrap()
}

async fn state(store: &PgStore, id: i64) -> ActionState {
    store.action_get(id).await.unwrap().unwrap().state
}

/// Enqueues `n` actions of store `s`, claims them and holds each `unknown`.
async fn held(store: &PgStore, s: &str, n: usize) -> Vec<Claimed> {
    for i in 0..n {
        store
            .action_enqueue(&fixtures::new_action(s, i))
            .await
            .unwrap();
    }
    let got = claim(store, n as u32).await;
    assert_eq!(got.len(), n);
    for c in &got {
        let held = store.action_hold(&c.lease, "no_lookup").await.unwrap();
        assert_eq!(held.ok(), Some(Held::Unknown));
    }
    got
}

async fn in_flight(store: &PgStore, s: &str) -> i64 {
    store
        .summary(3_600)
        .await
        .unwrap()
        .stores
        .into_iter()
        .find(|b| b.store == s)
        .map_or(0, |b| i64::from(b.in_flight))
}

async fn invariants_hold(db: &TestDb) {
    assert_eq!(
        db.store.actions_ready_mismatch().await.unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        db.store.actions_side_mismatch().await.unwrap(),
        Vec::<(String, i64)>::new()
    );
}

#[tokio::test]
async fn a_hold_is_fenced_releases_its_slot_and_is_listed_with_its_reason() {
    let db = fresh_db().await;
    let store = &db.store;
    let got = held(store, "s1", 2).await;
    let ids: Vec<i64> = got.iter().map(|c| c.lease.action_id).collect();
    for id in &ids {
        assert_eq!(state(store, *id).await, ActionState::Unknown);
    }
    assert_eq!(in_flight(store, "s1").await, 0);
    // Listed, newest hold first, with the reason and the counted attempt.
    let list = store.actions_unknown(10, None).await.unwrap();
    let listed: Vec<i64> = list.iter().map(|u| u.id).collect();
    assert_eq!(listed, vec![ids[1], ids[0]]);
    assert!(list
        .iter()
        .all(|u| u.reason == "no_lookup" && u.attempts == 1));
    assert_eq!(store.actions_unknown(1, None).await.unwrap().len(), 1);
    // Another store's caller sees none of them.
    let s2 = vec!["s2".to_string()];
    assert!(store
        .actions_unknown(10, Some(&s2))
        .await
        .unwrap()
        .is_empty());
    // The counts by state have them.
    assert_eq!(store.counts().await.unwrap().get("actions.unknown"), 2);
    // A second hold of the same lease changes nothing and is answered as
    // a fence at the same epoch (the worker's retry after a lost answer).
    let again = store.action_hold(&got[0].lease, "no_lookup").await.unwrap();
    assert_eq!(
        again.map_err(|f| f.current_epoch),
        Err(Some(got[0].lease.epoch))
    );
    // A stale lease is fenced: nothing written.
    store
        .action_enqueue(&fixtures::new_action("s1", 7))
        .await
        .unwrap();
    let c = claim(store, 1).await.remove(0);
    let stale = Lease {
        epoch: c.lease.epoch + 1,
        ..c.lease.clone()
    };
    assert!(store
        .action_hold(&stale, "no_lookup")
        .await
        .unwrap()
        .is_err());
    assert_eq!(state(store, c.lease.action_id).await, ActionState::Claimed);
    let holds: Vec<i64> = fixtures::column(
        store,
        "SELECT count(*) FROM events WHERE kind = 'held_unknown'",
    )
    .await;
    assert_eq!(holds, vec![2]);
    invariants_hold(&db).await;
}

#[tokio::test]
async fn a_webhook_carrying_the_key_moves_an_unknown_action_on() {
    let db = fresh_db().await;
    let store = &db.store;
    let got = held(store, "s1", 2).await;
    let key = |c: &Claimed| courier_core::action_key(&c.uid);
    let merged = store
        .webhooks_merge(&[
            WebhookIn {
                event_id: "e1".into(),
                key: key(&got[0]),
                status: Status::Sent,
                message_id: "m1".into(),
            },
            WebhookIn {
                event_id: "e2".into(),
                key: key(&got[1]),
                status: Status::Delivered,
                message_id: "m2".into(),
            },
        ])
        .await
        .unwrap();
    assert!(merged
        .iter()
        .all(|m| matches!(m, Ok(MergeOutcome::Applied(_)))));
    assert_eq!(
        state(store, got[0].lease.action_id).await,
        ActionState::Dispatched
    );
    assert_eq!(
        state(store, got[1].lease.action_id).await,
        ActionState::Done
    );
    assert!(store.actions_unknown(10, None).await.unwrap().is_empty());
    // The dispatched one finishes on its final status, as any does.
    store
        .webhooks_merge(&[WebhookIn {
            event_id: "e3".into(),
            key: key(&got[0]),
            status: Status::Delivered,
            message_id: "m1".into(),
        }])
        .await
        .unwrap();
    assert_eq!(
        state(store, got[0].lease.action_id).await,
        ActionState::Done
    );
    invariants_hold(&db).await;
}

#[tokio::test]
async fn an_operator_resolves_only_an_unknown_action_and_not_sent_admits_a_redrive() {
    let db = fresh_db().await;
    let store = &db.store;
    let got = held(store, "s1", 2).await;
    let (sent, not_sent) = (got[0].lease.action_id, got[1].lease.action_id);
    // Another store's caller: not found, nothing changed.
    let s2 = vec!["s2".to_string()];
    assert_eq!(
        store
            .action_resolve(sent, Resolution::Sent, "t", Some(&s2))
            .await
            .unwrap(),
        ResolveOutcome::NotFound
    );
    assert_eq!(state(store, sent).await, ActionState::Unknown);
    // A re-drive before any resolution: refused, with the way out.
    match store.action_redrive(not_sent, "ops", None).await.unwrap() {
        RedriveOutcome::Refused { state, reason } => {
            assert_eq!(state, ActionState::Unknown);
            assert!(reason.contains("resolve it as not sent"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store
            .action_resolve(sent, Resolution::Sent, "ops", None)
            .await
            .unwrap(),
        ResolveOutcome::Resolved(ActionState::Done)
    );
    assert_eq!(
        store
            .action_resolve(not_sent, Resolution::NotSent, "ops", None)
            .await
            .unwrap(),
        ResolveOutcome::Resolved(ActionState::Failed)
    );
    // Only once: the second answer names the state it is in.
    assert_eq!(
        store
            .action_resolve(sent, Resolution::NotSent, "ops", None)
            .await
            .unwrap(),
        ResolveOutcome::Refused(ActionState::Done)
    );
    let events: Vec<String> = fixtures::column(
        store,
        "SELECT action_id || ' ' || detail FROM events WHERE kind = 'resolve' ORDER BY id",
    )
    .await;
    assert_eq!(
        events,
        vec![
            format!("{sent} by=ops as=sent"),
            format!("{not_sent} by=ops as=not_sent")
        ]
    );
    // Resolved "sent" is not re-drivable; "not sent" is, as a new action.
    assert!(matches!(
        store.action_redrive(sent, "ops", None).await.unwrap(),
        RedriveOutcome::Refused { .. }
    ));
    let RedriveOutcome::Redriven(new) = store.action_redrive(not_sent, "ops", None).await.unwrap()
    else {
        panic!("not re-driven")
    };
    assert_eq!(state(store, new).await, ActionState::Pending);
    assert!(store.actions_unknown(10, None).await.unwrap().is_empty());
    // A resolution the function does not know is refused by the SQL too.
    let c = store.client().await.unwrap();
    let row = c
        .query_one(
            "SELECT outcome FROM courier.resolve($1, 'maybe', 'ops')",
            &[&new],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, &str>(0), "invalid");
    assert_eq!(state(store, new).await, ActionState::Pending);
    invariants_hold(&db).await;
}

#[tokio::test]
async fn an_unknown_action_is_never_claimed_and_never_pruned() {
    let db = fresh_db().await;
    let store = &db.store;
    let got = held(store, "s1", 1).await;
    let id = got[0].lease.action_id;
    assert!(claim(store, 4).await.is_empty());
    // The reclaim of expired leases does not see it either: it holds none.
    let held_rows: Vec<i64> = fixtures::column(
        store,
        &format!("SELECT count(*) FROM actions_held WHERE id = {id}"),
    )
    .await;
    assert_eq!(held_rows, vec![0]);
    let done_rows: Vec<i64> = fixtures::column(
        store,
        &format!("SELECT count(*) FROM actions_done WHERE id = {id}"),
    )
    .await;
    assert_eq!(done_rows, vec![0], "not final, so never pruned");
    invariants_hold(&db).await;
}

#[tokio::test]
async fn a_hold_after_a_webhook_reported_the_key_settles_instead() {
    let db = fresh_db().await;
    let store = &db.store;
    for i in 0..2 {
        store
            .action_enqueue(&fixtures::new_action("s1", i))
            .await
            .unwrap();
    }
    let got = claim(store, 2).await;
    let report = |c: &Claimed, event: &str, status: Status| WebhookIn {
        event_id: event.into(),
        key: courier_core::action_key(&c.uid),
        status,
        message_id: format!("m-{event}"),
    };
    // The webhooks land while the actions are claimed: merged into the
    // outbox only (a merge never writes a claimed action).
    store
        .webhooks_merge(&[
            report(&got[0], "e1", Status::Sent),
            report(&got[1], "e2", Status::Delivered),
        ])
        .await
        .unwrap();
    assert_eq!(
        state(store, got[0].lease.action_id).await,
        ActionState::Claimed
    );
    let sent = store.action_hold(&got[0].lease, "no_lookup").await.unwrap();
    let delivered = store.action_hold(&got[1].lease, "no_lookup").await.unwrap();
    assert_eq!(sent.ok(), Some(Held::Evidenced(Status::Sent)));
    assert_eq!(delivered.ok(), Some(Held::Evidenced(Status::Delivered)));
    assert_eq!(
        state(store, got[0].lease.action_id).await,
        ActionState::Dispatched
    );
    assert_eq!(
        state(store, got[1].lease.action_id).await,
        ActionState::Done
    );
    assert!(store.actions_unknown(10, None).await.unwrap().is_empty());
    assert_eq!(in_flight(store, "s1").await, 0);
    invariants_hold(&db).await;
}

#[tokio::test]
async fn a_report_after_a_resolution_of_not_sent_refuses_the_redrive() {
    let db = fresh_db().await;
    let store = &db.store;
    let got = held(store, "s1", 1).await;
    let id = got[0].lease.action_id;
    assert_eq!(
        store
            .action_resolve(id, Resolution::NotSent, "ops", None)
            .await
            .unwrap(),
        ResolveOutcome::Resolved(ActionState::Failed)
    );
    // The provider's webhook arrives after the operator's answer: the
    // failed action is left as it is, its outbox row shows the message.
    store
        .webhooks_merge(&[WebhookIn {
            event_id: "late".into(),
            key: courier_core::action_key(&got[0].uid),
            status: Status::Sent,
            message_id: "m-late".into(),
        }])
        .await
        .unwrap();
    match store.action_redrive(id, "ops", None).await.unwrap() {
        RedriveOutcome::Refused { state, reason } => {
            assert_eq!(state, ActionState::Failed);
            assert!(reason.contains("reported its message (sent)"), "{reason}");
        }
        other => panic!("re-driven after the provider reported it: {other:?}"),
    }
    invariants_hold(&db).await;
}

#[tokio::test]
async fn the_hold_of_an_action_still_held_outlives_the_event_retention() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let got = held(&store, "s1", 2).await;
    let windows = PruneWindows {
        action_retention_s: 600,
        key_retention_s: 300,
        webhook_event_retention_s: 120,
        event_retention_s: 60,
        batch_rows_max: 1,
    };
    store
        .action_resolve(got[1].lease.action_id, Resolution::Sent, "ops", None)
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_secs(3_600));
    // A batch of one row at a time: the kept hold is passed over, so the
    // rows behind it still go.
    for _ in 0..10 {
        store.prune_batch(&windows).await.unwrap();
    }
    let kinds: Vec<String> = fixtures::column(
        &store,
        "SELECT kind || ' ' || action_id FROM events ORDER BY id",
    )
    .await;
    assert_eq!(
        kinds,
        vec![format!("held_unknown {}", got[0].lease.action_id)]
    );
    let list = store.actions_unknown(10, None).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].id, got[0].lease.action_id);
}
