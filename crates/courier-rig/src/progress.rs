//! Progress bars, one per action state, drawn by indicatif on stderr (which
//! hides them when stderr is not a terminal).

use courier_core::ActionState;
use courier_store::{PgStore, Summary};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::time::{Duration, Instant};

/// The action states the bars show, in the order an action passes them.
fn states() -> impl Iterator<Item = &'static str> {
    ActionState::ALL.into_iter().map(ActionState::as_str)
}

/// Actions no worker will touch again: final (done, failed, cancelled,
/// expired) or held unknown.
pub fn at_rest_count(s: &Summary) -> i64 {
    s.by_state
        .iter()
        .filter(|(state, _)| state.is_at_rest())
        .map(|(_, n)| n)
        .sum()
}

/// Progress bars, one per action state.
pub struct Bars {
    bars: Vec<(&'static str, ProgressBar)>,
}

impl Bars {
    /// Adds one bar per state to `mp`.
    pub fn add_to(mp: &MultiProgress, total: usize) -> Bars {
        // The counts come first and the bar takes what width is left, so a
        // narrow terminal still shows every count.
        let style =
            ProgressStyle::with_template("{prefix:>10} {pos:>6}/{len:<6} {wide_bar:.cyan/blue}")
                .expect("static template");
        let bars = states()
            .map(|s| {
                let b = mp.add(ProgressBar::new(total as u64));
                b.set_style(style.clone());
                b.set_prefix(s);
                (s, b)
            })
            .collect();
        Bars { bars }
    }

    pub fn update(&self, s: &Summary) {
        for (state, bar) in &self.bars {
            bar.set_position(s.state(state) as u64);
        }
    }

    /// Leaves every bar at its last count. (indicatif's `finish` would
    /// move each bar to its length: "failed 2000/2000" after no failure.)
    pub fn finish(&self) {
        for (_, b) in &self.bars {
            b.abandon();
        }
    }

    /// The counts as one plain line, for output that is not a terminal
    /// (where indicatif draws nothing) and for the record.
    pub fn line(s: &Summary) -> String {
        states()
            .map(|st| format!("{st} {}", s.state(st)))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// A one-line spinner under the bars, for what the run is doing.
pub fn status_line(mp: &MultiProgress, prefix: &'static str) -> ProgressBar {
    let bar = mp.add(ProgressBar::new_spinner());
    bar.set_style(ProgressStyle::with_template("{prefix:>10} {msg}").expect("static template"));
    bar.set_prefix(prefix);
    bar
}

/// Shows progress by state until every action is at rest (final, or held
/// unknown; or the time is up); returns whether they all are, and the last
/// counts read.
pub async fn watch(store: &PgStore, total: usize, timeout: Duration) -> (bool, Option<Summary>) {
    let mp = MultiProgress::new();
    let bars = Bars::add_to(&mp, total);
    let deadline = Instant::now() + timeout;
    let mut finished = false;
    let mut last = None;
    while Instant::now() < deadline {
        match store.summary(1800).await {
            Ok(s) => {
                bars.update(&s);
                let at_rest = at_rest_count(&s);
                finished = s.total() as usize >= total && at_rest as usize >= total;
                last = Some(s);
                if finished {
                    break;
                }
            }
            Err(e) => tracing::warn!(error = %e, "progress: cannot read the store"),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bars.finish();
    (finished, last)
}
