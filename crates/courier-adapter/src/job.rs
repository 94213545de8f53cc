//! A benchmark job as courier carries it, and the provider its workers use.
//!
//! A job is one action of store [`STORE`]; its body starts with the wall
//! clock at its insert, in microseconds (`t=<us> `), padded to
//! `JOB_PAYLOAD_BYTES`. The provider is the throughput benchmark's stub
//! (with its record and the job's work), wrapped to measure the claim
//! latency: from the body's time to the moment the worker's send reaches
//! the stub (the job's work starts), for every job whose message the send
//! creates. The wall clock, not a monotonic one, because a job inserted
//! before a SIGKILL may start in the next process.

use crate::window::Window;
use courier_bench::stub::StubProvider;
use courier_dispatch::worker::Provider;
use courier_provider::{LookupOutcome, SendOutcome};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every job is an action of this one store: the harness runs one queue.
pub const STORE: &str = "bench";
/// Every job's recipient (the stub sends nothing anywhere).
pub const RECIPIENT: &str = "+15550000000";

/// The body of a job inserted at `at` (wall clock since the epoch).
pub fn body(at: Duration, payload_bytes: usize) -> String {
    let mut b = format!("t={} ", at.as_micros());
    while b.len() < payload_bytes {
        b.push('x');
    }
    b
}

/// The insert time a job's body carries, in microseconds since the epoch.
pub fn inserted_us(body: &str) -> Option<u64> {
    body.strip_prefix("t=")?.split(' ').next()?.parse().ok()
}

/// The stub, measuring when each job starts.
#[derive(Clone)]
pub struct Measured {
    pub stub: StubProvider,
    /// Claim latencies, shared with the sampler.
    pub claims: Arc<Mutex<Window>>,
}

impl Provider for Measured {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send {
        let started = crate::emit::now_since_epoch();
        let inserted = inserted_us(body);
        let answer = self.stub.send(key, to, body);
        let claims = self.claims.clone();
        async move {
            let out = answer.await;
            if let (SendOutcome::Accepted(_), Some(inserted)) = (&out, inserted) {
                let latency_us = (started.as_micros() as u64).saturating_sub(inserted);
                let mut w = claims.lock().unwrap_or_else(|p| p.into_inner());
                w.record(started.as_secs(), latency_us);
            }
            out
        }
    }

    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        self.stub.lookup(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_carries_its_insert_time_and_the_payload_size() {
        let b = body(Duration::from_micros(1_776_416_410_123_456), 256);
        assert_eq!(b.len(), 256);
        assert_eq!(inserted_us(&b), Some(1_776_416_410_123_456));
        // A payload smaller than the time keeps the time.
        assert_eq!(inserted_us(&body(Duration::from_micros(7), 1)), Some(7));
        assert_eq!(inserted_us("hello"), None);
    }
}
