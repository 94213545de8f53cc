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
use courier_provider::wire::MessageView;
use courier_provider::Provider;
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
    messages: Mutex<Messages>,
    next_id: AtomicU64,
    sends: AtomicU64,
    lookups: AtomicU64,
}

/// Keys in a compact form: the courier's keys (`courier-` and 32 hex digits)
/// as 128-bit numbers, any other key as text. The stub's memory counts in
/// the worker's peak resident memory the benchmark reports, so it must not
/// grow by a heap string per message.
#[derive(Debug, Default)]
struct Messages {
    compact: HashMap<u128, u64>,
    other: HashMap<String, u64>,
}

impl Messages {
    fn compact_key(key: &str) -> Option<u128> {
        let hex = key.strip_prefix("courier-")?;
        (hex.len() == 32)
            .then(|| u128::from_str_radix(hex, 16).ok())
            .flatten()
    }
    fn get(&self, key: &str) -> Option<u64> {
        match Self::compact_key(key) {
            Some(k) => self.compact.get(&k).copied(),
            None => self.other.get(key).copied(),
        }
    }
    fn insert(&mut self, key: &str, id: u64) {
        match Self::compact_key(key) {
            Some(k) => self.compact.insert(k, id),
            None => self.other.insert(key.to_string(), id),
        };
    }
    fn len(&self) -> usize {
        self.compact.len() + self.other.len()
    }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Messages> {
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
            return SendOutcome::Replayed(Self::view(key, id));
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        map.insert(key, id);
        SendOutcome::Accepted(Self::view(key, id))
    }

    fn lookup_now(&self, key: &str) -> LookupOutcome {
        self.inner.lookups.fetch_add(1, Ordering::Relaxed);
        match self.lock().get(key) {
            Some(id) => LookupOutcome::Found(Self::view(key, id)),
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
        // Courier keys take the compact path, and are told apart too.
        let a = "courier-0123456789abcdef0123456789abcdef";
        let b = "courier-0123456789abcdef0123456789abcdee";
        assert!(matches!(
            p.send(a, "+1", "x").await,
            SendOutcome::Accepted(_)
        ));
        assert!(matches!(
            p.send(a, "+1", "x").await,
            SendOutcome::Replayed(_)
        ));
        assert!(matches!(
            p.send(b, "+1", "x").await,
            SendOutcome::Accepted(_)
        ));
        assert_eq!(p.messages(), 4);
    }
}
