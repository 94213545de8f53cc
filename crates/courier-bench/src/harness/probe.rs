//! Probes: the samplers a run switches on when it investigates (the CPU and
//! the kernel's stall shares, the bench runtime's lateness, the sequential
//! scans of a table), off unless the run's settings ask for them, so a
//! report carries only what was asked for.
//!
//! # Invariants
//! - A probe only reads: switching one on changes no figure but its own
//!   (beyond the little CPU its readings take).
//! - A probe runs from its start until its stop is cancelled, and answers
//!   every reading it took; a failed reading ends its series early.

use crate::cpu;
use courier_store::PgStore;
use serde::Serialize;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Which probes a run asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Probes {
    /// The machine's, the server's and the bench's CPU, and the kernel's
    /// stall shares (PSI), every [`CPU_READ_EVERY`].
    pub cpu: bool,
    /// How late the bench's own runtime wakes a timer ([`LATE_EVERY`]).
    pub lateness: bool,
    /// Sequential scans of `actions`, every [`SCAN_POLL`].
    pub scans: bool,
}

impl Probes {
    /// Every probe on.
    pub const ALL: Probes = Probes {
        cpu: true,
        lateness: true,
        scans: true,
    };
}

/// How often a run reads the machine's and the server's CPU.
pub const CPU_READ_EVERY: Duration = Duration::from_millis(200);
/// The timer by which a run tells how late the bench's own runtime (load,
/// workers, provider) wakes, and the lateness worth keeping.
pub const LATE_EVERY: Duration = Duration::from_millis(10);
pub const LATE_NOTED_MS: f64 = 5.0;
/// How often `pg_stat_user_tables` is read for sequential scans.
pub const SCAN_POLL: Duration = Duration::from_secs(2);

/// A sampler: started with a stop signal, it answers its readings once
/// stopped.
pub(crate) trait Probe: Send + 'static {
    type Readings: Send + 'static;
    /// Starts sampling; `t0` is the time readings are stamped from.
    fn start(self, t0: Instant, stop: CancellationToken) -> JoinHandle<Self::Readings>;
}

/// A probe that was asked for and is running, or one that was not.
pub(crate) struct Running<R> {
    stop: CancellationToken,
    handle: Option<JoinHandle<R>>,
}

impl<R: Send + 'static> Running<R> {
    /// Starts `probe` if `on`.
    pub fn start_if<P: Probe<Readings = R>>(on: bool, probe: P, t0: Instant) -> Self {
        let stop = CancellationToken::new();
        let handle = on.then(|| probe.start(t0, stop.clone()));
        Running { stop, handle }
    }

    /// Stops it and answers its readings (`None` if it was not asked for).
    pub async fn finish(mut self) -> Result<Option<R>, tokio::task::JoinError> {
        self.stop.cancel();
        match self.handle.take() {
            Some(h) => Ok(Some(h.await?)),
            None => Ok(None),
        }
    }
}

impl<R> Drop for Running<R> {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The CPU of the run's processes by role, and the stall shares
/// ([`cpu::watch`]).
pub(crate) struct CpuProbe {
    pub roles: cpu::Roles,
}

impl Probe for CpuProbe {
    type Readings = Vec<cpu::Reading>;
    fn start(self, _t0: Instant, stop: CancellationToken) -> JoinHandle<Self::Readings> {
        cpu::watch(self.roles, CPU_READ_EVERY, stop)
    }
}

/// Wakes every [`LATE_EVERY`] and keeps each wake more than
/// [`LATE_NOTED_MS`] late: `(ms after t0 it was due, ms late)`. A runtime
/// whose threads are all blocked (a slow write, a long poll) wakes it late.
pub(crate) struct LatenessProbe;

impl Probe for LatenessProbe {
    type Readings = Vec<(f64, f64)>;
    fn start(self, t0: Instant, stop: CancellationToken) -> JoinHandle<Self::Readings> {
        tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let due = Instant::now() + LATE_EVERY;
                tokio::select! {
                    _ = stop.cancelled() => return out,
                    _ = tokio::time::sleep_until(due.into()) => {}
                }
                let late_ms = due.elapsed().as_secs_f64() * 1000.0;
                if late_ms > LATE_NOTED_MS {
                    out.push((t0.elapsed().as_secs_f64() * 1000.0 - late_ms, late_ms));
                }
            }
        })
    }
}

/// Sequential scans of `table` per second over each [`SCAN_POLL`]. A failed
/// read ends the series early (it is a measurement, not the run's work).
pub(crate) struct ScanProbe {
    pub store: PgStore,
    pub table: &'static str,
}

impl Probe for ScanProbe {
    type Readings = Vec<f64>;
    fn start(self, _t0: Instant, stop: CancellationToken) -> JoinHandle<Self::Readings> {
        tokio::spawn(async move {
            use crate::views::BenchViews;
            let mut rates = Vec::new();
            let mut last: Option<(Instant, i64)> = None;
            loop {
                let Ok(scans) = self.store.table_scans(self.table).await else {
                    return rates;
                };
                let now = Instant::now();
                if let Some((t, n)) = last {
                    let s = now.duration_since(t).as_secs_f64().max(1e-3);
                    rates.push((scans.seq_scan - n) as f64 / s);
                }
                last = Some((now, scans.seq_scan));
                tokio::select! {
                    _ = stop.cancelled() => return rates,
                    _ = tokio::time::sleep(SCAN_POLL) => {}
                }
            }
        })
    }
}
