//! The operator's side of time and intent, against a real PostgreSQL:
//! `courier cancel` and `courier redrive` (exit 0 done, 1 refused with the
//! reason, 2 not found or bad input; the `events` row names `cli:$USER`),
//! and `courier status` listing every state, zeros included.

use chrono::{Duration as Span, Utc};
use courier_core::ActionState;
use courier_store::{ClaimMode, NewAction, PgStore};
use courier_testkit::{fixtures, fresh_db};
use std::process::{Command, Output};
use std::sync::Arc;

/// `courier <args> --database-url URL` as login `user` (`None`: no $USER).
fn courier(url: &str, user: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_courier"));
    c.args(args).args(["--database-url", url]);
    match user {
        Some(u) => c.env("USER", u),
        None => c.env_remove("USER"),
    };
    c.output().expect("courier runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn state(store: &PgStore, id: i64) -> ActionState {
    store.action_get(id).await.unwrap().unwrap().state
}

async fn enqueue(store: &PgStore, a: NewAction) -> i64 {
    store.action_enqueue(&a).await.unwrap().id()
}

fn scheduled_in_an_hour(n: usize) -> NewAction {
    NewAction {
        not_before: Some(Utc::now() + Span::hours(1)),
        ..fixtures::new_action("s1", n)
    }
}

#[tokio::test]
async fn courier_cancel_takes_what_no_worker_holds_and_refuses_the_rest() {
    let db = fresh_db().await;
    let store = &db.store;
    // Claimed first, while it is the only pending action.
    let claimed = enqueue(store, fixtures::new_action("s1", 0)).await;
    assert_eq!(fixtures::claimed(store).await.lease.action_id, claimed);
    let pending = enqueue(store, fixtures::new_action("s1", 1)).await;
    let scheduled = enqueue(store, scheduled_in_an_hour(2)).await;
    assert_eq!(state(store, scheduled).await, ActionState::Scheduled);

    for id in [pending, scheduled] {
        let out = courier(&db.url, Some("ops-ann"), &["cancel", &id.to_string()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains(&format!("action {id} cancelled")),
            "{}",
            text(&out.stdout)
        );
        assert_eq!(state(store, id).await, ActionState::Cancelled);
    }
    // A worker holds it: refused with the reason, nothing changed.
    let out = courier(&db.url, Some("ops-ann"), &["cancel", &claimed.to_string()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let why = text(&out.stderr);
    assert!(
        why.contains("is claimed") && why.contains("may be on the wire"),
        "{why}"
    );
    assert_eq!(state(store, claimed).await, ActionState::Claimed);
    // Already cancelled: refused, it has ended.
    let out = courier(&db.url, Some("ops-ann"), &["cancel", &pending.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("it has ended"),
        "{}",
        text(&out.stderr)
    );
    // No such action; not an id.
    let out = courier(&db.url, Some("ops-ann"), &["cancel", "424242"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no action 424242"),
        "{}",
        text(&out.stderr)
    );
    let out = courier(&db.url, Some("ops-ann"), &["cancel", "forty-two"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));

    let events: Vec<String> = fixtures::column(
        store,
        "SELECT action_id || ' ' || detail FROM events WHERE kind = 'cancel' ORDER BY id",
    )
    .await;
    assert_eq!(
        events,
        vec![
            format!("{pending} by=cli:ops-ann from=pending"),
            format!("{scheduled} by=cli:ops-ann from=scheduled"),
        ]
    );
}

#[tokio::test]
async fn courier_redrive_takes_only_a_400_and_answers_a_repeat_with_the_first() {
    let db = fresh_db().await;
    let store = &db.store;
    let owner: Arc<str> = Arc::from("w1");
    let mut refused = Vec::new();
    for (i, status) in [400u16, 422].into_iter().enumerate() {
        let id = enqueue(store, fixtures::new_action("s1", i)).await;
        let got = fixtures::claim_to_send(store, &owner, 1, 60_000, 1_000, ClaimMode::Fair)
            .await
            .unwrap();
        assert_eq!(got[0].lease.action_id, id);
        store
            .action_fail(
                &got[0].lease,
                status,
                &format!("provider answered {status}"),
            )
            .await
            .unwrap()
            .unwrap();
        refused.push(id);
    }
    let (r400, r422) = (refused[0], refused[1]);

    let out = courier(&db.url, None, &["redrive", &r400.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let new = store.action_get(r400).await.unwrap().unwrap().redriven_as;
    let new = new.expect("linked to its re-drive");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("action {r400} re-driven as action {new}")
    );
    assert_eq!(state(store, new).await, ActionState::Pending);
    // A repeat answers the first re-drive and makes nothing new.
    let out = courier(&db.url, None, &["redrive", &r400.to_string()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        text(&out.stdout).contains(&format!("re-driven before, as action {new}")),
        "{}",
        text(&out.stdout)
    );
    // 422 and a pending action may have had, or may yet have, an effect.
    for id in [r422, new] {
        let before = store.action_get(id).await.unwrap();
        let out = courier(&db.url, None, &["redrive", &id.to_string()]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("cannot be re-driven"),
            "{}",
            text(&out.stderr)
        );
        assert_eq!(store.action_get(id).await.unwrap(), before);
    }
    let out = courier(&db.url, None, &["redrive", "424242"]);
    assert_eq!(out.status.code(), Some(2));

    let events: Vec<String> = fixtures::column(
        store,
        "SELECT action_id || ' ' || detail FROM events WHERE kind = 'redrive'",
    )
    .await;
    assert_eq!(events, vec![format!("{r400} by=cli:unknown as={new}")]);
}

#[tokio::test]
async fn courier_status_lists_every_state_in_life_order_with_zeros() {
    let db = fresh_db().await;
    let store = &db.store;
    enqueue(store, fixtures::new_action("s1", 0)).await;
    enqueue(store, scheduled_in_an_hour(1)).await;
    let soon = NewAction {
        not_before: Some(Utc::now() + Span::seconds(30)),
        ..fixtures::new_action("s1", 3)
    };
    enqueue(store, soon).await;
    let cancelled = enqueue(store, fixtures::new_action("s1", 2)).await;
    let out = courier(&db.url, Some("ops"), &["cancel", &cancelled.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = courier(&db.url, None, &["status"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let rows: Vec<(String, i64)> = shown
        .lines()
        .skip_while(|l| *l != "actions by state:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next().unwrap().to_string();
            (name, w.next().unwrap().parse().unwrap())
        })
        .collect();
    let expected: Vec<(String, i64)> = ActionState::ALL
        .iter()
        .map(|s| {
            let n = match s {
                ActionState::Scheduled => 2,
                ActionState::Pending | ActionState::Cancelled => 1,
                _ => 0,
            };
            (s.as_str().to_string(), n)
        })
        .collect();
    assert_eq!(rows, expected, "{shown}");
    // The one due in 30 s is due within a minute; both within the hour (the
    // other's time, an hour after its enqueue, is before the status's hour).
    assert!(
        shown.contains("scheduled due: 1 within a minute, 2 within an hour"),
        "{shown}"
    );

    let out = courier(&db.url, None, &["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = json["by_state"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[0].as_str().unwrap())
        .collect();
    let all: Vec<&str> = ActionState::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(names, all, "{json}");
    assert_eq!(json["scheduled_due"]["within_minute"], 1, "{json}");
    assert_eq!(json["scheduled_due"]["within_hour"], 2, "{json}");
}

/// `courier status` lists the actions held unknown; `courier resolve`
/// answers for one (exit 0), refuses what is not held (1) or does not
/// exist (2), and "not sent" is what `courier redrive` then takes.
#[tokio::test]
async fn courier_resolve_answers_for_a_held_action_and_status_lists_it() {
    let db = fresh_db().await;
    let store = &db.store;
    enqueue(store, fixtures::new_action("s1", 0)).await;
    let held = fixtures::claimed(store).await;
    let id = held.lease.action_id;
    store
        .action_hold(&held.lease, "no_lookup")
        .await
        .unwrap()
        .unwrap();
    let out = courier(&db.url, Some("ops-ann"), &["status"]);
    let listed = text(&out.stdout);
    assert!(listed.contains("ALERT: 1 actions held unknown"), "{listed}");
    assert!(
        listed.contains(&format!("{id:>10} s1")) && listed.contains("no_lookup"),
        "{listed}"
    );
    let out = courier(
        &db.url,
        Some("ops-ann"),
        &["resolve", &id.to_string(), "not-sent"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&format!("action {id} resolved as not_sent: now failed")),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(state(store, id).await, ActionState::Failed);
    let by: Vec<String> =
        fixtures::column(store, "SELECT detail FROM events WHERE kind = 'resolve'").await;
    assert_eq!(by, vec!["by=cli:ops-ann as=not_sent".to_string()]);
    // Not held any more: refused, nothing changed.
    let out = courier(
        &db.url,
        Some("ops-ann"),
        &["resolve", &id.to_string(), "sent"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not unknown"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(state(store, id).await, ActionState::Failed);
    let out = courier(&db.url, None, &["resolve", "987654", "sent"]);
    assert_eq!(out.status.code(), Some(2));
    let out = courier(&db.url, None, &["resolve", &id.to_string(), "maybe"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "clap refuses an outcome it does not know"
    );
    // Resolved not sent: a re-drive takes it.
    let out = courier(&db.url, Some("ops-ann"), &["redrive", &id.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = courier(&db.url, None, &["status"]);
    assert!(
        !text(&out.stdout).contains("held unknown"),
        "{}",
        text(&out.stdout)
    );
}
