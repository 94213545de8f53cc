//! courier-bench: the two questions users ask before adopting a queue, as
//! benchmarks anyone can rerun (`courier bench fairness`, `courier bench
//! throughput`; the method is in `docs/benchmarks.md`), and the fake
//! provider's own (`courier bench provider`).
//!
//! - [`fairness`]: will one noisy store hurt the others? Every scenario is run
//!   with fair and with FIFO claiming, in one run, against a PostgreSQL
//!   cluster of its own and the fake provider, with an open-loop load.
//! - [`matrix`]: the fairness benchmark at 18 shapes (stores x noisy stores
//!   x noise), one row per shape.
//! - [`scale`]: does a claim cost the same with a million stores registered
//!   (100 of them active), and with 10,000 active? Drain rate and claim
//!   round trip per shape.
//! - [`throughput`]: how fast is it? The whole protocol end to end, the
//!   claim-to-settle path alone (an in-process provider stub), and the
//!   ceiling of this PostgreSQL on this machine (pgbench), side by side.
//! - [`enqueue`]: how fast do actions get in? Actions a second through
//!   HTTP and the library, one at a time and in batches.
//! - [`provider`]: sends/s and latency of the fake provider over real
//!   loopback HTTP (faults off), so the provider is never the bottleneck.
//!
//! - [`history`]: does cost grow with history? The hot paths on an empty
//!   database and on one with millions of finished actions, and the time of
//!   `courier status` and of the dashboard's sample.
//! - [`soak`]: a long run at a steady share of capacity with pruning on:
//!   table sizes, claim p99 and worker memory, first third against last.
//!
//! Every benchmark is config -> rounds -> samples -> a pure verdict over
//! one [`harness`]: `with_cluster` sets up its PostgreSQL cluster (with
//! `pg_stat_statements` as it asks), `courier_inproc::WorkerPool` starts its
//! in-process workers, `drain` waits for its work with a deadline, and the
//! [`harness::probe`]s (CPU and stalls, the runtime's lateness, sequential
//! scans) run only when a run asks for them, its report carrying what was
//! asked for.
//!
//! The pure parts (arrival schedules, percentiles, calibration) are in
//! [`schedule`] and [`stats`]; everything else drives real servers:
//! [`pgbench`] runs PostgreSQL's own benchmark tool, [`memory`] reads the
//! process's resident memory, [`cpu`] the CPU time of a run's processes by
//! role, and [`chart`] draws the fairness chart. The benchmarks' own SQL,
//! which the courier never runs, is in [`views`] and [`history_views`].
//!
//! # Invariants
//! - Figures are compared within one run, never across runs: every run
//!   measures its own reference (the fair baseline, the pgbench ceiling).
//! - Every seeded run prints its seed first; the same seed replays the same
//!   arrival schedule.
//! - Every setting has a limit, checked once in `validate()`; a run never
//!   waits without a deadline.

pub mod chart;
pub mod cpu;
pub mod enqueue;
pub mod fairness;
pub mod harness;
pub mod history;
pub mod history_views;
pub mod live_migration;
pub mod matrix;
pub mod memory;
pub mod pgbench;
pub mod provider;
pub mod scale;
pub mod schedule;
pub mod soak;
pub mod soak_chart;
pub mod stats;
pub mod throughput;
pub mod views;

use std::path::PathBuf;
use std::time::Duration;

/// Why a benchmark could not run. All but `Settings` are failures of the
/// machinery the benchmark drives; none is a verdict on the figures.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag is out of range: fix the command line.
    #[error("invalid benchmark settings: {0}")]
    Settings(String),
    #[error("PostgreSQL cluster: {0}")]
    Cluster(#[from] courier_store::cluster::ClusterError),
    #[error("database: {0}")]
    Store(#[from] courier_store::StoreError),
    #[error("fake provider: {0}")]
    Provider(#[from] courier_fake::FakeError),
    #[error("{what} did not finish within {limit:?} ({detail})")]
    Timeout {
        what: String,
        limit: Duration,
        detail: String,
    },
    #[error("pgbench: {0}")]
    Pgbench(String),
    #[error("writing {path}: {detail}")]
    Output { path: PathBuf, detail: String },
    #[error("the provider wrote {counted} lines but its log holds {in_file}")]
    LogMismatch { counted: u64, in_file: u64 },
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("a benchmark task failed: {0}")]
    Task(String),
}

impl From<tokio::task::JoinError> for BenchError {
    fn from(e: tokio::task::JoinError) -> Self {
        BenchError::Task(e.to_string())
    }
}

/// A throwaway directory for a benchmark's cluster and logs, searchable by
/// the unprivileged user that runs PostgreSQL when we are root.
pub(crate) fn run_dir(prefix: &str) -> Result<tempfile::TempDir, BenchError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// A progress bar on stderr, or none (tests, `--json`). indicatif hides
/// itself when stderr is not a terminal.
pub(crate) fn bar(show: bool, len: u64, template: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        b.set_style(style.progress_chars("=> "));
    }
    b
}
