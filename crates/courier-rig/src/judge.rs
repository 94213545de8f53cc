//! The judge: the courier's database in the verifier's terms, and the
//! verdict on a provider's log (the verifier itself is `courier-verify`).
//!
//! Demo, chaos, `courier verify --database-url` and the worker's end-to-end
//! tests all judge through here, so there is one mapping from the store's
//! outcomes to [`Expectation`]s.

use crate::RigError;
use chrono::{DateTime, Utc};
use courier_core::ActionState;
use courier_store::PgStore;
use courier_verify::{verify_reader, Expectation, ReadLimits, Report};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

/// An action's `not_before` and `expires_at`.
type Times = (Option<DateTime<Utc>>, Option<DateTime<Utc>>);

/// Reads of single actions in flight at once while the times are read.
const TIMES_READS_IN_FLIGHT_MAX: usize = 8;

/// What the courier's database says about each action: its key, id, final
/// message status, whether the provider refused it, whether it was
/// cancelled or expired, and its `not_before` and `expires_at`. Only reads.
///
/// The times come from one read per action (`PgStore::action_get`), as
/// [`courier_store::ActionOutcome`] does not carry them.
pub async fn expectations(store: &PgStore) -> Result<Vec<Expectation>, RigError> {
    let outcomes = store.action_outcomes().await?;
    let times: Vec<Times> =
        futures::stream::iter(outcomes.iter().map(|o| action_times(store, o.action_id)))
            .buffered(TIMES_READS_IN_FLIGHT_MAX)
            .try_collect()
            .await?;
    Ok(outcomes
        .into_iter()
        .zip(times)
        .map(|(o, (not_before, expires_at))| Expectation {
            key: courier_core::action_key(&o.uid),
            action_id: o.action_id.to_string(),
            courier_final: o.final_status,
            refused: o.state == ActionState::Failed,
            not_before,
            expires_at,
            cancelled: o.state == ActionState::Cancelled,
            expired: o.state == ActionState::Expired,
        })
        .collect())
}

/// An action's `not_before` and `expires_at`; none for an action pruned
/// since the outcomes were read.
async fn action_times(store: &PgStore, id: i64) -> Result<Times, RigError> {
    let Some(view) = store.action_get(id).await? else {
        return Ok((None, None));
    };
    let not_before = time(id, "not_before", view.not_before.as_deref())?;
    let expires_at = time(id, "expires_at", view.expires_at.as_deref())?;
    Ok((not_before, expires_at))
}

/// The store's RFC 3339 text of an action's time, as a time.
fn time(id: i64, field: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, RigError> {
    text.map(|t| {
        DateTime::parse_from_rfc3339(t)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| RigError::Expectations(format!("action {id}: {field} {t:?}: {e}")))
    })
    .transpose()
}

/// Verifies a provider log against the courier's database.
pub async fn verify_against(store: &PgStore, log: &Path) -> Result<Report, RigError> {
    let expected = expectations(store).await?;
    let file = std::fs::File::open(log).map_err(|e| RigError::io(log, e))?;
    verify_reader(
        std::io::BufReader::new(file),
        &ReadLimits::default(),
        Some(&expected),
    )
    .map_err(|e| RigError::Verify {
        path: log.to_path_buf(),
        detail: e.to_string(),
    })
}

/// Send lines after the first, per key: the resends the run provoked.
pub fn resends(log: &Path) -> Result<u64, RigError> {
    let f = std::fs::File::open(log).map_err(|e| RigError::io(log, e))?;
    let mut keys = HashSet::new();
    let mut sends = 0u64;
    for line in std::io::BufReader::new(f).lines() {
        let line = line.map_err(|e| RigError::io(log, e))?;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if v["op"] == "send" {
            if let Some(k) = v["key"].as_str() {
                sends += 1;
                keys.insert(k.to_string());
            }
        }
    }
    Ok(sends - keys.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resends_count_send_lines_after_the_first_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.jsonl");
        let lines = [
            r#"{"seq":1,"op":"send","key":"a","result":"created"}"#,
            r#"{"seq":2,"op":"send","key":"a","result":"replayed"}"#,
            r#"{"seq":3,"op":"lookup","key":"b","result":"not_found"}"#,
            r#"{"seq":4,"op":"send","key":"b","result":"created"}"#,
            r#"{"seq":5,"op":"send","key":"a","result":"replayed"}"#,
            "not json",
        ];
        std::fs::write(&log, lines.join("\n")).unwrap();
        assert_eq!(resends(&log).unwrap(), 2);
        let missing = resends(&dir.path().join("none.jsonl")).unwrap_err();
        assert!(matches!(missing, RigError::Io { .. }), "{missing}");
    }
}
