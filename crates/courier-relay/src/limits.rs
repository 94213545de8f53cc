//! Every limit of the relay in one place, checked once in [`RelayLimits::validate`].
//! Units are the last part of each name.

use serde::{Deserialize, Serialize};

/// The most operations etcd accepts in one transaction by default
/// (`--max-txn-ops`).
pub const ETCD_TXN_OPS_MAX: u32 = 128;

const DAY_MS: u64 = 24 * 3_600_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayLimits {
    /// Client time-out of one etcd request. A time-out leaves the outcome of a
    /// write unknown, so every write is guarded by compares that make a retry safe.
    pub etcd_request_timeout_ms: u64,
    /// Client time-out of one JetStream API request (stream, consumer, info)
    /// and of connecting to nats-server.
    pub nats_request_timeout_ms: u64,
    /// How long the relay waits for JetStream's publish ACK before it treats
    /// the publication as unknown (and publishes again on its next pass).
    pub publish_ack_timeout_ms: u64,
    /// The consumer's AckWait: a delivered message that is not acknowledged
    /// within this time is delivered again.
    pub ack_wait_ms: u64,
    /// Messages one worker pulls in one request (and so holds unacknowledged).
    pub fetch_batch_max: u32,
    /// How long one pull request waits for messages.
    pub fetch_expires_ms: u64,
    /// Messages delivered and not yet acknowledged, over all workers.
    pub ack_pending_max: u32,
    /// Outbox entries the relay reads (and publishes) in one pass.
    pub outbox_scan_max: u32,
    /// Outbox entries marked published in one etcd transaction (two operations each).
    pub mark_batch_max: u32,
    /// Attempts of one apply transaction (compare failures and unknown outcomes)
    /// before the worker gives the message back for a later delivery.
    pub apply_attempts_max: u32,
    /// Backoff between apply attempts after a lost compare.
    pub apply_backoff_base_ms: u64,
    pub apply_backoff_cap_ms: u64,
    /// Pause of an idle relay between two reads of an empty outbox.
    pub relay_idle_ms: u64,
    /// Largest event payload the worker accepts.
    pub event_bytes_max: u32,
    /// Largest amount of one task.
    pub amount_max: u64,
    /// Stream size limits. The stream refuses new messages when full
    /// (discard "new"), so a full stream never drops an event silently.
    pub stream_bytes_max: i64,
    pub stream_messages_max: i64,
    /// How long a started etcd or nats-server may take to answer its first probe.
    pub server_ready_timeout_ms: u64,
    /// Copies of the stream JetStream keeps (1 on one server, 3 on the cluster).
    pub stream_replicas: u32,
    /// The stream's max age: JetStream removes a message this long after it
    /// was stored, so no copy of an event is delivered (or redelivered) later
    /// than this after its last publication.
    pub stream_max_age_ms: u64,
    /// The longest an outbox entry may stay unpublished (or published and
    /// not yet marked, so that it may be published again). Not enforced: an
    /// operating bound the dedup window is sized for.
    pub outbox_age_max_ms: u64,
    /// How long a dedup record is kept at least (an etcd lease). It must
    /// outlast every delivery still possible after the first apply:
    /// `outbox_age_max_ms + stream_max_age_ms + ack_wait_ms` (see
    /// [`RelayLimits::dedup_window_min_ms`]).
    pub dedup_retention_ms: u64,
}

impl Default for RelayLimits {
    fn default() -> Self {
        RelayLimits {
            etcd_request_timeout_ms: 2_000,
            nats_request_timeout_ms: 2_000,
            publish_ack_timeout_ms: 2_000,
            ack_wait_ms: 2_000,
            fetch_batch_max: 64,
            fetch_expires_ms: 500,
            ack_pending_max: 1_024,
            outbox_scan_max: 256,
            mark_batch_max: 50,
            apply_attempts_max: 500,
            apply_backoff_base_ms: 1,
            apply_backoff_cap_ms: 50,
            relay_idle_ms: 20,
            event_bytes_max: 1_024,
            amount_max: 1_000_000,
            stream_bytes_max: 1 << 30,
            stream_messages_max: 10_000_000,
            server_ready_timeout_ms: 15_000,
            stream_replicas: 1,
            stream_max_age_ms: DAY_MS,
            outbox_age_max_ms: DAY_MS,
            dedup_retention_ms: 7 * DAY_MS,
        }
    }
}

impl RelayLimits {
    /// The lab's limits: a short AckWait so a lost consumer ACK is redelivered
    /// within a second, and one message per pull so each worker holds at most
    /// one unacknowledged message (the scenarios stay easy to read).
    pub fn lab() -> Self {
        RelayLimits {
            publish_ack_timeout_ms: 500,
            ack_wait_ms: 1_000,
            fetch_batch_max: 1,
            fetch_expires_ms: 200,
            ..RelayLimits::default()
        }
    }

    /// The least time after an event's first apply during which a copy of it
    /// may still be delivered: a copy can be published until its outbox
    /// entry is marked (at most `outbox_age_max_ms` after the create, which
    /// precedes the apply), stays in the stream `stream_max_age_ms`, and one
    /// delivered just before it ages out is applied within AckWait or
    /// redelivered no more.
    pub fn dedup_window_min_ms(&self) -> u64 {
        self.outbox_age_max_ms
            .saturating_add(self.stream_max_age_ms)
            .saturating_add(self.ack_wait_ms)
    }

    pub fn validate(&self) -> Result<(), LimitsError> {
        let fail = |m: &str| Err(LimitsError(m.to_string()));
        let positive = [
            ("etcd_request_timeout_ms", self.etcd_request_timeout_ms),
            ("nats_request_timeout_ms", self.nats_request_timeout_ms),
            ("publish_ack_timeout_ms", self.publish_ack_timeout_ms),
            ("ack_wait_ms", self.ack_wait_ms),
            ("fetch_batch_max", u64::from(self.fetch_batch_max)),
            ("fetch_expires_ms", self.fetch_expires_ms),
            ("ack_pending_max", u64::from(self.ack_pending_max)),
            ("outbox_scan_max", u64::from(self.outbox_scan_max)),
            ("mark_batch_max", u64::from(self.mark_batch_max)),
            ("apply_attempts_max", u64::from(self.apply_attempts_max)),
            ("apply_backoff_base_ms", self.apply_backoff_base_ms),
            ("relay_idle_ms", self.relay_idle_ms),
            ("event_bytes_max", u64::from(self.event_bytes_max)),
            ("amount_max", self.amount_max),
            ("server_ready_timeout_ms", self.server_ready_timeout_ms),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return fail(&format!("{name} must be positive"));
        }
        if self.ack_wait_ms < 100 {
            return fail("ack_wait_ms must be at least 100");
        }
        if self.fetch_batch_max > self.ack_pending_max {
            return fail("fetch_batch_max must be at most ack_pending_max");
        }
        if self.mark_batch_max * 2 > ETCD_TXN_OPS_MAX {
            return fail(
                "mark_batch_max must be at most 64 (two etcd operations each, 128 per transaction)",
            );
        }
        if self.apply_backoff_cap_ms < self.apply_backoff_base_ms {
            return fail("apply_backoff_cap_ms must be at least apply_backoff_base_ms");
        }
        // The counter is a u64: a stream full of the largest amounts must not overflow it.
        if self.amount_max > u64::MAX / (self.stream_messages_max.max(1) as u64) {
            return fail("amount_max * stream_messages_max must fit in a u64 counter");
        }
        if self.stream_max_age_ms < 1_000 || self.outbox_age_max_ms == 0 {
            return fail("stream_max_age_ms must be at least 1000 and outbox_age_max_ms positive");
        }
        if self.dedup_retention_ms <= self.dedup_window_min_ms() {
            return fail(
                "dedup_retention_ms must be longer than outbox_age_max_ms + stream_max_age_ms + ack_wait_ms",
            );
        }
        if !(1..=5).contains(&self.stream_replicas) {
            return fail("stream_replicas must be within 1..=5");
        }
        if self.stream_bytes_max <= 0 || self.stream_messages_max <= 0 {
            return fail("stream_bytes_max and stream_messages_max must be positive");
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid relay limits: {0}")]
pub struct LimitsError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_lab_limits_are_valid() {
        assert_eq!(RelayLimits::default().validate(), Ok(()));
        assert_eq!(RelayLimits::lab().validate(), Ok(()));
    }

    #[test]
    fn inconsistent_limits_are_refused() {
        let bad = [
            RelayLimits {
                ack_wait_ms: 0,
                ..RelayLimits::default()
            },
            RelayLimits {
                ack_wait_ms: 50,
                ..RelayLimits::default()
            },
            RelayLimits {
                mark_batch_max: 65,
                ..RelayLimits::default()
            },
            RelayLimits {
                fetch_batch_max: 2_000,
                ..RelayLimits::default()
            },
            RelayLimits {
                apply_backoff_cap_ms: 0,
                ..RelayLimits::default()
            },
            RelayLimits {
                amount_max: u64::MAX,
                ..RelayLimits::default()
            },
            RelayLimits {
                dedup_retention_ms: 2 * DAY_MS,
                ..RelayLimits::default()
            },
            RelayLimits {
                stream_max_age_ms: 10,
                ..RelayLimits::default()
            },
        ];
        for l in bad {
            assert!(l.validate().is_err(), "{l:?}");
        }
    }
}
