//! 10,000 concurrent connections on loopback against a live `courier serve`:
//! all are accepted and held open at once (the server's own count of open
//! files shows it), then each sends a forged webhook and gets its 401; the
//! server stays up and the database shows nothing changed. Bounded in time.

#[path = "hostile/live.rs"]
mod live;
#[path = "hostile/raw.rs"]
mod raw;

use futures::StreamExt;
use live::{db_state, fresh_db, Service};
use raw::{read_answer, request};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const CONNECTIONS: usize = 10_000;
/// Connection attempts in flight at once.
const CONNECTING_AT_ONCE: usize = 256;
/// Connections opened before waiting for the server to accept them (below
/// the listen backlog of 1,024 to 4,096).
const WAVE: usize = 500;
/// The whole test must end within this.
const WHOLE_TEST: Duration = Duration::from_secs(90);

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_connections_are_all_answered() {
    // This process holds one end of every connection, the server the other:
    // both need room for 10,000 descriptors (the server raises its own).
    let want = (CONNECTIONS + 512) as u64;
    let fds = courier_dispatch::server::raise_fd_limit(want).expect("read the open-files limit");
    assert!(
        fds >= want,
        "the open-files limit is {fds}, {want} are needed: raise `ulimit -n`"
    );
    tokio::time::timeout(WHOLE_TEST, run())
        .await
        .expect("10,000 connections within the time bound");
}

async fn run() {
    let (url, store) = fresh_db("conn").await;
    let mut server = Service::start(
        "serve",
        &[
            "serve",
            "--database-url",
            &url,
            "--listen",
            "127.0.0.1:0",
            "--webhook-secret",
            "conn-secret",
            "--connections-max",
            "12000",
            "--header-read-timeout-ms",
            "60000",
            "--http-timeout-ms",
            "60000",
        ],
        true,
    );
    let addr = server.addr();
    let pid = server.pid();
    let before = db_state(&store).await;
    let files_idle = open_files(pid);

    let t0 = Instant::now();
    let streams = open_all(addr, pid, files_idle).await;
    let connected_in = t0.elapsed();
    let held = open_files(pid).saturating_sub(files_idle);
    assert!(
        held >= CONNECTIONS,
        "the server holds {held} connections, not {CONNECTIONS}"
    );
    let rss_held = rss_mib(pid);

    let t1 = Instant::now();
    let by_status = each_sends_a_forged_webhook(streams).await;
    let answered_in = t1.elapsed();
    eprintln!(
        "{CONNECTIONS} connections: opened in {connected_in:?}, {held} held by the server at once \
         (RSS {rss_held:.0} MiB), answered in {answered_in:?}: {by_status:?}"
    );
    assert_eq!(
        by_status.get("401").copied(),
        Some(CONNECTIONS),
        "every connection gets its 401: {by_status:?}"
    );

    server.assert_running();
    let r = reqwest::get(format!("{}/healthz", server.url))
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(db_state(&store).await, before);
}

/// Opens every connection and keeps them open: in waves no larger than the
/// listen backlog, each wave accepted by the server (its open files show
/// it) before the next, so that no handshake is dropped by a full queue.
async fn open_all(addr: std::net::SocketAddr, pid: u32, files_idle: usize) -> Vec<TcpStream> {
    let mut streams: Vec<TcpStream> = Vec::with_capacity(CONNECTIONS);
    while streams.len() < CONNECTIONS {
        let wave = WAVE.min(CONNECTIONS - streams.len());
        let opened: Vec<TcpStream> = futures::stream::iter(0..wave)
            .map(|_| async move {
                let mut tries = 0;
                loop {
                    match TcpStream::connect(addr).await {
                        Ok(s) => return s,
                        Err(e) if tries < 20 => {
                            tries += 1;
                            retry_pause(e).await;
                        }
                        Err(e) => panic!("connect: {e}"),
                    }
                }
            })
            .buffer_unordered(CONNECTING_AT_ONCE)
            .collect()
            .await;
        streams.extend(opened);
        let want = streams.len();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = open_files(pid).saturating_sub(files_idle);
            if n >= want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the server accepted {n} of {want} connections within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    streams
}

/// Each connection sends a forged webhook and reads its answer; the
/// answers counted by status (or by how the connection ended).
async fn each_sends_a_forged_webhook(
    streams: Vec<TcpStream>,
) -> std::collections::BTreeMap<String, usize> {
    let body = br#"{"event_id":"e","message_id":"m","key":"k","status":"sent","occurred_at":"x"}"#;
    let req = request(
        "POST",
        b"/v1/webhooks/provider",
        &[("X-Signature", b"sha256=00")],
        body,
    );
    let mut tasks = tokio::task::JoinSet::new();
    for mut s in streams {
        let req = req.clone();
        tasks.spawn(async move {
            s.write_all(&req).await.map_err(|e| format!("write: {e}"))?;
            read_answer(&mut s, Duration::from_secs(60))
                .await
                .map(|a| a.status)
                .map_err(|e| format!("{e:?}"))
        });
    }
    let mut by_status = std::collections::BTreeMap::<String, usize>::new();
    while let Some(r) = tasks.join_next().await {
        let key = match r.unwrap() {
            Ok(status) => status.to_string(),
            Err(e) => e,
        };
        *by_status.entry(key).or_default() += 1;
    }
    by_status
}

/// A short pause before retrying a refused connection (the accept queue was
/// full for a moment).
async fn retry_pause(_e: std::io::Error) {
    tokio::time::sleep(Duration::from_millis(20)).await;
}
