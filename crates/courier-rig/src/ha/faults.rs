//! What the failover run does to the cluster, each fault confirmed another
//! way than by having sent it: a killed Patroni by its wait status, a
//! killed postmaster by its pid vanishing, a failover by a running leader
//! on a later timeline.
//!
//! - [`HaCluster::kill_node`]: SIGKILL of the leader's Patroni and its
//!   PostgreSQL (the postmaster and every child) together: a node death;
//! - [`HaCluster::kill_postmaster`]: SIGKILL of the postmaster alone:
//!   Patroni restarts it in place and keeps the leader key (a restart, not
//!   a failover);
//! - [`HaCluster::pause`] / [`Paused::resume`]: SIGSTOP of the leader's
//!   Patroni and PostgreSQL, SIGCONT later;
//! - [`HaCluster::switchover`]: through Patroni's API;
//! - [`HaCluster::walsenders`]: the primary's WAL senders, which the
//!   negative control stops so the standbys miss the tail of the WAL.

use super::{procs, ClusterView, HaCluster, Member};
use crate::RigError;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};

/// How long a failover may take before the run gives up.
pub const FAILOVER_WAIT_S: u64 = 60;

/// The leader before a fault: its node, name and timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub node: usize,
    pub name: String,
    pub timeline: u32,
}

/// Processes stopped by [`HaCluster::pause`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    pub node: usize,
    pub pids: Vec<i32>,
}

impl Paused {
    pub fn resume(&self) {
        procs::signal_all(&self.pids, Signal::SIGCONT);
    }
}

fn err(name: &str, detail: impl std::fmt::Display) -> RigError {
    RigError::Process {
        name: name.to_string(),
        detail: detail.to_string(),
    }
}

impl HaCluster {
    /// The running leader now.
    pub async fn leader(&self) -> Result<Leader, RigError> {
        let view = self.rest.cluster().await.unwrap_or_default();
        let m = view
            .leader()
            .ok_or_else(|| err("patroni", "no running leader"))?;
        Ok(Leader {
            node: ClusterView::index_of(m).ok_or_else(|| err("patroni", "unnamed leader"))?,
            name: m.name.clone(),
            timeline: m.timeline.unwrap_or(0),
        })
    }

    fn postmaster(&self, node: usize) -> Option<i32> {
        procs::postmaster_pid(&self.node_dir(node).join("data"))
    }

    /// SIGKILLs node `node`'s Patroni and its PostgreSQL together; returns
    /// once Patroni's wait status says SIGKILL and every PostgreSQL process
    /// is gone.
    pub async fn kill_node(&mut self, node: usize) -> Result<(), RigError> {
        let tree = self
            .postmaster(node)
            .map(procs::postgres_tree)
            .unwrap_or_default();
        let patroni = self.patroni[node]
            .take()
            .ok_or_else(|| err("patroni", format!("node {node} has no Patroni to kill")))?;
        procs::signal_all(&tree, Signal::SIGKILL);
        patroni.kill_confirmed().await?;
        if tree.is_empty() || !procs::gone(&tree).await {
            return Err(err(
                "postgres",
                format!("node {node}'s PostgreSQL did not die"),
            ));
        }
        self.write_pids()
    }

    /// SIGKILLs node `node`'s postmaster alone; returns its pid once it is
    /// gone.
    pub async fn kill_postmaster(&self, node: usize) -> Result<i32, RigError> {
        let pm = self
            .postmaster(node)
            .ok_or_else(|| err("postgres", format!("node {node} has no postmaster")))?;
        procs::signal_all(&[pm], Signal::SIGKILL);
        if !procs::gone(&[pm]).await {
            return Err(err("postgres", format!("postmaster {pm} did not die")));
        }
        Ok(pm)
    }

    /// Waits until Patroni has started a new postmaster on `node` (not
    /// `old`) and the same node leads again (the key never left it);
    /// returns how long it took and the timeline it leads on. Patroni starts
    /// a crashed primary's PostgreSQL in recovery and promotes it again
    /// once it is sure it still holds the key, so the timeline moves on
    /// even though no other node took over.
    pub async fn wait_restarted_in_place(
        &self,
        was: &Leader,
        old: i32,
    ) -> Result<(Duration, u32), RigError> {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(FAILOVER_WAIT_S) {
            let fresh = self.postmaster(was.node).is_some_and(|p| p != old);
            let now = self.leader().await.ok();
            if let Some(l) = now.filter(|l| fresh && l.node == was.node) {
                return Ok((t0.elapsed(), l.timeline));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(err(
            "patroni",
            format!("node {} did not lead again in place", was.node),
        ))
    }

    /// SIGSTOPs node `node`'s Patroni, postmaster and every PostgreSQL child.
    pub fn pause(&self, node: usize) -> Result<Paused, RigError> {
        let patroni = (self.patroni[node].as_ref())
            .ok_or_else(|| err("patroni", format!("node {node} has no Patroni")))?;
        let mut pids = vec![patroni.pid];
        if let Some(pm) = self.postmaster(node) {
            // The postmaster first: it forks no new child once stopped.
            procs::signal_all(&[pm], Signal::SIGSTOP);
            pids.extend(procs::postgres_tree(pm));
        }
        procs::signal_all(&pids, Signal::SIGSTOP);
        Ok(Paused { node, pids })
    }

    /// Asks Patroni to hand the leader's role to its synchronous standby.
    pub async fn switchover(&self, was: &Leader) -> Result<(), RigError> {
        self.rest
            .switchover(was.node, &was.name)
            .await
            .map(|_| ())
            .map_err(|e| err("switchover", e))
    }

    /// Waits for a running leader on a timeline after `timeline`; returns
    /// it and how long it took.
    pub async fn wait_new_leader(&self, timeline: u32) -> Result<(Member, Duration), RigError> {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(FAILOVER_WAIT_S) {
            if let Some(v) = self.rest.cluster().await {
                if let Some(m) = v.leader_after(timeline) {
                    return Ok((m.clone(), t0.elapsed()));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(err(
            "patroni",
            format!("no leader after timeline {timeline} within {FAILOVER_WAIT_S} s"),
        ))
    }

    /// The WAL senders of node `leader` (titled `postgres: courier:
    /// walsender ...`, after the cluster name). The negative control stops
    /// these rather than the standbys' receivers: a stopped receiver still
    /// finds in its socket, once continued, the WAL the sender wrote into it
    /// meanwhile (loopback buffers hold megabytes), so nothing was lost in
    /// our first try; a stopped sender sends nothing more.
    pub fn walsenders(&self, leader: usize) -> Vec<i32> {
        self.postmaster(leader)
            .map(procs::children)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| procs::cmdline(*p).contains(": walsender"))
            .collect()
    }

    /// Tries a write on node `node` directly (no multi-host URL) every
    /// 200 ms for `span`; counts the writes it acknowledged. A write
    /// waiting for a synchronous standby that never answers is abandoned
    /// after 1 s and not counted: its client never saw a commit.
    pub async fn writes_accepted(&self, node: usize, span: Duration) -> usize {
        let t0 = Instant::now();
        let mut accepted = 0;
        while t0.elapsed() < span {
            let write = async {
                let c = self.connect(node, "postgres").await?;
                c.execute("INSERT INTO ha_probe DEFAULT VALUES", &[])
                    .await
                    .map_err(|e| e.to_string())
            };
            if let Ok(Ok(1)) = tokio::time::timeout(Duration::from_secs(1), write).await {
                accepted += 1;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        accepted
    }
}
