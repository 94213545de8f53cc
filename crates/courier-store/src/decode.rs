//! Columns decoded into courier-core's types.

use crate::error::StoreError;
use courier_core::{ActionState, Status};
use std::str::FromStr;
use tokio_postgres::Row;

pub(crate) fn status_col(row: &Row, idx: &str) -> Result<Status, StoreError> {
    let s: String = row.get(idx);
    Status::from_str(&s).map_err(|e| StoreError::Query(e.to_string()))
}

pub(crate) fn opt_status_col(row: &Row, idx: &str) -> Result<Option<Status>, StoreError> {
    let s: Option<String> = row.get(idx);
    s.map(|s| Status::from_str(&s).map_err(|e| StoreError::Query(e.to_string())))
        .transpose()
}

pub(crate) fn state_col(row: &Row, idx: &str) -> Result<ActionState, StoreError> {
    parse_state(row.get(idx))
}

pub(crate) fn parse_state(s: &str) -> Result<ActionState, StoreError> {
    ActionState::from_str(s).map_err(|e| StoreError::Query(e.to_string()))
}

/// The count of the state named `s` in counts by state (0 if absent).
pub(crate) fn state_count(by_state: &[(ActionState, i64)], s: &str) -> i64 {
    by_state
        .iter()
        .find(|(k, _)| k.as_str() == s)
        .map_or(0, |(_, v)| *v)
}
