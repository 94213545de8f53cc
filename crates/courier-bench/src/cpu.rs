//! CPU time of a run's processes by role, read from `/proc`, so a long run
//! can say which process's work grew when the machine's load did.
//!
//! # Invariants
//! - PostgreSQL's time is the postmaster's own, the time of its children
//!   that have exited (the postmaster reaps them: `cutime` + `cstime`) and
//!   that of its live children, so an autovacuum worker that ends between
//!   two readings is still counted; a reading during which a child was
//!   reaped is taken again (`postgres_ticks`).
//! - Readings are cumulative; a share is the difference of two readings
//!   over the wall time between them, in cores (1.0 = one core busy).

use serde::Serialize;

/// A run compares its thirds on the same machine only while the host gives
/// it the same CPU: no third's mean steal (time the hypervisor ran something
/// else while this machine wanted its CPUs) may exceed this many cores.
/// (Session 17's eighth run: steal 0.01 cores in the first third, 0.09 in
/// the last, up to 0.55 over 10 s from t = 1,500 s on, and the claim p99 of
/// a 10 s interval rose from 25-40 ms to 56-77 ms with it.)
pub const STEAL_MAX_CORES: f64 = 0.05;

/// The machine's load averages over 1, 5 and 15 minutes as `/proc/loadavg`
/// writes them ("0.52 0.58 0.59"), or "?" when it cannot be read.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The 1-minute load average, or NaN when it cannot be read.
pub fn load_average_1m() -> f64 {
    load_average()
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Clock ticks per second of `/proc`'s times (`USER_HZ`, 100 on Linux's
/// exported ABI whatever the kernel's own tick rate).
const TICKS_PER_S: f64 = 100.0;

/// The processes of a run, by role.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    pub workers: Vec<u32>,
    pub serve: Option<u32>,
    pub postmaster: Option<u32>,
    /// The benchmark itself (its load generator, in-process provider, sampler).
    pub bench: u32,
}

/// Cumulative ticks by role, and the machine's from `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ticks {
    pub workers: u64,
    pub serve: u64,
    pub postgres: u64,
    pub bench: u64,
    /// Every CPU's busy time (user, nice, system, irq, softirq), steal apart.
    pub machine_busy: u64,
    pub steal: u64,
    /// The kernel's stall totals, where it keeps them.
    pub stalls: Option<StallTotals>,
}

/// Cumulative stall time from the kernel's pressure stall information
/// (`/proc/pressure/{cpu,io,memory}`, in microseconds): time in which at
/// least one runnable task waited for the resource (`some`), or every
/// non-idle task did at once (`full`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StallTotals {
    pub cpu_some: u64,
    pub io_some: u64,
    pub io_full: u64,
    pub memory_some: u64,
}

impl StallTotals {
    /// Reads the three files; `None` when the kernel has none of them.
    pub fn read() -> Option<StallTotals> {
        let of = |name: &str| {
            std::fs::read_to_string(format!("/proc/pressure/{name}"))
                .ok()
                .and_then(|t| parse_pressure(&t))
        };
        let (cpu_some, _) = of("cpu")?;
        let (io_some, io_full) = of("io")?;
        let (memory_some, _) = of("memory")?;
        Some(StallTotals {
            cpu_some,
            io_some,
            io_full: io_full.unwrap_or(0),
            memory_some,
        })
    }
}

/// The `some` total and, when there is one, the `full` total of one
/// pressure file (`some avg10=0.01 avg60=1.36 avg300=1.48 total=294782257`).
pub fn parse_pressure(text: &str) -> Option<(u64, Option<u64>)> {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(kind))?
            .split_whitespace()
            .find_map(|f| f.strip_prefix("total="))?
            .parse::<u64>()
            .ok()
    };
    Some((total("some")?, total("full")))
}

/// The share of a span's wall time in which tasks stalled, by resource
/// (0.25: a quarter of the span), from [`StallTotals`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stalls {
    /// Some runnable task waited for a CPU.
    pub cpu_some: f64,
    /// Some task waited for the disk.
    pub io_some: f64,
    /// Every non-idle task waited for the disk at once.
    pub io_full: f64,
    /// Some task waited for memory (reclaim, refaults).
    pub memory_some: f64,
}

impl Stalls {
    /// The stalls between two readings `dt_s` seconds apart.
    pub fn between(a: &StallTotals, b: &StallTotals, dt_s: f64) -> Option<Stalls> {
        if dt_s <= 0.0 {
            return None;
        }
        let share = |x: u64, y: u64| y.saturating_sub(x) as f64 / 1e6 / dt_s;
        Some(Stalls {
            cpu_some: share(a.cpu_some, b.cpu_some),
            io_some: share(a.io_some, b.io_some),
            io_full: share(a.io_full, b.io_full),
            memory_some: share(a.memory_some, b.memory_some),
        })
    }
}

/// Cores used over an interval, by role; `other` is the machine's busy time
/// that none of the roles account for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cores {
    pub workers: f64,
    pub serve: f64,
    pub postgres: f64,
    pub bench: f64,
    pub other: f64,
    pub steal: f64,
}

impl Cores {
    /// The use between two readings `dt_s` seconds apart.
    pub fn between(a: &Ticks, b: &Ticks, dt_s: f64) -> Option<Cores> {
        if dt_s <= 0.0 {
            return None;
        }
        let c = |x: u64, y: u64| cores_of(y.saturating_sub(x), dt_s);
        let roles = Cores {
            workers: c(a.workers, b.workers),
            serve: c(a.serve, b.serve),
            postgres: c(a.postgres, b.postgres),
            bench: c(a.bench, b.bench),
            other: 0.0,
            steal: c(a.steal, b.steal),
        };
        let known = roles.workers + roles.serve + roles.postgres + roles.bench;
        Some(Cores {
            other: (c(a.machine_busy, b.machine_busy) - known).max(0.0),
            ..roles
        })
    }

    /// The mean of several intervals' use.
    pub fn mean<'a>(all: impl IntoIterator<Item = &'a Cores>) -> Cores {
        let mut n = 0.0;
        let mut m = Cores::default();
        for c in all {
            n += 1.0;
            m.workers += c.workers;
            m.serve += c.serve;
            m.postgres += c.postgres;
            m.bench += c.bench;
            m.other += c.other;
            m.steal += c.steal;
        }
        if n > 0.0 {
            for x in [
                &mut m.workers,
                &mut m.serve,
                &mut m.postgres,
                &mut m.bench,
                &mut m.other,
                &mut m.steal,
            ] {
                *x /= n;
            }
        }
        m
    }

    pub fn total(&self) -> f64 {
        self.workers + self.serve + self.postgres + self.bench + self.other
    }
}

/// One field-split `/proc/PID/stat`: the fields after the command name,
/// so index 0 is field 3 (`state`) of proc(5).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// The numeric fields after the command name (the state letter as 0).
pub fn parse_stat(text: &str) -> Option<Vec<u64>> {
    // The command name is in parentheses and may hold spaces or parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

// Indexes into `stat_fields` (proc(5) field number minus 3).
const PPID: usize = 1;
const UTIME: usize = 11;
const STIME: usize = 12;
const CUTIME: usize = 13;
const CSTIME: usize = 14;

fn own(f: &[u64]) -> u64 {
    f.get(UTIME).copied().unwrap_or(0) + f.get(STIME).copied().unwrap_or(0)
}

fn reaped(f: &[u64]) -> u64 {
    f.get(CUTIME).copied().unwrap_or(0) + f.get(CSTIME).copied().unwrap_or(0)
}

/// The machine's busy and steal ticks from the first line of `/proc/stat`.
pub fn parse_machine(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    Some((at(0) + at(1) + at(2) + at(5) + at(6), at(7)))
}

impl Roles {
    /// Reads every role's cumulative ticks now.
    pub fn read(&self) -> Ticks {
        let of = |pid: u32| stat_fields(pid).map_or(0, |f| own(&f));
        let mut t = Ticks {
            workers: self.workers.iter().map(|&p| of(p)).sum(),
            serve: self.serve.map_or(0, of),
            bench: of(self.bench),
            ..Ticks::default()
        };
        if let Some(pm) = self.postmaster {
            t.postgres = postgres_ticks(pm);
        }
        if let Some((busy, steal)) = std::fs::read_to_string("/proc/stat")
            .ok()
            .as_deref()
            .and_then(parse_machine)
        {
            t.machine_busy = busy;
            t.steal = steal;
        }
        t.stalls = StallTotals::read();
        t
    }
}

/// The postmaster's ticks, its reaped children's and its live children's.
/// A child reaped between the read of the postmaster and the scan of its
/// children would be in neither, so the postmaster is read again after the
/// scan and the whole reading retried when its reaped time moved.
fn postgres_ticks(postmaster: u32) -> u64 {
    let mut reading = 0;
    for _ in 0..5 {
        let Some(before) = stat_fields(postmaster) else {
            return 0;
        };
        let children = children_ticks(postmaster);
        let after = stat_fields(postmaster).map_or(0, |f| reaped(&f));
        reading = own(&before) + reaped(&before) + children;
        if after == reaped(&before) {
            break;
        }
    }
    reading
}

/// The own ticks of the live children of `parent` (a child's own reaped
/// children, rare in PostgreSQL, count once it exits).
fn children_ticks(parent: u32) -> u64 {
    children(parent).iter().map(|(_, f)| own(f)).sum()
}

/// The live children of `parent`: pid and `stat_fields`.
fn children(parent: u32) -> Vec<(u32, Vec<u64>)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_fields(pid)?)))
        .filter(|(_, f)| f.get(PPID).copied() == Some(u64::from(parent)))
        .collect()
}

/// What a PostgreSQL server process is, from its title.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgKind {
    /// An autovacuum worker (vacuuming or analysing one table at a time).
    Autovacuum,
    /// Everything else: client backends, the checkpointer, the WAL writer...
    Other,
}

/// The kind of a server process from its command line as the server sets it
/// (`postgres: autovacuum worker courier_hist_full`, `postgres: checkpointer`;
/// a `cluster_name` adds a `name: ` after `postgres: `).
pub fn pg_kind(title: &str) -> PgKind {
    if title.contains("autovacuum worker") {
        PgKind::Autovacuum
    } else {
        PgKind::Other
    }
}

/// The live children of `postmaster`: pid, kind and own ticks so far.
pub fn pg_children(postmaster: u32) -> Vec<(u32, PgKind, u64)> {
    children(postmaster)
        .into_iter()
        .filter_map(|(pid, f)| {
            let title = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let title = String::from_utf8_lossy(&title).replace('\0', " ");
            Some((pid, pg_kind(&title), own(&f)))
        })
        .collect()
}

/// Autovacuum's CPU over a span, from readings of the server's children taken
/// every so often: a worker's ticks are the last reading's less the first
/// (or less nothing, if it started after the span began). A worker that
/// starts and ends between two readings is missed, so the sum is a floor.
#[derive(Debug, Clone, Default)]
pub struct AutovacuumTicks {
    /// pid -> (ticks when first seen in the span, ticks last seen).
    seen: std::collections::HashMap<u32, (u64, u64)>,
    started: bool,
}

impl AutovacuumTicks {
    /// Takes one reading; the first sets the span's start.
    pub fn observe(&mut self, children: &[(u32, PgKind, u64)]) {
        for &(pid, kind, ticks) in children {
            if kind != PgKind::Autovacuum {
                continue;
            }
            let first = if self.started { 0 } else { ticks };
            let e = self.seen.entry(pid).or_insert((first, ticks));
            e.1 = e.1.max(ticks);
        }
        self.started = true;
    }

    /// Ticks autovacuum's workers used since the first reading.
    pub fn ticks(&self) -> u64 {
        self.seen.values().map(|&(a, b)| b.saturating_sub(a)).sum()
    }
}

/// One reading of [`watch`]: when (ms after the watch began), every role's
/// cumulative ticks, and autovacuum's ticks since the watch began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reading {
    pub at_ms: f64,
    pub ticks: Ticks,
    pub autovacuum: u64,
}

/// The CPU of a span of a run, in cores (1.0 = one core busy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct SpanCpu {
    pub cores: Cores,
    /// Autovacuum's workers (part of `cores.postgres`).
    pub autovacuum: f64,
    /// The machine's busy time (every process's, steal apart) over its
    /// cores: 1.0 is every core busy.
    pub busy_share: f64,
    /// The machine's stalls by resource; `None` without pressure files.
    pub stalls: Option<Stalls>,
}

/// The cores this machine has, as the scheduler lets this process use them.
pub fn machine_cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Reads `roles` (and, with a postmaster, its autovacuum workers) every
/// `every` on a blocking thread, from now until `stop`; the first reading
/// is taken at once, the last after `stop`.
pub fn watch(
    roles: Roles,
    every: std::time::Duration,
    stop: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<Vec<Reading>> {
    tokio::task::spawn_blocking(move || {
        let t0 = std::time::Instant::now();
        let mut av = AutovacuumTicks::default();
        let mut out = Vec::new();
        loop {
            let done = stop.is_cancelled();
            if let Some(pm) = roles.postmaster {
                av.observe(&pg_children(pm));
            }
            out.push(Reading {
                at_ms: t0.elapsed().as_secs_f64() * 1_000.0,
                ticks: roles.read(),
                autovacuum: av.ticks(),
            });
            if done {
                return out;
            }
            std::thread::sleep(every);
        }
    })
}

/// The CPU between `from_ms` and `to_ms`, from the last reading at or
/// before `from_ms` to the first at or after `to_ms` (so the span read
/// covers the one asked for); `None` when the readings do not reach both
/// ends or `cores` is not positive.
pub fn span(readings: &[Reading], from_ms: f64, to_ms: f64, cores: f64) -> Option<SpanCpu> {
    let a = readings.iter().rev().find(|r| r.at_ms <= from_ms)?;
    let b = readings.iter().find(|r| r.at_ms >= to_ms)?;
    let dt_s = (b.at_ms - a.at_ms) / 1_000.0;
    let used = Cores::between(&a.ticks, &b.ticks, dt_s)?;
    if cores <= 0.0 {
        return None;
    }
    Some(SpanCpu {
        cores: used,
        autovacuum: cores_of(b.autovacuum.saturating_sub(a.autovacuum), dt_s),
        busy_share: used.total() / cores,
        stalls: match (a.ticks.stalls, b.ticks.stalls) {
            (Some(x), Some(y)) => Stalls::between(&x, &y, dt_s),
            _ => None,
        },
    })
}

/// Ticks as cores over `dt_s` seconds.
pub fn cores_of(ticks: u64, dt_s: f64) -> f64 {
    if dt_s <= 0.0 {
        return 0.0;
    }
    ticks as f64 / TICKS_PER_S / dt_s
}

/// Ticks as milliseconds of CPU.
pub fn ms_of(ticks: u64) -> f64 {
    ticks as f64 * 1_000.0 / TICKS_PER_S
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_survive_a_command_name_with_spaces_and_parentheses() {
        // proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags
        // minflt cminflt majflt cmajflt utime stime cutime cstime ...
        let line =
            "4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 10 0 0 0 250 70 900 100 20 0";
        let f = parse_stat(line).unwrap();
        assert_eq!(f[PPID], 17);
        assert_eq!(own(&f), 320);
        assert_eq!(reaped(&f), 1_000);
    }

    #[test]
    fn machine_busy_counts_irq_time_and_leaves_idle_iowait_and_steal_out() {
        let text = "cpu  100 5 30 9000 40 2 3 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        assert_eq!(parse_machine(text), Some((140, 7)));
    }

    #[test]
    fn pressure_files_give_their_totals_and_a_span_their_shares() {
        let io = "some avg10=0.01 avg60=1.36 avg300=1.48 total=294782257\n\
                  full avg10=0.01 avg60=1.05 avg300=0.82 total=156354028\n";
        assert_eq!(parse_pressure(io), Some((294_782_257, Some(156_354_028))));
        let cpu = "some avg10=0.00 avg60=6.72 avg300=25.12 total=14783938116\n";
        assert_eq!(parse_pressure(cpu), Some((14_783_938_116, None)));
        assert_eq!(parse_pressure("full avg10=0.00 total=5\n"), None);
        assert_eq!(parse_pressure("some avg10=0.00\n"), None);
        // 2 s apart: 500 ms of some task waiting for the disk is a quarter.
        let a = StallTotals::default();
        let b = StallTotals {
            cpu_some: 200_000,
            io_some: 500_000,
            io_full: 100_000,
            memory_some: 0,
        };
        let s = Stalls::between(&a, &b, 2.0).unwrap();
        assert_eq!(s.io_some, 0.25);
        assert_eq!(s.io_full, 0.05);
        assert_eq!(s.cpu_some, 0.1);
        assert_eq!(Stalls::between(&a, &b, 0.0), None);
        // The counters only grow; a smaller later total reads as no stall.
        assert_eq!(Stalls::between(&b, &a, 1.0).unwrap().io_some, 0.0);
    }

    #[test]
    fn cores_are_ticks_per_second_and_other_is_what_no_role_used() {
        let a = Ticks::default();
        let b = Ticks {
            workers: 200,
            serve: 50,
            postgres: 600,
            bench: 50,
            machine_busy: 1_000,
            steal: 10,
            stalls: None,
        };
        // 10 s apart: 1,000 ticks are 1.0 core.
        let c = Cores::between(&a, &b, 10.0).unwrap();
        assert_eq!(c.workers, 0.2);
        assert_eq!(c.postgres, 0.6);
        assert!((c.other - 0.1).abs() < 1e-9, "{c:?}");
        assert_eq!(c.steal, 0.01);
        assert!((c.total() - 1.0).abs() < 1e-9);
        assert_eq!(Cores::between(&a, &b, 0.0), None);
        let m = Cores::mean([&c, &Cores::default()]);
        assert_eq!(m.workers, 0.1);
    }

    #[test]
    fn this_process_uses_some_cpu_and_the_machine_more() {
        let roles = Roles {
            bench: std::process::id(),
            ..Roles::default()
        };
        let a = roles.read();
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = roles.read();
        assert!(b.bench > a.bench, "{a:?} {b:?}");
        // The same ticks, accounted per CPU: at least ours, give or take
        // a few ticks of rounding at each edge.
        assert!(
            b.machine_busy - a.machine_busy + 4 >= b.bench - a.bench,
            "{a:?} {b:?}"
        );
    }

    #[test]
    fn server_processes_are_told_apart_by_title() {
        assert_eq!(
            pg_kind("postgres: autovacuum worker courier_hist_full   "),
            PgKind::Autovacuum
        );
        assert_eq!(
            pg_kind("postgres: main: autovacuum worker db"),
            PgKind::Autovacuum
        );
        assert_eq!(pg_kind("postgres: autovacuum launcher"), PgKind::Other);
        assert_eq!(pg_kind("postgres: checkpointer"), PgKind::Other);
        assert_eq!(
            pg_kind("postgres: postgres courier_hist_full 127.0.0.1(5432) idle"),
            PgKind::Other
        );
    }

    #[test]
    fn autovacuum_ticks_count_from_the_first_reading_and_new_workers_whole() {
        let mut t = AutovacuumTicks::default();
        // A worker already running (40 ticks in) and a backend.
        t.observe(&[(10, PgKind::Autovacuum, 40), (11, PgKind::Other, 500)]);
        assert_eq!(t.ticks(), 0);
        // It runs on; a second worker starts after the span began.
        t.observe(&[(10, PgKind::Autovacuum, 65), (12, PgKind::Autovacuum, 7)]);
        assert_eq!(t.ticks(), 25 + 7);
        // Worker 10 has ended: its last reading stands.
        t.observe(&[(12, PgKind::Autovacuum, 9), (11, PgKind::Other, 900)]);
        assert_eq!(t.ticks(), 25 + 9);
        assert_eq!(AutovacuumTicks::default().ticks(), 0);
        assert_eq!(cores_of(150, 1.5), 1.0);
        assert_eq!(cores_of(150, 0.0), 0.0);
        assert_eq!(ms_of(3), 30.0);
    }

    #[test]
    fn a_span_reads_from_the_reading_before_its_start_to_the_one_after_its_end() {
        let at = |ms: f64, busy: u64, pg: u64, av: u64| Reading {
            at_ms: ms,
            ticks: Ticks {
                postgres: pg,
                machine_busy: busy,
                ..Ticks::default()
            },
            autovacuum: av,
        };
        // Every 500 ms: the machine busy 100 ticks a second (one core of
        // two), the server 60 of them, autovacuum 10 in the second second.
        let r = [
            at(0.0, 0, 0, 0),
            at(500.0, 50, 30, 0),
            at(1_000.0, 100, 60, 0),
            at(1_500.0, 150, 90, 5),
            at(2_000.0, 200, 120, 10),
        ];
        let s = span(&r, 1_000.0, 2_000.0, 2.0).expect("covered");
        assert!((s.cores.postgres - 0.6).abs() < 1e-9, "{s:?}");
        assert!((s.cores.other - 0.4).abs() < 1e-9, "{s:?}");
        assert!((s.autovacuum - 0.1).abs() < 1e-9, "{s:?}");
        assert!((s.busy_share - 0.5).abs() < 1e-9, "{s:?}");
        // A start between readings reads from the one before it.
        let wider = span(&r, 700.0, 1_900.0, 2.0).expect("covered");
        assert!((wider.busy_share - 0.5).abs() < 1e-9, "{wider:?}");
        // Readings that end before the span's end: not covered.
        assert_eq!(span(&r, 1_000.0, 2_500.0, 2.0), None);
        assert_eq!(span(&r, 1_000.0, 2_000.0, 0.0), None);
    }
}
