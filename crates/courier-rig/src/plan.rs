//! The fault plan of a chaos run: what is done to the system, and when.
//!
//! Pure and seeded: [`FaultPlan::draw`] turns counts, a span and a random
//! source into faults at offsets from the start of the run, so the same
//! seed gives the same plan and the plan can be tested on its own. The run
//! (`crate::chaos`) applies each fault once its time has come.
//!
//! - kills: one in each of `kills` equal slices of the span, at a random
//!   point in the middle 80% of its slice;
//! - PostgreSQL crash-restarts: evenly spaced, never at either end;
//! - freezes: one per slice, 30% into it;
//! - failovers of the HA cluster ([`FaultPlan::with_failovers`]): evenly
//!   spaced, never at either end, their kinds in a seeded order.
//!
//! # Invariants
//! - Every offset lies within the span, and the plan is sorted by offset.
//! - The plan holds exactly the counts asked for.

use rand::Rng;
use std::time::Duration;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// SIGKILL a random worker (not the frozen one), then start a new one.
    Kill,
    /// `pg_ctl stop -m immediate`, then start (crash recovery).
    PgRestart,
    /// SIGSTOP the worker holding the most actions, longer than its lease.
    Freeze,
    /// SIGKILL the HA primary's Patroni and its PostgreSQL together.
    NodeDeath,
    /// SIGKILL the HA primary's postmaster alone (Patroni restarts it in place).
    PostmasterKill,
    /// SIGSTOP the HA primary's Patroni and PostgreSQL past the TTL, then SIGCONT.
    Pause,
    /// A switchover requested through Patroni's API.
    Switchover,
    /// The negative control: SIGSTOP the primary's WAL senders, let
    /// acknowledged writes pile up, then kill the primary (asynchronous only).
    LossyDeath,
}

impl FaultKind {
    /// A fault of the HA cluster (the failover run).
    pub fn is_failover(self) -> bool {
        !matches!(
            self,
            FaultKind::Kill | FaultKind::PgRestart | FaultKind::Freeze
        )
    }
}

/// How many faults of each kind the HA cluster gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FailoverCounts {
    pub node_deaths: usize,
    pub postmaster_kills: usize,
    pub pauses: usize,
    pub switchovers: usize,
    pub lossy_deaths: usize,
}

impl FailoverCounts {
    /// Every HA fault, kind by kind.
    pub fn kinds(&self) -> Vec<FaultKind> {
        let each = [
            (FaultKind::NodeDeath, self.node_deaths),
            (FaultKind::PostmasterKill, self.postmaster_kills),
            (FaultKind::Pause, self.pauses),
            (FaultKind::Switchover, self.switchovers),
            (FaultKind::LossyDeath, self.lossy_deaths),
        ];
        each.iter()
            .flat_map(|(k, n)| std::iter::repeat_n(*k, *n))
            .collect()
    }
}

/// How many faults of each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FaultCounts {
    pub kills: usize,
    pub pg_restarts: usize,
    pub freezes: usize,
}

/// One fault, due `at` after the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub kind: FaultKind,
}

/// The faults of one run, sorted by time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FaultPlan {
    pub faults: Vec<Planned>,
}

impl FaultPlan {
    /// Draws the plan. The kills' offsets are the only random draws (one per
    /// kill, in order), so the same source state gives the same plan.
    pub fn draw(rng: &mut impl Rng, counts: &FaultCounts, span: Duration) -> FaultPlan {
        let at = |frac: f64| span.mul_f64(frac.clamp(0.0, 1.0));
        let kills = counts.kills;
        let mut faults: Vec<Planned> = (0..kills)
            .map(|i| Planned {
                at: at((i as f64 + rng.random_range(0.1..0.9)) / kills.max(1) as f64),
                kind: FaultKind::Kill,
            })
            .collect();
        let restarts = counts.pg_restarts;
        faults.extend((0..restarts).map(|i| Planned {
            at: at((i as f64 + 1.0) / (restarts as f64 + 1.0)),
            kind: FaultKind::PgRestart,
        }));
        let freezes = counts.freezes;
        faults.extend((0..freezes).map(|i| Planned {
            at: at((i as f64 + 0.3) / freezes.max(1) as f64),
            kind: FaultKind::Freeze,
        }));
        // Stable: equal offsets keep kills before restarts before freezes.
        faults.sort_by_key(|f| f.at);
        FaultPlan { faults }
    }

    /// Adds the HA cluster's faults, evenly spaced over the span (never at
    /// either end), in an order drawn from `rng` (drawn after the rest of
    /// the plan, so a run without failovers draws the same plan as before).
    pub fn with_failovers(
        mut self,
        rng: &mut impl Rng,
        counts: &FailoverCounts,
        span: Duration,
    ) -> FaultPlan {
        use rand::seq::SliceRandom;
        let mut kinds = counts.kinds();
        kinds.shuffle(rng);
        let n = kinds.len() as f64;
        let at = |i: usize| span.mul_f64((i as f64 + 1.0) / (n + 1.0));
        let failovers = kinds.into_iter().enumerate();
        (self.faults).extend(failovers.map(|(i, kind)| Planned { at: at(i), kind }));
        self.faults.sort_by_key(|f| f.at);
        self
    }

    /// How many faults of `kind` the plan holds.
    pub fn count(&self, kind: FaultKind) -> usize {
        self.faults.iter().filter(|f| f.kind == kind).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    const SPAN: Duration = Duration::from_secs(60);
    const COUNTS: FaultCounts = FaultCounts {
        kills: 200,
        pg_restarts: 1,
        freezes: 5,
    };

    fn plan(seed: u64) -> FaultPlan {
        FaultPlan::draw(&mut StdRng::seed_from_u64(seed), &COUNTS, SPAN)
    }

    #[test]
    fn the_same_seed_draws_the_same_plan_and_another_seed_another() {
        assert_eq!(plan(42), plan(42));
        assert_ne!(plan(42), plan(43));
    }

    #[test]
    fn the_plan_holds_the_counts_sorted_within_the_span() {
        let p = plan(7);
        assert_eq!(p.count(FaultKind::Kill), 200);
        assert_eq!(p.count(FaultKind::PgRestart), 1);
        assert_eq!(p.count(FaultKind::Freeze), 5);
        assert!(p.faults.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(p.faults.iter().all(|f| f.at <= SPAN));
    }

    #[test]
    fn kills_fall_one_in_each_slice_and_the_rest_where_stated() {
        let p = plan(9);
        let slice = SPAN / 200;
        let kills: Vec<Duration> = p
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Kill)
            .map(|f| f.at)
            .collect();
        for (i, at) in kills.iter().enumerate() {
            // A microsecond of slack for the float arithmetic.
            let slack = Duration::from_micros(1);
            let lo = slice * i as u32 + slice.mul_f64(0.1) - slack;
            let hi = slice * i as u32 + slice.mul_f64(0.9) + slack;
            assert!((lo..=hi).contains(at), "kill {i} at {at:?}");
        }
        let restart = p.faults.iter().find(|f| f.kind == FaultKind::PgRestart);
        assert_eq!(restart.map(|f| f.at), Some(SPAN / 2));
        let freezes: Vec<Duration> = p
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Freeze)
            .map(|f| f.at)
            .collect();
        let want: Vec<Duration> = (0..5)
            .map(|i| SPAN.mul_f64((i as f64 + 0.3) / 5.0))
            .collect();
        assert_eq!(freezes, want);
    }

    #[test]
    fn failovers_are_spaced_evenly_in_a_seeded_order_and_leave_the_rest_alone() {
        let counts = FailoverCounts {
            node_deaths: 1,
            postmaster_kills: 1,
            pauses: 1,
            switchovers: 1,
            lossy_deaths: 0,
        };
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            FaultPlan::draw(&mut rng, &COUNTS, SPAN).with_failovers(&mut rng, &counts, SPAN)
        };
        let p = draw(5);
        assert_eq!(p, draw(5));
        let ha: Vec<&Planned> = p.faults.iter().filter(|f| f.kind.is_failover()).collect();
        let at: Vec<Duration> = ha.iter().map(|f| f.at).collect();
        assert_eq!(at, [12, 24, 36, 48].map(Duration::from_secs));
        for kind in [
            FaultKind::NodeDeath,
            FaultKind::PostmasterKill,
            FaultKind::Pause,
            FaultKind::Switchover,
        ] {
            assert_eq!(p.count(kind), 1, "{kind:?}");
        }
        assert_eq!(p.count(FaultKind::Kill), 200);
        assert!(p.faults.windows(2).all(|w| w[0].at <= w[1].at));
        let orders: std::collections::HashSet<Vec<FaultKind>> = (0..20)
            .map(|s| {
                draw(s)
                    .faults
                    .iter()
                    .filter(|f| f.kind.is_failover())
                    .map(|f| f.kind)
                    .collect()
            })
            .collect();
        assert!(orders.len() > 1, "the order of the kinds follows the seed");
    }

    #[test]
    fn no_faults_is_an_empty_plan() {
        let p = FaultPlan::draw(&mut StdRng::seed_from_u64(1), &FaultCounts::default(), SPAN);
        assert!(p.faults.is_empty());
    }
}
