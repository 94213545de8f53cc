//! Open-loop arrival schedules, a pure function of the settings and a seed.
//!
//! Arrivals do not wait for earlier actions to finish (that would be a closed
//! loop, which hides queueing: a slow system would simply be offered less).
//! Each store's arrivals form a Poisson process (exponential gaps); a bulk
//! store instead enqueues the same expected total in a few bursts of
//! thousands at once.
//!
//! # Invariants
//! - Arrivals are sorted by time and lie within `[0, duration_ms)`.
//! - A bulk store's bursts add up to exactly `round(rate * factor * duration)`
//!   actions, the expected total of the steady scenario.
//! - The same seed gives the same schedule.
//! - Each store draws from a stream of its own (the seed and the store's
//!   index), so with one seed a quiet store's arrivals are the same in every
//!   scenario: scenarios differ only by what the noisy stores send, and a
//!   comparison of quiet latencies across them is paired.
//! - [`spread_latencies`] gives the quiet stores' arrivals, in time order,
//!   the provider latencies of a golden-ratio sequence of quantiles,
//!   shuffled within windows of 16: any stretch of a few hundred meets the
//!   distribution's own percentiles, not a sample's luck; being a function
//!   of the quiet arrivals alone, they are the same in every scenario of a
//!   seed.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// How the noisy stores send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// Every store sends at the same rate.
    Baseline,
    /// The noisy stores send `factor` times the others' rate, evenly (Poisson).
    Steady,
    /// The noisy stores send the steady scenario's total in bursts of
    /// thousands at once.
    Bulk,
}

impl Scenario {
    pub const ALL: [Scenario; 3] = [Scenario::Baseline, Scenario::Steady, Scenario::Bulk];

    /// A short label for tables and charts.
    pub fn label(&self, noisy: u32, factor: u32) -> String {
        let who = if noisy == 1 {
            "one store".to_string()
        } else {
            format!("{noisy} stores")
        };
        match self {
            Scenario::Baseline => "every store equal".to_string(),
            Scenario::Steady => format!("{who} {factor}x, steady"),
            Scenario::Bulk => format!("{who} {factor}x, bulk"),
        }
    }
}

/// One enqueue: a single action, or a burst of `count` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// Milliseconds after the start of the run.
    pub at_ms: f64,
    /// The store's index: `0..noisy` are the noisy stores.
    pub store: u32,
    /// This arrival's place among its store's, from 0: with the store, it
    /// names the same arrival in every scenario of one seed.
    pub ordinal: u32,
    pub count: u32,
    /// The provider latency this arrival's message states, once
    /// [`spread_latencies`] gave it one (single arrivals only).
    pub latency_ms: Option<u64>,
}

/// What shapes a schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub stores: u32,
    pub noisy_stores: u32,
    pub noise_factor: u32,
    /// Arrivals per second of each ordinary store.
    pub rate_per_store_hz: f64,
    pub duration_ms: f64,
    /// A bulk store's bursts are at least this large (fewer, larger bursts
    /// when the total allows fewer); a total below it is one burst.
    pub burst_actions_min: u32,
}

impl Shape {
    /// The rate of a noisy store in the steady scenario.
    pub fn noisy_rate_hz(&self) -> f64 {
        self.rate_per_store_hz * f64::from(self.noise_factor)
    }

    /// Actions per second offered on average in a scenario.
    pub fn offered_hz(&self, scenario: Scenario) -> f64 {
        let quiet = f64::from(self.stores - self.noisy_stores) * self.rate_per_store_hz;
        match scenario {
            Scenario::Baseline => f64::from(self.stores) * self.rate_per_store_hz,
            Scenario::Steady | Scenario::Bulk => {
                quiet + f64::from(self.noisy_stores) * self.noisy_rate_hz()
            }
        }
    }

    /// A bulk store's total: the steady scenario's expected total.
    pub fn bulk_total(&self) -> u32 {
        let total = self.noisy_rate_hz() * self.duration_ms / 1000.0;
        total.round().clamp(0.0, f64::from(u32::MAX)) as u32
    }

    /// The times (ms) and sizes of one bulk store's bursts.
    pub fn bursts(&self, noisy_index: u32) -> Vec<(f64, u32)> {
        let total = self.bulk_total();
        if total == 0 {
            return Vec::new();
        }
        let k = (total / self.burst_actions_min.max(1)).max(1);
        let base = total / k;
        let extra = total % k;
        // Bursts start a fifth of the way into their slot, so the backlog
        // of the last one drains inside the measured window; several noisy
        // stores take turns within a slot rather than bursting together.
        let slot = self.duration_ms / f64::from(k);
        let offset = 0.2 + 0.6 * f64::from(noisy_index) / f64::from(self.noisy_stores.max(1));
        (0..k)
            .map(|i| {
                let size = base + u32::from(i < extra);
                (slot * (f64::from(i) + offset), size)
            })
            .collect()
    }
}

/// The arrivals of one scenario, sorted by time.
pub fn arrivals(shape: &Shape, scenario: Scenario, seed: u64) -> Vec<Arrival> {
    let mut out = Vec::new();
    for store in 0..shape.stores {
        let noisy = store < shape.noisy_stores && scenario != Scenario::Baseline;
        if noisy && scenario == Scenario::Bulk {
            out.extend(shape.bursts(store).into_iter().zip(0..).map(
                |((at_ms, count), ordinal)| Arrival {
                    at_ms,
                    store,
                    ordinal,
                    count,
                    latency_ms: None,
                },
            ));
            continue;
        }
        let mut rng = StdRng::seed_from_u64(store_seed(seed, store));
        let mut ordinal = 0;
        let rate = if noisy {
            shape.noisy_rate_hz()
        } else {
            shape.rate_per_store_hz
        };
        poisson(&mut rng, rate, shape.duration_ms, |at_ms| {
            out.push(Arrival {
                at_ms,
                store,
                ordinal,
                count: 1,
                latency_ms: None,
            });
            ordinal += 1;
        });
    }
    out.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms).then(a.store.cmp(&b.store)));
    out
}

/// Draws kept of the provider's latency distribution, sorted, to read its
/// quantiles from: one standard error of the table's p95 is about 0.25 ms
/// at log-normal, median 25 ms, sigma 0.5 (entries are whole ms).
const LATENCY_TABLE: usize = 1 << 16;
/// The arrivals of a sequence whose quantiles are shuffled among them
/// (16 quiet arrivals: about 64 ms of the matrix's 250/s). Wider windows
/// leave more of a third's edges to the shuffle: at 64, two thirds of one
/// round read p95s 3 ms apart.
const WINDOW: usize = 16;

/// One sequence's quantiles: the golden-ratio sequence `frac(u0 + k / phi)`
/// (any `n` consecutive terms spread over `[0, 1)` with gaps of at most
/// about `2.6 / n`), taken [`WINDOW`] terms at a time in a random order.
struct Quantiles {
    next: f64,
    rng: StdRng,
    window: Vec<f64>,
}

impl Quantiles {
    fn new(seed: u64) -> Quantiles {
        let mut rng = StdRng::seed_from_u64(seed);
        Quantiles {
            next: rng.random(),
            rng,
            window: Vec::with_capacity(WINDOW),
        }
    }

    fn next(&mut self) -> f64 {
        const PHI_INV: f64 = 0.618_033_988_749_894_9;
        if self.window.is_empty() {
            for _ in 0..WINDOW {
                self.window.push(self.next);
                self.next = (self.next + PHI_INV).fract();
            }
            self.window.shuffle(&mut self.rng);
        }
        self.window.pop().unwrap_or(0.5)
    }
}

/// Gives every single arrival a provider latency from `latency`, spread
/// evenly over time: the quiet stores' arrivals (`store >= noisy_stores`),
/// in time order, take the quantiles of a golden-ratio sequence, shuffled
/// within each [`WINDOW`] of them; the noisy stores' arrivals a sequence of
/// their own, so the quiet ones are the same in every scenario of a seed.
/// A quantile reads a sorted table of [`LATENCY_TABLE`] draws of the
/// distribution.
///
/// Why: a third of a round (~600 quiet actions) of independent draws has a
/// p95 with a standard error of about 2.5 ms, and paired runs repeat one
/// round's draw in all its runs; one such draw put the last third's
/// provider latencies above the first's in every run of a round. The
/// sequence gives every few hundred arrivals the distribution's own
/// percentiles; the shuffle lets slow answers fall together within a
/// window as independent draws would, instead of at even spacings.
pub fn spread_latencies(
    arrivals: &mut [Arrival],
    noisy_stores: u32,
    latency: &courier_fake::Latency,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(store_seed(seed, u32::MAX));
    let mut table: Vec<u64> = (0..LATENCY_TABLE)
        .map(|_| latency.sample_ms(rng.random(), rng.random()))
        .collect();
    table.sort_unstable();
    let mut sequences = [
        Quantiles::new(store_seed(seed, u32::MAX - 1)),
        Quantiles::new(store_seed(seed, u32::MAX - 2)),
    ];
    for a in arrivals.iter_mut().filter(|a| a.count == 1) {
        let u = sequences[usize::from(a.store >= noisy_stores)].next();
        let at = ((u * LATENCY_TABLE as f64) as usize).min(LATENCY_TABLE - 1);
        a.latency_ms = Some(table[at]);
    }
}

/// The seed of one store's stream: a splitmix64 step of the seed and the
/// store, so neighbouring stores' streams are unrelated.
fn store_seed(seed: u64, store: u32) -> u64 {
    let mut z = seed ^ u64::from(store).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Calls `f` at the times of a Poisson process of `rate_hz` in `[0, duration_ms)`.
fn poisson(rng: &mut StdRng, rate_hz: f64, duration_ms: f64, mut f: impl FnMut(f64)) {
    if rate_hz.is_nan() || rate_hz <= 0.0 {
        return;
    }
    let mean_gap_ms = 1000.0 / rate_hz;
    let mut t = 0.0;
    loop {
        // 1 - u is in (0, 1]: the logarithm is finite.
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() * mean_gap_ms;
        if t >= duration_ms {
            return;
        }
        f(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            stores: 100,
            noisy_stores: 1,
            noise_factor: 10,
            rate_per_store_hz: 3.0,
            duration_ms: 60_000.0,
            burst_actions_min: 1000,
        }
    }

    #[test]
    fn poisson_arrivals_match_their_rate_and_stay_sorted() {
        let s = shape();
        let a = arrivals(&s, Scenario::Baseline, 7);
        // 100 stores * 3/s * 60 s = 18,000 expected; sd ~134.
        assert!((17_400..=18_600).contains(&a.len()), "{}", a.len());
        assert!(a.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.iter().all(|x| x.at_ms >= 0.0 && x.at_ms < s.duration_ms));
        assert!(a.iter().all(|x| x.count == 1));
        // Every store gets about its share.
        let store0 = a.iter().filter(|x| x.store == 0).count();
        assert!((120..=240).contains(&store0), "{store0}");
    }

    #[test]
    fn spread_latencies_give_every_third_the_distributions_p95_and_iid_draws_do_not() {
        use crate::stats::Percentiles;
        let latency = courier_fake::Latency::LogNormal {
            median_ms: 25.0,
            sigma: 0.5,
        };
        // The matrix's shape: 250/s over 1,000 stores, 8 s.
        let s = Shape {
            stores: 1_000,
            noisy_stores: 2,
            rate_per_store_hz: 0.25,
            duration_ms: 8_000.0,
            ..shape()
        };
        let third_p95s = |a: &[Arrival], of: &dyn Fn(&Arrival) -> u64| -> Vec<f64> {
            (0..3)
                .map(|i| {
                    let lo = f64::from(i) * s.duration_ms / 3.0;
                    let within = a.iter().filter(|x| {
                        x.store >= s.noisy_stores
                            && x.at_ms >= lo
                            && x.at_ms < lo + s.duration_ms / 3.0
                    });
                    Percentiles::from_us(within.map(|x| of(x) * 1_000))
                        .expect("a third has arrivals")
                        .p95_ms
                })
                .collect()
        };
        let spread = |p: &[f64]| {
            let max = p.iter().copied().fold(f64::MIN, f64::max);
            let min = p.iter().copied().fold(f64::MAX, f64::min);
            max / min - 1.0
        };
        let (mut stated_worst, mut iid_worst) = (0f64, 0f64);
        for seed in 0..20 {
            let mut a = arrivals(&s, Scenario::Steady, seed);
            spread_latencies(&mut a, s.noisy_stores, &latency, seed);
            assert!(a.iter().all(|x| x.latency_ms.is_some()));
            let stated = third_p95s(&a, &|x| x.latency_ms.unwrap());
            // The distribution's p95 is 25 * e^(0.5 * 1.645) = 57.0 ms.
            assert!(stated.iter().all(|p| (p - 57.0).abs() < 1.5), "{stated:?}");
            stated_worst = stated_worst.max(spread(&stated));
            // The control: independent draws for the same arrivals.
            let mut rng = StdRng::seed_from_u64(seed);
            let drawn: Vec<Arrival> = a
                .iter()
                .map(|x| Arrival {
                    latency_ms: Some(latency.sample_ms(rng.random(), rng.random())),
                    ..*x
                })
                .collect();
            iid_worst = iid_worst.max(spread(&third_p95s(&drawn, &|x| x.latency_ms.unwrap())));
        }
        assert!(
            stated_worst < 0.03,
            "stated thirds differ by {stated_worst}"
        );
        assert!(iid_worst > 0.08, "independent thirds differ by {iid_worst}");
        // The quiet stores' latencies are the same in every scenario of a
        // seed; a bulk burst states none.
        let quiet = |scenario| -> Vec<Arrival> {
            let mut a = arrivals(&s, scenario, 5);
            spread_latencies(&mut a, s.noisy_stores, &latency, 5);
            a.into_iter()
                .filter(|x| x.store >= s.noisy_stores)
                .collect()
        };
        assert_eq!(quiet(Scenario::Baseline), quiet(Scenario::Bulk));
        let mut bulk = arrivals(&s, Scenario::Bulk, 5);
        spread_latencies(&mut bulk, s.noisy_stores, &latency, 5);
        assert!(bulk
            .iter()
            .filter(|x| x.count > 1)
            .all(|x| x.latency_ms.is_none()));
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let s = shape();
        assert_eq!(
            arrivals(&s, Scenario::Steady, 3),
            arrivals(&s, Scenario::Steady, 3)
        );
        assert_ne!(
            arrivals(&s, Scenario::Steady, 3),
            arrivals(&s, Scenario::Steady, 4)
        );
    }

    #[test]
    fn quiet_stores_arrive_alike_in_every_scenario_of_a_seed() {
        let s = Shape {
            noisy_stores: 2,
            ..shape()
        };
        let quiet = |scenario| -> Vec<Arrival> {
            arrivals(&s, scenario, 9)
                .into_iter()
                .filter(|x| x.store >= s.noisy_stores)
                .collect()
        };
        let base = quiet(Scenario::Baseline);
        assert!(base.len() > 10_000, "{}", base.len());
        assert_eq!(base, quiet(Scenario::Steady));
        assert_eq!(base, quiet(Scenario::Bulk));
        // Ordinals count each store's arrivals from 0 in time order.
        let of_store_5: Vec<u32> = base
            .iter()
            .filter(|x| x.store == 5)
            .map(|x| x.ordinal)
            .collect();
        assert_eq!(of_store_5, (0..of_store_5.len() as u32).collect::<Vec<_>>());
        // The noisy stores differ; another seed moves the quiet ones too.
        let noisy = |scenario| {
            arrivals(&s, scenario, 9)
                .into_iter()
                .filter(|x| x.store == 0)
                .count()
        };
        assert!(noisy(Scenario::Steady) > 5 * noisy(Scenario::Baseline));
        let other: Vec<Arrival> = arrivals(&s, Scenario::Baseline, 10)
            .into_iter()
            .filter(|x| x.store >= s.noisy_stores)
            .collect();
        assert_ne!(base, other);
    }

    #[test]
    fn steady_noise_is_factor_times_the_rate() {
        let s = shape();
        let a = arrivals(&s, Scenario::Steady, 11);
        let noisy = a.iter().filter(|x| x.store == 0).count() as f64;
        // Expected 1,800; sd ~42.
        assert!((1_650.0..=1_950.0).contains(&noisy), "{noisy}");
        assert!((s.offered_hz(Scenario::Steady) - 327.0).abs() < 1e-9);
    }

    #[test]
    fn bulk_sends_the_steady_total_in_bursts_of_thousands() {
        let s = Shape {
            duration_ms: 120_000.0,
            ..shape()
        };
        let a = arrivals(&s, Scenario::Bulk, 5);
        let bursts: Vec<_> = a.iter().filter(|x| x.store == 0).collect();
        assert_eq!(bursts.len(), 3);
        assert_eq!(bursts.iter().map(|b| b.count).sum::<u32>(), 3_600);
        assert!(bursts.iter().all(|b| b.count >= 1_000));
        assert!(bursts.iter().all(|b| b.at_ms < s.duration_ms));
        // The quiet stores are as in the baseline.
        assert!(a.iter().filter(|x| x.store != 0).all(|x| x.count == 1));
        // A total below the minimum is one burst of that total.
        let small = Shape {
            burst_actions_min: 5_000,
            ..s
        };
        assert_eq!(small.bursts(0), vec![(small.duration_ms * 0.2, 3_600)]);
    }

    #[test]
    fn several_noisy_stores_take_turns() {
        let s = Shape {
            noisy_stores: 2,
            ..shape()
        };
        let b0 = s.bursts(0);
        let b1 = s.bursts(1);
        assert_eq!(b0.len(), 1);
        assert!(b1[0].0 > b0[0].0);
    }
}
