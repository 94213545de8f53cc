//! courier-verify: judges exactly-once claims from a provider's own log.
//!
//! The log (`docs/provider-api.md`, "The provider's own log") is the ground
//! truth, not the courier's database, and any provider that follows the
//! contract writes one, so this module reads logs it did not write: unknown
//! fields are ignored, and nothing here depends on how our fake provider
//! happens to phrase things beyond the contract.
//!
//! The work is split three ways:
//! - [`read`]: turns bytes into [`LogEntry`] values ([`read_log`], or
//!   [`LogReader`] to stream) and reads [`Expectation`]s from JSON.
//! - [`check`]: a pure fold over entries ([`Verifier`], or [`verify`] for a
//!   slice) that keeps one small state per key, not the whole log.
//! - [`report`]: the [`Report`], its table and its JSON form.
//!
//! # Invariants
//! - Each check counts something a human can recount by hand from the log:
//!   `created` send lines per key, `send` lines per key with no `lookup` of
//!   that key since the previous `send`, the last `status` line with
//!   `final: true` per key, and entries whose `seq` is not the previous one
//!   plus one.
//! - With the courier's expectations, the intent of each action is checked
//!   too: a cancelled action has no effect, and no `send` line of a key is
//!   earlier than its action's `not_before` or later than its `expires_at`
//!   plus [`EXPIRY_CLOCK_MARGIN_MS`] (the `at` of each `send` line against
//!   the expectation's times, at the precision of that `at`). An action
//!   the courier ended expired expects no effect; one it has anyway is
//!   judged like any action.
//! - The verifier can fail: every check has a test with a hand-made log that
//!   breaks it and the exact count it must report
//!   (`tests/verify.rs`, `tests/verify_props.rs`).
//! - A check that needs the courier's database is reported as such when the
//!   expectations are absent; it never silently passes.
//! - Reading is bounded: [`ReadLimits`] caps the bytes of one line and the
//!   number of lines, and samples are capped at [`SAMPLES_PER_CHECK_MAX`].

pub mod check;
pub mod read;
pub mod report;

pub use check::{verify, Verifier, EXPIRY_CLOCK_MARGIN_MS};
pub use read::{
    read_expectations, read_log, read_log_with, validate_expectations, Expectation, LogReader,
    ProviderLog, ReadLimits,
};
pub use report::{Check, Report, Stats, WithVerdict, NEEDS_DATABASE, SAMPLES_PER_CHECK_MAX};

/// Why a log or an expectations file could not be read. Every variant means
/// the same thing to the caller: the input is unusable, so no verdict can be
/// given (the CLI exits with status 2).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read line {line}: {source}")]
    Io {
        line: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("line {line} is not a valid log line: {message}")]
    Malformed { line: u64, message: String },
    #[error("line {line} is longer than {line_bytes_max} bytes")]
    LineTooLong { line: u64, line_bytes_max: usize },
    #[error("the log has more than {lines_max} lines")]
    TooManyLines { lines_max: u64 },
    #[error("invalid expectations: {0}")]
    Expectations(String),
}

/// Reads a whole log and verifies it in one pass, without keeping the
/// entries in memory: the memory used grows with the number of keys, not
/// with the number of lines.
pub fn verify_reader(
    r: impl std::io::BufRead,
    limits: &ReadLimits,
    expected: Option<&[Expectation]>,
) -> Result<Report, VerifyError> {
    let mut reader = LogReader::new(r, limits.clone());
    let mut verifier = Verifier::new();
    while let Some(entry) = reader.next_entry()? {
        verifier.observe(&entry);
    }
    let mut report = verifier.finish(expected);
    report.warnings.extend(reader.warnings());
    Ok(report)
}

/// Verifies a log read by [`read_log`], carrying its reading warnings (such
/// as a torn final line) into the report.
pub fn verify_log(log: &ProviderLog, expected: Option<&[Expectation]>) -> Report {
    let mut report = verify(&log.entries, expected);
    report.warnings.extend(log.warnings.iter().cloned());
    report
}
