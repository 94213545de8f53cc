//! The adapter run as the harness runs it: its binary, the harness's
//! environment, stdout read line by line, SIGTERM at the end, SIGKILL in
//! the middle. Against the testkit's real PostgreSQL.
//!
//! The 60 s offered-rate check at the 800 jobs/s is
//! `offered_rate_at_800_per_s_over_60_s` (ignored in CI; run it with
//! `--run-ignored only`). It needs a machine whose PostgreSQL can take 800
//! inserts a second through `action_enqueue` next to the test build: an 8 s
//! form passed (800.6/s) at a load average of about 11 on 2 cores and failed
//! (about 250/s offered) at 47. CI, which runs the other tests beside it,
//! checks the same pacing over 8 s at 200 jobs/s.

use courier_adapter::emit::{EVENT_INDEXES, EVENT_TABLES, REQUIRED_METRICS};
use courier_adapter::judge::judge;
use courier_bench::stub::StubRecord;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One adapter process and its stdout lines, each with the wall-clock time
/// it was read.
struct Adapter {
    child: Child,
    lines: mpsc::Receiver<(Duration, String)>,
}

/// A test that fails leaves no adapter running.
impl Drop for Adapter {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn start(url: &str, record: &Path, env: &[(&str, &str)]) -> Adapter {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_courier-adapter"));
    cmd.env("DATABASE_URL", url)
        .env("SCENARIO", "long_horizon")
        .env("PRODUCER_MODE", "fixed")
        .env("PRODUCER_PACING", "adapter")
        .env("PRODUCER_RATE", "200")
        .env("WORKER_COUNT", "32")
        .env("JOB_PAYLOAD_BYTES", "256")
        .env("JOB_WORK_MS", "1")
        .env("SAMPLE_EVERY_S", "1")
        .env("COURIER_STUB_RECORD", record)
        .env("RUST_LOG", "warn")
        // A pipe, as the harness gives (its pacer writes ENQUEUE lines).
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the adapter");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            if tx.send((now, line)).is_err() {
                return;
            }
        }
    });
    Adapter { child, lines }
}

/// One tick: its time, when its first record was read, and its metrics.
#[derive(Debug)]
struct Tick {
    t: String,
    read_at: Duration,
    metrics: BTreeMap<String, f64>,
}

impl Adapter {
    /// The next record, within `limit`.
    fn record(&self, limit: Duration) -> (Duration, Value) {
        let (at, line) = self.lines.recv_timeout(limit).expect("a record in time");
        let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        (at, v)
    }

    fn descriptor(&self) -> Value {
        let (_, d) = self.record(Duration::from_secs(60));
        assert_eq!(d["kind"], "descriptor", "{d}");
        d
    }

    /// The next `n` whole ticks (a tick is whole when a later one starts).
    fn ticks(&self, n: usize) -> Vec<Tick> {
        let mut ticks: Vec<Tick> = Vec::new();
        while ticks.len() <= n {
            let (at, r) = self.record(Duration::from_secs(10));
            assert_eq!(r["kind"], "adapter", "{r}");
            let t = r["t"].as_str().expect("t").to_string();
            if ticks.last().is_none_or(|k| k.t != t) {
                ticks.push(Tick {
                    t,
                    read_at: at,
                    metrics: BTreeMap::new(),
                });
            }
            let metric = r["metric"].as_str().expect("metric").to_string();
            let value = r["value"].as_f64().expect("value");
            ticks.last_mut().unwrap().metrics.insert(metric, value);
        }
        ticks.truncate(n);
        ticks
    }

    /// SIGTERM; the exit status and how long the exit took.
    fn terminate(mut self) -> (ExitStatus, Duration) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let sent = Instant::now();
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let limit = Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status, sent.elapsed());
            }
            assert!(
                sent.elapsed() < limit,
                "still running {limit:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL; the wait status.
    fn kill(mut self) -> ExitStatus {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("wait")
    }
}

fn parse_t(t: &str) -> Duration {
    let dt = chrono::DateTime::parse_from_rfc3339(t).unwrap_or_else(|e| panic!("{t}: {e}"));
    Duration::from_millis(dt.timestamp_millis() as u64)
}

#[tokio::test]
async fn descriptor_every_metric_at_every_aligned_tick_and_exit_on_sigterm() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        &db.url,
        &dir.path().join("stub"),
        &[("SAMPLE_EVERY_S", "2")],
    );
    let d = a.descriptor();
    let manifest: Value =
        serde_json::from_str(include_str!("../adapter.json")).expect("adapter.json");
    for key in [
        "system",
        "db_name",
        "event_tables",
        "extensions",
        "version",
        "schema_version",
        "started_at",
    ] {
        assert!(d.get(key).is_some(), "descriptor lacks {key}: {d}");
    }
    assert_eq!(d["system"], manifest["system"]);
    // The harness fails a run whose descriptor is not a superset of adapter.json.
    assert_eq!(d["event_tables"], manifest["event_tables"]);
    assert_eq!(d["event_indexes"], manifest["event_indexes"]);
    assert_eq!(d["extensions"], manifest["extensions"]);
    let ticks = a.ticks(4);
    for (i, tick) in ticks.iter().enumerate() {
        for m in REQUIRED_METRICS {
            assert!(
                tick.metrics.contains_key(*m),
                "tick {} lacks {m}: {tick:?}",
                tick.t
            );
        }
        let t = parse_t(&tick.t);
        assert_eq!(
            t.as_millis() % 2_000,
            0,
            "tick {} not on a 2 s boundary",
            tick.t
        );
        // Emitted on time: read within a second after its boundary.
        let late = tick.read_at.saturating_sub(t);
        assert!(
            tick.read_at + Duration::from_millis(50) >= t && late < Duration::from_secs(1),
            "{tick:?}"
        );
        if i > 0 {
            assert_eq!(
                t - parse_t(&ticks[i - 1].t),
                Duration::from_secs(2),
                "{ticks:?}"
            );
        }
    }
    let last = &ticks[3].metrics;
    assert!(
        last["claim_p50_ms"] > 0.0 && last["claim_p99_ms"] >= last["claim_p50_ms"],
        "{last:?}"
    );
    // Live figures (their size depends on the machine; the rate is checked below).
    assert!(
        last["completion_rate"] > 0.0 && last["enqueue_rate"] > 0.0,
        "{last:?}"
    );
    let (status, took) = a.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    // Every relation the harness is told to watch exists.
    let client = db.store.client().await.unwrap();
    for rel in EVENT_TABLES.iter().chain(EVENT_INDEXES) {
        let row = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[rel])
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0), "{rel} does not exist");
    }
}

/// The mean enqueue rate over `seconds` whole ticks, the first left out.
async fn offered_rate(rate: u32, seconds: usize) -> f64 {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        &db.url,
        &dir.path().join("stub"),
        &[("PRODUCER_RATE", &rate.to_string())],
    );
    a.descriptor();
    let ticks = a.ticks(seconds + 1);
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
    let rates: Vec<f64> = ticks[1..]
        .iter()
        .map(|t| t.metrics["enqueue_rate"])
        .collect();
    let done = db.store.actions_progress().await.unwrap();
    eprintln!(
        "enqueue_rate per tick: {rates:?}; {} actions, {} settled",
        done.total, done.settled
    );
    rates.iter().sum::<f64>() / rates.len() as f64
}

/// `PRODUCER_PACING=harness`: exactly the jobs of the `ENQUEUE <n>` lines
/// (some above `PRODUCER_BATCH_MAX`), then, when stdin ends, the adapter's
/// own rate (0 here: nothing more).
#[tokio::test]
async fn harness_tokens_on_stdin_pace_the_producer() {
    use std::io::Write;
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("PRODUCER_PACING", "harness"),
        ("PRODUCER_RATE", "0"),
        ("PRODUCER_BATCH_MAX", "16"),
    ];
    let mut a = start(&db.url, &dir.path().join("stub"), &env);
    a.descriptor();
    let mut stdin = a.child.stdin.take().expect("stdin");
    for n in [10, 40, 1, 49] {
        writeln!(stdin, "ENQUEUE {n}").unwrap();
    }
    writeln!(stdin, "not a token").unwrap();
    stdin.flush().unwrap();
    a.ticks(2);
    assert_eq!(db.store.actions_progress().await.unwrap().total, 100);
    drop(stdin);
    let after: Vec<f64> = a
        .ticks(2)
        .iter()
        .map(|t| t.metrics["enqueue_rate"])
        .collect();
    assert_eq!(after, [0.0, 0.0]);
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
    assert_eq!(db.store.actions_progress().await.unwrap().total, 100);
}

#[tokio::test]
async fn offered_rate_at_200_per_s_within_3_percent_short() {
    let rate = offered_rate(200, 8).await;
    assert!((rate - 200.0).abs() <= 6.0, "offered {rate:.1}/s");
}

#[tokio::test]
#[ignore = "60 s: run with --run-ignored only"]
async fn offered_rate_at_800_per_s_over_60_s() {
    let rate = offered_rate(800, 60).await;
    assert!((rate - 800.0).abs() <= 24.0, "offered {rate:.1}/s");
}

/// Runs an adapter, SIGKILLs it mid-run with jobs in hand, restarts it
/// (producing nothing more) with the record at `second_record`, waits until
/// no job is open, and returns the judge's inputs: the actions, every key
/// either stub created, and how many actions were reclaimed.
async fn kill_and_restart(
    db: &courier_testkit::TestDb,
    first: &Path,
    second: &Path,
) -> (courier_adapter::judge::Verdict, i64) {
    // A 100 ms answer: at 200 jobs/s about 20 messages exist whose worker
    // has not heard the answer at any moment, so the kill leaves some.
    let work = [("JOB_WORK_MS", "100")];
    let a = start(&db.url, first, &work);
    a.descriptor();
    let ticks = a.ticks(3);
    assert!(ticks[2].metrics["completion_rate"] > 0.0, "{ticks:?}");
    let status = a.kill();
    assert_eq!(
        status.signal(),
        Some(9),
        "the adapter died by SIGKILL: {status:?}"
    );
    let b = start(&db.url, second, &[work[0], ("PRODUCER_RATE", "0")]);
    b.descriptor();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let p = db.store.actions_progress().await.unwrap();
        if p.open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "jobs still open after 60 s: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, _) = b.terminate();
    assert_eq!(status.code(), Some(0));
    let actions = db.store.actions_outcomes().await.unwrap();
    let mut keys = StubRecord::keys(first).unwrap();
    if second != first {
        keys.extend(StubRecord::keys(second).unwrap());
    }
    let client = db.store.client().await.unwrap();
    let reclaimed: i64 = client
        .query_one("SELECT count(*) FROM events WHERE kind = 'reclaimed'", &[])
        .await
        .unwrap()
        .get(0);
    (judge(&actions, &keys), reclaimed)
}

#[tokio::test]
async fn after_a_sigkill_and_a_restart_every_job_completes_once() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("stub");
    let (v, reclaimed) = kill_and_restart(&db, &record, &record).await;
    eprintln!("{v:?}; reclaimed {reclaimed}");
    assert!(v.passed(), "{v:?}");
    assert!(v.actions > 200 && v.settled == v.actions, "{v:?}");
    assert!(
        reclaimed > 0,
        "the kill left no job in hand, so the test proved nothing"
    );
}

/// The negative control: the restarted adapter's stub has forgotten what
/// the first one sent (another record), so the lookups after the reclaims
/// find nothing, courier sends again, and the judge sees second messages.
#[tokio::test]
async fn a_stub_that_forgets_across_the_restart_is_caught() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let (v, reclaimed) =
        kill_and_restart(&db, &dir.path().join("first"), &dir.path().join("second")).await;
    eprintln!("{v:?}; reclaimed {reclaimed}");
    assert!(!v.passed() && !v.repeated_keys.is_empty(), "{v:?}");
}
