//! `courier providers check`: a named provider's setup checked without
//! sending, against Infobip's double (its message logs take the credentials
//! check) and a real `courier serve` (its webhook route).

#[path = "hostile/live.rs"]
mod live;

use live::{fresh_db, Service};
use std::process::Command;

const API_KEY: &str = "check-api-key";
const SECRET: &str = "check-webhook-secret";

fn credentials(dir: &std::path::Path, api_key: &str) -> std::path::PathBuf {
    let path = dir.join("infobip.credentials");
    let lines = [
        format!("INFOBIP_API_KEY={api_key}"),
        "INFOBIP_FROM=+15550100000".to_string(),
        format!("INFOBIP_WEBHOOK_SECRET={SECRET}"),
    ];
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

fn check(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(["providers", "check"])
        .args(args)
        .env_remove("INFOBIP_API_KEY")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[tokio::test]
async fn a_setup_is_checked_without_sending_and_a_wrong_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("provider.jsonl");
    let log_text = log.display().to_string();
    let double = Service::start(
        "provider",
        &[
            "provider",
            "--listen",
            "127.0.0.1:0",
            "--log",
            &log_text,
            "--api-key",
            API_KEY,
            "--webhook-secret",
            SECRET,
            "--dialect",
            "infobip",
        ],
        true,
    );
    let (url, _store) = fresh_db("providers_check").await;
    let serve = |webhooks: bool, file: &str| {
        let mut a = vec![
            "serve",
            "--database-url",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            SECRET,
        ];
        if webhooks {
            a.extend(["--provider-webhooks", "infobip", "--credentials-file", file]);
        }
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let good = credentials(dir.path(), API_KEY);
    let good_text = good.display().to_string();
    let args = serve(true, &good_text);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Service::start("serve", &args, true);
    // Everything right: exit 0, and nothing sent (no send line in the log).
    let (code, text) = check(&[
        "infobip",
        "--credentials-file",
        &good_text,
        "--provider-url",
        &double.url,
        "--server",
        &server.url,
    ]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("tier c, at-most-once"), "{text}");
    assert!(text.contains("ok: credentials accepted (200)"), "{text}");
    assert!(
        text.contains("ok: the server takes these webhooks"),
        "{text}"
    );
    assert!(text.contains("only Infobip can confirm"), "{text}");
    assert!(!text.contains(API_KEY) && !text.contains(SECRET), "{text}");
    let sends = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(r#""op":"send""#))
        .count();
    assert_eq!(sends, 0, "a check sends nothing");
    // A wrong key: the provider refuses it; exit 1.
    let wrong = dir.path().join("wrong");
    std::fs::create_dir(&wrong).unwrap();
    let wrong = credentials(&wrong, "not-the-key");
    let (code, text) = check(&[
        "infobip",
        "--credentials-file",
        &wrong.display().to_string(),
        "--provider-url",
        &double.url,
    ]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("WRONG: credentials refused (401)"), "{text}");
    // A server that does not take these webhooks: named as such.
    let args = serve(false, "");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let plain = Service::start("serve", &args, true);
    let (code, text) = check(&[
        "infobip",
        "--credentials-file",
        &good_text,
        "--provider-url",
        &double.url,
        "--server",
        &plain.url,
    ]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("WRONG: the server does not take these webhooks"),
        "{text}"
    );
    // Settings missing: exit 2, the names listed, no request made.
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let (code, text) = check(&[
        "infobip",
        "--credentials-file",
        &empty.display().to_string(),
    ]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("INFOBIP_API_KEY") && text.contains("not set"),
        "{text}"
    );
}
