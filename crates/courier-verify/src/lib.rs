//! courier-verify: judges a courier's promise (exactly once, at most once,
//! at least once) from a provider's own log.
//!
//! The log (`docs/provider-api.md`, "The provider's own log") is the ground
//! truth, not the courier's database, and any provider that follows the
//! contract writes one, so this module reads logs it did not write: unknown
//! fields are ignored, and nothing here depends on how our fake provider
//! happens to phrase things beyond the contract.
//!
//! The work is split four ways:
//! - [`read`]: turns bytes into [`LogEntry`](courier_provider::wire::LogEntry)
//!   values ([`read_log`], or [`LogReader`] to stream) and reads
//!   [`Expectation`]s from JSON.
//! - [`promise`]: the [`Promise`] a log is judged against, and which counts
//!   break it.
//! - [`check`]: a pure fold over entries ([`Verifier`], or [`verify`] for a
//!   slice) that keeps one small state per key, not the whole log.
//! - [`report`]: the [`Report`], its table and its JSON form.
//!
//! Each entry point judges [`Promise::ExactlyOnce`]; its `_under` twin
//! ([`verify_under`], [`verify_reader_under`], [`verify_log_under`],
//! [`Verifier::with_promise`]) takes the promise.
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
//! - The verdict follows the promise, and the report names it
//!   ([`Report::promise`]). Under every promise these are violations: an
//!   action with no effect that the courier did not mark refused, cancelled
//!   or expired (nor, where the promise allows it, holds as unknown),
//!   effects of refused or cancelled actions, sends outside an
//!   action's window, effects for keys of no action, gaps in `seq`, and
//!   outcomes that differ (but for actions the courier holds as unknown,
//!   whose outcome it does not know, and duplicated actions under
//!   `at-least-once`). Besides:
//!   - `exactly-once`: more than one effect, no effect on an action held as
//!     unknown, and a resend with no lookup since the previous send are
//!     violations.
//!   - `exactly-once-by-resend`: the same, but resends with no lookup are by
//!     design (the provider deduplicates by key) and only counted.
//!   - `at-most-once`: more than one effect and a resend with no lookup are
//!     violations; an action the courier holds as unknown may have no effect
//!     or one (each counted), and an action with no effect must be one it
//!     holds as unknown.
//!   - `at-least-once`: an action the courier holds as unknown may have no
//!     effect; duplicates (actions and extra effects) and resends with no
//!     lookup are counted, never violations.
//! - The verifier can fail: every check has a test with a hand-made log that
//!   breaks it and the exact count it must report
//!   (`tests/verify.rs`, `tests/verify_props.rs`), and every promise a log
//!   that keeps it and logs that break it (`tests/verify_promises.rs`).
//! - A check that needs the courier's database is reported as such when the
//!   expectations are absent; it never silently passes.
//! - Reading is bounded: [`ReadLimits`] caps the bytes of one line and the
//!   number of lines, and samples are capped at [`SAMPLES_PER_CHECK_MAX`].

pub mod check;
pub mod promise;
pub mod read;
pub mod report;

pub use check::{verify, verify_under, Verifier, EXPIRY_CLOCK_MARGIN_MS};
pub use promise::{Promise, UnknownPromise};
pub use read::{
    read_expectations, read_log, read_log_with, validate_expectations, Expectation, LogReader,
    ProviderLog, ReadLimits,
};
pub use report::{
    Check, Duplicates, Report, Stats, UnknownHeld, WithVerdict, NEEDS_DATABASE,
    SAMPLES_PER_CHECK_MAX,
};

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

/// Reads a whole log and verifies it in one pass against
/// [`Promise::ExactlyOnce`], without keeping the entries in memory: the
/// memory used grows with the number of keys, not with the number of lines.
pub fn verify_reader(
    r: impl std::io::BufRead,
    limits: &ReadLimits,
    expected: Option<&[Expectation]>,
) -> Result<Report, VerifyError> {
    verify_reader_under(r, limits, expected, Promise::ExactlyOnce)
}

/// [`verify_reader`] against the given promise.
pub fn verify_reader_under(
    r: impl std::io::BufRead,
    limits: &ReadLimits,
    expected: Option<&[Expectation]>,
    promise: Promise,
) -> Result<Report, VerifyError> {
    let mut reader = LogReader::new(r, limits.clone());
    let mut verifier = Verifier::with_promise(promise);
    while let Some(entry) = reader.next_entry()? {
        verifier.observe(&entry);
    }
    let mut report = verifier.finish(expected);
    report.warnings.extend(reader.warnings());
    Ok(report)
}

/// Verifies a log read by [`read_log`] against [`Promise::ExactlyOnce`],
/// carrying its reading warnings (such as a torn final line) into the
/// report.
pub fn verify_log(log: &ProviderLog, expected: Option<&[Expectation]>) -> Report {
    verify_log_under(log, expected, Promise::ExactlyOnce)
}

/// [`verify_log`] against the given promise.
pub fn verify_log_under(
    log: &ProviderLog,
    expected: Option<&[Expectation]>,
    promise: Promise,
) -> Report {
    let mut report = verify_under(&log.entries, expected, promise);
    report.warnings.extend(log.warnings.iter().cloned());
    report
}
