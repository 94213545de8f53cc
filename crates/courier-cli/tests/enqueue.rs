//! `courier enqueue`: the SQL enqueue from a shell, one action from flags or
//! many from JSON lines, against a real PostgreSQL.

use courier_testkit::fresh_db;
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn courier(url: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .arg("enqueue")
        .args(["--database-url", url])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("courier runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn one_action_from_flags_then_its_repeat_then_a_refusal() {
    let db = fresh_db().await;
    let one = [
        "--store",
        "s1",
        "--to",
        "+15551234567",
        "--body",
        "hi",
        "--key",
        "k",
    ];
    let out = courier(&db.url, &one, "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("1 created "),
        "{}",
        text(&out.stdout)
    );
    let out = courier(&db.url, &one, "");
    assert!(
        text(&out.stdout).starts_with("1 repeat "),
        "{}",
        text(&out.stdout)
    );
    let out = courier(
        &db.url,
        &["--store", "s1", "--to", "hello", "--body", "hi"],
        "",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("bad_phone"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 1);
}

#[tokio::test]
async fn many_from_json_lines_in_all_or_nothing_batches() {
    let db = fresh_db().await;
    let line =
        |i: usize, to: &str| format!(r#"{{"store":"s{}","to":"{to}","body":"m{i}"}}"#, i % 3);
    let good: String = (0..5).map(|i| line(i, "+15551234567") + "\n").collect();
    let out = courier(&db.url, &["--jsonl", "-", "--batch", "2"], &good);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().count(), 5);
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 5);
    // A bad fourth line: the first batch (two) stands, the second (two,
    // with the bad one) is refused whole, the rest is not sent.
    let bad: String = (0..5)
        .map(|i| line(i, if i == 3 { "+1" } else { "+15551234567" }) + "\n")
        .collect();
    let out = courier(&db.url, &["--jsonl", "-", "--batch", "2"], &bad);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("(action 4)"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(db.store.summary(1800).await.unwrap().total(), 7);
}
