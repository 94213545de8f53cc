//! Signed status webhooks, delivered at least once.
//!
//! One task per message drains that message's queue of events in order, so
//! webhooks of one message arrive in status order unless the plan says
//! otherwise (`out_of_order`: the `sent` event is queued after the final
//! one). Each event is POSTed (as the dialect renders and signs it; the
//! contract's: JSON with `X-Signature: sha256=<hex HMAC>`) until a
//! 2xx answer, with capped, jittered exponential backoff between attempts,
//! at most `webhook_attempts_max` times. Every attempt is one `webhook` log
//! line, written after its answer (or time-out), with `attempt` counting the
//! POSTs of that event from 1, across restarts. A deliberate duplicate is one
//! more POST after the 2xx, with the same body and so the same `event_id`.
//!
//! # Invariants
//! - At most `webhook_concurrency_max` POSTs are in flight at once.
//! - An event's body is built from its status line's `at`, so every attempt
//!   and every duplicate, before and after a restart, carries the same bytes.

use crate::dialect::Outgoing;
use crate::fate::{self, Tag};
use crate::logfile::Extra;
use crate::state::WebhookJob;
use crate::Shared;
use courier_provider::wire::WebhookAnswer;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;

/// The most of a receiver's answer body that is read (and thrown away).
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// Starts the delivery task of message `n`.
pub(crate) fn start(sh: &Arc<Shared>, n: u64) {
    sh.tracker.spawn(deliver_message(sh.clone(), n));
}

async fn deliver_message(sh: Arc<Shared>, n: u64) {
    loop {
        let job = sh.lock().next_webhook(n, &sh.cfg);
        let Some(job) = job else { return };
        if !deliver_event(&sh, &job).await {
            return;
        }
    }
}

/// Delivers one event. False when the provider is stopping (or its log
/// failed): the event stays undelivered in the log and a restart resumes it.
async fn deliver_event(sh: &Shared, job: &WebhookJob) -> bool {
    // The provider's callback, signed its way (the contract's: JSON and
    // `X-Signature`), built once: every attempt sends the same bytes.
    let out = sh.cfg.dialect.outgoing(&sh.cfg, job);
    let mut attempt = job.next_attempt;
    loop {
        let (answer, error) = tokio::select! {
            r = post(sh, &out) => r,
            () = sh.cancel.cancelled() => return false,
        };
        let ok = answer.is_success();
        let gave_up = !ok && attempt >= sh.cfg.webhook_attempts_max;
        let extra = Extra {
            gave_up,
            error,
            ..Extra::default()
        };
        if sh.lock().log_webhook(job, attempt, answer, &extra).is_err() {
            return false;
        }
        if ok {
            if fate::duplicate_webhook(&sh.cfg, &job.event_id) {
                attempt += 1;
                let (answer, error) = tokio::select! {
                    r = post(sh, &out) => r,
                    () = sh.cancel.cancelled() => return false,
                };
                let extra = Extra {
                    duplicate: true,
                    error,
                    ..Extra::default()
                };
                if sh.lock().log_webhook(job, attempt, answer, &extra).is_err() {
                    return false;
                }
            }
            return true;
        }
        if gave_up {
            tracing::warn!(event = %job.event_id, "webhook given up after {attempt} attempts");
            return true;
        }
        let mut rng = StdRng::seed_from_u64(fate::hash(
            sh.cfg.seed,
            &job.event_id,
            Tag::Backoff,
            u64::from(attempt),
        ));
        let delay_ms = courier_core::backoff::delay_ms(
            attempt - 1,
            sh.cfg.webhook_backoff_base_ms,
            sh.cfg.webhook_backoff_cap_ms,
            &mut rng,
        );
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(delay_ms)) => {}
            () = sh.cancel.cancelled() => return false,
        }
        attempt += 1;
    }
}

/// One POST: the receiver's status code, or `timeout` with the reason.
async fn post(sh: &Shared, out: &Outgoing) -> (WebhookAnswer, Option<String>) {
    let Ok(_permit) = sh.webhook_permits.acquire().await else {
        return (WebhookAnswer::timeout(), Some("provider stopping".into()));
    };
    let mut req = sh
        .webhook_http
        .post(&out.url)
        .header(reqwest::header::CONTENT_TYPE, out.content_type);
    for (name, value) in &out.headers {
        req = req.header(*name, value);
    }
    let sent = req.body(out.body.clone()).send().await;
    match sent {
        Ok(mut resp) => {
            let code = resp.status().as_u16();
            // Read (a bounded part of) the answer so the connection is reused.
            let mut read = 0;
            while let Ok(Some(chunk)) = resp.chunk().await {
                read += chunk.len();
                if read > ANSWER_BYTES_MAX {
                    break;
                }
            }
            (WebhookAnswer::Code(code), None)
        }
        // The contract logs any answer that is not a status code as
        // `timeout`; the reason goes in the fake's own `error` field.
        Err(e) => (WebhookAnswer::timeout(), Some(e.to_string())),
    }
}
