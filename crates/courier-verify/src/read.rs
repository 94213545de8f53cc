//! Reading a provider's log and the courier's expectations.
//!
//! A log line is one JSON object ending in `\n`. The provider writes and
//! flushes each line before it answers, so a crash can leave at most the last
//! line half-written: an unterminated final line that does not parse is a torn
//! write, skipped with a warning. Any other line that does not parse is an
//! error naming its line number, because a verdict over a log we could not
//! fully read would be a guess.
//!
//! # Invariants
//! - Only the final, unterminated line may be skipped as torn; a malformed
//!   line that ends in `\n` is always an error.
//! - No line longer than [`ReadLimits::line_bytes_max`] is buffered, and no
//!   more than [`ReadLimits::lines_max`] lines are read.
//! - Expectations name each key and each action at most once, and each
//!   action ends at most one way: refused, cancelled, expired or held as
//!   unknown ([`validate_expectations`]).

use crate::VerifyError;
use chrono::{DateTime, Utc};
use courier_core::{validate_key, Status};
use courier_provider::wire::LogEntry;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::HashSet;
use std::io::{BufRead, Read};

/// Bounds on what the reader accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadLimits {
    /// Longest log line, newline excluded. Contract lines are a few hundred
    /// bytes (keys are at most 255 characters).
    pub line_bytes_max: usize,
    /// Most lines read from one log.
    pub lines_max: u64,
    /// Largest expectations file.
    pub expectations_bytes_max: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            line_bytes_max: 64 * 1024,
            lines_max: 20_000_000,
            expectations_bytes_max: 256 * 1024 * 1024,
        }
    }
}

/// A whole log in memory, as [`read_log`] returns it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderLog {
    pub entries: Vec<LogEntry>,
    /// The line number of a torn (unterminated and unparsable) final line
    /// that was skipped, if any.
    pub torn_final_line: Option<u64>,
    /// Human-readable notes about what was skipped.
    pub warnings: Vec<String>,
}

/// Reads a whole log with the default [`ReadLimits`].
pub fn read_log(r: impl BufRead) -> Result<ProviderLog, VerifyError> {
    read_log_with(r, &ReadLimits::default())
}

/// Reads a whole log with the given limits.
pub fn read_log_with(r: impl BufRead, limits: &ReadLimits) -> Result<ProviderLog, VerifyError> {
    let mut reader = LogReader::new(r, limits.clone());
    let mut entries = Vec::new();
    while let Some(entry) = reader.next_entry()? {
        entries.push(entry);
    }
    Ok(ProviderLog {
        entries,
        torn_final_line: reader.torn_final_line(),
        warnings: reader.warnings(),
    })
}

/// Reads log entries one at a time, so a verifier can stream a log of any
/// length in memory proportional to its number of keys.
pub struct LogReader<R> {
    r: R,
    limits: ReadLimits,
    buf: Vec<u8>,
    /// Physical lines read so far (blank lines included).
    line: u64,
    blank_lines: u64,
    torn: Option<(u64, usize)>,
    done: bool,
}

impl<R: BufRead> LogReader<R> {
    pub fn new(r: R, limits: ReadLimits) -> Self {
        LogReader {
            r,
            limits,
            buf: Vec::new(),
            line: 0,
            blank_lines: 0,
            torn: None,
            done: false,
        }
    }

    /// The next entry, `None` at the end of the log.
    pub fn next_entry(&mut self) -> Result<Option<LogEntry>, VerifyError> {
        while !self.done {
            self.buf.clear();
            let line = self.line + 1;
            // Read at most one byte more than a full line plus its newline
            // would need, so an endless line is never buffered whole.
            let cap = self.limits.line_bytes_max as u64 + 1;
            let n = (&mut self.r)
                .take(cap)
                .read_until(b'\n', &mut self.buf)
                .map_err(|source| VerifyError::Io { line, source })?;
            if n == 0 {
                self.done = true;
                break;
            }
            self.line = line;
            if line > self.limits.lines_max {
                return Err(VerifyError::TooManyLines {
                    lines_max: self.limits.lines_max,
                });
            }
            let terminated = self.buf.last() == Some(&b'\n');
            if !terminated && n as u64 == cap {
                return Err(VerifyError::LineTooLong {
                    line,
                    line_bytes_max: self.limits.line_bytes_max,
                });
            }
            let parsed = match std::str::from_utf8(&self.buf) {
                Ok(text) if text.trim().is_empty() => {
                    self.blank_lines += 1;
                    continue;
                }
                Ok(text) => serde_json::from_str::<LogEntry>(text).map_err(|e| e.to_string()),
                Err(e) => Err(format!("not UTF-8: {e}")),
            };
            match parsed {
                Ok(entry) => return Ok(Some(entry)),
                // Without a newline this is the last line: a torn write.
                Err(_) if !terminated => {
                    self.torn = Some((line, n));
                    self.done = true;
                }
                Err(message) => return Err(VerifyError::Malformed { line, message }),
            }
        }
        Ok(None)
    }

    /// The line number of a skipped torn final line, once the end is reached.
    pub fn torn_final_line(&self) -> Option<u64> {
        self.torn.map(|(line, _)| line)
    }

    /// Lines read so far.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// Notes about skipped lines, for the report.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((line, bytes)) = self.torn {
            out.push(format!(
                "the final line (line {line}, {bytes} bytes) has no newline and does not parse: \
                 a torn write, skipped"
            ));
        }
        if self.blank_lines > 0 {
            out.push(format!("{} blank lines skipped", self.blank_lines));
        }
        out
    }
}

/// What the courier's database says about one action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    /// The action's idempotency key, as sent to the provider.
    pub key: String,
    /// The action's id in the courier's store (a JSON string or integer).
    #[serde(deserialize_with = "id_text")]
    pub action_id: String,
    /// The courier's final status of the message (`delivered` or `failed`),
    /// `None` when the courier has none. Compared with the provider's final
    /// status only for actions that were not refused.
    #[serde(default)]
    pub courier_final: Option<Status>,
    /// The courier marked the action failed because the provider definitely
    /// refused it (a 400 or 422): no effect is expected for it.
    #[serde(default)]
    pub refused: bool,
    /// The action's `not_before` (RFC 3339), when it had one: no `send`
    /// line of its key may be earlier.
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// The action's `expires_at` (RFC 3339), when it had one: no `send`
    /// line of its key may be later, beyond
    /// [`EXPIRY_CLOCK_MARGIN_MS`](crate::EXPIRY_CLOCK_MARGIN_MS).
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// The courier cancelled the action before any worker claimed it: no
    /// effect is expected for it.
    #[serde(default)]
    pub cancelled: bool,
    /// The courier ended the action expired: no effect is expected for it,
    /// and one that the provider has anyway is judged like any action's
    /// (its outcomes compared).
    #[serde(default)]
    pub expired: bool,
    /// The courier holds the action as `unknown`: it does not know whether
    /// the provider made the effect, and lists the action for an operator.
    /// Its `courier_final` is not compared with the provider's final status
    /// (the courier has no outcome to compare); whether it may have no
    /// effect depends on the [`Promise`](crate::Promise).
    #[serde(default)]
    pub unknown: bool,
}

fn id_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Number(i64),
    }
    Ok(match Id::deserialize(d)? {
        Id::Text(s) => s,
        Id::Number(n) => n.to_string(),
    })
}

/// Reads a JSON array of [`Expectation`] and validates it.
pub fn read_expectations(
    r: impl Read,
    limits: &ReadLimits,
) -> Result<Vec<Expectation>, VerifyError> {
    let mut bytes = Vec::new();
    r.take(limits.expectations_bytes_max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| VerifyError::Expectations(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > limits.expectations_bytes_max {
        return Err(VerifyError::Expectations(format!(
            "larger than {} bytes",
            limits.expectations_bytes_max
        )));
    }
    let expected: Vec<Expectation> = serde_json::from_slice(&bytes)
        .map_err(|e| VerifyError::Expectations(format!("not a JSON array of expectations: {e}")))?;
    validate_expectations(&expected)?;
    Ok(expected)
}

/// Checks that every key is a contract key, that no key or action id
/// appears twice, that each courier status given is a final one, that at
/// most one of `refused`, `cancelled`, `expired` and `unknown` is set, and
/// that no `expires_at` is before its `not_before`.
pub fn validate_expectations(expected: &[Expectation]) -> Result<(), VerifyError> {
    let mut keys = HashSet::with_capacity(expected.len());
    let mut ids = HashSet::with_capacity(expected.len());
    for (i, e) in expected.iter().enumerate() {
        let fail = |m: String| Err(VerifyError::Expectations(format!("entry {i}: {m}")));
        if let Err(err) = validate_key(&e.key) {
            return fail(format!("key {:?}: {err}", e.key));
        }
        if e.action_id.is_empty() {
            return fail("action_id is empty".to_string());
        }
        if let Some(s) = e.courier_final {
            if !s.is_final() {
                return fail(format!(
                    "courier_final is {s}, which is not final (give delivered, failed or null)"
                ));
            }
        }
        let endings = [e.refused, e.cancelled, e.expired, e.unknown];
        if endings.iter().filter(|set| **set).count() > 1 {
            return fail(
                "more than one of refused, cancelled, expired and unknown is set \
                 (an action ends one way)"
                    .to_string(),
            );
        }
        if let (Some(nb), Some(ea)) = (e.not_before, e.expires_at) {
            if ea < nb {
                return fail(format!("expires_at {ea} is before not_before {nb}"));
            }
        }
        if !keys.insert(e.key.as_str()) {
            return fail(format!("key {:?} appears more than once", e.key));
        }
        if !ids.insert(e.action_id.as_str()) {
            return fail(format!(
                "action_id {:?} appears more than once",
                e.action_id
            ));
        }
    }
    Ok(())
}
