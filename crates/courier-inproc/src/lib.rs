//! courier-inproc: courier run inside one process, for measuring it.
//!
//! - [`WorkerPool`]: in-process workers, each with its own connection pool
//!   as a `courier worker` process has: the one way the benchmarks
//!   (`courier-bench`) and the public queue benchmark's adapter
//!   (`courier-adapter`) start workers.
//! - [`StubProvider`]: a provider that answers at once (or after a fixed
//!   time), for measuring the claim-to-settle path without HTTP, with its
//!   cross-process [`StubRecord`].
//!
//! The adapter links this crate and not the benchmarks, so its binary does
//! not carry the benchmarks' charts, pgbench driver or cluster harness.
//!
//! # Invariants
//! - Every worker of a pool has its own owner name (`{owner}-w{i}`) and seed
//!   (`seed + i`), and at most one of them (the first) runs the reconciler.
//! - A pool is stopped by [`WorkerPool::stop`], which waits for every worker
//!   to let its actions in hand finish.

mod pool;
pub mod stub;

pub use pool::WorkerPool;
pub use stub::{StubProvider, StubRecord};
