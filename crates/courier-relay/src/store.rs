//! The only module that speaks to etcd: named operations on one namespace.
//!
//! Every request has a client time-out. A time-out or a broken connection is
//! [`StoreError::Unknown`]: a write may or may not have committed, so callers
//! retry only writes whose compares make a second attempt harmless, and read
//! back on the else branch.
//!
//! # Invariants
//! - Marking an outbox entry published deletes the entry and writes its
//!   published record in one transaction: an entry is pending or published,
//!   never both and never neither.
//! - Ranges are read in pages of at most [`PAGE_KEYS_MAX`] keys, so no answer
//!   grows with the size of a run.

use crate::check::Observation;
use crate::limits::RelayLimits;
use crate::model::{
    CounterRead, DedupRecord, Event, Keys, PublishedRecord, ResultRecord, TaskRecord,
};
use etcd_client::{
    Client, ConnectOptions, GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keys read per range request.
pub const PAGE_KEYS_MAX: i64 = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A time-out or a transport failure: a write may or may not have
    /// committed. Retry only guarded writes; read back before deciding.
    #[error("etcd outcome unknown: {0}")]
    Unknown(String),
    /// etcd refused the request; sending it again will not help.
    #[error("etcd refused the request: {0}")]
    Refused(String),
    /// A stored record cannot be read (foreign or damaged data).
    #[error("etcd record {key} cannot be read: {reason}")]
    Corrupt { key: String, reason: String },
}

impl StoreError {
    fn from_client(e: etcd_client::Error) -> Self {
        use etcd_client::Error as E;
        use tonic::Code;
        match e {
            E::GRpcStatus(s) => match s.code() {
                Code::InvalidArgument
                | Code::FailedPrecondition
                | Code::OutOfRange
                | Code::PermissionDenied
                | Code::Unauthenticated
                | Code::Unimplemented => {
                    StoreError::Refused(format!("{:?}: {}", s.code(), s.message()))
                }
                _ => StoreError::Unknown(format!("{:?}: {}", s.code(), s.message())),
            },
            E::InvalidArgs(m) => StoreError::Refused(m),
            other => StoreError::Unknown(other.to_string()),
        }
    }

    /// Whether the caller may try again (with a guarded write).
    pub fn is_unknown(&self) -> bool {
        matches!(self, StoreError::Unknown(_))
    }
}

/// Encodes a record for etcd.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// Decodes a record read from etcd.
pub fn decode<T: DeserializeOwned>(kv: &KeyValue) -> Result<T, StoreError> {
    serde_json::from_slice(kv.value()).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: e.to_string(),
    })
}

/// Reads the counter from the key-value etcd returned (absent: 0 at revision 0).
pub fn counter_from(kv: Option<&KeyValue>) -> Result<CounterRead, StoreError> {
    let Some(kv) = kv else {
        return Ok(CounterRead {
            value: 0,
            mod_revision: 0,
        });
    };
    let text = std::str::from_utf8(kv.value()).map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: e.to_string(),
    })?;
    let value = text.parse::<u64>().map_err(|e| StoreError::Corrupt {
        key: String::from_utf8_lossy(kv.key()).into_owned(),
        reason: format!("counter {text:?}: {e}"),
    })?;
    Ok(CounterRead {
        value,
        mod_revision: kv.mod_revision(),
    })
}

/// The key-values of the `index`-th operation of a transaction's answer, when it was a get.
pub fn get_answer(resp: &TxnResponse, index: usize) -> Vec<KeyValue> {
    match resp.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(g)) => g.kvs().to_vec(),
        _ => Vec::new(),
    }
}

/// The lease dedup records are written under, and when it was granted.
#[derive(Debug, Clone, Copy)]
struct DedupLease {
    id: i64,
    granted: Instant,
}

/// One namespace of one etcd cluster.
#[derive(Clone)]
pub struct Store {
    client: Client,
    keys: Keys,
    timeout: Duration,
    /// Shared by clones: one lease serves every dedup record written during
    /// its reuse period.
    dedup_lease: Arc<Mutex<Option<DedupLease>>>,
    retention: Duration,
}

impl Store {
    /// Connects (with the request time-out as connect time-out).
    pub async fn connect(
        endpoints: &[String],
        keys: Keys,
        limits: &RelayLimits,
    ) -> Result<Self, StoreError> {
        let timeout = Duration::from_millis(limits.etcd_request_timeout_ms);
        let options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout)
            .with_keep_alive(Duration::from_secs(2), timeout);
        let client = tokio::time::timeout(timeout, Client::connect(endpoints, Some(options)))
            .await
            .map_err(|_| StoreError::Unknown(format!("connecting to {endpoints:?} timed out")))?
            .map_err(StoreError::from_client)?;
        Ok(Store {
            client,
            keys,
            timeout,
            dedup_lease: Arc::new(Mutex::new(None)),
            retention: Duration::from_millis(limits.dedup_retention_ms),
        })
    }

    /// How long one dedup lease serves new records: a tenth of the
    /// retention, at least a second.
    fn lease_reuse(&self) -> Duration {
        (self.retention / 10).max(Duration::from_secs(1))
    }

    /// The lease a dedup record written now goes under. It is granted for
    /// the retention plus its reuse period, so a record written at the end
    /// of the reuse period still lives the whole retention. etcd keeps a
    /// lease across a leader change (and then renews its remaining time, so
    /// a record lives longer, never shorter).
    pub async fn dedup_lease(&self) -> Result<i64, StoreError> {
        let current = *self.dedup_lease.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = current.filter(|l| l.granted.elapsed() < self.lease_reuse()) {
            return Ok(l.id);
        }
        let ttl_s = (self.retention + self.lease_reuse()).as_secs_f64().ceil() as i64;
        let granted = Instant::now();
        let mut lease = self.client.lease_client();
        let resp = self
            .bounded("lease grant", lease.grant(ttl_s, None))
            .await?;
        let l = DedupLease {
            id: resp.id(),
            granted,
        };
        *self.dedup_lease.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
        Ok(l.id)
    }

    /// The time a dedup record written now is kept at least.
    pub fn dedup_retention(&self) -> Duration {
        self.retention
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn bounded<T>(
        &self,
        what: &str,
        fut: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r.map_err(StoreError::from_client),
            Err(_) => Err(StoreError::Unknown(format!(
                "{what} timed out after {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    /// Runs a transaction.
    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, StoreError> {
        let mut kv = self.client.kv_client();
        self.bounded("txn", kv.txn(txn)).await
    }

    /// Reads one key.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError> {
        let mut kv = self.client.kv_client();
        let mut resp = self.bounded("get", kv.get(key, None)).await?;
        Ok(resp.take_kvs().into_iter().next())
    }

    /// The store's current revision (it moves with every committed write).
    pub async fn revision(&self) -> Result<i64, StoreError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .bounded(
                "get",
                kv.get(
                    self.keys.counter(),
                    Some(GetOptions::new().with_count_only()),
                ),
            )
            .await?;
        Ok(resp.header().map(|h| h.revision()).unwrap_or(0))
    }

    /// Counts the keys under a prefix.
    pub async fn count(&self, prefix: &str) -> Result<u64, StoreError> {
        let mut kv = self.client.kv_client();
        let resp = self
            .bounded(
                "count",
                kv.get(
                    prefix,
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ),
            )
            .await?;
        Ok(resp.count().max(0) as u64)
    }

    /// Reads up to `limit` keys under a prefix, in key order.
    pub async fn range(&self, prefix: &str, limit: i64) -> Result<Vec<KeyValue>, StoreError> {
        let mut out = Vec::new();
        let end = prefix_end(prefix.as_bytes());
        let mut from = prefix.as_bytes().to_vec();
        loop {
            let page = PAGE_KEYS_MAX.min(limit - out.len() as i64);
            if page <= 0 {
                break;
            }
            let mut kv = self.client.kv_client();
            let opts = GetOptions::new().with_range(end.clone()).with_limit(page);
            let mut resp = self
                .bounded("range", kv.get(from.clone(), Some(opts)))
                .await?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            let Some(last) = kvs.last() else { break };
            from = last.key().to_vec();
            from.push(0);
            out.extend(kvs);
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// Pending publication intents, oldest task id first.
    pub async fn outbox_pending(&self, limit: u32) -> Result<Vec<Event>, StoreError> {
        let kvs = self.range(&self.keys.outboxes(), i64::from(limit)).await?;
        kvs.iter().map(decode::<Event>).collect()
    }

    /// Marks entries published: deletes each outbox entry and writes its
    /// published record, `batch_max` entries per transaction. Harmless to repeat.
    pub async fn outbox_mark_published(
        &self,
        entries: &[(Event, Option<u64>)],
        batch_max: u32,
    ) -> Result<(), StoreError> {
        for chunk in entries.chunks(batch_max.max(1) as usize) {
            let mut ops = Vec::with_capacity(chunk.len() * 2);
            for (event, seq) in chunk {
                ops.push(TxnOp::delete(self.keys.outbox(&event.task_id), None));
                let rec = PublishedRecord {
                    event_id: event.event_id.clone(),
                    stream_sequence: *seq,
                };
                ops.push(TxnOp::put(
                    self.keys.published(&event.task_id),
                    encode(&rec),
                    None,
                ));
            }
            self.txn(Txn::new().and_then(ops)).await?;
        }
        Ok(())
    }

    /// Reads the dedup record of an event and the counter, in one round trip.
    pub async fn apply_read(
        &self,
        event_id: &str,
    ) -> Result<(Option<DedupRecord>, CounterRead), StoreError> {
        let txn = Txn::new().and_then(vec![
            TxnOp::get(self.keys.dedup(event_id), None),
            TxnOp::get(self.keys.counter(), None),
        ]);
        let resp = self.txn(txn).await?;
        let dedup = match get_answer(&resp, 0).first() {
            Some(kv) => Some(decode::<DedupRecord>(kv)?),
            None => None,
        };
        let counter = counter_from(get_answer(&resp, 1).first())?;
        Ok((dedup, counter))
    }

    /// Everything the checker reads from etcd.
    pub async fn observe(&self) -> Result<Observation, StoreError> {
        let all = i64::MAX;
        let mut obs = Observation::default();
        for kv in self.range(&self.keys.tasks(), all).await? {
            let t: TaskRecord = decode(&kv)?;
            obs.tasks.insert(t.task_id.clone(), t);
        }
        for kv in self.range(&self.keys.outboxes(), all).await? {
            let e: Event = decode(&kv)?;
            obs.pending_outbox.insert(e.task_id);
        }
        for kv in self.range(&self.keys.dedups(), all).await? {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let event_id = key.rsplit('/').next().unwrap_or_default().to_string();
            obs.dedup.insert(event_id, decode(&kv)?);
        }
        for kv in self.range(&self.keys.results(), all).await? {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let task_id = key.rsplit('/').next().unwrap_or_default().to_string();
            obs.results.insert(task_id, decode::<ResultRecord>(&kv)?);
        }
        obs.counter = counter_from(self.get(&self.keys.counter()).await?.as_ref())?.value;
        Ok(obs)
    }

    /// Deletes every key of this namespace (used on servers the lab did not start).
    pub async fn delete_namespace(&self) -> Result<(), StoreError> {
        let mut kv = self.client.kv_client();
        self.bounded(
            "delete",
            kv.delete(
                self.keys.all(),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            ),
        )
        .await?;
        Ok(())
    }
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff"), vec![0]);
    }
}
