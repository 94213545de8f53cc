//! The batched paths against a real PostgreSQL: the claim that writes the
//! intent, the batched settle and the batched webhook merge each do exactly
//! what their one-at-a-time forms do (compared on two databases driven the
//! same way), and the group-commit batcher answers every caller.

use courier_core::status::Merge;
use courier_core::step::{after_claim, Step};
use courier_core::{action_key, Status};
use courier_store::*;
use courier_testkit::fresh_db;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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

/// Everything the merges and settles write, without uids and keys (they are
/// random per database): rows by action id.
async fn dump(store: &PgStore) -> Vec<String> {
    let c = store.client().await.unwrap();
    let mut out = Vec::new();
    for r in c
        .query(
            "SELECT a.id, a.state, a.owner, a.epoch, a.lease_until IS NULL AS no_lease,
                    a.done_at IS NULL AS no_done, a.dispatched_at IS NULL AS no_dispatch,
                    o.status, o.conflict, o.message_id, o.attempts,
                    o.final_at IS NULL AS no_final, o.next_check_at IS NULL AS no_check,
                    o.accepted_at IS NULL AS no_accept
             FROM actions a LEFT JOIN outbox o ON o.action_id = a.id ORDER BY a.id",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "action {} {} {:?} {} lease-null={} done-null={} dispatched-null={} | {:?} conflict={:?} msg={:?} attempts={:?} final-null={} check-null={} accepted-null={}",
            r.get::<_, i64>(0),
            r.get::<_, String>(1),
            r.get::<_, Option<String>>(2),
            r.get::<_, i64>(3),
            r.get::<_, bool>(4),
            r.get::<_, bool>(5),
            r.get::<_, bool>(6),
            r.get::<_, Option<String>>(7),
            r.get::<_, Option<bool>>(8),
            r.get::<_, Option<String>>(9),
            r.get::<_, Option<i32>>(10),
            r.get::<_, bool>(11),
            r.get::<_, bool>(12),
            r.get::<_, bool>(13),
        ));
    }
    for r in c
        .query(
            "SELECT store, in_flight FROM store_in_flight ORDER BY store",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "store {} {}",
            r.get::<_, String>(0),
            r.get::<_, i32>(1)
        ));
    }
    for r in c
        .query(
            "SELECT kind, action_id, detail, count(*) FROM events
             GROUP BY kind, action_id, detail ORDER BY kind, action_id, detail",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "event {} {:?} {} x{}",
            r.get::<_, String>(0),
            r.get::<_, Option<i64>>(1),
            r.get::<_, String>(2),
            r.get::<_, i64>(3)
        ));
    }
    for r in c
        .query(
            "SELECT w.event_id, o.action_id, w.status, w.outcome FROM webhook_events w
             LEFT JOIN outbox o ON o.idem_key = w.idem_key ORDER BY w.event_id",
            &[],
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "webhook {} {:?} {} {}",
            r.get::<_, String>(0),
            r.get::<_, Option<i64>>(1),
            r.get::<_, String>(2),
            r.get::<_, String>(3)
        ));
    }
    out
}

#[tokio::test]
async fn claim_to_send_writes_the_intent_with_the_core_key_and_counts_one_attempt() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], 3).await;
    let w = owner("w1");
    let got = db
        .store
        .action_claim_to_send(&w, 6, 60_000, 100, ClaimMode::Fair)
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
    let plain = db
        .store
        .action_claim(&w, 1, 60_000, 100, ClaimMode::Fair)
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
    enqueue(&db.store, &["a"], 1).await;
    let first = db
        .store
        .action_claim_to_send(&owner("w1"), 1, 50, 100, ClaimMode::Fifo)
        .await
        .unwrap();
    assert!(first[0].attempt_counted);
    tokio::time::sleep(Duration::from_millis(80)).await;
    let second = db
        .store
        .action_claim_to_send(&owner("w2"), 1, 60_000, 100, ClaimMode::Fifo)
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
    let got = db
        .store
        .action_claim_to_send(&owner("w1"), 6, 60_000, 100, ClaimMode::Fair)
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
    let got = db
        .store
        .action_claim_to_send(&owner("w1"), 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 6, "one store with work fills the whole batch");
}

/// Drives two databases the same way up to the settles; `batched` chooses
/// how the settles are written.
async fn settle_scenario(batched: bool) -> (Vec<String>, Vec<Result<Settled, Fenced>>) {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b", "c"], 4).await;
    let w = owner("w1");
    let got = db
        .store
        .action_claim_to_send(&w, 12, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    assert_eq!(got.len(), 12);
    let mut got = got;
    got.sort_by_key(|c| c.lease.action_id);
    // Reports that arrived before the settle: a webhook ahead (delivered), a
    // final one that will conflict, and one behind.
    let ahead = [
        (1usize, Status::Delivered),
        (2, Status::Failed),
        (3, Status::Sent),
    ];
    for (i, (n, s)) in ahead.iter().enumerate() {
        let c = &got[*n];
        db.store
            .webhook_merge(&format!("pre{i}"), &action_key(&c.uid), *s, "msg_pre")
            .await
            .unwrap();
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
    reqs[10].lease.epoch += 1;
    // Action 11 was settled already (a retry after a lost commit answer).
    let first = db
        .store
        .action_settle(
            &reqs[11].lease,
            Status::Accepted,
            Some("msg_11"),
            false,
            60_000,
        )
        .await
        .unwrap();
    assert!(first.is_ok());
    let answers = if batched {
        db.store
            .actions_settle_batch(&reqs, 60_000)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap())
            .collect()
    } else {
        let mut v = Vec::new();
        for r in &reqs {
            v.push(
                db.store
                    .action_settle(
                        &r.lease,
                        r.report,
                        r.message_id.as_deref(),
                        r.from_lookup,
                        60_000,
                    )
                    .await
                    .unwrap(),
            );
        }
        v
    };
    (dump(&db.store).await, answers)
}

#[tokio::test]
async fn a_batched_settle_writes_what_single_settles_write() {
    let (batched, a) = settle_scenario(true).await;
    let (single, b) = settle_scenario(false).await;
    assert_eq!(a, b);
    assert_eq!(batched, single);
    // And the scenario covers what it means to.
    assert!(matches!(a[10], Err(Fenced { .. })));
    assert!(matches!(
        a[11],
        Ok(Settled {
            merge: Merge::Same,
            ..
        })
    ));
    assert!(a.iter().any(|r| matches!(
        r,
        Ok(Settled {
            merge: Merge::Conflict,
            ..
        })
    )));
    assert!(a.iter().any(|r| matches!(
        r,
        Ok(Settled {
            merge: Merge::Backward,
            ..
        })
    )));
    assert!(batched.iter().any(|l| l.starts_with("store a 0")));
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

async fn webhook_scenario(seed: u64, batched: bool) -> (Vec<String>, Vec<MergeOutcome>) {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], 3).await;
    let w = owner("w1");
    let mut got = db
        .store
        .action_claim_to_send(&w, 6, 60_000, 100, ClaimMode::Fair)
        .await
        .unwrap();
    got.sort_by_key(|c| c.lease.action_id);
    // Half are dispatched (settled accepted), half still held.
    for c in got.iter().take(3) {
        db.store
            .action_settle(&c.lease, Status::Accepted, Some("m"), false, 60_000)
            .await
            .unwrap()
            .unwrap();
    }
    let keys: Vec<String> = got.iter().map(|c| action_key(&c.uid)).collect();
    let events = webhook_stream(seed, &keys, 60);
    let mut outcomes = Vec::new();
    if batched {
        let mut g = Lcg(seed ^ 0x5eed);
        let mut rest = &events[..];
        while !rest.is_empty() {
            let n = (1 + g.below(12) as usize).min(rest.len());
            outcomes.extend(
                db.store
                    .webhooks_merge_batch(&rest[..n])
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|r| r.unwrap()),
            );
            rest = &rest[n..];
        }
    } else {
        for e in &events {
            outcomes.push(
                db.store
                    .webhook_merge(&e.event_id, &e.key, e.status, &e.message_id)
                    .await
                    .unwrap(),
            );
        }
    }
    (dump(&db.store).await, outcomes)
}

#[tokio::test]
async fn batched_webhook_merges_write_what_sequential_merges_write() {
    for seed in [1u64, 2, 3, 4, 5] {
        let (batched, a) = webhook_scenario(seed, true).await;
        let (single, b) = webhook_scenario(seed, false).await;
        assert_eq!(a, b, "seed {seed}: outcomes");
        assert_eq!(batched, single, "seed {seed}: database state");
        for want in [MergeOutcome::Duplicate, MergeOutcome::UnknownKey] {
            assert!(a.contains(&want), "seed {seed} never produced {want:?}");
        }
    }
}

#[tokio::test]
async fn a_webhook_batch_that_fails_is_merged_one_by_one() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a"], 1).await;
    let got = db
        .store
        .action_claim_to_send(&owner("w1"), 1, 60_000, 100, ClaimMode::Fair)
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
    let answers = db.store.webhooks_merge_batch(&events).await.unwrap();
    assert!(matches!(answers[0], Ok(MergeOutcome::Applied(_))));
    assert!(matches!(answers[1], Err(StoreError::Query(_))));
    assert!(matches!(answers[2], Ok(MergeOutcome::Applied(_))));
    let again = db
        .store
        .webhooks_merge_batch(&[events[0].clone(), events[2].clone()])
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
    let got = db
        .store
        .action_claim_to_send(&owner("w1"), 1, 60_000, 100, ClaimMode::Fair)
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
    let answers: Vec<MergeOutcome> = db
        .store
        .webhooks_merge_batch(&events)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(answers[0], MergeOutcome::UnknownKey);
    assert!(matches!(answers[1], MergeOutcome::Applied(_)));
}

/// A settle that cannot be written (a message id PostgreSQL refuses) fails
/// alone; the others of its batch are settled.
#[tokio::test]
async fn a_settle_batch_that_fails_is_settled_one_by_one() {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b"], 2).await;
    let got = db
        .store
        .action_claim_to_send(&owner("w1"), 4, 60_000, 100, ClaimMode::Fair)
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
    let answers = db.store.actions_settle_batch(&reqs, 60_000).await.unwrap();
    for (i, a) in answers.iter().enumerate() {
        if i == 1 {
            assert!(matches!(a, Err(StoreError::Query(_))), "{a:?}");
        } else {
            assert!(matches!(a, Ok(Ok(_))), "{i}: {a:?}");
        }
    }
}

#[tokio::test]
async fn group_commit_answers_every_caller_in_batches() {
    let sizes = Arc::new(Mutex::new(Vec::new()));
    let s2 = sizes.clone();
    let gc: GroupCommit<u32, u32> = GroupCommit::start(16, 2, move |reqs: Vec<u32>| {
        s2.lock().unwrap().push(reqs.len());
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(reqs.into_iter().map(|r| r * 10).collect())
        }
    });
    let mut tasks = Vec::new();
    for i in 0..100u32 {
        let gc = gc.clone();
        tasks.push(tokio::spawn(async move { (i, gc.call(i).await.unwrap()) }));
    }
    for t in tasks {
        let (i, answer) = t.await.unwrap();
        assert_eq!(answer, i * 10);
    }
    let sizes = sizes.lock().unwrap().clone();
    assert_eq!(sizes.iter().sum::<usize>(), 100);
    assert!(sizes.iter().all(|&n| n <= 16));
    assert!(
        sizes.len() < 100,
        "callers waiting together share a batch: {sizes:?}"
    );
}

#[tokio::test]
async fn group_commit_passes_errors_and_short_answers_to_each_caller() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c2 = calls.clone();
    let gc: GroupCommit<u32, u32> = GroupCommit::start(8, 1, move |reqs: Vec<u32>| {
        let n = c2.fetch_add(1, Ordering::SeqCst);
        async move {
            if n == 0 {
                Err(StoreError::Unavailable("restarting".into()))
            } else {
                // Answers one fewer than asked.
                Ok(reqs.iter().skip(1).copied().collect())
            }
        }
    });
    assert!(matches!(gc.call(1).await, Err(StoreError::Unavailable(_))));
    assert!(matches!(gc.call(2).await, Err(StoreError::Query(_))));
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

async fn racing_claims_and_settles(with_fifo: bool) {
    let db = fresh_db().await;
    enqueue(&db.store, &["a", "b", "c"], 40).await;
    let cap = 2u32;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = db.store.clone();
        let mode = if !with_fifo || w % 2 == 0 {
            ClaimMode::Fair
        } else {
            ClaimMode::Fifo
        };
        tasks.push(tokio::spawn(async move {
            let who = owner(&format!("w{w}"));
            let mut settled = 0;
            loop {
                let got = store
                    .action_claim_to_send(&who, 3, 60_000, cap, mode)
                    .await
                    .unwrap();
                if got.is_empty() {
                    if store.summary(3600).await.unwrap().state("pending") == 0 {
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
                    .actions_settle_batch(&reqs, 60_000)
                    .await
                    .unwrap()
                    .into_iter()
                    .filter(|r| matches!(r, Ok(Ok(_))))
                    .count();
            }
        }));
    }
    let probe = {
        let store = db.store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let c = store.client().await.unwrap();
            let mut samples = 0;
            while !stop.load(Ordering::SeqCst) {
                // One statement, one snapshot: the truth and the count.
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
                    let (store, counted, claimed): (String, i32, i32) =
                        (r.get(0), r.get(1), r.get(2));
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
        })
    };
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
