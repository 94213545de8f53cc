//! An in-process provider that answers at once, for measuring the
//! claim-to-settle path without HTTP or provider latency.
//!
//! It follows the contract where the worker can observe it: the first send
//! of a key is `Accepted`, a repeat is `Replayed` with the same message, and
//! a lookup finds exactly the keys it was sent.
//!
//! Two extensions serve the public queue benchmark's adapter
//! (`courier-adapter`, [`StubProvider::with_record`]): each send's answer
//! can take a fixed time (the job's work), and the messages can live in a
//! [`StubRecord`], an append-only file shared by every process that opens it,
//! so that the stub remembers what it sent across a SIGKILL and a restart of
//! the process it runs in, as a real provider would.
//!
//! # Invariants
//! - One message per key, ever: a repeated key never creates a second message.
//!   With a record, "ever" spans processes: a key is created only after the
//!   record, read to its end under an exclusive lock, does not hold it, and
//!   the line is appended before the lock is released and the answer given.

use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::Provider;
use courier_provider::{LookupOutcome, SendOutcome};
use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The stub. Clones share one set of messages (every worker of a run
/// talks to the same provider).
#[derive(Debug, Default, Clone)]
pub struct StubProvider {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Key to message id. A std mutex: held for one map operation (and, with
    /// a record, one locked read and append of its file), never across an
    /// await.
    messages: Mutex<Messages>,
    /// Where the messages also live, across processes (see [`StubRecord`]).
    record: Option<StubRecord>,
    /// How long every send takes to be answered.
    work: Duration,
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

    /// A stub whose messages also live in `record`, starting with every key
    /// it holds, and whose every send is answered `work` after it arrives.
    pub fn with_record(record: StubRecord, work: Duration) -> Self {
        StubProvider {
            inner: Arc::new(Inner {
                record: Some(record),
                work,
                ..Inner::default()
            }),
        }
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
        let Some(record) = &self.inner.record else {
            return SendOutcome::Accepted(Self::view(key, self.create(&mut map, key)));
        };
        // Another process may have created the key since this one last read
        // the record: read it to its end and append, under one file lock.
        let created = record.create_if_absent(key, |k| {
            if map.get(k).is_none() {
                self.create(&mut map, k);
            }
        });
        match (created, map.get(key)) {
            (Ok(true), _) => SendOutcome::Accepted(Self::view(key, self.create(&mut map, key))),
            (Ok(false), Some(id)) => SendOutcome::Replayed(Self::view(key, id)),
            // The record failed: nothing is known of this request, like a
            // provider that answers 500.
            (Ok(false), None) | (Err(_), _) => {
                SendOutcome::Unknown("stub record unavailable".into())
            }
        }
    }

    fn create(&self, map: &mut Messages, key: &str) -> u64 {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        map.insert(key, id);
        id
    }

    fn lookup_now(&self, key: &str) -> LookupOutcome {
        self.inner.lookups.fetch_add(1, Ordering::Relaxed);
        let mut map = self.lock();
        if let (None, Some(record)) = (map.get(key), &self.inner.record) {
            if let Err(e) = record.read_new(|k| {
                if map.get(k).is_none() {
                    self.create(&mut map, k);
                }
            }) {
                return LookupOutcome::Unknown(format!("stub record unavailable: {e}"));
            }
        }
        match map.get(key) {
            Some(id) => LookupOutcome::Found(Self::view(key, id)),
            None => LookupOutcome::NotFound,
        }
    }
}

impl Provider for StubProvider {
    fn send(&self, key: &str, _to: &str, _body: &str) -> impl Future<Output = SendOutcome> + Send {
        let (this, key) = (self.clone(), key.to_string());
        async move {
            // The message exists from the moment the request arrives; the
            // answer takes the job's work. A process killed meanwhile
            // leaves a message its worker never heard of: the case a
            // lookup after the reclaim is for.
            let out = this.send_now(&key);
            if !this.inner.work.is_zero() {
                tokio::time::sleep(this.inner.work).await;
            }
            out
        }
    }

    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        std::future::ready(self.lookup_now(key))
    }
}

/// The stub's messages on disk: one line per message created, its key, in an
/// append-only file. Every process that opens the same file shares one set
/// of messages: each send reads what others appended (from where this
/// process stopped reading) and appends its own under an exclusive `flock`,
/// and a line is written (to the page cache: it survives a SIGKILL of the
/// process, not a crash of the machine) before the send is answered.
#[derive(Debug)]
pub struct StubRecord {
    /// The file and how far this process has read it.
    file: Mutex<(Option<std::fs::File>, u64)>,
}

impl StubRecord {
    /// Opens (creating) the record at `path`; with `fresh`, empties it first.
    pub fn open(path: &Path, fresh: bool) -> std::io::Result<StubRecord> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let record = StubRecord {
            file: Mutex::new((Some(file), 0)),
        };
        if fresh {
            record.locked(|f, _| f.set_len(0))?;
        }
        Ok(record)
    }

    /// Every key in the record file at `path`, in the order created,
    /// repeats included (a repeat would be a second message for one key).
    pub fn keys(path: &Path) -> std::io::Result<Vec<String>> {
        let text = std::fs::read_to_string(path)?;
        Ok(text.lines().map(str::to_string).collect())
    }

    /// Reads the lines appended since the last read, handing each key to `seen`.
    fn read_new(&self, seen: impl FnMut(&str)) -> std::io::Result<()> {
        self.locked(|f, offset| Self::read_from(f, offset, seen))
    }

    /// Reads to the end (handing each new key to `seen`); if `key` is not
    /// among the keys of the file, appends it. Returns whether it appended.
    fn create_if_absent(&self, key: &str, mut seen: impl FnMut(&str)) -> std::io::Result<bool> {
        self.locked(|f, offset| {
            let mut found = false;
            Self::read_from(f, offset, |k| {
                found |= k == key;
                seen(k);
            })?;
            if found {
                return Ok(false);
            }
            let line = format!("{key}\n");
            f.write_all(line.as_bytes())?;
            *offset += line.len() as u64;
            Ok(true)
        })
    }

    fn read_from(
        f: &mut std::fs::File,
        offset: &mut u64,
        mut seen: impl FnMut(&str),
    ) -> std::io::Result<()> {
        f.seek(SeekFrom::Start(*offset))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        // Only whole lines: a line is written by one write(2) under the
        // lock, so a partial one is never seen by a reader that holds it.
        let whole = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        for line in String::from_utf8_lossy(&buf[..whole]).lines() {
            seen(line);
        }
        *offset += whole as u64;
        Ok(())
    }

    /// Runs `op` on the file under an exclusive `flock`.
    fn locked<T>(
        &self,
        op: impl FnOnce(&mut std::fs::File, &mut u64) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        use nix::fcntl::{Flock, FlockArg};
        let mut state = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let (slot, offset) = &mut *state;
        let file = slot
            .take()
            .ok_or_else(|| std::io::Error::other("the record was lost by an earlier failure"))?;
        let mut guard = Flock::lock(file, FlockArg::LockExclusive).map_err(|(f, e)| {
            *slot = Some(f);
            std::io::Error::from(e)
        })?;
        let out = op(&mut guard, offset);
        let file = guard.unlock().map_err(|(_, e)| std::io::Error::from(e))?;
        *slot = Some(file);
        out
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

    /// Two stubs on one record (two processes, or one before a SIGKILL and
    /// one after): a key either created is found by the other and replayed,
    /// never created twice; `fresh` empties the record.
    #[tokio::test]
    async fn a_record_is_one_set_of_messages_across_processes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stub.record");
        let zero = Duration::ZERO;
        let a = StubProvider::with_record(StubRecord::open(&path, true).unwrap(), zero);
        let k = "courier-0123456789abcdef0123456789abcdef";
        assert!(matches!(
            a.send(k, "+1", "x").await,
            SendOutcome::Accepted(_)
        ));
        let b = StubProvider::with_record(StubRecord::open(&path, false).unwrap(), zero);
        assert!(matches!(b.lookup(k).await, LookupOutcome::Found(_)));
        assert!(matches!(
            b.send(k, "+1", "x").await,
            SendOutcome::Replayed(_)
        ));
        assert!(matches!(
            b.send("other", "+1", "x").await,
            SendOutcome::Accepted(_)
        ));
        assert!(matches!(
            a.send("other", "+1", "x").await,
            SendOutcome::Replayed(_)
        ));
        assert_eq!(
            StubRecord::keys(&path).unwrap(),
            vec![k.to_string(), "other".into()]
        );
        // Negative control: a stub whose record was emptied has forgotten
        // the key, and a send creates it a second time.
        let c = StubProvider::with_record(StubRecord::open(&path, true).unwrap(), zero);
        assert_eq!(c.lookup(k).await, LookupOutcome::NotFound);
        assert!(matches!(
            c.send(k, "+1", "x").await,
            SendOutcome::Accepted(_)
        ));
    }
}
