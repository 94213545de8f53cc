//! [`drain`]: the one wait of a benchmark for its work to be done, always
//! with a deadline.

use crate::BenchError;
use std::time::{Duration, Instant};

/// How far the work is: `done` of `total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    pub done: u64,
    pub total: u64,
}

/// Asks `progress` every `every` until it reports everything done, and
/// answers when that was seen; past `limit` it gives up with a
/// [`BenchError::Timeout`] naming `what` and how far the work got.
pub(crate) async fn drain(
    what: &str,
    limit: Duration,
    every: Duration,
    mut progress: impl AsyncFnMut() -> Result<Progress, BenchError>,
) -> Result<Instant, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        let p = progress().await?;
        if p.done >= p.total {
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Timeout {
                what: what.to_string(),
                limit,
                detail: format!("{} of {} done", p.done, p.total),
            });
        }
        tokio::time::sleep(every).await;
    }
}
