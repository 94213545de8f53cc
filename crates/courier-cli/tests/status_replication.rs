//! `courier status` names the node it reached and, from that node's
//! `pg_stat_replication`, each standby with its lag; no standby lines when
//! there are none. A private primary (courier-testkit's `Node`), then the
//! same with a streaming standby.

use courier_store::{PgStore, StoreConfig};
use courier_testkit::node::Node;
use std::process::Command;
use std::time::{Duration, Instant};

fn status(url: &str, json: bool) -> String {
    let mut args = vec!["status", "--database-url", url];
    if json {
        args.push("--json");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_courier"))
        .args(&args)
        .output()
        .expect("run courier status");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_primary_and_each_standby_lag() {
    let a = Node::start().await;
    PgStore::connect(&StoreConfig::new(a.url()))
        .await
        .expect("migrate");
    let alone = status(&a.url(), false);
    assert!(
        alone.contains(&format!(
            "database node: {} (primary, timeline 1)",
            a.host()
        )),
        "{alone}"
    );
    assert!(!alone.contains("standby"), "{alone}");
    let json: serde_json::Value = serde_json::from_str(&status(&a.url(), true)).unwrap();
    assert_eq!(json["replication"]["primary"], true, "{json}");
    assert_eq!(
        json["replication"]["standbys"],
        serde_json::json!([]),
        "{json}"
    );

    let _b = Node::standby_of(&a).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let with = loop {
        let text = status(&a.url(), false);
        if text.contains("streaming") {
            break text;
        }
        assert!(Instant::now() < deadline, "no standby shown: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        with.contains("replay lag ms") && with.contains("bytes behind"),
        "{with}"
    );
    assert!(with.contains("async"), "{with}");
}
