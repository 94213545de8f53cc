//! The one enqueue (`courier.enqueue`, `courier.enqueue_many`, migration 21)
//! from every kind of caller: the Rust library, `psql`, and Python with
//! psycopg from PyPI (scripts/install-py-deps.sh). Each runs inside a
//! transaction that rolls back (nothing enqueued) and one that commits
//! (exactly one action); bad input is refused with its SQLSTATE or error
//! and leaves every table as it was.

use courier_core::{BODY_CHARS_MAX, ENQUEUE_MANY_MAX};
use courier_store::*;
use courier_testkit::fixtures::new_action;
use courier_testkit::{fresh_db, TestDb};
use std::path::PathBuf;
use std::process::Command;

/// Rows of every table an enqueue writes (directly or by its triggers).
async fn tables(db: &TestDb) -> Vec<(String, i64)> {
    let c = db.raw_client().await;
    let mut out = Vec::new();
    for t in [
        "actions",
        "stores",
        "store_work",
        "actions_ready",
        "actions_held",
        "actions_done",
        "count_deltas",
        "events",
        "outbox",
    ] {
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await
            .unwrap()
            .get(0);
        out.push((t.to_string(), n));
    }
    out
}

fn action(store: &str, to: &str, body: &str, key: Option<&str>) -> NewAction {
    NewAction {
        store: store.into(),
        to: to.into(),
        body: body.into(),
        key: key.map(String::from),
        ..Default::default()
    }
}

/// Every bad input of the HTTP API's hostile tests, with the field and the
/// stable code it must be refused with.
fn bad_inputs() -> Vec<(NewAction, &'static str, &'static str)> {
    let long_body = "x".repeat(BODY_CHARS_MAX as usize + 1);
    let long_key = "k".repeat(256);
    vec![
        (action("", "+15551234567", "hi", None), "store", "bad_store"),
        (
            action("s 1", "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (
            action(&"s".repeat(65), "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (
            action("s/1", "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (
            action("sé", "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (action("s1", "hello", "hi", None), "to", "bad_phone"),
        (action("s1", "15551234567", "hi", None), "to", "bad_phone"),
        (action("s1", "+0555123456", "hi", None), "to", "bad_phone"),
        (action("s1", "+1555", "hi", None), "to", "bad_phone"),
        (
            action("s1", "+1234567890123456", "hi", None),
            "to",
            "bad_phone",
        ),
        (action("s1", "+1555123456\n", "hi", None), "to", "bad_phone"),
        (action("s1", "+15551234567", "", None), "body", "empty_body"),
        (
            action("s1", "+15551234567", &long_body, None),
            "body",
            "body_too_long",
        ),
        (
            action("s1", "+15551234567", "hi", Some("")),
            "key",
            "bad_key",
        ),
        (
            action("s1", "+15551234567", "hi", Some(&long_key)),
            "key",
            "bad_key",
        ),
        (
            action("s1", "+15551234567", "hi", Some("clé")),
            "key",
            "bad_key",
        ),
        (
            action("s1", "+15551234567", "hi", Some("a\tb")),
            "key",
            "bad_key",
        ),
        (
            action("../etc", "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (
            action("ストア", "+15551234567", "hi", None),
            "store",
            "bad_store",
        ),
        (action("s1", "555-1234", "hi", None), "to", "bad_phone"),
        (
            action("s1", "+15551234567", "hi", Some("k\u{7}")),
            "key",
            "bad_key",
        ),
        (
            action("s1", "+15551234567", "hi", Some("ключ")),
            "key",
            "bad_key",
        ),
    ]
}

#[tokio::test]
async fn library_enqueue_rolls_back_and_commits_with_the_callers_transaction() {
    let db = fresh_db().await;
    let mut client = db.store.client().await.unwrap();
    let tx = client.transaction().await.unwrap();
    let made = action_enqueue(&*tx, &new_action("s1", 1)).await.unwrap();
    assert!(made.created());
    let many = actions_enqueue_many(&*tx, &[new_action("s1", 2), new_action("s2", 3)])
        .await
        .unwrap();
    assert_eq!(many.len(), 2);
    tx.rollback().await.unwrap();
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);

    let tx = client.transaction().await.unwrap();
    action_enqueue(&*tx, &new_action("s1", 1)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
}

/// `psql` at `url` running `script`; its output.
fn psql(url: &str, script: &str) -> String {
    let out = Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            script,
        ])
        .output()
        .expect("psql runs (PostgreSQL's client is on PATH)");
    assert!(
        out.status.success(),
        "psql failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn psql_enqueue_rolls_back_and_commits() {
    let db = fresh_db().await;
    // One psql session per transaction; psql's -c runs the whole string as
    // one multi-statement request, so BEGIN ... ROLLBACK is one transaction.
    psql(
        &db.url,
        "BEGIN; SELECT created FROM courier.enqueue('shop-1', '+15551234567', 'order shipped', 'o-1'); ROLLBACK;",
    );
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
    let out = psql(
        &db.url,
        "BEGIN; SELECT created FROM courier.enqueue('shop-1', '+15551234567', 'order shipped', 'o-1'); COMMIT;",
    );
    assert_eq!(out.trim(), "t");
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
    // A repeat: the same action, not created.
    let out = psql(
        &db.url,
        "SELECT created FROM courier.enqueue(store => 'shop-1', recipient => '+15551234567', body => 'order shipped', key => 'o-1');",
    );
    assert_eq!(out.trim(), "f");
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
}

/// The interpreter of scripts/install-py-deps.sh (or `COURIER_PYTHON`).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("COURIER_PYTHON") {
        return PathBuf::from(p);
    }
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.courier/tools/py-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/install-py-deps.sh (scripts/install-deps.sh runs it)",
        p.display()
    );
    p
}

/// The README's outbox from Python, as a user writes it: the
/// application's own row and the enqueue in one transaction.
const PYTHON_OUTBOX: &str = r#"
import sys, psycopg
url, outcome = sys.argv[1], sys.argv[2]
with psycopg.connect(url) as conn:
    with conn.transaction(force_rollback=(outcome == "rollback")):
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text)")
        conn.execute("INSERT INTO orders VALUES (%s, 'shipped')", (42,))
        (action_id, created) = conn.execute(
            "SELECT id, created FROM courier.enqueue(%s, %s, %s, %s)",
            ("store-042", "+15551234567", "Your order has shipped.", "order-42-shipped"),
        ).fetchone()
        print(action_id, created)
    # A bad recipient: refused with SQLSTATE 22023, the field named.
    try:
        conn.execute("SELECT * FROM courier.enqueue('store-042', 'hello', 'hi')")
        sys.exit("a bad recipient was enqueued")
    except psycopg.Error as e:
        conn.rollback()
        print(e.sqlstate, e.diag.column_name, e.diag.constraint_name)
"#;

fn run_python(url: &str, outcome: &str) -> String {
    let out = Command::new(python())
        .args(["-c", PYTHON_OUTBOX, url, outcome])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn python_psycopg_enqueue_rolls_back_and_commits() {
    let db = fresh_db().await;
    let out = run_python(&db.url, "rollback");
    assert!(out.contains("True"), "{out}");
    assert!(out.contains("22023 to bad_phone"), "{out}");
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
    let out = run_python(&db.url, "commit");
    assert!(out.lines().next().unwrap().ends_with(" True"), "{out}");
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
    let c = db.raw_client().await;
    let orders: i64 = c
        .query_one("SELECT count(*) FROM orders", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(orders, 1, "the application's row committed with the action");
}

#[tokio::test]
async fn bad_input_through_the_library_is_refused_and_changes_nothing() {
    let db = fresh_db().await;
    db.store.action_enqueue(&new_action("s1", 1)).await.unwrap();
    let before = tables(&db).await;
    for (bad, field, code) in bad_inputs() {
        for result in [
            db.store.action_enqueue(&bad).await,
            db.store
                .actions_enqueue_many(std::slice::from_ref(&bad))
                .await
                .map(|v| v[0]),
        ] {
            match result {
                Err(EnqueueError::Invalid(i)) => {
                    assert_eq!(
                        (i.field.as_str(), i.code.as_str()),
                        (field, code),
                        "{bad:?}"
                    );
                    assert!(i.message.contains(field), "{}", i.message);
                }
                other => panic!("{bad:?} gave {other:?}"),
            }
        }
    }
    // NUL cannot reach PostgreSQL: the library names the field.
    for (bad, field) in [
        (action("s1", "+15551234567", "a\0b", None), "body"),
        (action("s1", "+15551234567", "hi", Some("k\0")), "key"),
        (action("s\0", "+15551234567", "hi", None), "store"),
    ] {
        match db.store.action_enqueue(&bad).await {
            Err(EnqueueError::Invalid(i)) => assert_eq!(i.field, field),
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    assert_eq!(tables(&db).await, before);
}

#[tokio::test]
async fn bad_input_through_sql_is_refused_with_its_sqlstate_and_changes_nothing() {
    let db = fresh_db().await;
    db.store.action_enqueue(&new_action("s1", 1)).await.unwrap();
    let before = tables(&db).await;
    let c = db.raw_client().await;
    for (bad, field, code) in bad_inputs() {
        let e = c
            .query(
                "SELECT * FROM courier.enqueue($1, $2, $3, $4)",
                &[&bad.store, &bad.to, &bad.body, &bad.key],
            )
            .await
            .expect_err("refused");
        let db_err = e.as_db_error().expect("a database error");
        assert_eq!(db_err.code().code(), "22023", "{bad:?}");
        assert_eq!(db_err.column(), Some(field), "{bad:?}");
        assert_eq!(db_err.constraint(), Some(code), "{bad:?}");
    }
    // NULLs, which only SQL callers can send.
    for (args, field) in [
        ("NULL, '+15551234567', 'hi'", "store"),
        ("'s1', NULL, 'hi'", "to"),
        ("'s1', '+15551234567', NULL", "body"),
    ] {
        let e = c
            .query(&format!("SELECT * FROM courier.enqueue({args})"), &[])
            .await
            .expect_err("refused");
        assert_eq!(e.as_db_error().unwrap().column(), Some(field));
    }
    assert_eq!(tables(&db).await, before);
    // A key reused with another body: its own SQLSTATE.
    c.query(
        "SELECT * FROM courier.enqueue('s1', '+15551234567', 'hi', 'k1')",
        &[],
    )
    .await
    .unwrap();
    let before = tables(&db).await;
    let e = c
        .query(
            "SELECT * FROM courier.enqueue('s1', '+15551234567', 'other', 'k1')",
            &[],
        )
        .await
        .expect_err("refused");
    assert_eq!(e.as_db_error().unwrap().code().code(), "QC001");
    assert_eq!(tables(&db).await, before);
}

#[tokio::test]
async fn the_limits_are_the_contracts_and_the_schemas() {
    let db = fresh_db().await;
    let longest_body = "é".repeat(BODY_CHARS_MAX as usize);
    let longest_key = "k".repeat(courier_core::key::KEY_LEN_MAX);
    let ok = db
        .store
        .action_enqueue(&action(
            "s1",
            "+15551234567",
            &longest_body,
            Some(&longest_key),
        ))
        .await
        .unwrap();
    assert!(ok.created());
    // The schema's own CHECK agrees with the function's limit.
    let c = db.raw_client().await;
    let check: String = c
        .query_one(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'actions_body_check'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(check.contains(&BODY_CHARS_MAX.to_string()), "{check}");
}

#[tokio::test]
async fn a_repeat_gets_the_same_answer_and_a_reused_key_its_own_error() {
    let db = fresh_db().await;
    let a = action("s1", "+15551234567", "hi", Some("order-7"));
    let first = db.store.action_enqueue(&a).await.unwrap();
    assert!(first.created());
    assert_eq!(
        db.store.action_enqueue(&a).await.unwrap(),
        Enqueued::Existing(first.id())
    );
    let mut other = a.clone();
    other.to = "+15557654321".into();
    match db.store.action_enqueue(&other).await {
        Err(EnqueueError::KeyReused {
            existing_id, index, ..
        }) => assert_eq!((existing_id, index), (Some(first.id()), None)),
        e => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn the_set_form_absorbs_repeats_inside_one_call() {
    let db = fresh_db().await;
    let k = |key: &str, body: &str| action("s1", "+15551234567", body, Some(key));
    let earlier = db.store.action_enqueue(&k("old", "b")).await.unwrap();
    let made = db
        .store
        .actions_enqueue_many(&[
            k("a", "x"),
            new_action("s2", 1),
            k("a", "x"),
            k("old", "b"),
            new_action("s2", 1),
            k("b", "y"),
        ])
        .await
        .unwrap();
    assert!(made[0].created() && made[1].created() && made[5].created());
    assert_eq!(made[2], Enqueued::Existing(made[0].id()));
    assert_eq!(made[3], Enqueued::Existing(earlier.id()));
    // Without a key, two equal actions are two actions.
    assert!(made[4].created() && made[4].id() != made[1].id());
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 5);
    // The same call again: all repeats, nothing new (but the keyless two).
    let again = db
        .store
        .actions_enqueue_many(&[k("a", "x"), k("b", "y"), k("a", "x")])
        .await
        .unwrap();
    assert_eq!(
        again,
        vec![
            Enqueued::Existing(made[0].id()),
            Enqueued::Existing(made[5].id()),
            Enqueued::Existing(made[0].id())
        ]
    );
    // A repeat inside the call with other content: named by its index.
    let before = tables(&db).await;
    match db
        .store
        .actions_enqueue_many(&[k("c", "x"), new_action("s2", 2), k("c", "other")])
        .await
    {
        Err(EnqueueError::KeyReused { index, .. }) => assert_eq!(index, Some(2)),
        e => panic!("{e:?}"),
    }
    // And with an existing action's key.
    match db
        .store
        .actions_enqueue_many(&[new_action("s2", 3), k("old", "changed")])
        .await
    {
        Err(EnqueueError::KeyReused {
            index, existing_id, ..
        }) => assert_eq!((index, existing_id), (Some(1), Some(earlier.id()))),
        e => panic!("{e:?}"),
    }
    assert_eq!(tables(&db).await, before);
}

#[tokio::test]
async fn a_bad_item_at_each_position_is_named_and_nothing_is_enqueued() {
    let db = fresh_db().await;
    let before = tables(&db).await;
    let n = 5;
    for (bad, field, code) in bad_inputs() {
        for at in 0..n {
            let mut items: Vec<NewAction> = (0..n).map(|i| new_action("s1", i)).collect();
            items[at] = bad.clone();
            match db.store.actions_enqueue_many(&items).await {
                Err(EnqueueError::Invalid(i)) => {
                    assert_eq!(
                        (i.index, i.field.as_str(), i.code.as_str()),
                        (Some(at), field, code),
                        "{bad:?} at {at}"
                    );
                    assert!(
                        i.message.contains(&format!("item {}", at + 1)),
                        "{}",
                        i.message
                    );
                }
                e => panic!("{bad:?} at {at}: {e:?}"),
            }
        }
    }
    assert_eq!(tables(&db).await, before);
}

#[tokio::test]
async fn the_set_form_takes_its_maximum_and_refuses_one_more() {
    let db = fresh_db().await;
    let max = ENQUEUE_MANY_MAX as usize;
    let items: Vec<NewAction> = (0..=max)
        .map(|i| new_action(&format!("s{}", i % 7), i))
        .collect();
    let before = tables(&db).await;
    match db.store.actions_enqueue_many(&items).await {
        Err(EnqueueError::Invalid(i)) => {
            assert_eq!((i.index, i.code.as_str()), (None, "too_many_items"))
        }
        e => panic!("{:?}", e.map(|v| v.len())),
    }
    assert_eq!(tables(&db).await, before);
    let made = db.store.actions_enqueue_many(&items[..max]).await.unwrap();
    assert_eq!(made.len(), max);
    assert!(made.iter().all(|e| e.created()));
    assert_eq!(db.store.summary(1800).await.unwrap().total(), max as i64);
    // In item order: ids ascend with the items.
    assert!(made.windows(2).all(|w| w[0].id() < w[1].id()));
}

#[tokio::test]
async fn the_set_forms_arrays_must_agree_in_length() {
    let db = fresh_db().await;
    let c = db.raw_client().await;
    let e = c
        .query(
            "SELECT * FROM courier.enqueue_many(ARRAY['s1', 's2'], ARRAY['+15551234567'], ARRAY['a', 'b'])",
            &[],
        )
        .await
        .expect_err("refused");
    let e = e.as_db_error().unwrap();
    assert_eq!((e.code().code(), e.column()), ("22023", Some("items")));
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 0);
}

/// The checks are one expression the planner inlines into the enqueue's
/// own (a function it cannot inline runs as a query of its own at every
/// call: a stable `format()` in its body made the single enqueue 20%
/// slower). Any non-immutable call in `courier.enqueue_problem` breaks this.
#[tokio::test]
async fn the_checks_are_inlined_into_the_enqueue() {
    let db = fresh_db().await;
    let c = db.raw_client().await;
    let plan: String = c
        .query(
            "EXPLAIN (VERBOSE, COSTS OFF)
             SELECT courier.enqueue_problem('s' || g, '+15551234567', 'hi', 'k' || g)
             FROM generate_series(1, 2) AS g",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!plan.contains("enqueue_problem"), "not inlined:\n{plan}");
    assert!(plan.contains("CASE"), "{plan}");
}
