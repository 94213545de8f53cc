//! The adapter run as the harness runs it: its binary, the harness's
//! environment, stdout read line by line, SIGTERM at the end, SIGKILL in
//! the middle. Against the testkit's real PostgreSQL.
//!
//! The 60 s offered-rate check at the 800 jobs/s is
//! `offered_rate_at_800_per_s_over_60_s` (ignored in CI; run it with
//! `--run-ignored only`). It needs a machine whose PostgreSQL can take 800
//! inserts a second next to the test build: an 8 s form passed (800.6/s) at
//! a load average of about 11 on 2 cores and failed (about 250/s offered)
//! at 47. CI, which runs the other tests beside it, checks the same pacing
//! over 8 s at 200 jobs/s (`offered_rate_at_200_per_s_within_3_percent_short`).

use courier_adapter::emit::{EVENT_INDEXES, EVENT_TABLES, REQUIRED_METRICS};
use courier_adapter::judge::judge;
use courier_inproc::StubRecord;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One adapter process, its stdout records, each with the wall-clock time
/// it was read, and its stderr lines.
struct Adapter {
    child: Child,
    lines: mpsc::Receiver<(Duration, String)>,
    /// A line read ahead (the first of the tick after those asked for).
    held: Mutex<Option<(Duration, String)>>,
    stderr: Arc<Mutex<Vec<String>>>,
    /// The wall clock just before the process was started.
    spawned_at: Duration,
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

fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
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
        // A pipe, as the harness gives (its pacer writes ENQUEUE lines).
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let spawned_at = wall();
    let mut child = cmd.spawn().expect("start the adapter");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send((wall(), line)).is_err() {
                return;
            }
        }
    });
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let (pipe, kept) = (child.stderr.take().expect("stderr"), stderr.clone());
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            eprintln!("adapter: {line}");
            kept.lock().unwrap().push(line);
        }
    });
    Adapter {
        child,
        lines,
        held: Mutex::new(None),
        stderr,
        spawned_at,
    }
}

/// One adapter record and when it was read.
#[derive(Debug, Clone)]
struct Rec {
    read_at: Duration,
    v: Value,
}

impl Rec {
    fn metric(&self) -> &str {
        self.v["metric"].as_str().expect("metric")
    }
    fn value(&self) -> f64 {
        self.v["value"].as_f64().expect("value")
    }
    fn window_s(&self) -> f64 {
        self.v["window_s"].as_f64().expect("window_s")
    }
}

/// One tick: its time, when its first record was read, and its metrics.
#[derive(Debug)]
struct Tick {
    t: String,
    read_at: Duration,
    metrics: BTreeMap<String, f64>,
}

/// Groups records by their tick, in order.
fn ticks_of(recs: &[Rec]) -> Vec<Tick> {
    let mut ticks: Vec<Tick> = Vec::new();
    for r in recs {
        let t = r.v["t"].as_str().expect("t").to_string();
        if ticks.last().is_none_or(|k| k.t != t) {
            ticks.push(Tick {
                t,
                read_at: r.read_at,
                metrics: BTreeMap::new(),
            });
        }
        let last = ticks.last_mut().unwrap();
        last.metrics.insert(r.metric().to_string(), r.value());
    }
    ticks
}

/// The sum of `metric x window_s` over `recs`: what the harness's
/// `_chaos_aggregates` integrates.
fn integral(recs: &[Rec], metric: &str) -> f64 {
    recs.iter()
        .filter(|r| r.metric() == metric)
        .map(|r| r.value() * r.window_s())
        .sum()
}

impl Adapter {
    /// The next record, within `limit`.
    fn record(&self, limit: Duration) -> (Duration, Value) {
        let held = self.held.lock().unwrap().take();
        let (at, line) =
            held.unwrap_or_else(|| self.lines.recv_timeout(limit).expect("a record in time"));
        let v = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        (at, v)
    }

    fn descriptor(&self) -> Value {
        let (_, d) = self.record(Duration::from_secs(60));
        assert_eq!(d["kind"], "descriptor", "{d}");
        d
    }

    /// Sample records until `done` says so (it sees each one), within `limit`.
    fn records_until(&self, limit: Duration, mut done: impl FnMut(&Rec) -> bool) -> Vec<Rec> {
        let deadline = Instant::now() + limit;
        let mut out = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "not done within {limit:?}: {out:?}");
            let (read_at, v) = self.record(left);
            assert_eq!(v["kind"], "adapter", "{v}");
            let r = Rec { read_at, v };
            let stop = done(&r);
            out.push(r);
            if stop {
                return out;
            }
        }
    }

    /// The records of the next `n` whole ticks (a tick is whole when a later one starts).
    fn tick_records(&self, n: usize) -> Vec<Rec> {
        let mut seen: Vec<String> = Vec::new();
        let mut recs = self.records_until(Duration::from_secs(10 + 2 * n as u64), |r| {
            let t = r.v["t"].as_str().expect("t").to_string();
            if seen.last() != Some(&t) {
                seen.push(t);
            }
            seen.len() > n
        });
        let next = recs.pop().expect("the next tick's first record");
        *self.held.lock().unwrap() = Some((next.read_at, next.v.to_string()));
        recs
    }

    /// The records of every tick stamped at or before `until` (the wall
    /// clock), the earlier ones already written included.
    fn records_through(&self, until: Duration) -> Vec<Rec> {
        let limit = until.saturating_sub(wall()) + Duration::from_secs(10);
        let mut recs =
            self.records_until(limit, |r| parse_t(r.v["t"].as_str().expect("t")) > until);
        let next = recs.pop().expect("a record after `until`");
        *self.held.lock().unwrap() = Some((next.read_at, next.v.to_string()));
        recs
    }

    /// The next `n` whole ticks.
    fn ticks(&self, n: usize) -> Vec<Tick> {
        ticks_of(&self.tick_records(n))
    }

    /// Whatever records the process wrote and the test has not read yet.
    fn rest(&self) -> Vec<Rec> {
        let mut out = Vec::new();
        if let Some((read_at, line)) = self.held.lock().unwrap().take() {
            out.push(Rec {
                read_at,
                v: serde_json::from_str(&line).expect("JSON"),
            });
        }
        while let Ok((read_at, line)) = self.lines.recv_timeout(Duration::from_millis(300)) {
            let v: Value = serde_json::from_str(&line).expect("JSON");
            out.push(Rec { read_at, v });
        }
        out
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

    /// SIGKILL; the wait status, checked to be a death by SIGKILL.
    fn kill(&mut self) -> ExitStatus {
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().expect("wait");
        assert_eq!(
            status.signal(),
            Some(9),
            "the adapter died by SIGKILL: {status:?}"
        );
        status
    }

    fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }
}

/// No sample's window is longer than its process had lived when the
/// sample was read.
fn assert_windows_within_lifetime(a: &Adapter, recs: &[Rec]) {
    for r in recs {
        let lived = r.read_at.saturating_sub(a.spawned_at).as_secs_f64();
        assert!(
            r.window_s() <= lived,
            "window {} s, but the process had lived {lived:.3} s: {:?}",
            r.window_s(),
            r.v
        );
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
    // The worker is `courier worker`'s; what differs is named, as its flags.
    let differs = &d["worker_differs_from_defaults"];
    assert_eq!(differs["--store-in-flight-max"], "32", "{d}");
    assert!(differs.get("--no-reconcile").is_some(), "{d}");
    assert!(
        differs.get("--concurrency").is_none(),
        "32 is the default: {d}"
    );
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
    let stderr = a.stderr();
    let (status, took) = a.terminate();
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    assert!(
        stderr.iter().all(|l| !l.contains('\u{1b}')),
        "colour codes in the logs: {stderr:?}"
    );
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
    let mut a = start(&db.url, first, &work);
    a.descriptor();
    let ticks = a.ticks(3);
    assert!(ticks[2].metrics["completion_rate"] > 0.0, "{ticks:?}");
    a.kill();
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

/// PostgreSQL's rate of `actions` rows, as the harness's database would
/// count the jobs: every enqueued action, and those the worker completed.
async fn counted(db: &courier_testkit::TestDb) -> (f64, f64) {
    let p = db.store.actions_progress().await.unwrap();
    (p.total as f64, p.settled as f64)
}

/// The accounting: across a SIGKILL and a restart, the harness's
/// sum of `rate x window_s` over every sample equals the jobs PostgreSQL
/// holds, short by no more than the window the kill cut off (the jobs the
/// killed process enqueued or completed after its last sample), and no
/// sample's window is longer than its process had lived.
///
/// The bounds, with R the offered rate, c the time from the killed
/// process's last tick to the kill, B the producer's batch period, M its
/// largest batch (`PRODUCER_BATCH_MAX`) and P the depth poll (200 ms):
/// - enqueued: short by at most R x (c + B) + M + 1 (the credit of the cut
///   window and of the period before it, the one batch whose insert
///   straddled the tick, and the fraction);
/// - completed: short by at most the jobs open at the last tick (its
///   `queue_depth`, counted up to P before it, plus R x P enqueued since,
///   plus the `WORKER_COUNT` in hand) and those enqueued after it.
///
/// Neither sum may exceed what PostgreSQL holds.
#[tokio::test]
async fn across_a_kill_and_a_restart_rate_times_window_adds_up_to_the_database() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let (record, control) = (dir.path().join("stub"), dir.path().join("rate"));
    std::fs::write(&control, "200.0").unwrap();
    let control_env = control.display().to_string();
    let env = [
        ("PRODUCER_RATE", "200"),
        ("PRODUCER_RATE_CONTROL_FILE", control_env.as_str()),
        ("LEASE_DEADLINE_MS", "3000"),
    ];
    let (rate, batch_s, batch_max, poll_s, in_hand) = (200.0, 0.025, 128.0, 0.2, 32.0);
    let mut a = start(&db.url, &record, &env);
    a.descriptor();
    // Three whole ticks, then the kill 0.4 s into the next window.
    let mut recs_a = a.tick_records(3);
    std::thread::sleep(Duration::from_millis(400));
    let ticks_so_far = ticks_of(&recs_a).len();
    a.kill();
    let killed_at = wall();
    recs_a.extend(a.rest());
    let ticks_a = ticks_of(&recs_a);
    assert!(ticks_a.len() >= ticks_so_far);
    let last = ticks_a.last().unwrap();
    let cut_s = (killed_at.saturating_sub(parse_t(&last.t))).as_secs_f64();
    let depth_at_last = last.metrics["queue_depth"];
    assert_windows_within_lifetime(&a, &recs_a);

    let b = start(&db.url, &record, &env);
    b.descriptor();
    let mut recs_b = b.tick_records(3);
    // Stop offering, and wait until every job, the reclaimed ones included,
    // is done; two more ticks then count the last completions.
    std::fs::write(&control, "0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.store.actions_progress().await.unwrap().open > 0 {
        assert!(Instant::now() < deadline, "jobs still open after 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    recs_b.extend(b.records_through(wall() + Duration::from_secs(2)));
    let ticks_b = ticks_of(&recs_b);
    assert_eq!(ticks_b.last().unwrap().metrics["enqueue_rate"], 0.0);
    assert_windows_within_lifetime(&b, &recs_b);
    let b_spawned_at = b.spawned_at;
    let (status, _) = b.terminate();
    assert_eq!(status.code(), Some(0));

    let all: Vec<Rec> = recs_a.iter().chain(&recs_b).cloned().collect();
    let (enqueued, completed) = counted(&db).await;
    let (sum_enq, sum_done) = (
        integral(&all, "enqueue_rate"),
        integral(&all, "completion_rate"),
    );
    let enq_bound = rate * (cut_s + batch_s) + batch_max + 1.0;
    let done_bound = depth_at_last + rate * poll_s + in_hand + enq_bound;
    eprintln!(
        "enqueued {enqueued} (samples say {sum_enq:.1}, bound {enq_bound:.1}); \
         completed {completed} (samples say {sum_done:.1}, bound {done_bound:.1}); cut {cut_s:.3} s"
    );
    let eps = 1e-6 * enqueued;
    assert!(
        sum_enq <= enqueued + eps && enqueued - sum_enq <= enq_bound,
        "enqueued {enqueued}, samples {sum_enq}"
    );
    assert!(
        sum_done <= completed + eps && completed - sum_done <= done_bound,
        "completed {completed}, samples {sum_done}"
    );
    // The restart's first window is the time it covered, not SAMPLE_EVERY_S.
    let first_b = recs_b
        .iter()
        .find(|r| r.metric() == "enqueue_rate")
        .unwrap();
    let lived = first_b.read_at.saturating_sub(b_spawned_at).as_secs_f64();
    assert!(first_b.window_s() <= lived.min(1.0) + 0.2, "{first_b:?}");
}

/// `PRODUCER_RATE_CONTROL_FILE` replaces `PRODUCER_RATE` while the adapter
/// runs: the harness's high-load phases write a decimal there.
#[tokio::test]
async fn the_rate_control_file_sets_the_offered_rate() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let control = dir.path().join("rate");
    std::fs::write(&control, "150.0").unwrap();
    let control_env = control.display().to_string();
    let a = start(
        &db.url,
        &dir.path().join("stub"),
        &[
            ("PRODUCER_RATE", "20"),
            ("PRODUCER_RATE_CONTROL_FILE", control_env.as_str()),
        ],
    );
    a.descriptor();
    let mean = |ticks: &[Tick]| {
        ticks.iter().map(|t| t.metrics["enqueue_rate"]).sum::<f64>() / ticks.len() as f64
    };
    // The first (partial) tick left out.
    let at_150 = mean(&a.ticks(3)[1..]);
    assert!(
        (at_150 - 150.0).abs() <= 15.0,
        "offered {at_150:.1}/s at 150.0"
    );
    // What the harness's truncating write may leave for a moment: ignored.
    std::fs::write(&control, "").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    std::fs::write(&control, "0").unwrap();
    let stopped = a.records_until(Duration::from_secs(10), |r| {
        r.metric() == "enqueue_rate" && r.value() == 0.0
    });
    assert!(!stopped.is_empty());
    std::fs::write(&control, "60").unwrap();
    // The ticks whose whole window came after the file was read again.
    let written = wall();
    let later: Vec<Tick> = ticks_of(&a.records_through(written + Duration::from_millis(3_300)))
        .into_iter()
        .filter(|t| parse_t(&t.t) >= written + Duration::from_millis(1_300))
        .collect();
    assert!(later.len() >= 2, "{later:?}");
    let at_60 = mean(&later);
    assert!((at_60 - 60.0).abs() <= 9.0, "offered {at_60:.1}/s at 60");
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
}

/// While PostgreSQL is down the adapter cannot count the queue, and no
/// job starts or ends: the ticks then carry no `queue_depth` and no
/// latency (not the last values), and completions of 0; once PostgreSQL is
/// back, so is the depth.
#[tokio::test]
async fn a_sample_while_postgresql_is_down_has_no_stale_value() {
    let node = courier_testkit::node::Node::start().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        &node.url(),
        &dir.path().join("stub"),
        &[("PRODUCER_RATE", "100")],
    );
    a.descriptor();
    let up = a.ticks(3);
    for m in ["queue_depth", "claim_p99_ms", "end_to_end_p99_ms"] {
        assert!(up[2].metrics.contains_key(m), "{m} while up: {up:?}");
    }
    let cluster = node.cluster.clone();
    tokio::task::spawn_blocking(move || cluster.stop(courier_store::cluster::StopMode::Fast))
        .await
        .unwrap()
        .expect("stop PostgreSQL");
    // The ticks whose whole window came after the stop.
    let stopped_at = wall();
    let down: Vec<Tick> = ticks_of(&a.records_through(stopped_at + Duration::from_secs(3)))
        .into_iter()
        .filter(|t| parse_t(&t.t) >= stopped_at + Duration::from_secs(1))
        .collect();
    assert!(down.len() >= 2, "{down:?}");
    for tick in &down {
        for m in [
            "queue_depth",
            "claim_p50_ms",
            "claim_p99_ms",
            "end_to_end_p99_ms",
        ] {
            assert!(!tick.metrics.contains_key(m), "{m} while down: {tick:?}");
        }
        assert_eq!(tick.metrics["completion_rate"], 0.0, "{tick:?}");
        assert_eq!(tick.metrics["enqueue_rate"], 0.0, "{tick:?}");
    }
    let cluster = node.cluster.clone();
    tokio::task::spawn_blocking(move || cluster.start())
        .await
        .unwrap()
        .expect("start PostgreSQL again");
    let back = a.records_until(Duration::from_secs(20), |r| r.metric() == "queue_depth");
    assert!(!back.is_empty());
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
}

/// A job reclaimed from a killed adapter, whose message the killed one had
/// sent, starts in the restarted one with a lookup: its claim latency, the
/// wait for the lease included, is counted, and so is its end-to-end time.
#[tokio::test]
async fn a_reclaimed_jobs_claim_latency_includes_its_wait_for_the_lease() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("stub");
    // Answers of 1 s at 20 jobs/s, within 32 deliveries at once: at the
    // kill about 20 jobs are in hand, sent.
    let env = [
        ("PRODUCER_RATE", "20"),
        ("JOB_WORK_MS", "1000"),
        ("LEASE_DEADLINE_MS", "3000"),
    ];
    let mut a = start(&db.url, &record, &env);
    a.descriptor();
    a.ticks(2);
    a.kill();
    let killed_at = wall();
    let b = start(&db.url, &record, &[env[1], env[2], ("PRODUCER_RATE", "0")]);
    b.descriptor();
    let deadline = Instant::now() + Duration::from_secs(30);
    while db.store.actions_progress().await.unwrap().open > 0 {
        assert!(Instant::now() < deadline, "jobs still open after 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recs = b.records_through(wall() + Duration::from_secs(1));
    let (status, _) = b.terminate();
    assert_eq!(status.code(), Some(0));
    let max_of = |metric: &str| {
        recs.iter()
            .filter(|r| r.metric() == metric)
            .map(Rec::value)
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
    };
    // Every reclaimed job was inserted before the kill and claimed after its
    // lease, extended every second until the kill, ran out: it waited at
    // least 2 s. The restarted adapter also starts the jobs still pending at
    // the kill, at once, so the reclaimed ones show in the upper percentiles.
    let (claim_p99, end_p99) = (max_of("claim_p99_ms"), max_of("end_to_end_p99_ms"));
    eprintln!("restarted adapter: claim p99 up to {claim_p99:?} ms, end-to-end {end_p99:?} ms");
    assert!(claim_p99.is_some_and(|p| p >= 2_000.0), "{recs:?}");
    assert!(end_p99.is_some_and(|p| p >= 2_000.0), "{recs:?}");
    let reclaimed: i64 = db
        .store
        .client()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM events WHERE kind = 'reclaimed'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        reclaimed > 0,
        "the kill left no job in hand (killed at {killed_at:?})"
    );
    let v = judge(
        &db.store.actions_outcomes().await.unwrap(),
        &StubRecord::keys(&record).unwrap(),
    );
    assert!(v.passed(), "{v:?}");
}

/// `end_to_end_p*_ms`: from the insert to the provider's answer that
/// completes the job, so at least the job's work (`JOB_WORK_MS`) beyond
/// its claim latency. (With `BENCH_QUEUE_COUNT=3`: the jobs go to three
/// stores, which the worker serves.)
#[tokio::test]
async fn end_to_end_latency_covers_the_claim_and_the_jobs_work() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let a = start(
        &db.url,
        &dir.path().join("stub"),
        &[
            ("PRODUCER_RATE", "50"),
            ("JOB_WORK_MS", "100"),
            ("BENCH_QUEUE_COUNT", "3"),
        ],
    );
    a.descriptor();
    let ticks = a.ticks(3);
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
    let last = &ticks[2].metrics;
    let (e50, e95, e99) = (
        last["end_to_end_p50_ms"],
        last["end_to_end_p95_ms"],
        last["end_to_end_p99_ms"],
    );
    assert!(e50 >= 100.0 && e95 >= e50 && e99 >= e95, "{last:?}");
    assert!(e50 >= last["claim_p50_ms"] + 90.0, "{last:?}");
    let client = db.store.client().await.unwrap();
    let stores: Vec<String> = client
        .query(
            "SELECT DISTINCT store FROM actions WHERE state = 'dispatched' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stores, ["bench-0", "bench-1", "bench-2"]);
}

/// The harness's failure knobs in courier's terms: a marked job's first
/// request fails retryably (an unknown outcome), courier looks it up and
/// sends again (2 attempts); `terminal-always` refuses, and courier marks
/// the action failed, which is not a completion.
#[tokio::test]
async fn failing_jobs_are_retried_or_refused_as_the_knobs_say() {
    use std::io::Write;
    async fn run(
        env: &[(&str, &str)],
        jobs: usize,
    ) -> Vec<courier_store::run_views::ActionOutcome> {
        let db = courier_testkit::fresh_db().await;
        let dir = tempfile::tempdir().unwrap();
        let mut env = env.to_vec();
        env.extend([("PRODUCER_PACING", "harness"), ("PRODUCER_RATE", "0")]);
        let mut a = start(&db.url, &dir.path().join("stub"), &env);
        a.descriptor();
        let mut stdin = a.child.stdin.take().expect("stdin");
        writeln!(stdin, "ENQUEUE {jobs}").unwrap();
        stdin.flush().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let p = db.store.actions_progress().await.unwrap();
            if p.total as usize == jobs && p.open == 0 {
                break;
            }
            assert!(Instant::now() < deadline, "jobs still open: {p:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let recs = a.records_through(wall() + Duration::from_secs(1));
        let failures = integral(&recs, "retryable_failure_rate");
        let (status, _) = a.terminate();
        assert_eq!(status.code(), Some(0));
        drop(stdin);
        let out = db.store.actions_outcomes().await.unwrap();
        eprintln!("failures reported: {failures}");
        out
    }
    let retried = run(
        &[
            ("WORKER_FAIL_MODE", "retryable-first"),
            ("JOB_FAIL_FIRST_MOD", "2"),
        ],
        20,
    )
    .await;
    assert!(
        retried.iter().all(|a| a.state == "dispatched"),
        "{retried:?}"
    );
    let twice = retried.iter().filter(|a| a.attempts == 2).count();
    assert_eq!(twice, 10, "{retried:?}");
    assert!(retried.iter().all(|a| a.attempts <= 2), "{retried:?}");
    let refused = run(&[("WORKER_FAIL_MODE", "terminal-always")], 10).await;
    assert!(refused.iter().all(|a| a.state == "failed"), "{refused:?}");
}

/// The harness closes stdin and sends SIGTERM right after (its
/// `ReplicaPool._signal_slot`): the adapter exits 0 without warning that
/// stdin ended.
#[tokio::test]
async fn stdin_ending_at_shutdown_under_harness_pacing_is_not_a_warning() {
    let db = courier_testkit::fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let mut a = start(
        &db.url,
        &dir.path().join("stub"),
        &[("PRODUCER_PACING", "harness"), ("PRODUCER_RATE", "0")],
    );
    a.descriptor();
    a.ticks(1);
    drop(a.child.stdin.take());
    let stderr = a.stderr.clone();
    let (status, _) = a.terminate();
    assert_eq!(status.code(), Some(0));
    let stderr = stderr.lock().unwrap().clone();
    assert!(
        stderr.iter().all(|l| !l.contains("stdin ended")),
        "{stderr:?}"
    );
}
