//! Time and intent against a real PostgreSQL (migration 23): scheduled
//! actions wait for their time, deadlines end unsent actions, a cancel is a
//! compare-and-set no claim can pass, a re-drive takes only what created
//! nothing, and out-of-limits schedules are refused with every table
//! unchanged.

use chrono::{DateTime, Duration as Span, Utc};
use courier_core::ActionState;
use courier_store::*;
use courier_testkit::{fixtures, fresh_db, TestDb};
use std::sync::Arc;
use std::time::Duration;

const OWNER: &str = "w1";
const LEASE_MS: u64 = 60_000;

async fn db_now(store: &PgStore) -> DateTime<Utc> {
    let c = store.client().await.unwrap();
    c.query_one("SELECT now()", &[]).await.unwrap().get(0)
}

fn action(store: &str, n: usize) -> NewAction {
    fixtures::new_action(store, n)
}

async fn claim(store: &PgStore, n: u32) -> Vec<Claimed> {
    let owner: Arc<str> = Arc::from(OWNER);
    fixtures::claim_to_send(store, &owner, n, LEASE_MS, 1_000, ClaimMode::Fair)
        .await
        .unwrap()
}

async fn state(store: &PgStore, id: i64) -> ActionState {
    store.action_get(id).await.unwrap().unwrap().state
}

/// Row counts of every table an enqueue, cancel or re-drive could write.
async fn tables(store: &PgStore) -> Vec<i64> {
    let c = store.client().await.unwrap();
    let mut out = Vec::new();
    for t in [
        "actions",
        "actions_ready",
        "actions_scheduled",
        "actions_done",
        "outbox",
        "events",
        "stores",
        "store_work",
    ] {
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get(0);
        out.push(n);
    }
    out
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
async fn a_scheduled_action_is_not_claimed_before_its_time_and_is_after_a_tick() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let now = clock.now().expect("a manual clock");
    let later = NewAction {
        not_before: Some(now + Span::seconds(3_600)),
        ..action("s1", 1)
    };
    let id = store.action_enqueue(&later).await.unwrap().id();
    assert_eq!(state(&store, id).await, ActionState::Scheduled);
    invariants_hold(&db).await;
    // Before its time: no claim sees it, no tick promotes it.
    assert!(claim(&store, 16).await.is_empty());
    assert_eq!(
        store.schedule_tick(1_000, 1_000).await.unwrap(),
        ScheduleTick::default()
    );
    clock.advance(Duration::from_secs(3_599));
    assert_eq!(store.schedule_tick(1_000, 1_000).await.unwrap().promoted, 0);
    assert!(claim(&store, 16).await.is_empty());
    // At its time: the tick makes it pending, with its store's work row.
    clock.advance(Duration::from_secs(1));
    let tick = store.schedule_tick(1_000, 1_000).await.unwrap();
    assert_eq!((tick.promoted, tick.expired), (1, 0));
    assert_eq!(state(&store, id).await, ActionState::Pending);
    assert!(store.store_work_missing().await.unwrap().is_empty());
    invariants_hold(&db).await;
    let got = claim(&store, 16).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].lease.action_id, id);
    assert_eq!(got[0].expires_in_ms, None);
    // A not_before already past is pending at once.
    let due = NewAction {
        not_before: Some(now - Span::seconds(60)),
        ..action("s1", 2)
    };
    let id = store.action_enqueue(&due).await.unwrap().id();
    assert_eq!(state(&store, id).await, ActionState::Pending);
    invariants_hold(&db).await;
}

#[tokio::test]
async fn unclaimed_actions_past_their_deadline_expire_unsent_and_are_never_claimed() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let now = clock.now().expect("a manual clock");
    let pending = NewAction {
        expires_at: Some(now + Span::seconds(10)),
        ..action("s1", 1)
    };
    let scheduled = NewAction {
        not_before: Some(now + Span::seconds(5)),
        expires_at: Some(now + Span::seconds(10)),
        ..action("s2", 2)
    };
    let p = store.action_enqueue(&pending).await.unwrap().id();
    let s = store.action_enqueue(&scheduled).await.unwrap().id();
    assert_eq!(
        store.schedule_tick(1_000, 1_000).await.unwrap(),
        ScheduleTick::default()
    );
    clock.advance(Duration::from_secs(10));
    let tick = store.schedule_tick(1_000, 1_000).await.unwrap();
    // The scheduled one is promoted and expired in the same tick.
    assert_eq!((tick.promoted, tick.expired), (1, 2));
    for id in [p, s] {
        let v = store.action_get(id).await.unwrap().unwrap();
        assert_eq!(v.state, ActionState::Expired);
        assert_eq!(v.attempts, 0, "no intent, no attempt: nothing was sent");
        assert!(v.status.is_none());
    }
    assert!(claim(&store, 16).await.is_empty());
    invariants_hold(&db).await;
    // Final: the pruner's table has both.
    let done: Vec<i64> = fixtures::column(&store, "SELECT id FROM actions_done ORDER BY id").await;
    assert_eq!(done, vec![p, s]);
}

#[tokio::test]
async fn a_claimed_action_past_its_deadline_is_its_owners_to_end() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    let now = clock.now().expect("a manual clock");
    let id = store
        .action_enqueue(&NewAction {
            expires_at: Some(now + Span::seconds(10)),
            ..action("s1", 1)
        })
        .await
        .unwrap()
        .id();
    let got = claim(&store, 1).await;
    assert_eq!(got.len(), 1);
    // The claim hands the deadline over, from the claim's time.
    let left = got[0].expires_in_ms.expect("a deadline");
    assert!((9_000..=11_000).contains(&left), "{left}");
    // The schedule never ends a claimed action, whatever the time.
    clock.advance(Duration::from_secs(20));
    assert_eq!(store.schedule_tick(1_000, 1_000).await.unwrap().expired, 0);
    assert_eq!(state(&store, id).await, ActionState::Claimed);
    // Its owner does, fenced: a stale epoch is refused.
    let stale = Lease {
        epoch: got[0].lease.epoch - 1,
        ..got[0].lease.clone()
    };
    assert!(store.action_expire(&stale).await.unwrap().is_err());
    assert_eq!(state(&store, id).await, ActionState::Claimed);
    store.action_expire(&got[0].lease).await.unwrap().unwrap();
    assert_eq!(state(&store, id).await, ActionState::Expired);
    invariants_hold(&db).await;
    // Its store's slot is released: the next action of the store is taken.
    store.action_enqueue(&action("s1", 2)).await.unwrap();
    assert_eq!(claim(&store, 1).await.len(), 1);
}

#[tokio::test]
async fn cancel_is_a_compare_and_set_that_no_claim_passes() {
    let db = fresh_db().await;
    let store = &db.store;
    let now = db_now(store).await;
    let pending = store.action_enqueue(&action("s1", 1)).await.unwrap().id();
    let scheduled = store
        .action_enqueue(&NewAction {
            not_before: Some(now + Span::seconds(3_600)),
            ..action("s1", 2)
        })
        .await
        .unwrap()
        .id();
    // Another store's token: not found, nothing changes.
    let before = tables(store).await;
    let other = vec!["s2".to_string()];
    assert_eq!(
        store
            .action_cancel(pending, "t-s2", Some(&other))
            .await
            .unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(
        store.action_cancel(424_242, "ops", None).await.unwrap(),
        CancelOutcome::NotFound
    );
    assert_eq!(tables(store).await, before);
    // The store's own token, and an admin.
    let own = vec!["s1".to_string()];
    assert_eq!(
        store
            .action_cancel(pending, "t-s1", Some(&own))
            .await
            .unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        store.action_cancel(scheduled, "ops", None).await.unwrap(),
        CancelOutcome::Cancelled
    );
    for id in [pending, scheduled] {
        assert_eq!(state(store, id).await, ActionState::Cancelled);
    }
    invariants_hold(&db).await;
    // No claim takes them; a second cancel changes nothing.
    assert!(claim(store, 16).await.is_empty());
    let before = tables(store).await;
    assert_eq!(
        store.action_cancel(pending, "ops", None).await.unwrap(),
        CancelOutcome::Refused(ActionState::Cancelled)
    );
    assert_eq!(tables(store).await, before);
    // The record: who, when, from which state.
    let events: Vec<String> = fixtures::column(
        store,
        "SELECT kind || ' ' || action_id || ' ' || detail FROM events WHERE kind = 'cancel' ORDER BY id",
    )
    .await;
    assert_eq!(
        events,
        vec![
            format!("cancel {pending} by=t-s1 from=pending"),
            format!("cancel {scheduled} by=ops from=scheduled"),
        ]
    );
    // A claimed action: refused, with its state, and nothing changes.
    let claimed = store.action_enqueue(&action("s1", 3)).await.unwrap().id();
    assert_eq!(claim(store, 1).await.len(), 1);
    let before = tables(store).await;
    assert_eq!(
        store.action_cancel(claimed, "ops", None).await.unwrap(),
        CancelOutcome::Refused(ActionState::Claimed)
    );
    assert_eq!(tables(store).await, before);
    assert_eq!(state(store, claimed).await, ActionState::Claimed);
}

/// The claim and the cancel race for the same actions, many times: each
/// action ends either cancelled with no intent, or claimed with one, never
/// both and never neither.
#[tokio::test]
async fn cancel_and_claim_race_and_exactly_one_wins() {
    let db = fresh_db().await;
    let store = db.store.clone();
    const ROUNDS: usize = 200;
    let mut cancelled = 0;
    let mut claimed = 0;
    for i in 0..ROUNDS {
        let id = store.action_enqueue(&action("race", i)).await.unwrap().id();
        let (s1, s2) = (store.clone(), store.clone());
        let claim_task = tokio::spawn(async move { claim(&s1, 1).await });
        let cancel_task = tokio::spawn(async move { s2.action_cancel(id, "ops", None).await });
        let got = claim_task.await.unwrap();
        let outcome = cancel_task.await.unwrap().unwrap();
        let intent: Vec<i64> = fixtures::column(
            &store,
            &format!("SELECT action_id FROM outbox WHERE action_id = {id}"),
        )
        .await;
        match outcome {
            CancelOutcome::Cancelled => {
                cancelled += 1;
                assert!(got.is_empty(), "round {i}: cancelled and claimed");
                assert!(
                    intent.is_empty(),
                    "round {i}: a cancelled action has an intent"
                );
            }
            CancelOutcome::Refused(ActionState::Claimed) => {
                claimed += 1;
                assert_eq!(got.len(), 1, "round {i}: refused but not claimed");
                assert_eq!(intent, vec![id]);
                store.action_expire(&got[0].lease).await.unwrap().unwrap();
            }
            other => panic!("round {i}: {other:?}"),
        }
    }
    eprintln!("{ROUNDS} races: {cancelled} cancelled first, {claimed} claimed first");
    assert_eq!(cancelled + claimed, ROUNDS);
    invariants_hold(&db).await;
}

#[tokio::test]
async fn a_redrive_takes_only_a_refusal_that_created_nothing_and_links_both_ways() {
    let db = fresh_db().await;
    let store = &db.store;
    let mut by_status = Vec::new();
    for (i, status) in [400u16, 422, 400].into_iter().enumerate() {
        let id = store.action_enqueue(&action("s1", i)).await.unwrap().id();
        let got = claim(store, 1).await;
        assert_eq!(got[0].lease.action_id, id);
        let reason = format!("provider answered {status}: refused");
        store
            .action_fail(&got[0].lease, status, &reason)
            .await
            .unwrap()
            .unwrap();
        by_status.push(id);
    }
    let (refused_400, refused_422, other_store) = (by_status[0], by_status[1], by_status[2]);
    // 422: the key already has a message; refused, nothing changes.
    let before = tables(store).await;
    match store
        .action_redrive(refused_422, "ops", None)
        .await
        .unwrap()
    {
        RedriveOutcome::Refused { state, reason } => {
            assert_eq!(state, ActionState::Failed);
            assert!(reason.contains("422"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Another store's token sees nothing.
    let s2 = vec!["s2".to_string()];
    assert_eq!(
        store
            .action_redrive(other_store, "t", Some(&s2))
            .await
            .unwrap(),
        RedriveOutcome::NotFound
    );
    assert_eq!(tables(store).await, before);
    // 400: a new action, a new key, the same content, linked both ways.
    let RedriveOutcome::Redriven(new) = store
        .action_redrive(refused_400, "ops", None)
        .await
        .unwrap()
    else {
        panic!("not re-driven")
    };
    let (old_v, new_v) = (
        store.action_get(refused_400).await.unwrap().unwrap(),
        store.action_get(new).await.unwrap().unwrap(),
    );
    assert_eq!(old_v.redriven_as, Some(new));
    assert_eq!(new_v.redrive_of, Some(refused_400));
    assert_eq!(new_v.state, ActionState::Pending);
    assert_eq!(
        (new_v.store.as_str(), new_v.to.as_str()),
        (old_v.store.as_str(), old_v.to.as_str())
    );
    let bodies: Vec<String> = fixtures::column(
        store,
        &format!("SELECT body FROM actions WHERE id IN ({refused_400}, {new}) ORDER BY id"),
    )
    .await;
    assert_eq!(bodies[0], bodies[1]);
    // The new action's key is its own.
    let got = claim(store, 1).await;
    assert_eq!(got[0].lease.action_id, new);
    assert_ne!(
        Some(courier_core::action_key(&got[0].uid)),
        old_v.idempotency_key
    );
    // A repeat answers the first re-drive; the record has one row.
    assert_eq!(
        store
            .action_redrive(refused_400, "ops", None)
            .await
            .unwrap(),
        RedriveOutcome::Already(new)
    );
    let events: Vec<String> = fixtures::column(
        store,
        "SELECT action_id || ' ' || detail FROM events WHERE kind = 'redrive'",
    )
    .await;
    assert_eq!(events, vec![format!("{refused_400} by=ops as={new}")]);
    // Anything that may have had an effect, or never left: refused.
    let cancelled = store.action_enqueue(&action("s1", 9)).await.unwrap().id();
    store.action_cancel(cancelled, "ops", None).await.unwrap();
    store.action_enqueue(&action("s1", 10)).await.unwrap();
    let settled = fixtures::settled(store).await.lease.action_id;
    for id in [cancelled, settled] {
        let before = tables(store).await;
        assert!(matches!(
            store.action_redrive(id, "ops", None).await.unwrap(),
            RedriveOutcome::Refused { .. }
        ));
        assert_eq!(tables(store).await, before);
    }
    invariants_hold(&db).await;
}

#[tokio::test]
async fn schedules_out_of_limits_are_refused_and_change_nothing() {
    let db = fresh_db().await;
    let store = &db.store;
    let now = db_now(store).await;
    let at = |s: i64| Some(now + Span::seconds(s));
    let day = 86_400;
    let cases = [
        (at(-2 * day), None, "not_before", "time_too_old"),
        (at(366 * day), None, "not_before", "time_too_far"),
        (None, at(-1), "expires_at", "already_expired"),
        (None, at(366 * day), "expires_at", "time_too_far"),
        (at(600), at(300), "expires_at", "expires_before_not_before"),
        (at(600), at(600), "expires_at", "expires_before_not_before"),
    ];
    store.action_enqueue(&action("s1", 0)).await.unwrap();
    let before = tables(store).await;
    for (i, (not_before, expires_at, field, code)) in cases.into_iter().enumerate() {
        let bad = NewAction {
            not_before,
            expires_at,
            ..action("s1", i + 1)
        };
        match store.action_enqueue(&bad).await {
            Err(EnqueueError::Invalid(inv)) => {
                assert_eq!(
                    (inv.field.as_str(), inv.code.as_str()),
                    (field, code),
                    "{inv:?}"
                );
                assert!(inv.message.starts_with(field), "{}", inv.message);
            }
            other => panic!("case {i}: {other:?}"),
        }
        // The set form names the item.
        let many = vec![action("s1", 100), bad.clone()];
        match store.actions_enqueue_many(&many).await {
            Err(EnqueueError::Invalid(inv)) => {
                assert_eq!((inv.index, inv.code.as_str()), (Some(1), code), "{inv:?}");
            }
            other => panic!("case {i}, batch: {other:?}"),
        }
    }
    assert_eq!(tables(store).await, before);
}

#[tokio::test]
async fn a_repeated_key_must_repeat_its_schedule() {
    let db = fresh_db().await;
    let store = &db.store;
    let now = db_now(store).await;
    let first = NewAction {
        key: Some("k1".into()),
        not_before: Some(now + Span::seconds(60)),
        expires_at: Some(now + Span::seconds(600)),
        ..action("s1", 1)
    };
    let id = store.action_enqueue(&first).await.unwrap();
    assert!(id.created());
    assert_eq!(
        store.action_enqueue(&first).await.unwrap(),
        Enqueued::Existing(id.id())
    );
    for changed in [
        NewAction {
            not_before: None,
            ..first.clone()
        },
        NewAction {
            expires_at: Some(now + Span::seconds(601)),
            ..first.clone()
        },
    ] {
        assert!(matches!(
            store.action_enqueue(&changed).await,
            Err(EnqueueError::KeyReused { existing_id: Some(e), .. }) if e == id.id()
        ));
        assert!(matches!(
            store
                .actions_enqueue_many(std::slice::from_ref(&changed))
                .await,
            Err(EnqueueError::KeyReused { .. })
        ));
    }
    // Through the set form, the same schedule is the same action.
    let again = store
        .actions_enqueue_many(std::slice::from_ref(&first))
        .await
        .unwrap();
    assert_eq!(again, vec![Enqueued::Existing(id.id())]);
}
