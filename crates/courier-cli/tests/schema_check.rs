//! Long-lived processes do not migrate: `courier worker` and `courier
//! status` refuse a schema they cannot work with, at once and with what to
//! run, and `courier db migrate` is what brings a database up to date.

#[path = "hostile/live.rs"]
mod live;

use std::process::Command;
use std::time::{Duration, Instant};

fn courier(args: &[&str]) -> (bool, String) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .output()
        .expect("run courier");
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "a refusal must be immediate, not retried: {:?}",
        t.elapsed()
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn workers_refuse_a_schema_they_do_not_know_and_db_migrate_fills_a_gap() {
    let (url, store) = live::fresh_db("schema").await;
    let c = store.client().await.unwrap();
    c.execute(
        "INSERT INTO schema_migrations (version, name) VALUES (999, 'from a newer courier')",
        &[],
    )
    .await
    .unwrap();
    let worker = [
        "worker",
        "--database-url",
        &url,
        "--provider-url",
        "http://127.0.0.1:9",
        "--provider-api-key",
        "k",
    ];
    let (ok, text) = courier(&worker);
    assert!(!ok, "{text}");
    assert!(
        text.contains("[999]") && text.contains("newer courier"),
        "{text}"
    );

    // A schema that lacks a migration: status refuses, db migrate applies it.
    c.batch_execute("DELETE FROM schema_migrations WHERE version IN (7, 999)")
        .await
        .unwrap();
    let (ok, text) = courier(&["status", "--database-url", &url]);
    assert!(!ok && text.contains("courier db migrate"), "{text}");
    let (ok, text) = courier(&["db", "migrate", "--database-url", &url]);
    assert!(ok && text.contains("applied 1 migration"), "{text}");
    let (ok, text) = courier(&["status", "--database-url", &url]);
    assert!(ok, "{text}");
    let (ok, text) = courier(&["db", "prune", "--database-url", &url]);
    assert!(ok && text.contains("removed 0 actions"), "{text}");
}
