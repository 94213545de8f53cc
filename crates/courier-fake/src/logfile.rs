//! The provider's append-only log: one JSON object a line, every request and
//! every effect, in the order they happened.
//!
//! Lines are [`LogEntry`] objects plus a few fields of the fake's own
//! ([`Extra`]) that a restart needs and that other readers ignore: the body
//! fingerprint, callback and plan of a `created` line, the number of a send
//! among its key's sends (ignore-key mode), the fault that shaped a line,
//! and whether a webhook line was a deliberate duplicate or the last attempt
//! before giving up.
//!
//! # Invariants
//! - `seq` runs 1, 2, 3, ... without gaps: only the holder of the state lock
//!   stages lines, and a staged batch reaches the file in one `write_all`
//!   before anyone is answered or any effect becomes visible.
//! - After a failed write the log is poisoned: nothing more is written, so a
//!   gap or a line after a torn one can never appear; the server then answers
//!   `503` to everything until it is restarted (and recovers from the file).
//! - On open, a torn last line (no trailing newline: the process died in the
//!   middle of a write) is cut off; any other unreadable line is an error,
//!   never skipped.

use crate::fate::MessagePlan;
use courier_provider::wire::LogOp;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The fake's own fields on a log line (readers of the contract ignore them).
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Extra {
    /// `created`: hex fingerprint of (to, body, status_callback), so a `422`
    /// can still be decided after a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp: Option<String>,
    /// `created`: where this message's webhooks go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
    /// `created`: the message's planned life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<MessagePlan>,
    /// `created` and `faulted`, in ignore-key mode only: the send's number
    /// among its key's sends, from 0. Its fate and plan are drawn by it, and
    /// its presence tells a restart that the log was written in that mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u64>,
    /// The injected fault or the refusal reason behind this line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Cow<'static, str>>,
    /// `webhook`: a deliberate second delivery of an answered event.
    #[serde(default, skip_serializing_if = "is_false")]
    pub duplicate: bool,
    /// `webhook`: the last attempt; the provider gave up on this event.
    #[serde(default, skip_serializing_if = "is_false")]
    pub gave_up: bool,
    /// `webhook`: why no status code was received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    at: &'a str,
    #[serde(flatten)]
    op: &'a LogOp,
    #[serde(flatten)]
    extra: &'a Extra,
}

/// One line as read back on restart.
#[derive(Debug, Deserialize)]
pub(crate) struct LineIn {
    pub seq: u64,
    pub at: String,
    #[serde(flatten)]
    pub op: LogOp,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The log cannot be written; the provider refuses everything until restarted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the provider log cannot be written: {0}")]
pub(crate) struct LogWriteError(pub String);

/// Why a log could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogOpenError {
    #[error("cannot open the log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the log {path} is damaged at line {line}: {reason}")]
    Corrupt {
        path: PathBuf,
        line: u64,
        reason: String,
    },
}

/// What opening an existing log found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogOpened {
    /// Complete lines read back.
    pub lines: u64,
    /// Bytes of a torn last line that were cut off.
    pub torn_bytes: u64,
}

/// The single writer of the log file.
pub(crate) struct LogFile {
    file: File,
    buf: Vec<u8>,
    next_seq: u64,
    fsync: bool,
    poisoned: Option<String>,
    /// The last `seq` that reached the file, shared with observers.
    written: Arc<AtomicU64>,
}

impl LogFile {
    /// Opens (or creates) the log, cuts off a torn last line, and hands every
    /// complete line to `visit` in order. `seq` must run from 1 without gaps.
    pub fn open(
        path: &Path,
        fsync: bool,
        mut visit: impl FnMut(LineIn) -> Result<(), String>,
    ) -> Result<(LogFile, LogOpened), LogOpenError> {
        let io = |source| LogOpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 20, &file);
        let mut line = Vec::with_capacity(512);
        let mut good_bytes: u64 = 0;
        let mut lines: u64 = 0;
        let mut torn_bytes: u64 = 0;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(io)?;
            if n == 0 {
                break;
            }
            if line.last() != Some(&b'\n') {
                // The process died in the middle of this write.
                torn_bytes = n as u64;
                break;
            }
            let number = lines + 1;
            let corrupt = |reason: String| LogOpenError::Corrupt {
                path: path.to_path_buf(),
                line: number,
                reason,
            };
            let parsed: LineIn = serde_json::from_slice(&line[..n - 1])
                .map_err(|e| corrupt(format!("not a log line: {e}")))?;
            if parsed.seq != number {
                return Err(corrupt(format!(
                    "seq {} where {number} was expected",
                    parsed.seq
                )));
            }
            visit(parsed).map_err(corrupt)?;
            lines = number;
            good_bytes += n as u64;
        }
        drop(reader);
        if torn_bytes > 0 {
            file.set_len(good_bytes).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        Ok((
            LogFile {
                file,
                buf: Vec::with_capacity(64 * 1024),
                next_seq: lines + 1,
                fsync,
                poisoned: None,
                written: Arc::new(AtomicU64::new(lines)),
            },
            LogOpened { lines, torn_bytes },
        ))
    }

    /// The counter of lines that reached the file.
    pub fn written(&self) -> Arc<AtomicU64> {
        self.written.clone()
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Refuses every later write (the provider has stopped).
    pub fn close(&mut self) {
        self.buf.clear();
        self.poisoned
            .get_or_insert_with(|| "the provider has stopped".into());
    }

    /// Adds a line to the pending batch and returns its `seq`. Nothing is on
    /// disk until [`LogFile::commit`].
    pub fn stage(&mut self, at: &str, op: &LogOp, extra: &Extra) -> Result<u64, LogWriteError> {
        if let Some(why) = &self.poisoned {
            return Err(LogWriteError(why.clone()));
        }
        let seq = self.next_seq;
        let start = self.buf.len();
        let line = LineOut { seq, at, op, extra };
        if let Err(e) = serde_json::to_writer(&mut self.buf, &line) {
            self.buf.truncate(start);
            return Err(LogWriteError(format!("cannot encode a log line: {e}")));
        }
        self.buf.push(b'\n');
        self.next_seq += 1;
        Ok(seq)
    }

    /// Writes the pending batch in one `write_all` (and `fdatasync`s it when
    /// configured). A failure poisons the log.
    pub fn commit(&mut self) -> Result<(), LogWriteError> {
        if let Some(why) = &self.poisoned {
            return Err(LogWriteError(why.clone()));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let mut result = self.file.write_all(&self.buf);
        if result.is_ok() && self.fsync {
            result = self.file.sync_data();
        }
        self.buf.clear();
        match result {
            Ok(()) => {
                self.written.store(self.next_seq - 1, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                let why = e.to_string();
                self.poisoned = Some(why.clone());
                Err(LogWriteError(why))
            }
        }
    }

    /// Stages and commits one line.
    pub fn append(&mut self, at: &str, op: &LogOp, extra: &Extra) -> Result<u64, LogWriteError> {
        let seq = self.stage(at, op, extra)?;
        self.commit()?;
        Ok(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::Status;
    use courier_provider::wire::{LogEntry, SendResult};

    fn created(key: &str) -> LogOp {
        LogOp::Send {
            key: Some(key.into()),
            result: SendResult::Created,
            message_id: Some("msg_000001".into()),
        }
    }

    #[test]
    fn lines_carry_extras_that_contract_readers_ignore() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let (mut log, opened) = LogFile::open(&path, false, |_| Ok(())).unwrap();
        assert_eq!(opened, LogOpened::default());
        let extra = Extra {
            fp: Some("ab".into()),
            callback: Some("http://h/x".into()),
            plan: Some(MessagePlan {
                sent_ms: 5,
                final_status: Status::Failed,
                final_ms: 7,
                out_of_order: true,
            }),
            fault: Some("timeout_after_create".into()),
            ..Extra::default()
        };
        assert_eq!(
            log.append("2026-01-01T00:00:00.000Z", &created("k"), &extra),
            Ok(1)
        );
        assert_eq!(
            log.append(
                "2026-01-01T00:00:00.001Z",
                &created("k2"),
                &Extra::default()
            ),
            Ok(2)
        );
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        let entry: LogEntry = serde_json::from_str(first).unwrap();
        assert_eq!(entry.seq, 1);
        assert_eq!(entry.op, created("k"));
        let mut seen = Vec::new();
        let (log, opened) = LogFile::open(&path, false, |l| {
            seen.push(l);
            Ok(())
        })
        .unwrap();
        assert_eq!(opened.lines, 2);
        assert_eq!(seen[0].extra, extra);
        assert_eq!(seen[0].op, created("k"));
        assert_eq!(seen[1].extra, Extra::default());
        assert_eq!(log.next_seq, 3);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_and_seq_continues() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        let (mut log, _) = LogFile::open(&path, false, |_| Ok(())).unwrap();
        log.append("t", &created("k"), &Extra::default()).unwrap();
        drop(log);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"seq":2,"at":"t","op":"se"#).unwrap();
        drop(f);
        let (mut log, opened) = LogFile::open(&path, false, |_| Ok(())).unwrap();
        assert_eq!(
            opened,
            LogOpened {
                lines: 1,
                torn_bytes: 26
            }
        );
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        assert_eq!(log.append("t", &created("k2"), &Extra::default()), Ok(2));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        for (i, line) in text.lines().enumerate() {
            assert_eq!(
                serde_json::from_str::<LogEntry>(line).unwrap().seq,
                i as u64 + 1
            );
        }
    }

    #[test]
    fn damaged_or_gapped_logs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        std::fs::write(&path, "{\"seq\":1,\"at\":\"t\",\"op\":\"lookup\",\"key\":\"k\",\"result\":\"found\"}\nnot json\n").unwrap();
        match LogFile::open(&path, false, |_| Ok(())) {
            Err(LogOpenError::Corrupt { line: 2, .. }) => {}
            other => panic!("{:?}", other.map(|(_, o)| o)),
        }
        std::fs::write(
            &path,
            "{\"seq\":2,\"at\":\"t\",\"op\":\"lookup\",\"key\":\"k\",\"result\":\"found\"}\n",
        )
        .unwrap();
        match LogFile::open(&path, false, |_| Ok(())) {
            Err(LogOpenError::Corrupt {
                line: 1, reason, ..
            }) => assert!(reason.contains("seq 2")),
            other => panic!("{:?}", other.map(|(_, o)| o)),
        }
    }
}
