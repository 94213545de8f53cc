//! Named crash points of the worker, compiled only with the `failpoints`
//! feature (production builds have none).
//!
//! The points sit where a real worker can die with work half done:
//!
//! - [`Point::AfterCount`]: the attempt is counted, the request has not left;
//! - [`Point::AfterSend`]: the provider answered, nothing is recorded yet;
//! - [`Point::BeforeSettle`]: the answer is known, the settle not written;
//! - [`Point::BeforeLookup`]: before a lookup, where the negative control
//!   skips it ([`Verdict::SkipLookup`]).
//!
//! A test arms a worker with a [`Hook`] ([`crate::worker::Worker::with_failpoints`])
//! that is asked at every point. [`Verdict::Crash`] stops the whole worker
//! where it stands, as a SIGKILL would: [`crate::worker::Worker::run`]
//! returns, every delivery in hand is dropped mid-step, the heartbeat stops,
//! nothing more is written or sent; its leases run out and other workers
//! reclaim them. Unlike a global failpoint registry, each worker has its own
//! hook, so one test process can run several workers with different plans,
//! and the test decides (seeded) when to crash.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Where the worker asks its hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Point {
    AfterCount,
    AfterSend,
    BeforeSettle,
    BeforeLookup,
}

/// What the hook answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Go on as if nothing happened.
    Go,
    /// Crash the whole worker here.
    Crash,
    /// (At [`Point::BeforeLookup`] only; elsewhere it means `Go`.) Skip the
    /// lookup and act as if the provider had answered "not found": the
    /// protocol bug that the failpoint test must catch.
    SkipLookup,
}

/// One visit of a point.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    pub point: Point,
    pub action_id: i64,
    pub key: &'a str,
}

pub type Hook = Arc<dyn Fn(&Hit<'_>) -> Verdict + Send + Sync>;

/// A worker's failpoints: unarmed by default (every point says `Go`).
#[derive(Default)]
pub(crate) struct Failpoints {
    hook: Option<Hook>,
    crashed: CancellationToken,
}

impl Failpoints {
    pub fn armed(hook: Hook) -> Self {
        Failpoints {
            hook: Some(hook),
            crashed: CancellationToken::new(),
        }
    }

    fn ask(&self, hit: &Hit<'_>) -> Verdict {
        self.hook.as_ref().map_or(Verdict::Go, |h| h(hit))
    }

    /// A crash point: returns unless the hook says crash; then never returns.
    pub async fn crash_point(&self, hit: Hit<'_>) {
        if self.ask(&hit) == Verdict::Crash {
            match self.crash().await {}
        }
    }

    /// The lookup's point: true when the lookup is to be skipped.
    pub async fn skip_lookup(&self, hit: Hit<'_>) -> bool {
        match self.ask(&hit) {
            Verdict::Go => false,
            Verdict::SkipLookup => true,
            Verdict::Crash => match self.crash().await {},
        }
    }

    async fn crash(&self) -> Infallible {
        tracing::info!("failpoint: crashing the worker");
        self.crashed.cancel();
        std::future::pending().await
    }

    /// Runs `work` until it ends or the worker crashes (then it is dropped
    /// where it stands).
    pub async fn until_crash(&self, work: impl Future<Output = ()>) {
        tokio::select! {
            _ = work => {}
            _ = self.crashed.cancelled() => {}
        }
    }
}
