//! Where the lease statements take their time from.
//!
//! As River passes `now` into its SQL (`coalesce($now::timestamptz, now())`,
//! with a time generator that is nil in production and stubbed in tests),
//! every lease statement here takes the time as a parameter: `None` (the
//! database's clock, always in production) or the time of a manual clock
//! that a test moves, so a test can let a lease run out without sleeping
//! through it.

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
    /// since statements other than the lease statements still read `now()`.
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

    /// The time to pass to a lease statement: `None` means the database's.
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
