//! No open listener by accident: `courier serve` and a worker's metrics
//! refuse an address beyond loopback when no token protects it (0.0.0.0,
//! ::, a host name that resolves elsewhere), `--insecure-no-auth` overrides
//! that and says why, and on loopback an open API says so at start. Tokens
//! from `courier token create` are printed once, listed, and revoked.

use courier_testkit::fresh_db;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn courier(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(args)
        .output()
        .expect("run courier")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `courier serve` on `listen`; `Err(output)` when it exited, or the
/// child and what it said before "listening".
fn serve(url: &str, listen: &str, extra: &[&str]) -> Result<(Child, String), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["serve", "--database-url", url, "--listen", listen])
        .args(["--webhook-secret", "s"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run courier serve");
    let stderr = child.stderr.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let err_lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
            .join("\n")
    });
    let first = BufReader::new(stdout).lines().next();
    match first {
        Some(Ok(line)) if line.contains("listening") => {
            let _ = child.kill();
            let _ = child.wait();
            let said = err_lines.join().unwrap();
            Ok((child, said))
        }
        _ => {
            let _ = child.wait();
            Err(err_lines.join().unwrap())
        }
    }
}

#[tokio::test]
async fn serve_refuses_an_open_api_beyond_loopback() {
    let db = fresh_db().await;
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let refused = serve(&db.url, listen, &[]).expect_err(listen);
        assert!(
            refused.contains("refusing to listen") && refused.contains("--insecure-no-auth"),
            "{listen}: {refused}"
        );
    }
    // --insecure-no-auth listens, and says what that means.
    let (_, said) = serve(&db.url, "0.0.0.0:0", &["--insecure-no-auth"]).unwrap();
    assert!(said.contains("WARNING") && said.contains("bill"), "{said}");
    // On loopback an open API is allowed, and said to be open.
    let (_, said) = serve(&db.url, "127.0.0.1:0", &[]).unwrap();
    assert!(said.contains("open to every process"), "{said}");
    // An admin token on the command line protects it anywhere, and is
    // never printed.
    let (_, said) = serve(&db.url, "0.0.0.0:0", &["--api-token", "t0ken-never-logged"]).unwrap();
    assert!(said.contains("needs a token"), "{said}");
    assert!(!said.contains("t0ken-never-logged"), "{said}");
}

#[tokio::test]
async fn a_created_token_protects_the_api_and_is_listed_then_revoked() {
    let db = fresh_db().await;
    let made = courier(&[
        "token",
        "create",
        "--database-url",
        &db.url,
        "--store",
        "s1",
        "--name",
        "shop",
    ]);
    assert!(made.status.success(), "{}", text(&made));
    let token = String::from_utf8_lossy(&made.stdout).trim().to_string();
    assert!(token.starts_with("courier_"), "{token}");
    let listed = courier(&["token", "list", "--database-url", &db.url]);
    let listed = text(&listed);
    assert!(listed.contains("shop") && listed.contains("s1"), "{listed}");
    assert!(
        !listed.contains(&token[token.len() - 16..]),
        "the secret is never listed"
    );
    // With a token in the table, serve may listen beyond loopback.
    let (_, said) = serve(&db.url, "0.0.0.0:0", &[]).unwrap();
    assert!(said.contains("needs a token"), "{said}");
    let id = token.split('_').nth(1).unwrap();
    let revoked = courier(&["token", "revoke", "--database-url", &db.url, id]);
    assert!(revoked.status.success(), "{}", text(&revoked));
    let again = courier(&["token", "revoke", "--database-url", &db.url, id]);
    assert_eq!(again.status.code(), Some(2));
    // A bad store name: refused, nothing created.
    let bad = courier(&[
        "token",
        "create",
        "--database-url",
        &db.url,
        "--store",
        "a b",
    ]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("store"), "{}", text(&bad));
}

#[test]
fn a_workers_metrics_refuse_to_listen_beyond_loopback_without_a_token() {
    let started = Instant::now();
    let out = courier(&[
        "worker",
        "--database-url",
        "postgres://postgres@127.0.0.1:9/none",
        "--provider-url",
        "http://127.0.0.1:9",
        "--provider-api-key",
        "k",
        "--metrics-listen",
        "0.0.0.0:0",
    ]);
    assert!(!out.status.success());
    let said = text(&out);
    assert!(said.contains("refusing to serve metrics"), "{said}");
    assert!(started.elapsed() < Duration::from_secs(30));
}
