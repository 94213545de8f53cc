//! An in-process provider that answers at once, for measuring the
//! claim-to-settle path without HTTP or provider latency.
//!
//! It follows the contract where the worker can observe it: the first send
//! of a key is `Accepted`, a repeat is `Replayed` with the same message, and
//! a lookup finds exactly the keys it was sent.
//!
//! # Invariants
//! - One message per key, ever: a repeated key never creates a second message.

use courier_core::Status;
use courier_dispatch::worker::Provider;
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, SendOutcome};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The stub. Clones share one set of messages (every worker of a run
/// talks to the same provider).
#[derive(Debug, Default, Clone)]
pub struct StubProvider {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Key to message id. A std mutex: held for one map operation, never
    /// across an await.
    messages: Mutex<HashMap<String, u64>>,
    next_id: AtomicU64,
    sends: AtomicU64,
    lookups: AtomicU64,
}

impl StubProvider {
    pub fn new() -> Self {
        Self::default()
    }

    /// Messages created (distinct keys sent).
    pub fn messages(&self) -> usize {
        self.lock().len()
    }

    /// Send requests received, repeats included.
    pub fn sends(&self) -> u64 {
        self.inner.sends.load(Ordering::Relaxed)
    }

    pub fn lookups(&self) -> u64 {
        self.inner.lookups.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.inner
            .messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn view(key: &str, id: u64) -> MessageView {
        MessageView {
            id: format!("stub_{id}"),
            key: key.to_string(),
            status: Status::Accepted,
            updated_at: None,
        }
    }

    fn send_now(&self, key: &str) -> SendOutcome {
        self.inner.sends.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        if let Some(id) = map.get(key) {
            return SendOutcome::Replayed(Self::view(key, *id));
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        map.insert(key.to_string(), id);
        SendOutcome::Accepted(Self::view(key, id))
    }

    fn lookup_now(&self, key: &str) -> LookupOutcome {
        self.inner.lookups.fetch_add(1, Ordering::Relaxed);
        match self.lock().get(key) {
            Some(id) => LookupOutcome::Found(Self::view(key, *id)),
            None => LookupOutcome::NotFound,
        }
    }
}

impl Provider for StubProvider {
    fn send(&self, key: &str, _to: &str, _body: &str) -> impl Future<Output = SendOutcome> + Send {
        std::future::ready(self.send_now(key))
    }

    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        std::future::ready(self.lookup_now(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_message_per_key_and_lookups_find_it() {
        let p = StubProvider::new();
        assert_eq!(p.lookup("k1").await, LookupOutcome::NotFound);
        let first = p.send("k1", "+15550000001", "hi").await;
        let SendOutcome::Accepted(m) = first else {
            panic!("{first:?}")
        };
        assert_eq!(
            p.send("k1", "+15550000001", "hi").await,
            SendOutcome::Replayed(m.clone())
        );
        assert_eq!(p.lookup("k1").await, LookupOutcome::Found(m));
        assert!(matches!(
            p.send("k2", "+15550000002", "hi").await,
            SendOutcome::Accepted(_)
        ));
        assert_eq!((p.messages(), p.sends(), p.lookups()), (2, 3, 2));
    }
}
