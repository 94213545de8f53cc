//! Scene `ordering`: how often retries reorder a stream, and what stops it.
//!
//! # Model
//! A producer sends messages 1..=`messages` to a broker partition; the broker
//! appends what it accepts to a log, and consumers read the log in order.
//! Time is counted in send slots:
//! - In each slot the producer sends at most one request, and only while fewer
//!   than `in_flight` requests are unanswered. A retry waiting to go out is
//!   sent before any new message.
//! - A request reaches the broker in the slot it is sent. With probability
//!   `failure_rate` (independently per request) it fails and nothing is
//!   appended; otherwise the broker appends it.
//! - The producer learns the answer `round_trip_slots` slots after sending. A
//!   failed request is retried at once (this round trip is the "short delay"),
//!   up to `retries_max` times; after that the message is given up.
//! - With `sequence_numbers` the broker also refuses any message that is not
//!   the next one it expects (Kafka's idempotent producer); a refusal is
//!   answered like a failure but does not count toward `retries_max`. A given-up
//!   message is skipped by the broker's expectation.
//!
//! A message is *out of order* when it is consumed before a message that was
//! sent earlier (a lower number). The share is over consumed messages.
//!
//! ## Expected value
//! At most `L = min(in_flight, round_trip_slots)` requests are unanswered at
//! once, and every message stays in one of `L` interleaved lanes of slots
//! until it is appended (its retries come back to its lane). A new message j
//! is out of order exactly when one of the `n = min(j − 1, L − 1)` earlier
//! messages still in the other lanes needs more further attempts than j does.
//! With failures K of j and A of each other message geometric
//! (`P(K = k) = (1 − f) f^k`), ignoring the retry cap,
//! `P(out of order) = 1 − Σ_k (1 − f) f^k (1 − f^(k+1))^n`, which for two lanes
//! is `f / (1 + f)`: 4.76% at 5% failures (5 in flight, a 2-slot round trip).
//! One request in flight (or a one-slot round trip) gives one lane and zero;
//! sequence numbers give zero by construction. More in flight than the round
//! trip has slots changes nothing: answers come back before more requests can
//! be outstanding.
//!
//! The defaults (5 in flight, as Kafka's producer allows, and an 8-slot round
//! trip) leave room on both sides, so the first move of the in-flight slider
//! changes the share; the sweep covers the slider's whole range (1..=16).
//!
//! # Invariants
//! - Every message is consumed at most once (the log holds no id twice).
//! - consumed + given up = messages.
//! - With sequence numbers the log is strictly increasing.

use std::collections::VecDeque;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::params::{Count, Flag, ParamSpec, Real};
use crate::{text, SimError};

pub const MODEL: &str = "One request per send slot while fewer than in_flight are unanswered; a request fails with \
probability failure_rate, and the producer learns so round_trip_slots slots later and retries at once (up to \
retries_max times). With sequence numbers the broker refuses any message but the next it expects. A message is out \
of order when consumed before one sent earlier. Expected share with L = min(in_flight, round_trip_slots) lanes: \
1 − Σ_k (1 − f) f^k (1 − f^(k+1))^(L−1), i.e. f / (1 + f) for two lanes; zero with one lane or sequence numbers.";

pub const MESSAGES: Count = Count {
    name: "messages",
    label: "Messages",
    min: 1,
    max: 100_000,
    default: 10_000,
    log: true,
    help: "How many messages the producer sends.",
};
pub const IN_FLIGHT: Count = Count {
    name: "in_flight",
    label: "Requests in flight (max)",
    min: 1,
    max: 16,
    default: 5,
    log: false,
    help: "How many requests may be unanswered at once.",
};
pub const FAILURE_RATE: Real = Real {
    name: "failure_rate",
    label: "Failure rate",
    min: 0.0,
    max: 0.5,
    default: 0.05,
    log: false,
    percent: true,
    help: "Probability that a request fails and must be retried.",
};
pub const ROUND_TRIP_SLOTS: Count = Count {
    name: "round_trip_slots",
    label: "Round trip, in send slots",
    min: 1,
    max: 16,
    default: 8,
    log: false,
    help: "How many sends fit in the time an answer takes to come back.",
};
pub const RETRIES_MAX: Count = Count {
    name: "retries_max",
    label: "Retries per message (max)",
    min: 0,
    max: 50,
    default: 5,
    log: false,
    help: "After this many failed retries the producer gives the message up.",
};
pub const SEQUENCE_NUMBERS: Flag = Flag {
    name: "sequence_numbers",
    label: "Sequence numbers",
    default: false,
    help: "The broker accepts only the next expected message, as Kafka's idempotent producer does.",
};

/// The sweep shows the share for one to this many requests in flight: the
/// in-flight slider's whole range.
const SWEEP_IN_FLIGHT_MAX: u64 = IN_FLIGHT.max;
/// How many consumed ids the strip chart shows.
const STRIP_LEN: usize = 40;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    pub messages: u64,
    pub in_flight: u64,
    pub failure_rate: f64,
    pub round_trip_slots: u64,
    pub retries_max: u64,
    pub sequence_numbers: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            messages: MESSAGES.default,
            in_flight: IN_FLIGHT.default,
            failure_rate: FAILURE_RATE.default,
            round_trip_slots: ROUND_TRIP_SLOTS.default,
            retries_max: RETRIES_MAX.default,
            sequence_numbers: SEQUENCE_NUMBERS.default,
        }
    }
}

impl Params {
    pub fn specs() -> Vec<ParamSpec> {
        vec![
            IN_FLIGHT.spec(),
            FAILURE_RATE.spec(),
            SEQUENCE_NUMBERS.spec(),
            ROUND_TRIP_SLOTS.spec(),
            RETRIES_MAX.spec(),
            MESSAGES.spec(),
        ]
    }

    pub fn validate(&self) -> Result<(), SimError> {
        MESSAGES.check(self.messages)?;
        IN_FLIGHT.check(self.in_flight)?;
        FAILURE_RATE.check(self.failure_rate)?;
        ROUND_TRIP_SLOTS.check(self.round_trip_slots)?;
        RETRIES_MAX.check(self.retries_max)
    }

    /// Lanes: how many requests are ever unanswered at once.
    pub fn lanes(&self) -> u64 {
        self.in_flight.min(self.round_trip_slots)
    }

    /// The model's expected out-of-order share, ignoring the retry cap (whose
    /// effect is of order `failure_rate^(retries_max + 1)`).
    pub fn expected_share(&self) -> f64 {
        if self.sequence_numbers {
            return 0.0;
        }
        let lanes = self.lanes();
        let n = self.messages;
        let total: f64 = (0..n)
            .map(|j| out_of_order_probability(self.failure_rate, j.min(lanes - 1)))
            .sum();
        total / n as f64
    }
}

/// `P(max(A_1..A_n) > K)` for independent geometric failure counts with
/// failure probability `f`: the chance that a new message overtakes one of `n`
/// earlier messages in other lanes.
pub fn out_of_order_probability(f: f64, n: u64) -> f64 {
    if n == 0 || f == 0.0 {
        return 0.0;
    }
    let mut in_order = 0.0;
    let mut fk = 1.0; // f^k
    for _ in 0..10_000 {
        in_order += (1.0 - f) * fk * (1.0 - fk * f).powf(n as f64);
        fk *= f;
        if fk < 1e-18 {
            break;
        }
    }
    1.0 - in_order
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Appended,
    Failed,
    Refused,
}

/// What one simulated stream produced.
#[derive(Debug, Clone, PartialEq)]
struct Stream {
    log: Vec<u32>,
    requests: u64,
    failed: u64,
    refused: u64,
    given_up: u64,
    slots: u64,
}

fn simulate(p: &Params, rng: &mut StdRng) -> Result<Stream, SimError> {
    let n = p.messages as usize;
    let rt = p.round_trip_slots as usize;
    let mut answers: Vec<Option<(usize, Answer)>> = vec![None; rt];
    let mut failures = vec![0u64; n];
    let mut settled = vec![false; n]; // appended or given up
    let mut expected_next = 0usize;
    let mut retries: VecDeque<usize> = VecDeque::new();
    let mut next_new = 0usize;
    let mut unanswered = 0u64;
    let mut s = Stream {
        log: Vec::with_capacity(n),
        requests: 0,
        failed: 0,
        refused: 0,
        given_up: 0,
        slots: 0,
    };
    // Each message takes at most retries_max + 1 failed attempts, each slot
    // sends unless L requests wait for answers, and refusals happen only while
    // an earlier message in another lane is unsettled: this bounds the run.
    let slots_max = (p.messages * (p.retries_max + 2) * (p.lanes() + 1) + 1) * p.round_trip_slots;
    let advance = |settled: &[bool], expected_next: &mut usize| {
        while *expected_next < n && settled[*expected_next] {
            *expected_next += 1;
        }
    };
    while (s.log.len() as u64 + s.given_up) < p.messages {
        if s.slots > slots_max {
            return Err(SimError::BadParams(format!(
                "ordering did not finish within {slots_max} slots (a bug: report it with the seed)"
            )));
        }
        let lane = (s.slots % p.round_trip_slots) as usize;
        if let Some((id, answer)) = answers[lane].take() {
            unanswered -= 1;
            match answer {
                Answer::Appended => {}
                Answer::Refused => retries.push_back(id),
                Answer::Failed => {
                    failures[id] += 1;
                    if failures[id] > p.retries_max {
                        s.given_up += 1;
                        settled[id] = true;
                        advance(&settled, &mut expected_next);
                    } else {
                        retries.push_back(id);
                    }
                }
            }
        }
        if unanswered < p.in_flight {
            let id = retries.pop_front().or_else(|| {
                (next_new < n).then(|| {
                    next_new += 1;
                    next_new - 1
                })
            });
            if let Some(id) = id {
                s.requests += 1;
                unanswered += 1;
                let answer = if rng.random::<f64>() < p.failure_rate {
                    s.failed += 1;
                    Answer::Failed
                } else if p.sequence_numbers && id != expected_next {
                    s.refused += 1;
                    Answer::Refused
                } else {
                    debug_assert!(!settled[id]);
                    s.log.push(id as u32);
                    settled[id] = true;
                    advance(&settled, &mut expected_next);
                    Answer::Appended
                };
                answers[lane] = Some((id, answer));
            }
        }
        s.slots += 1;
    }
    Ok(s)
}

/// Messages consumed before some message with a lower number.
fn count_out_of_order(log: &[u32]) -> u64 {
    let mut suffix_min = u32::MAX;
    let mut count = 0;
    for &id in log.iter().rev() {
        if suffix_min < id {
            count += 1;
        }
        suffix_min = suffix_min.min(id);
    }
    count
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    pub in_flight: u64,
    pub out_of_order_share: f64,
    pub expected_share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub messages: u64,
    pub consumed: u64,
    pub out_of_order: u64,
    pub out_of_order_share: f64,
    pub expected_share: f64,
    pub lanes: u64,
    pub requests: u64,
    pub failed_requests: u64,
    /// Requests the broker refused for arriving out of sequence.
    pub refused_requests: u64,
    pub given_up: u64,
    /// The first consumed message numbers (1-based), for a strip chart.
    pub first_consumed: Vec<u32>,
    /// The same run with 1..=16 requests in flight (same seed).
    pub sweep: Vec<SweepPoint>,
    pub reading: String,
}

fn share(count: u64, of: u64) -> f64 {
    if of == 0 {
        0.0
    } else {
        count as f64 / of as f64
    }
}

pub fn run(params: &Params, seed: u64) -> Result<Outcome, SimError> {
    params.validate()?;
    let stream = simulate(params, &mut StdRng::seed_from_u64(seed))?;
    let consumed = stream.log.len() as u64;
    let out_of_order = count_out_of_order(&stream.log);
    let mut sweep = Vec::new();
    for w in 1..=SWEEP_IN_FLIGHT_MAX {
        let p = Params {
            in_flight: w,
            ..params.clone()
        };
        let s = simulate(&p, &mut StdRng::seed_from_u64(seed))?;
        sweep.push(SweepPoint {
            in_flight: w,
            out_of_order_share: share(count_out_of_order(&s.log), s.log.len() as u64),
            expected_share: p.expected_share(),
        });
    }
    let expected = params.expected_share();
    let share_now = share(out_of_order, consumed);
    let reading = if params.sequence_numbers {
        format!(
            "With sequence numbers the broker kept the order: {} of {} messages were consumed out of order, \
at the cost of {} refused requests that had to be sent again.",
            text::count(out_of_order),
            text::count(consumed),
            text::count(stream.refused),
        )
    } else {
        format!(
            "With {} request{} in flight ({} used by a {}-slot round trip) and {} of requests failing, {} of {} \
messages were consumed before one sent earlier (the model expects {}).",
            params.in_flight,
            if params.in_flight == 1 { "" } else { "s" },
            params.lanes(),
            params.round_trip_slots,
            text::rate(params.failure_rate),
            text::pct(share_now, 2),
            text::count(consumed),
            text::pct(expected, 2),
        ) + &past_round_trip(params)
    };
    Ok(Outcome {
        messages: params.messages,
        consumed,
        out_of_order,
        out_of_order_share: share_now,
        expected_share: expected,
        lanes: params.lanes(),
        requests: stream.requests,
        failed_requests: stream.failed,
        refused_requests: stream.refused,
        given_up: stream.given_up,
        first_consumed: stream.log.iter().take(STRIP_LEN).map(|&i| i + 1).collect(),
        sweep,
        reading,
    })
}

/// Why more in flight stopped mattering, when the setting is past the round
/// trip (empty otherwise).
fn past_round_trip(p: &Params) -> String {
    if p.in_flight <= p.round_trip_slots {
        return String::new();
    }
    let rt = p.round_trip_slots;
    format!(
        " More than {rt} in flight changes nothing here: the first answer comes back after {rt} send{}, \
so no more than {rt} request{} can ever be unanswered at once.",
        if rt == 1 { "" } else { "s" },
        if rt == 1 { "" } else { "s" },
    )
}

impl Outcome {
    pub fn table(&self) -> String {
        let rows = vec![
            vec!["messages".to_string(), text::count(self.messages)],
            vec!["consumed".to_string(), text::count(self.consumed)],
            vec!["given up".to_string(), text::count(self.given_up)],
            vec!["out of order".to_string(), text::count(self.out_of_order)],
            vec![
                "out-of-order share".to_string(),
                text::pct(self.out_of_order_share, 2),
            ],
            vec!["model".to_string(), text::pct(self.expected_share, 2)],
            vec!["requests sent".to_string(), text::count(self.requests)],
            vec!["failed".to_string(), text::count(self.failed_requests)],
            vec![
                "refused (sequence)".to_string(),
                text::count(self.refused_requests),
            ],
        ];
        let sweep: Vec<Vec<String>> = self
            .sweep
            .iter()
            .map(|s| {
                vec![
                    s.in_flight.to_string(),
                    text::pct(s.out_of_order_share, 2),
                    text::pct(s.expected_share, 2),
                ]
            })
            .collect();
        format!(
            "{}\n{}",
            text::table(&["", "value"], &rows),
            text::table(&["in flight", "out of order", "model"], &sweep)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Out-of-order events cluster (one slow message can be overtaken by
    /// several), so the binomial standard deviation is widened by a factor of
    /// two, measured to be ample (see `spread_across_seeds_fits_the_tolerance`).
    fn assert_near(what: &str, got: f64, n: u64, p: f64, slack: f64) {
        let tol = 8.0 * (p * (1.0 - p) / n as f64).sqrt() + slack + 1.0 / n as f64;
        assert!(
            (got - p).abs() <= tol,
            "{what}: got {got:.5}, expected {p:.5} ± {tol:.5}"
        );
    }

    /// One stream without the sweep: (out-of-order share, consumed, given up).
    fn stream_share(p: &Params, seed: u64) -> (f64, u64, u64) {
        let s = simulate(p, &mut StdRng::seed_from_u64(seed)).unwrap();
        let consumed = s.log.len() as u64;
        (
            share(count_out_of_order(&s.log), consumed),
            consumed,
            s.given_up,
        )
    }

    #[test]
    fn closed_form_by_hand() {
        let f: f64 = 0.05;
        assert!((out_of_order_probability(f, 1) - f / (1.0 + f)).abs() < 1e-12);
        assert_eq!(out_of_order_probability(f, 0), 0.0);
        // n other lanes: at least one of n first attempts failing while j
        // succeeds at once is a lower bound: (1 − (1 − f)^n)(1 − f).
        let lower = (1.0 - (1.0 - f).powi(4)) * (1.0 - f);
        assert!(out_of_order_probability(f, 4) > lower);
    }

    #[test]
    fn five_in_flight_two_slot_round_trip_is_two_lanes() {
        let p = Params {
            messages: 100_000,
            round_trip_slots: 2,
            ..Params::default()
        };
        let o = run(&p, 31).unwrap();
        // The cap of 5 retries changes the share by about f^6 ≈ 1.6e-8.
        assert_near(
            "out of order",
            o.out_of_order_share,
            o.consumed,
            o.expected_share,
            1e-6,
        );
        assert!((o.expected_share - 0.05 / 1.05).abs() < 1e-4);
    }

    #[test]
    fn one_in_flight_or_sequence_numbers_keep_order() {
        for p in [
            Params {
                in_flight: 1,
                failure_rate: 0.3,
                ..Params::default()
            },
            Params {
                round_trip_slots: 1,
                failure_rate: 0.3,
                ..Params::default()
            },
            Params {
                sequence_numbers: true,
                failure_rate: 0.3,
                in_flight: 8,
                round_trip_slots: 8,
                ..Params::default()
            },
        ] {
            let o = run(&p, 4).unwrap();
            assert_eq!(o.out_of_order, 0, "{p:?}");
            assert_eq!(o.expected_share, 0.0);
        }
        let seq = run(
            &Params {
                sequence_numbers: true,
                ..Params::default()
            },
            4,
        )
        .unwrap();
        assert!(seq.refused_requests > 0);
    }

    #[test]
    fn several_settings_match_the_closed_form() {
        // A high retry cap makes the uncapped closed form exact.
        let settings = [(0.1, 3, 3), (0.3, 8, 4), (0.02, 16, 16), (0.5, 2, 6)];
        for (i, (f, w, rt)) in settings.into_iter().enumerate() {
            let p = Params {
                messages: 40_000,
                in_flight: w,
                failure_rate: f,
                round_trip_slots: rt,
                retries_max: 50,
                sequence_numbers: false,
            };
            let (got, consumed, given_up) = stream_share(&p, 900 + i as u64);
            assert_eq!(given_up, 0);
            assert_near("share", got, consumed, p.expected_share(), 0.0);
        }
    }

    #[test]
    fn spread_across_seeds_fits_the_tolerance() {
        // The sample standard deviation over 30 seeds must stay within twice
        // the binomial one, which is what `assert_near` assumes.
        let p = Params {
            messages: 5_000,
            failure_rate: 0.3,
            in_flight: 4,
            round_trip_slots: 4,
            retries_max: 50,
            ..Params::default()
        };
        let shares: Vec<f64> = (0..30).map(|s| stream_share(&p, s).0).collect();
        let mean = shares.iter().sum::<f64>() / shares.len() as f64;
        let sd = (shares.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
            / (shares.len() - 1) as f64)
            .sqrt();
        let q = p.expected_share();
        let binomial = (q * (1.0 - q) / p.messages as f64).sqrt();
        assert!(sd < 2.0 * binomial, "sd {sd} vs binomial {binomial}");
    }

    #[test]
    fn retry_cap_gives_messages_up() {
        let p = Params {
            failure_rate: 0.5,
            retries_max: 0,
            messages: 4_000,
            ..Params::default()
        };
        let o = run(&p, 2).unwrap();
        assert_eq!(o.consumed + o.given_up, p.messages);
        crate::check::assert_binomial("given up", o.given_up, p.messages, 0.5);
        let seq = run(
            &Params {
                sequence_numbers: true,
                ..p
            },
            2,
        )
        .unwrap();
        assert_eq!(seq.consumed + seq.given_up, 4_000);
        assert_eq!(seq.out_of_order, 0);
    }

    #[test]
    fn sweep_and_strip_and_determinism() {
        let p = Params {
            messages: 2_000,
            ..Params::default()
        };
        let o = run(&p, 6).unwrap();
        assert_eq!(o.sweep.len() as u64, IN_FLIGHT.max);
        assert_eq!(o.sweep[0].out_of_order_share, 0.0);
        assert_eq!(o.sweep[4].out_of_order_share, o.out_of_order_share);
        assert_eq!(o.first_consumed.len(), 40);
        assert_eq!(o, run(&p, 6).unwrap());
        assert_ne!(o, run(&p, 7).unwrap());
        for bad in [
            Params {
                in_flight: 0,
                ..p.clone()
            },
            Params {
                messages: 200_000,
                ..p.clone()
            },
            Params {
                failure_rate: 0.9,
                ..p.clone()
            },
            Params {
                retries_max: 51,
                ..p.clone()
            },
            Params {
                round_trip_slots: 0,
                ..p.clone()
            },
        ] {
            assert!(run(&bad, 1).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn defaults_show_the_effect_of_the_first_move() {
        // One step either way on the in-flight slider changes the share, and
        // past the round trip nothing changes (the reading says why).
        let p = Params {
            messages: 4_000,
            ..Params::default()
        };
        let o = run(&p, 1).unwrap();
        let at = |w: u64| o.sweep[(w - 1) as usize].out_of_order_share;
        assert!(at(4) < at(5) && at(5) < at(6), "{:?}", o.sweep);
        let rt = p.round_trip_slots;
        assert!(p.in_flight < rt && rt < IN_FLIGHT.max);
        for w in rt..=IN_FLIGHT.max {
            assert_eq!(at(w), at(rt), "{w} in flight");
        }
        assert!(!o.reading.contains("changes nothing"));
        let past = run(
            &Params {
                in_flight: rt + 3,
                ..p
            },
            1,
        )
        .unwrap();
        assert_eq!(past.out_of_order_share, at(rt));
        assert!(
            past.reading
                .contains("More than 8 in flight changes nothing"),
            "{}",
            past.reading
        );
    }

    #[test]
    fn out_of_order_counting_by_hand() {
        assert_eq!(count_out_of_order(&[0, 1, 2, 3]), 0);
        assert_eq!(count_out_of_order(&[1, 0, 2]), 1);
        assert_eq!(count_out_of_order(&[1, 2, 3, 0]), 3);
        assert_eq!(count_out_of_order(&[2, 0, 1]), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn stream_invariants(
            messages in 1u64..600, w in 1u64..=16, f in 0.0f64..=0.5, rt in 1u64..=16,
            cap in 0u64..=6, seq: bool, seed: u64,
        ) {
            let p = Params { messages, in_flight: w, failure_rate: f, round_trip_slots: rt, retries_max: cap, sequence_numbers: seq };
            let s = simulate(&p, &mut StdRng::seed_from_u64(seed)).unwrap();
            prop_assert_eq!(s.log.len() as u64 + s.given_up, messages);
            let mut seen = std::collections::HashSet::new();
            prop_assert!(s.log.iter().all(|id| seen.insert(*id)));
            if seq {
                prop_assert!(s.log.windows(2).all(|w| w[0] < w[1]));
            }
            if w.min(rt) == 1 {
                prop_assert_eq!(count_out_of_order(&s.log), 0);
            }
        }
    }
}
