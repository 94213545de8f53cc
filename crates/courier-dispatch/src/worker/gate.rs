//! The provider's pause, as this worker knows it: no request (send or
//! lookup) leaves for the provider before the pause ends.
//!
//! A pause begins when the provider answers "too many requests"
//! (`SendOutcome::throttle`), for its `Retry-After` or, without one, a
//! backoff (`courier_core::rate::pause_ms`). The worker that got the answer
//! pauses itself at once and writes the pause to `provider_gates`
//! (`PgStore::provider_pause`); every claim of every worker reads it back
//! (`ClaimTaken::provider_paused_ms`), and a worker whose deliveries fill
//! all its slots, and so does not claim, reads it every
//! [`REFRESH_BUSY_MS`] (`claim.rs`).
//!
//! # Invariants
//! - A pause only lengthens here: a shorter one never ends a longer one.
//! - A delivery waits for the pause before each request, then core checks
//!   its lease again (`Delivery::wait_for_provider`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often a worker with no room to claim reads the provider's pause.
pub const REFRESH_BUSY_MS: u64 = 250;

/// One worker's view of its provider's pause, on the worker's lease clock
/// (ms since its `t0`).
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// The gate's name in `provider_gates`; None: no gate (no pause is
    /// shared, and none is read).
    pub name: Option<Arc<str>>,
    /// The pause's end; 0: none yet.
    until_ms: AtomicU64,
    /// "Too many requests" answers in a row, for the backoff without a
    /// `Retry-After`; reset by any other answer to a send.
    streak: AtomicU32,
}

impl Gate {
    pub fn new(name: Option<Arc<str>>) -> Self {
        Gate {
            name,
            ..Gate::default()
        }
    }

    /// Pauses until `now_ms + ms`, unless a longer pause is in force.
    /// Returns whether the pause grew by more than `slack_ms` (worth
    /// telling the other workers).
    pub fn pause(&self, now_ms: u64, ms: u64, slack_ms: u64) -> bool {
        let until = now_ms.saturating_add(ms);
        let was = self.until_ms.fetch_max(until, Ordering::Relaxed);
        until > was.saturating_add(slack_ms)
    }

    /// Milliseconds the pause still lasts at `now_ms`; None when not paused.
    pub fn remaining_ms(&self, now_ms: u64) -> Option<u64> {
        let until = self.until_ms.load(Ordering::Relaxed);
        (until > now_ms).then(|| until - now_ms)
    }

    /// Counts one more "too many requests" in a row; returns the streak.
    pub fn throttled(&self) -> u32 {
        self.streak
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    /// A send was answered otherwise: the streak ends.
    pub fn answered(&self) {
        self.streak.store(0, Ordering::Relaxed);
    }

    /// Waits until the pause ends (it may be lengthened meanwhile), or
    /// `stop` is cancelled. `now_ms` reads the lease clock. Returns whether
    /// it waited at all.
    pub async fn wait(&self, now_ms: impl Fn() -> u64, stop: &CancellationToken) -> bool {
        let mut waited = false;
        while let Some(ms) = self.remaining_ms(now_ms()) {
            waited = true;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                _ = stop.cancelled() => break,
            }
        }
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_only_lengthens() {
        let g = Gate::new(None);
        assert_eq!(g.remaining_ms(0), None);
        assert!(g.pause(1_000, 2_000, 0));
        assert_eq!(g.remaining_ms(1_500), Some(1_500));
        // A shorter pause later does not cut it, and is not news.
        assert!(!g.pause(1_600, 500, 0));
        assert_eq!(g.remaining_ms(2_999), Some(1));
        assert_eq!(g.remaining_ms(3_000), None);
        // Within the slack: not worth telling the others.
        assert!(!g.pause(1_100, 2_000, 200));
        assert!(g.pause(1_100, 2_500, 200));
    }

    #[test]
    fn the_streak_counts_throttles_in_a_row() {
        let g = Gate::new(None);
        assert_eq!(g.throttled(), 1);
        assert_eq!(g.throttled(), 2);
        g.answered();
        assert_eq!(g.throttled(), 1);
    }

    #[tokio::test]
    async fn waiting_ends_with_the_pause_or_the_stop() {
        let g = Gate::new(None);
        let t0 = tokio::time::Instant::now();
        let now = move || t0.elapsed().as_millis() as u64;
        let stop = CancellationToken::new();
        assert!(!g.wait(now, &stop).await, "no pause, no wait");
        g.pause(now(), 50, 0);
        assert!(g.wait(now, &stop).await);
        assert!(now() >= 50);
        g.pause(now(), 60_000, 0);
        stop.cancel();
        g.wait(now, &stop).await;
        assert!(now() < 30_000, "a stop ends the wait");
    }
}
