//! The batch writes against a real PostgreSQL: the claim that writes the
//! intent, the settle and the webhook merge. A single settle or merge is a
//! batch of one, so these tests pin down what a batch writes: each request's
//! answer and row as the rules say (checked against expected rows and, for
//! webhooks, against a small in-memory model, whatever the batch sizes), and
//! a failing request alone in its batch.

use courier_core::status::{fold_report, merge_label, Merge};
use courier_core::step::{after_claim, Step};
use courier_core::{action_key, ActionState, Status};
use courier_store::*;
use courier_testkit::fixtures::{
    self, claimed_to_send, column, expire_lease, settle, settled_ok, webhook,
};
use courier_testkit::fresh_db;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn owner(name: &str) -> Arc<str> {
    Arc::from(name)
}

async fn enqueue(store: &PgStore, stores: &[&str], per_store: usize) {
    for i in 0..per_store {
        for s in stores {
            store
                .action_enqueue(&NewAction {
                    store: s.to_string(),
                    to: "+15551234567".into(),
                    body: format!("order {i}"),
                    key: None,
                    ..Default::default()
                })
                .await
                .unwrap();
        }
    }
}

/// A small deterministic generator (the tests need no more than this).
struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn claim_to_send_writes_the_intent_with_the_core_key_and_counts_one_attempt() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], 3).await;
    let w = owner("w1");
    let got = fixtures::claim_to_send(&db.store, &w, 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 6);
    for c in &got {
        assert!(c.attempt_counted && !c.reclaimed);
        // outbox_intent refuses (as a Query error) an intent whose key is
        // not the one asked for: so the SQL key is the core's key.
        let intent = db
            .store
            .outbox_intent(&c.lease, &action_key(&c.uid))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(intent.attempts, 1);
        assert_eq!(intent.status, Status::Sending);
        assert!(!intent.written_now);
    }
    // The plain claim writes no intent.
    enqueue(&db.store, &["c"], 1).await;
    let plain = fixtures::claim(&db.store, &w, 1, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert!(!plain[0].attempt_counted);
    let intent = db
        .store
        .outbox_intent(&plain[0].lease, &action_key(&plain[0].uid))
        .await
        .unwrap()
        .unwrap();
    assert!(intent.written_now);
    assert_eq!(intent.attempts, 0);
}

#[tokio::test]
async fn a_reclaim_after_claim_to_send_keeps_the_intent_and_looks_up_first() {
    let db = fresh_db().await;
    let (store, clock) = db.manual_clock().await;
    enqueue(&store, &["a"], 1).await;
    let first = fixtures::claim_to_send(&store, &owner("w1"), 1, 50, 100, ClaimMode::Fifo)
        .await
        .unwrap();
    assert!(first[0].attempt_counted);
    expire_lease(&clock, 50);
    let second = fixtures::claim_to_send(&store, &owner("w2"), 1, 60_000, 100, ClaimMode::Fifo)
        .await
        .unwrap();
    assert_eq!(second.len(), 1);
    assert!(second[0].reclaimed && !second[0].attempt_counted);
    assert_eq!(second[0].lease.epoch, first[0].lease.epoch + 1);
    let intent = db
        .store
        .outbox_intent(&second[0].lease, &action_key(&second[0].uid))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        intent.attempts, 1,
        "the claim does not count a second attempt"
    );
    assert_eq!(after_claim(intent.attempts, intent.status), Step::Lookup);
}

#[tokio::test]
async fn fair_claim_takes_each_store_in_turn_and_fills_the_batch_from_one_store() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b", "c"], 10).await;
    let got = fixtures::claim_to_send(&db.store, &owner("w1"), 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    let mut per: std::collections::BTreeMap<String, usize> = Default::default();
    for c in &got {
        *per.entry(c.store.clone()).or_default() += 1;
    }
    assert_eq!(got.len(), 6);
    assert_eq!(per.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);

    let db = fresh_db().await;
    enqueue(&db.store, &["only"], 10).await;
    let got = fixtures::claim_to_send(&db.store, &owner("w1"), 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 6, "one store with work fills the whole batch");
}

/// What the settles and merges left of each action (by position in id
/// order): state, status, conflict, message id, and whether a next check is
/// set; and the events by kind, action position and detail.
async fn rows(store: &PgStore, ids: &[i64]) -> Vec<String> {
    let c = store.client().await.unwrap();
    let pos = |id: i64| ids.iter().position(|&x| x == id).unwrap();
    let mut out = Vec::new();
    for r in c
        .query(
            "SELECT a.id, a.state, o.status, o.conflict, o.message_id,
                    o.next_check_at IS NOT NULL AS checked, a.lease_until IS NULL AS released
             FROM actions a JOIN outbox o ON o.action_id = a.id ORDER BY a.id",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "{} {} {} conflict={} msg={} check={} released={}",
            pos(r.get(0)),
            r.get::<_, String>(1),
            r.get::<_, String>(2),
            r.get::<_, bool>(3),
            r.get::<_, Option<String>>(4).unwrap_or_default(),
            r.get::<_, bool>(5),
            r.get::<_, bool>(6),
        ));
    }
    for r in c
        .query(
            "SELECT kind, action_id, detail FROM events ORDER BY kind, action_id, detail",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "event {} {:?} {}",
            r.get::<_, String>(0),
            r.get::<_, Option<i64>>(1).map(pos),
            r.get::<_, String>(2)
        ));
    }
    out
}

/// The rows `a_settle_batch_answers_and_writes_each_settle_by_the_rules` leaves.
/// Action 10's refused settle is answered as data and leaves no `events` row:
/// its caller (the worker's `observe`) records the fence.
const SETTLE_BATCH_ROWS: [&str; 15] = [
    "0 dispatched accepted conflict=false msg=msg_0 check=true released=true",
    "1 done delivered conflict=false msg=msg_1 check=false released=true",
    "2 dispatched failed conflict=true msg=msg_1 check=true released=true",
    "3 dispatched sent conflict=false msg=msg_1 check=true released=true",
    "4 dispatched sent conflict=false msg=msg_4 check=true released=true",
    "5 done delivered conflict=false msg=msg_5 check=false released=true",
    "6 done failed conflict=false msg=msg_6 check=false released=true",
    "7 dispatched accepted conflict=false msg=msg_7 check=true released=true",
    "8 dispatched accepted conflict=false msg=msg_8 check=true released=true",
    "9 dispatched sent conflict=false msg=msg_9 check=true released=true",
    "10 claimed sending conflict=false msg= check=false released=false",
    "11 dispatched accepted conflict=false msg=msg_11 check=true released=true",
    "event backward Some(1) settle",
    "event backward Some(3) settle",
    "event conflict Some(2) settle",
];

/// Twelve sent actions of three stores, three of them overtaken by a
/// webhook, and a settle for each (action 10's at a newer epoch than its
/// own, action 11's already settled once): the action ids in order, the
/// settles, and action 10's epoch.
async fn twelve_settles(store: &PgStore) -> (Vec<i64>, Vec<SettleReq>, i64) {
    enqueue(store, &["a", "b", "c"], 4).await;
    let w = owner("w1");
    let mut got = fixtures::claim_to_send(store, &w, 12, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 12);
    got.sort_by_key(|c| c.lease.action_id);
    let ids: Vec<i64> = got.iter().map(|c| c.lease.action_id).collect();
    // Reports that arrived before the settle (with the message id msg_1): a
    // webhook ahead (delivered), a final one that will conflict, and one
    // behind.
    for (n, s) in [
        (1usize, Status::Delivered),
        (2, Status::Failed),
        (3, Status::Sent),
    ] {
        let key = action_key(&got[n].uid);
        let _ = webhook(store, &format!("pre{n}"), &key, s).await;
    }
    let reports = [
        Status::Accepted,
        Status::Accepted,
        Status::Delivered,
        Status::Accepted,
        Status::Sent,
        Status::Delivered,
        Status::Failed,
        Status::Accepted,
        Status::Accepted,
        Status::Sent,
        Status::Accepted,
        Status::Accepted,
    ];
    let mut reqs: Vec<SettleReq> = got
        .iter()
        .zip(reports)
        .enumerate()
        .map(|(i, (c, r))| SettleReq {
            lease: c.lease.clone(),
            report: r,
            message_id: Some(format!("msg_{i}")),
            from_lookup: i == 9,
        })
        .collect();
    // Action 10 was taken over (a newer epoch): fenced.
    let epoch_10 = reqs[10].lease.epoch;
    reqs[10].lease.epoch += 1;
    // Action 11 was settled already (a retry after a lost commit answer).
    settled_ok(
        settle(
            store,
            &reqs[11].lease,
            Status::Accepted,
            Some("msg_11"),
            false,
        )
        .await,
    );
    (ids, reqs, epoch_10)
}

/// One batch of twelve settles over every case a settle meets: reports ahead
/// of, behind and in conflict with a webhook that overtook it, a lookup's
/// report, a fenced lease and a retry of a settle that committed.
#[tokio::test]
async fn a_settle_batch_answers_and_writes_each_settle_by_the_rules() {
    let db = fresh_db().await;
    let (ids, reqs, epoch_10) = twelve_settles(&db.store).await;
    let answers: Vec<SettleOutcome> = db
        .store
        .actions_settle(&reqs, 60_000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let ok = |status, merge| SettleOutcome::Settled(Settled { status, merge });
    use Status::*;
    assert_eq!(
        answers,
        vec![
            ok(Accepted, Merge::Advance(Accepted)),
            ok(Delivered, Merge::Backward),
            ok(Failed, Merge::Conflict),
            ok(Sent, Merge::Backward),
            ok(Sent, Merge::Advance(Sent)),
            ok(Delivered, Merge::Advance(Delivered)),
            ok(Failed, Merge::Advance(Failed)),
            ok(Accepted, Merge::Advance(Accepted)),
            ok(Accepted, Merge::Advance(Accepted)),
            ok(Sent, Merge::Advance(Sent)),
            SettleOutcome::Fenced(Fenced {
                current_epoch: Some(epoch_10)
            }),
            ok(Accepted, Merge::Same),
        ]
    );
    let got_rows = rows(&db.store, &ids).await;
    assert_eq!(got_rows, SETTLE_BATCH_ROWS.map(String::from));
    // Only the fenced action still holds its store's slot.
    let in_flight: i64 = db
        .store
        .client()
        .await
        .unwrap()
        .query_one(
            "SELECT coalesce(sum(in_flight), 0) FROM store_in_flight",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_flight, 1);
}

/// A stream of webhooks over a few actions: repeated event ids (within and
/// across batches), unknown keys, every status, out of order.
fn webhook_stream(seed: u64, keys: &[String], n: usize) -> Vec<WebhookIn> {
    let mut g = Lcg(seed);
    let statuses = [
        Status::Accepted,
        Status::Sent,
        Status::Delivered,
        Status::Failed,
    ];
    let mut out: Vec<WebhookIn> = Vec::new();
    for i in 0..n {
        if !out.is_empty() && g.below(5) == 0 {
            // A redelivery of an earlier event, same id and content.
            let j = g.below(out.len() as u64) as usize;
            out.push(out[j].clone());
            continue;
        }
        let k = g.below(keys.len() as u64 + 1) as usize;
        let key = keys
            .get(k)
            .cloned()
            .unwrap_or_else(|| format!("courier-unknown-{}", g.below(3)));
        out.push(WebhookIn {
            event_id: format!("evt_{i}"),
            key,
            status: statuses[g.below(4) as usize],
            message_id: format!("msg_{k}"),
        });
    }
    out
}

/// What the webhooks should do, one after another: the rules of a merge
/// without a lease, kept apart from the store. Per key: status, conflict,
/// whether the action is dispatched (else claimed), whether it is done.
struct Model {
    rows: HashMap<String, (Status, bool, bool, bool)>,
    /// Recorded event ids with the outcome recorded beside them.
    recorded: HashMap<String, &'static str>,
    events: Vec<String>,
}

impl Model {
    fn merge(&mut self, ev: &WebhookIn) -> MergeOutcome {
        if self.recorded.contains_key(&ev.event_id) {
            self.events.push("duplicate_webhook".into());
            return MergeOutcome::Duplicate;
        }
        let Some((status, conflict, dispatched, done)) = self.rows.get_mut(&ev.key) else {
            // Recorded nowhere: a later delivery may find the key.
            return MergeOutcome::UnknownKey;
        };
        let (new, how) = fold_report(*status, *conflict, ev.status, false);
        self.recorded.insert(ev.event_id.clone(), merge_label(how));
        (*status, *conflict) = (new.status, new.conflict);
        *done |= *dispatched && new.status.is_final() && !new.conflict;
        match how {
            Merge::Backward => self.events.push("backward".into()),
            Merge::Conflict => self.events.push("conflict".into()),
            Merge::Advance(_) | Merge::Same => {}
        }
        MergeOutcome::Applied(how)
    }
}

/// Six actions, half dispatched and half still claimed; their keys.
async fn webhook_targets(
    store: &PgStore,
) -> (Vec<String>, HashMap<String, (Status, bool, bool, bool)>) {
    enqueue(store, &["a", "b"], 3).await;
    let mut got = fixtures::claim_to_send(store, &owner("w1"), 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    got.sort_by_key(|c| c.lease.action_id);
    let mut rows = HashMap::new();
    for (i, c) in got.iter().enumerate() {
        let dispatched = i < 3;
        if dispatched {
            settled_ok(settle(store, &c.lease, Status::Accepted, Some("m"), false).await);
        }
        let status = if dispatched {
            Status::Accepted
        } else {
            Status::Sending
        };
        rows.insert(action_key(&c.uid), (status, false, dispatched, false));
    }
    (got.iter().map(|c| action_key(&c.uid)).collect(), rows)
}

/// The rows, events and event ids the model says the webhooks leave.
async fn assert_store_is_like(store: &PgStore, model: &mut Model, seed: u64) {
    let c = store.client().await.unwrap();
    for (key, (status, conflict, _, done)) in &model.rows {
        let r = c
            .query_one(
                "SELECT o.status, o.conflict, a.state FROM outbox o
                 JOIN actions a ON a.id = o.action_id WHERE o.idem_key = $1",
                &[key],
            )
            .await
            .unwrap();
        let got = (
            r.get::<_, String>(0),
            r.get::<_, bool>(1),
            r.get::<_, String>(2) == "done",
        );
        assert_eq!(
            got,
            (status.to_string(), *conflict, *done),
            "seed {seed}: {key}"
        );
    }
    let mut kinds: Vec<String> = c
        .query("SELECT kind FROM events ORDER BY kind", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    model.events.sort();
    kinds.sort();
    assert_eq!(kinds, model.events, "seed {seed}: events");
    // Every recorded event id with its outcome, and no other.
    let ids: HashMap<String, String> = c
        .query("SELECT event_id, outcome FROM webhook_events", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let want_ids: HashMap<String, String> = model
        .recorded
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(ids, want_ids, "seed {seed}: event ids");
}

/// Merged in batches of 1 to 12 (and all in one), webhooks answer and write
/// what the model says they do one after another.
#[tokio::test]
async fn webhook_batches_of_any_size_merge_as_the_rules_say() {
    for seed in [1u64, 2, 3, 4, 5] {
        let db = fresh_db().await;
        let (keys, rows) = webhook_targets(&db.store).await;
        let events = webhook_stream(seed, &keys, 60);
        let mut model = Model {
            rows,
            recorded: HashMap::new(),
            events: Vec::new(),
        };
        let want: Vec<MergeOutcome> = events.iter().map(|e| model.merge(e)).collect();
        let mut g = Lcg(seed ^ 0x5eed);
        let mut rest = &events[..];
        let mut outcomes = Vec::new();
        while !rest.is_empty() {
            let n = if seed == 5 {
                rest.len()
            } else {
                (1 + g.below(12) as usize).min(rest.len())
            };
            outcomes.extend(
                db.store
                    .webhooks_merge(&rest[..n])
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.unwrap()),
            );
            rest = &rest[n..];
        }
        assert_eq!(outcomes, want, "seed {seed}: outcomes");
        for want in [MergeOutcome::Duplicate, MergeOutcome::UnknownKey] {
            assert!(
                outcomes.contains(&want),
                "seed {seed} never produced {want:?}"
            );
        }
        assert_store_is_like(&db.store, &mut model, seed).await;
    }
}

#[tokio::test]
async fn a_webhook_batch_that_fails_is_merged_one_by_one() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a"], 1).await;
    let got = fixtures::claim_to_send(&db.store, &owner("w1"), 1, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    let key = action_key(&got[0].uid);
    let event = |id: &str, status| WebhookIn {
        event_id: id.into(),
        key: key.clone(),
        status,
        message_id: "m1".into(),
    };
    // A NUL byte is refused by PostgreSQL's text type: that event cannot be
    // stored; the ones before and after it must be.
    let events = vec![
        event("good1", Status::Sent),
        event("bad\0", Status::Delivered),
        event("good2", Status::Delivered),
    ];
    let answers = db.store.webhooks_merge(&events).await.unwrap();
    assert!(matches!(answers[0], Ok(MergeOutcome::Applied(_))));
    assert!(matches!(answers[1], Err(StoreError::Query(_))));
    assert!(matches!(answers[2], Ok(MergeOutcome::Applied(_))));
    let again = db
        .store
        .webhooks_merge(&[events[0].clone(), events[2].clone()])
        .await
        .unwrap();
    assert!(again
        .iter()
        .all(|a| matches!(a, Ok(MergeOutcome::Duplicate))));
}

/// One event id with two keys in a batch (a provider bug): merged one by one,
/// as if they had come one after another.
#[tokio::test]
async fn an_event_id_with_two_keys_in_one_batch_is_merged_in_order() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a"], 1).await;
    let got = fixtures::claim_to_send(&db.store, &owner("w1"), 1, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    let key = action_key(&got[0].uid);
    let events = vec![
        WebhookIn {
            event_id: "e1".into(),
            key: "courier-nobody".into(),
            status: Status::Sent,
            message_id: "m1".into(),
        },
        WebhookIn {
            event_id: "e1".into(),
            key: key.clone(),
            status: Status::Sent,
            message_id: "m1".into(),
        },
    ];
    let answers = merged(&db.store, &events).await;
    assert_eq!(answers[0], MergeOutcome::UnknownKey);
    assert!(matches!(answers[1], MergeOutcome::Applied(_)));
}

/// The answers of one batch of webhook merges, each of which must succeed.
async fn merged(store: &PgStore, events: &[WebhookIn]) -> Vec<MergeOutcome> {
    store
        .webhooks_merge(events)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect()
}

/// One event id with an unknown key, then two known keys, in a batch: as if
/// they had come one after another, the first known key takes it and the
/// second is a duplicate; the id is recorded once, with the first key.
#[tokio::test]
async fn an_event_id_repeated_after_an_unknown_key_is_recorded_once() {
    let db = fresh_db().await;
    let got = claimed_to_send(&db.store, "a", 2).await;
    let keys: Vec<String> = got.iter().map(|c| action_key(&c.uid)).collect();
    let event = |key: &str| WebhookIn {
        event_id: "e1".into(),
        key: key.into(),
        status: Status::Sent,
        message_id: "m1".into(),
    };
    let events = vec![event("courier-nobody"), event(&keys[0]), event(&keys[1])];
    let answers = merged(&db.store, &events).await;
    assert_eq!(answers[0], MergeOutcome::UnknownKey);
    assert!(
        matches!(answers[1], MergeOutcome::Applied(_)),
        "{answers:?}"
    );
    assert_eq!(answers[2], MergeOutcome::Duplicate);
    let recorded: Vec<String> = column(
        &db.store,
        "SELECT idem_key FROM webhook_events WHERE event_id = 'e1'",
    )
    .await;
    assert_eq!(recorded, vec![keys[0].clone()]);
    let sent: Vec<String> = column(
        &db.store,
        "SELECT idem_key FROM outbox WHERE status = 'sent'",
    )
    .await;
    assert_eq!(sent, vec![keys[0].clone()]);
}

/// One event id sent with two keys by two batches at once (a provider bug):
/// the two merges lock different outbox rows, so neither waits for the
/// other before both look the id up. The id's insert decides: the batch
/// whose insert found the id recorded meanwhile rolls back as retryable,
/// and retried, answers a duplicate. Every id is then applied to one key
/// only, the one recorded with it.
#[tokio::test]
async fn an_event_id_sent_with_two_keys_by_two_batches_at_once_is_applied_once() {
    const N: usize = 32;
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], N).await;
    let got = fixtures::claim_to_send(
        &db.store,
        &owner("w1"),
        2 * N as u32,
        60_000,
        100,
        ClaimMode::Fair,
    )
    .await
    .unwrap();
    assert_eq!(got.len(), 2 * N);
    let keys: Vec<String> = got.iter().map(|c| action_key(&c.uid)).collect();
    let batch = |half: usize| -> Vec<WebhookIn> {
        (0..N)
            .map(|i| WebhookIn {
                event_id: format!("race-{i}"),
                key: keys[2 * i + half].clone(),
                status: Status::Sent,
                message_id: "m1".into(),
            })
            .collect()
    };
    let mut tasks = tokio::task::JoinSet::new();
    for half in 0..2 {
        let (store, events) = (db.store.clone(), batch(half));
        tasks.spawn(async move {
            for _ in 0..20 {
                match store.webhooks_merge(&events).await {
                    Ok(answers) => return answers.into_iter().map(|a| a.unwrap()).collect(),
                    Err(e) => {
                        assert!(e.is_unavailable(), "{e}");
                        eprintln!("batch {half}: {e}");
                    }
                }
            }
            panic!("batch {half} never merged");
        });
    }
    let mut answers: Vec<Vec<MergeOutcome>> = Vec::new();
    while let Some(r) = tasks.join_next().await {
        answers.push(r.unwrap());
    }
    let c = db.store.client().await.unwrap();
    for i in 0..N {
        let applied: Vec<bool> = answers
            .iter()
            .map(|a| matches!(a[i], MergeOutcome::Applied(_)))
            .collect();
        assert_eq!(
            applied.iter().filter(|a| **a).count(),
            1,
            "race-{i}: {answers:?}"
        );
        let sent: Vec<String> = c
            .query(
                "SELECT idem_key FROM outbox WHERE idem_key = ANY($1) AND status = 'sent'",
                &[&vec![keys[2 * i].clone(), keys[2 * i + 1].clone()]],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let recorded: String = c
            .query_one(
                "SELECT idem_key FROM webhook_events WHERE event_id = $1",
                &[&format!("race-{i}")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(sent, vec![recorded], "race-{i}");
    }
}

/// The race above, made to happen every time: another transaction records
/// an event id with one key after a merge of the same id with another key
/// looked it up (the merge then waits at its insert for that transaction).
/// The merge finds the id recorded when it inserts, rolls back as
/// retryable, and retried, answers a duplicate: the second key's row is not
/// touched. The negative control commits the merge whatever its insert
/// found, and the id is applied to the second key as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merge_whose_event_id_is_recorded_after_it_looked_rolls_back() {
    /// The webhook both sides send: event id `once`, `sent`.
    fn once(key: String) -> WebhookIn {
        WebhookIn {
            event_id: "once".into(),
            key,
            status: Status::Sent,
            message_id: "m1".into(),
        }
    }

    /// The merge's answer, the second key and the status of its intent.
    async fn race(store: &PgStore) -> (Result<MergeOutcome, StoreError>, String, String) {
        let got = claimed_to_send(store, "a", 2).await;
        let keys: Vec<String> = got.iter().map(|c| action_key(&c.uid)).collect();
        let mut other = store.client().await.unwrap();
        let first = other.transaction().await.unwrap();
        first
            .execute(
                "INSERT INTO webhook_events (event_id, idem_key, status, outcome)
                 VALUES ('once', $1, 'sent', 'advance')",
                &[&keys[0]],
            )
            .await
            .unwrap();
        let merge = {
            let (store, key) = (store.clone(), keys[1].clone());
            tokio::spawn(async move {
                store
                    .webhooks_merge(&[once(key)])
                    .await
                    .map(|mut a| a.remove(0).unwrap())
            })
        };
        courier_testkit::fixtures::until_waiting_for_locks(store, 1).await;
        let c = store.client().await.unwrap();
        first.commit().await.unwrap();
        let answer = merge.await.unwrap();
        let status: String = c
            .query_one("SELECT status FROM outbox WHERE idem_key = $1", &[&keys[1]])
            .await
            .unwrap()
            .get(0);
        (answer, keys[1].clone(), status)
    }

    let db = fresh_db().await;
    let (answer, key, status) = race(&db.store).await;
    assert!(
        matches!(&answer, Err(e) if e.is_unavailable()),
        "{answer:?}"
    );
    assert_ne!(status, "sent");
    let retried = merged(&db.store, &[once(key)]).await;
    assert_eq!(retried, [MergeOutcome::Duplicate]);

    let db = fresh_db().await;
    let broken = db.store.with_merges_ignoring_ids_recorded_meanwhile();
    let (answer, _, status) = race(&broken).await;
    assert!(matches!(answer, Ok(MergeOutcome::Applied(_))), "{answer:?}");
    assert_eq!(status, "sent", "the control did not apply the id twice");
}

/// A settle that cannot be written (a message id PostgreSQL refuses) fails
/// alone; the others of its batch are settled.
#[tokio::test]
async fn a_settle_batch_that_fails_is_settled_one_by_one() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], 2).await;
    let got = fixtures::claim_to_send(&db.store, &owner("w1"), 4, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    let reqs: Vec<SettleReq> = got
        .iter()
        .enumerate()
        .map(|(i, c)| SettleReq {
            lease: c.lease.clone(),
            report: Status::Accepted,
            message_id: Some(if i == 1 {
                "bad\0".into()
            } else {
                format!("m{i}")
            }),
            from_lookup: false,
        })
        .collect();
    let answers = db.store.actions_settle(&reqs, 60_000).await.unwrap();
    for (i, a) in answers.iter().enumerate() {
        if i == 1 {
            assert!(matches!(a, Err(StoreError::Query(_))), "{a:?}");
        } else {
            assert!(matches!(a, Ok(SettleOutcome::Settled(_))), "{i}: {a:?}");
        }
    }
}

/// Fair claimers and settlers racing on three stores with a cap of 2: no
/// store ever has more than 2 actions claimed, and the in-flight count the
/// claims use (the counter less the unfolded releases) equals the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_store_cap_holds_while_releases_are_folded_by_racing_claims() {
    racing_claims_and_settles(false).await;
}

/// The same with FIFO claimers among them (FIFO ignores the cap, so only the
/// count is checked): the two claims fold releases without deadlocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fair_and_fifo_claims_fold_releases_without_deadlock() {
    racing_claims_and_settles(true).await;
}

/// One racing worker: claims (to send) and settles until nothing is
/// pending; how many it settled.
async fn claim_and_settle_until_empty(
    store: PgStore,
    w: usize,
    mode: ClaimMode,
    cap: u32,
) -> usize {
    let who = owner(&format!("w{w}"));
    let mut settled = 0;
    loop {
        let got = fixtures::claim_to_send(&store, &who, 3, 60_000, cap, mode)
            .await
            .unwrap();
        if got.is_empty() {
            if store
                .summary(3600)
                .await
                .unwrap()
                .state(ActionState::Pending)
                == 0
            {
                return settled;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let reqs: Vec<SettleReq> = got
            .iter()
            .map(|c| SettleReq {
                lease: c.lease.clone(),
                report: Status::Accepted,
                message_id: None,
                from_lookup: false,
            })
            .collect();
        settled += store
            .actions_settle(&reqs, 60_000)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| matches!(r, Ok(SettleOutcome::Settled(_))))
            .count();
    }
}

/// Samples every store's in-flight count against the claimed actions (one
/// statement, one snapshot) until `stop`; how many samples it took.
async fn probe_in_flight(
    store: PgStore,
    stop: Arc<AtomicBool>,
    with_fifo: bool,
    cap: u32,
) -> usize {
    let c = store.client().await.unwrap();
    let mut samples = 0;
    while !stop.load(Ordering::SeqCst) {
        for r in c
            .query(
                "SELECT s.store, s.in_flight,
                        (SELECT count(*) FROM actions a
                         WHERE a.store = s.store AND a.state = 'claimed')::int AS claimed
                 FROM store_in_flight s",
                &[],
            )
            .await
            .unwrap()
        {
            let (store, counted, claimed): (String, i32, i32) = (r.get(0), r.get(1), r.get(2));
            assert!(
                with_fifo || claimed <= cap as i32,
                "{store}: {claimed} claimed, cap {cap}"
            );
            assert_eq!(
                counted, claimed,
                "{store}: counted {counted}, claimed {claimed}"
            );
        }
        samples += 1;
    }
    samples
}

async fn racing_claims_and_settles(with_fifo: bool) {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b", "c"], 40).await;
    let cap = 2u32;
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let mode = if !with_fifo || w % 2 == 0 {
            ClaimMode::Fair
        } else {
            ClaimMode::Fifo
        };
        tasks.push(tokio::spawn(claim_and_settle_until_empty(
            db.store.clone(),
            w,
            mode,
            cap,
        )));
    }
    let probe = tokio::spawn(probe_in_flight(
        db.store.clone(),
        stop.clone(),
        with_fifo,
        cap,
    ));
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    assert!(probe.await.unwrap() > 0);
    assert_eq!(total, 120);
    let c = db.store.client().await.unwrap();
    let left: i64 = c
        .query_one(
            "SELECT coalesce(sum(in_flight), 0) FROM store_in_flight",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
