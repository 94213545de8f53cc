//! Where the store's statements take their time from.
//!
//! As River passes `now` into its SQL (`coalesce($now::timestamptz, now())`,
//! with a time generator that is nil in production and stubbed in tests),
//! every statement here that reads or writes a time by which the protocol
//! decides takes it as a parameter: the leases (claim, heartbeat, the
//! attempt's margin), the settle and the fail, the merges, the
//! reconciler's pick, the reports and the pruner. The time is `None` (the
//! database's clock, always in production) or the time of a manual clock
//! that a test moves, so a test can let a lease run out, or a final status
//! fall overdue, without sleeping through it. What still reads `now()`:
//! the times rows are stamped with at insert (an action's `enqueued_at`,
//! an intent's `created_at`, an event's `at`, a webhook id's
//! `received_at`), and the operator views' and benchmarks' own statements
//! (`views.rs`, `run_views.rs`, and `courier-bench`'s `views.rs` and
//! `history_views.rs`).

use chrono::{DateTime, Utc};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The lease statements' clock: the database's, or a manual one.
#[derive(Debug, Clone, Default)]
pub struct Clock(Option<Arc<Mutex<DateTime<Utc>>>>);

impl Clock {
    /// The database's own `now()`: what production uses.
    pub fn database() -> Clock {
        Clock(None)
    }

    /// A clock that stands at `start` until [`Clock::advance`] moves it.
    /// Start it at the database's time (`courier_testkit::TestDb::manual_clock`),
    /// since the times stamped at insert still read `now()`.
    pub fn manual(start: DateTime<Utc>) -> Clock {
        Clock(Some(Arc::new(Mutex::new(start))))
    }

    /// Moves a manual clock forward (and every store that shares it).
    ///
    /// # Panics
    /// On the database's clock, which no caller can move: a test bug.
    pub fn advance(&self, by: Duration) {
        let cell = self.0.as_ref().expect("only a manual clock can be moved");
        let by = chrono::Duration::from_std(by).expect("a duration that fits");
        let mut now = cell.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// The time to pass to a statement: `None` means the database's.
    pub fn now(&self) -> Option<DateTime<Utc>> {
        self.0
            .as_ref()
            .map(|cell| *cell.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_is_shared_by_its_clones() {
        let start = DateTime::<Utc>::from_timestamp(1_000, 0).unwrap();
        let c = Clock::manual(start);
        let other = c.clone();
        assert_eq!(c.now(), Some(start));
        other.advance(Duration::from_millis(1_500));
        assert_eq!(c.now(), Some(start + chrono::Duration::milliseconds(1_500)));
        assert_eq!(Clock::database().now(), None);
    }
}
