//! Seeded, reproducible decisions.
//!
//! Every fault and timing decision is a pure function of the seed, a subject
//! (a key or an event id) and a tag naming the decision, hashed with a fixed
//! function (FNV-1a over the bytes, then the SplitMix64 finaliser), never
//! with the process's randomised hasher. The same seed therefore gives the
//! same fate to the same key in every run and after every restart, whatever
//! the order in which concurrent requests arrive.
//!
//! # Invariants
//! - [`unit`] depends only on its arguments and lies in `[0, 1)`.
//! - A message's [`MessagePlan`] has exactly one final status.

use crate::config::{FakeConfig, LatencySubject};
use courier_core::Status;
use serde::{Deserialize, Serialize};

/// The decision a hash is drawn for; distinct tags give independent draws.
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub enum Tag {
    Timeout = 1,
    TimeoutSide = 2,
    SentDelay = 3,
    LateFailed = 4,
    FinalDelay = 5,
    OutOfOrder = 6,
    Duplicate = 7,
    Latency = 8,
    LatencyShape = 9,
    Backoff = 10,
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit hash of (seed, subject, tag, ordinal).
pub fn hash(seed: u64, subject: &str, tag: Tag, ordinal: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325 ^ splitmix(seed);
    for b in subject.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    splitmix(h ^ splitmix(((tag as u64) << 32) ^ ordinal))
}

/// A uniform number in `[0, 1)` for (seed, subject, tag, ordinal).
pub fn unit(seed: u64, subject: &str, tag: Tag, ordinal: u64) -> f64 {
    (hash(seed, subject, tag, ordinal) >> 11) as f64 / (1u64 << 53) as f64
}

/// Where a timed-out send loses its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutFault {
    /// Nothing is created; logged `faulted`.
    BeforeCreate,
    /// The message is created (logged `created`); only the answer is lost.
    AfterCreate,
}

impl TimeoutFault {
    /// The marker written in the log line's `fault` field.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutFault::BeforeCreate => "timeout_before_create",
            TimeoutFault::AfterCreate => "timeout_after_create",
        }
    }
}

/// The time-out fate of a send: of the first send of a key, or in
/// ignore-key mode of its `ordinal`-th send (the first is 0). It is a
/// function of the key and the ordinal alone, so a key forgotten after its
/// retention and sent again meets the same fate as the first time.
pub fn send_timeout(cfg: &FakeConfig, key: &str, ordinal: u64) -> Option<TimeoutFault> {
    if unit(cfg.seed, key, Tag::Timeout, ordinal) >= cfg.faults.timeout {
        return None;
    }
    Some(if unit(cfg.seed, key, Tag::TimeoutSide, ordinal) < 0.5 {
        TimeoutFault::BeforeCreate
    } else {
        TimeoutFault::AfterCreate
    })
}

/// The life of one message, decided when it is created and written into its
/// `created` log line, so a restart keeps it even under another seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessagePlan {
    /// From `accepted` to `sent`.
    pub sent_ms: u64,
    /// `delivered` or `failed`.
    #[serde(rename = "final")]
    pub final_status: Status,
    /// From `sent` to the final status.
    pub final_ms: u64,
    /// The `sent` webhook is held back until the final one was delivered.
    pub out_of_order: bool,
}

/// The plan of the message created for `key` (by its `ordinal`-th send in
/// ignore-key mode, so each of a key's messages has a life of its own; 0
/// otherwise).
pub fn plan(cfg: &FakeConfig, key: &str, ordinal: u64) -> MessagePlan {
    let draw = |tag| unit(cfg.seed, key, tag, ordinal);
    let late_failed = draw(Tag::LateFailed) < cfg.faults.late_failed;
    let final_range = if late_failed {
        cfg.failed_after_ms
    } else {
        cfg.delivered_after_ms
    };
    let plan = MessagePlan {
        sent_ms: cfg.sent_after_ms.sample(draw(Tag::SentDelay)),
        final_status: if late_failed {
            Status::Failed
        } else {
            Status::Delivered
        },
        final_ms: final_range.sample(draw(Tag::FinalDelay)),
        out_of_order: draw(Tag::OutOfOrder) < cfg.faults.out_of_order,
    };
    debug_assert!(plan.final_status.is_final());
    plan
}

/// Whether a status event is delivered once more after its first 2xx.
pub fn duplicate_webhook(cfg: &FakeConfig, event_id: &str) -> bool {
    unit(cfg.seed, event_id, Tag::Duplicate, 0) < cfg.faults.duplicate_webhook
}

/// The latency of one request; `ordinal` tells requests of one subject apart.
pub fn latency_ms(cfg: &FakeConfig, subject: &str, ordinal: u64) -> u64 {
    if cfg.latency.is_zero() {
        return 0;
    }
    cfg.latency.sample_ms(
        unit(cfg.seed, subject, Tag::Latency, ordinal),
        unit(cfg.seed, subject, Tag::LatencyShape, ordinal),
    )
}

/// The latency of one send: drawn as [`latency_ms`] from its key and
/// `ordinal`, or, under [`LatencySubject::Message`], from its recipient and
/// body alone (a newline cannot be part of a recipient); under
/// [`LatencySubject::Stated`], what the body states, else as `Message`.
pub fn send_latency_ms(cfg: &FakeConfig, key: &str, ordinal: u64, to: &str, body: &str) -> u64 {
    match cfg.latency_subject {
        LatencySubject::Request => latency_ms(cfg, key, ordinal),
        LatencySubject::Message => latency_ms(cfg, &format!("{to}\n{body}"), 0),
        LatencySubject::Stated => {
            stated_latency_ms(body).unwrap_or_else(|| latency_ms(cfg, &format!("{to}\n{body}"), 0))
        }
    }
}

/// The latency a body states at its end (`... [latency 57 ms]`), capped at
/// [`DELAY_MS_MAX`](crate::config::DELAY_MS_MAX); `None` when it states none.
pub fn stated_latency_ms(body: &str) -> Option<u64> {
    let n = body.strip_suffix(" ms]")?.rsplit_once("[latency ")?.1;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: too many of them is a latency above the cap.
    Some(n.parse::<u64>().map_or(crate::config::DELAY_MS_MAX, |ms| {
        ms.min(crate::config::DELAY_MS_MAX)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Latency;

    #[test]
    fn a_message_subject_gives_the_same_message_the_same_latency() {
        let mut cfg = FakeConfig::new("unused.jsonl", "k", "s");
        cfg.latency = Latency::LogNormal {
            median_ms: 25.0,
            sigma: 0.5,
        };
        let draws = |cfg: &FakeConfig, body: &str| -> Vec<u64> {
            (0..50)
                .map(|i| send_latency_ms(cfg, &format!("courier-{i}"), i, "+15551234567", body))
                .collect()
        };
        // By request (the default): keys and ordinals differ, so do draws.
        let by_request = draws(&cfg, "hello");
        assert!(
            by_request.iter().any(|ms| *ms != by_request[0]),
            "{by_request:?}"
        );
        // By message: one message, one latency, whatever its key and ordinal;
        // another message draws afresh.
        cfg.latency_subject = LatencySubject::Message;
        let same = draws(&cfg, "hello");
        assert!(same.iter().all(|ms| *ms == same[0]), "{same:?}");
        let others: Vec<u64> = (0..50)
            .map(|i| send_latency_ms(&cfg, "courier-0", 0, "+15551234567", &format!("m{i}")))
            .collect();
        assert!(others.iter().any(|ms| *ms != same[0]), "{others:?}");
    }

    #[test]
    fn a_stated_subject_waits_what_the_body_states_and_draws_otherwise() {
        assert_eq!(
            stated_latency_ms("bench message 3 of 7 [latency 57 ms]"),
            Some(57)
        );
        assert_eq!(stated_latency_ms("[latency 0 ms]"), Some(0));
        assert_eq!(
            stated_latency_ms("x [latency 99999999999999999999999 ms]"),
            Some(crate::config::DELAY_MS_MAX)
        );
        for not_stated in [
            "hello",
            "x [latency ms]",
            "x [latency -5 ms]",
            "x [latency 5 ms] and more",
            "x [latency 5ms]",
        ] {
            assert_eq!(stated_latency_ms(not_stated), None, "{not_stated}");
        }
        let mut cfg = FakeConfig::new("unused.jsonl", "k", "s");
        cfg.latency = Latency::LogNormal {
            median_ms: 25.0,
            sigma: 0.5,
        };
        cfg.latency_subject = LatencySubject::Stated;
        let to = "+15551234567";
        assert_eq!(
            send_latency_ms(&cfg, "k1", 0, to, "a [latency 123 ms]"),
            123
        );
        assert_eq!(send_latency_ms(&cfg, "k2", 9, to, "b [latency 4 ms]"), 4);
        // Without a statement, the message's own draw, as under `Message`.
        let stated = send_latency_ms(&cfg, "k1", 0, to, "plain");
        cfg.latency_subject = LatencySubject::Message;
        assert_eq!(send_latency_ms(&cfg, "k3", 5, to, "plain"), stated);
        // The control: under `Message` a statement is only text.
        let drawn: Vec<u64> = (0..20)
            .map(|i| send_latency_ms(&cfg, "k", 0, to, &format!("{i} [latency 123 ms]")))
            .collect();
        assert!(drawn.iter().any(|ms| *ms != 123), "{drawn:?}");
    }

    #[test]
    fn hashes_are_stable_across_builds() {
        // Fixed values: a change here would change every seeded run's fate.
        assert_eq!(hash(1, "k", Tag::Timeout, 0), hash(1, "k", Tag::Timeout, 0));
        assert_ne!(hash(1, "k", Tag::Timeout, 0), hash(2, "k", Tag::Timeout, 0));
        assert_ne!(
            hash(1, "k", Tag::Timeout, 0),
            hash(1, "k", Tag::TimeoutSide, 0)
        );
        assert_ne!(hash(1, "k", Tag::Timeout, 0), hash(1, "k", Tag::Timeout, 1));
        assert_eq!(splitmix(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn each_send_of_a_key_draws_its_own_plan_and_fate() {
        let mut cfg = FakeConfig::new("x", "k", "s");
        cfg.faults.timeout = 0.5;
        let plans: std::collections::HashSet<u64> =
            (0..20).map(|i| plan(&cfg, "a", i).sent_ms).collect();
        assert!(plans.len() > 1, "one plan for every send: {plans:?}");
        let fates: Vec<bool> = (0..20)
            .map(|i| send_timeout(&cfg, "a", i).is_some())
            .collect();
        assert!(fates.contains(&true) && fates.contains(&false), "{fates:?}");
    }

    #[test]
    fn units_are_uniform_over_similar_keys() {
        // Ten buckets over 100,000 near-identical keys: each within 5 standard
        // deviations of a binomial(100000, 0.1).
        let n = 100_000;
        let mut buckets = [0u32; 10];
        for i in 0..n {
            let u = unit(7, &format!("courier-{i}"), Tag::Timeout, 0);
            assert!((0.0..1.0).contains(&u));
            buckets[(u * 10.0) as usize] += 1;
        }
        let sd = (n as f64 * 0.1 * 0.9).sqrt();
        for b in buckets {
            assert!(
                (f64::from(b) - n as f64 * 0.1).abs() < 5.0 * sd,
                "{buckets:?}"
            );
        }
    }

    #[test]
    fn plans_respect_the_configuration() {
        let mut cfg = FakeConfig::new("x", "k", "s");
        cfg.faults.late_failed = 1.0;
        cfg.faults.out_of_order = 0.0;
        let p = plan(&cfg, "a", 0);
        assert_eq!(p.final_status, Status::Failed);
        assert!(!p.out_of_order);
        assert!(
            cfg.failed_after_ms.min_ms <= p.final_ms && p.final_ms <= cfg.failed_after_ms.max_ms
        );
        cfg.faults.late_failed = 0.0;
        let p = plan(&cfg, "a", 0);
        assert_eq!(p.final_status, Status::Delivered);
        assert!(cfg.sent_after_ms.min_ms <= p.sent_ms && p.sent_ms <= cfg.sent_after_ms.max_ms);
        assert_eq!(plan(&cfg, "a", 0), plan(&cfg, "a", 0));
        cfg.faults.timeout = 0.0;
        assert_eq!(send_timeout(&cfg, "a", 0), None);
        cfg.faults.timeout = 1.0;
        assert!(send_timeout(&cfg, "a", 0).is_some());
    }
}
