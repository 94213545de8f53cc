//! The failover run's faults and its two extra rows: each HA fault applied
//! to the cluster and confirmed another way (the killed process gone, a
//! leader on a later timeline), the actions' states read from the primary
//! before and after it, and the client-side history checked at the end.
//!
//! # Invariants
//! - A failover counts only once a running leader on a later timeline is
//!   seen; a postmaster kill counts as a restart only once the same node
//!   leads again on the same timeline with a new postmaster.
//! - Before each fault the cluster is healthy again (every node running,
//!   a synchronous standby when synchronous), so every fault starts from a
//!   primary whose commits are on a standby.

use crate::ha::faults::Leader;
use crate::ha::{procs, HaCluster};
use crate::load::Acked;
use crate::plan::{FailoverCounts, FaultKind};
use crate::RigError;
use courier_core::ActionState;
use courier_store::{ActionOutcome, PgStore};
use nix::sys::signal::Signal;
use serde::Serialize;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long the woken old primary is tried with writes after a pause.
pub const WOKEN_PROBE_S: u64 = 5;
/// How long the negative control lets writes pile up with the primary's
/// WAL senders stopped.
pub const LOSSY_WINDOW_MS: u64 = 3_000;
/// How long the store may take to answer again after a failover.
pub const STORE_BACK_S: u64 = 60;

/// The kinds of failover the proof needs, in the order of `planned`.
const KINDS: [&str; 3] = ["node death", "pause", "switchover"];

/// What the failover run did to the cluster, and what it found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct FailoverDone {
    /// Node deaths, pauses and switchovers planned.
    pub planned: [usize; 3],
    pub node_deaths: usize,
    pub pauses: usize,
    pub switchovers: usize,
    /// Node deaths of the negative control (WAL senders stopped first).
    pub lossy_deaths: usize,
    /// Postmaster SIGKILLs Patroni restarted in place (not failovers: the
    /// same node keeps the leader key, though its promotion after crash
    /// recovery starts a new timeline).
    pub restarts: usize,
    /// The last timeline a leader ran on (the cluster starts on 1).
    pub timeline: u32,
    /// From each fault to a running leader on a later timeline, summed.
    pub no_primary_ms: u64,
    /// The longest of those.
    pub no_primary_max_ms: u64,
    /// From each postmaster kill to the same node leading again.
    pub restart_ms: u64,
    /// How long the run loop saw the cluster unhealthy (a member down or
    /// rejoining, or no synchronous standby when synchronous), summed.
    pub unhealthy_ms: u64,
    /// Writes the old primary acknowledged after it woke from a pause.
    pub woken_writes: usize,
    /// Actions whose state or final status went backwards across a failover.
    pub went_backwards: usize,
    /// Acknowledged enqueues missing from the final primary (set at the end).
    pub acked_missing: usize,
    pub acked: usize,
}

impl FailoverDone {
    pub fn failovers(&self) -> usize {
        self.node_deaths + self.pauses + self.switchovers + self.lossy_deaths
    }

    /// Adds a span the cluster was seen unhealthy.
    pub fn unhealthy(&mut self, span: Duration) {
        self.unhealthy_ms += span.as_millis() as u64;
    }

    /// The run's plan: node deaths, pauses and switchovers asked for.
    pub fn planned(counts: &FailoverCounts) -> Self {
        FailoverDone {
            planned: [counts.node_deaths, counts.pauses, counts.switchovers],
            ..Self::default()
        }
    }

    /// The kinds the proof needs that the plan held and the run did not do.
    pub fn kinds_missing(&self) -> Vec<&'static str> {
        let done = [self.node_deaths, self.pauses, self.switchovers];
        (0..3)
            .filter(|k| self.planned[*k] > 0 && done[*k] == 0)
            .map(|k| KINDS[k])
            .collect()
    }

    /// The kinds the proof needs that the plan left out (a short run, or
    /// the negative control): such a run is not the whole proof.
    pub fn kinds_unplanned(&self) -> Vec<&'static str> {
        (0..3)
            .filter(|k| self.planned[*k] == 0)
            .map(|k| KINDS[k])
            .collect()
    }

    fn failed_over(&mut self, took: Duration, timeline: u32) {
        let ms = took.as_millis() as u64;
        self.no_primary_ms += ms;
        self.no_primary_max_ms = self.no_primary_max_ms.max(ms);
        self.timeline = self.timeline.max(timeline);
    }
}

/// An action's place in its life: a later rank never returns to an earlier one.
fn rank(s: ActionState) -> u8 {
    match s {
        ActionState::Scheduled => 0,
        ActionState::Pending => 1,
        ActionState::Claimed => 2,
        // Held unknown, it moves on to dispatched or to an end.
        ActionState::Dispatched | ActionState::Unknown => 3,
        ActionState::Done | ActionState::Failed | ActionState::Cancelled | ActionState::Expired => {
            4
        }
    }
}

/// The actions, by id, as the primary has them.
pub type Snapshot = HashMap<i64, ActionOutcome>;

async fn snapshot(store: &PgStore) -> Result<Snapshot, RigError> {
    let t0 = Instant::now();
    loop {
        match store.action_outcomes().await {
            Ok(v) => return Ok(v.into_iter().map(|o| (o.action_id, o)).collect()),
            Err(e) if t0.elapsed() > Duration::from_secs(STORE_BACK_S) => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Actions of `before` that are missing from `after`, moved to an earlier
/// state, or lost or changed their final status.
pub fn went_backwards(before: &Snapshot, after: &Snapshot) -> usize {
    before
        .values()
        .filter(|b| match after.get(&b.action_id) {
            None => true,
            Some(a) => {
                rank(a.state) < rank(b.state)
                    || (b.final_status.is_some() && a.final_status != b.final_status)
            }
        })
        .count()
}

/// Acknowledged enqueues that the final primary does not have: no action
/// with that id, or (ids are drawn from a sequence, which a lost tail of the
/// WAL rolls back, so a later enqueue may reuse the id) one with another key.
pub async fn acked_missing(store: &PgStore, acked: &[Acked]) -> Result<usize, RigError> {
    let mut missing = 0;
    for a in acked {
        let view = store.action_get(a.id).await?;
        if view.is_none_or(|v| v.key.as_deref() != Some(a.key.as_str())) {
            missing += 1;
        }
    }
    Ok(missing)
}

/// Applies one HA fault: waits for a healthy cluster, reads the actions,
/// does the fault, waits for its confirmation, reads the actions again.
pub async fn apply(
    ha: &mut HaCluster,
    store: &PgStore,
    kind: FaultKind,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    ha.wait_healthy(Duration::from_secs(120)).await?;
    let was = ha.leader().await?;
    if kind == FaultKind::LossyDeath {
        stop_senders(ha, &was).await?;
    }
    // Read just before the fault: everything in it was acknowledged.
    let before = snapshot(store).await?;
    match kind {
        FaultKind::NodeDeath => node_death(ha, &was, done).await?,
        FaultKind::LossyDeath => lossy_death(ha, &was, done).await?,
        FaultKind::Pause => pause(ha, &was, done).await?,
        FaultKind::Switchover => switchover(ha, &was, done).await?,
        FaultKind::PostmasterKill => postmaster_kill(ha, &was, done).await?,
        FaultKind::Kill | FaultKind::PgRestart | FaultKind::Freeze => {
            return Err(RigError::Settings(format!("{kind:?} is not an HA fault")))
        }
    }
    let after = snapshot(store).await?;
    done.went_backwards += went_backwards(&before, &after);
    Ok(())
}

async fn node_death(
    ha: &mut HaCluster,
    was: &Leader,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    killed_over(ha, was, done).await?;
    done.node_deaths += 1;
    // The dead node rejoins as a standby (pg_rewind) while the run goes on.
    ha.start_patroni(was.node)
}

/// Kills the primary's node and waits for a leader on a later timeline,
/// counting the failover and the time without a primary.
async fn killed_over(
    ha: &mut HaCluster,
    was: &Leader,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    let t0 = Instant::now();
    ha.kill_node(was.node).await?;
    let (m, _) = ha.wait_new_leader(was.timeline).await?;
    done.failed_over(t0.elapsed(), m.timeline.unwrap_or(0));
    Ok(())
}

/// The negative control's first half: the primary's WAL senders stopped,
/// then enqueues and settles go on for [`LOSSY_WINDOW_MS`], acknowledged by
/// the primary alone.
async fn stop_senders(ha: &HaCluster, was: &Leader) -> Result<(), RigError> {
    let senders = ha.walsenders(was.node);
    if senders.is_empty() {
        return Err(RigError::Settings(
            "no WAL sender to stop on the primary".into(),
        ));
    }
    procs::signal_all(&senders, Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(LOSSY_WINDOW_MS)).await;
    Ok(())
}

/// The second half: the node dies with its senders still stopped.
async fn lossy_death(
    ha: &mut HaCluster,
    was: &Leader,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    killed_over(ha, was, done).await?;
    done.lossy_deaths += 1;
    ha.start_patroni(was.node)
}

async fn pause(ha: &mut HaCluster, was: &Leader, done: &mut FailoverDone) -> Result<(), RigError> {
    let t0 = Instant::now();
    let paused = ha.pause(was.node)?;
    let waited = ha.wait_new_leader(was.timeline).await;
    // Paused longer than the leader key lives, whatever the election took.
    let ttl = Duration::from_secs(u64::from(ha.settings().ttl_s) + 1);
    tokio::time::sleep(ttl.saturating_sub(t0.elapsed())).await;
    paused.resume();
    let (m, took) = waited?;
    done.failed_over(took, m.timeline.unwrap_or(0));
    done.woken_writes += ha
        .writes_accepted(was.node, Duration::from_secs(WOKEN_PROBE_S))
        .await;
    done.pauses += 1;
    Ok(())
}

async fn switchover(
    ha: &mut HaCluster,
    was: &Leader,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    let t0 = Instant::now();
    ha.switchover(was).await?;
    let (m, _) = ha.wait_new_leader(was.timeline).await?;
    done.failed_over(t0.elapsed(), m.timeline.unwrap_or(0));
    done.switchovers += 1;
    Ok(())
}

async fn postmaster_kill(
    ha: &mut HaCluster,
    was: &Leader,
    done: &mut FailoverDone,
) -> Result<(), RigError> {
    let old = ha.kill_postmaster(was.node).await?;
    let (took, timeline) = ha.wait_restarted_in_place(was, old).await?;
    done.restart_ms += took.as_millis() as u64;
    done.timeline = done.timeline.max(timeline);
    done.restarts += 1;
    Ok(())
}
