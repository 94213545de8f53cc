//! The judge: the courier's database in the verifier's terms, and the
//! verdict on a provider's log (the verifier itself is `courier-verify`).
//!
//! Demo, chaos, `courier verify --database-url` and the worker's end-to-end
//! tests all judge through here, so there is one mapping from the store's
//! outcomes to [`Expectation`]s.

use crate::RigError;
use courier_core::ActionState;
use courier_store::PgStore;
use courier_verify::{verify_reader_under, Expectation, Promise, ReadLimits, Report};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

/// What the courier's database says about each action: its key, id, final
/// message status, whether the provider refused it (or an operator resolved
/// it as not sent: both end `failed`, and expect no effect), whether it was
/// cancelled, expired or is held `unknown`, and its `not_before` and
/// `expires_at`. Only reads.
pub async fn expectations(store: &PgStore) -> Result<Vec<Expectation>, RigError> {
    Ok(store
        .action_outcomes()
        .await?
        .into_iter()
        .map(|o| Expectation {
            key: courier_core::action_key(&o.uid),
            action_id: o.action_id.to_string(),
            courier_final: o.final_status,
            refused: o.state == ActionState::Failed,
            not_before: o.not_before,
            expires_at: o.expires_at,
            cancelled: o.state == ActionState::Cancelled,
            expired: o.state == ActionState::Expired,
            unknown: o.state == ActionState::Unknown,
        })
        .collect())
}

/// Verifies a provider log against the courier's database, by the
/// contract's promise: exactly one effect per action.
pub async fn verify_against(store: &PgStore, log: &Path) -> Result<Report, RigError> {
    verify_against_under(store, log, Promise::ExactlyOnce).await
}

/// Verifies a provider log against the courier's database, by `promise`
/// (a provider's guarantee tier names its own: `courier_core::Tier::promise`).
pub async fn verify_against_under(
    store: &PgStore,
    log: &Path,
    promise: Promise,
) -> Result<Report, RigError> {
    let expected = expectations(store).await?;
    let file = std::fs::File::open(log).map_err(|e| RigError::io(log, e))?;
    verify_reader_under(
        std::io::BufReader::new(file),
        &ReadLimits::default(),
        Some(&expected),
        promise,
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

/// The verifier's promise for a provider's tier.
pub fn promise_of(tier: courier_core::Tier) -> Promise {
    tier.promise()
        .parse()
        .expect("every tier names one of the verifier's promises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tier_names_a_promise_the_verifier_knows() {
        use courier_core::Tier;
        let got: Vec<Promise> = Tier::ALL.into_iter().map(promise_of).collect();
        assert_eq!(
            got,
            [
                Promise::ExactlyOnce,
                Promise::ExactlyOnceByResend,
                Promise::ExactlyOnce,
                Promise::AtMostOnce,
                Promise::AtLeastOnce
            ]
        );
    }

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
