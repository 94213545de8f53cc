//! The faults of a cluster run, one at a time, and the table that judges them.
//!
//! The plan is every cluster fault kind, shuffled by the seed. Each fault is
//! injected only when the work released so far is done; at that moment the
//! next share of the tasks is released, so there is work in flight while
//! the member is gone. A killed member stays down until a commit has
//! followed the fault, and at least [`DOWN_MIN_MS`]. A stopped server stays
//! stopped for a fixed time drawn by the seed from [`STOP_MS_MIN`] to
//! [`STOP_MS_MAX`], longer than the others take to elect a new stream
//! leader, whatever happens meanwhile. Then the member is restarted (or
//! continued) and must answer before the next fault.
//!
//! # Invariants
//! - Every signal is confirmed by the member (see [`crate::cluster`]).
//! - A fault is attributed every event (commit, redelivery, suppression,
//!   extra stream copy) from its injection to the next fault's.
//! - A seed whose table lacks a kind, or a fault no commit followed, fails.
//! - A stopped server's fault fails unless the others reported a new stream
//!   leader, and a commit followed, while it was still stopped: the relay
//!   and the workers must ride through a paused leader, not wait for it.

use crate::broker::Broker;
use crate::cluster::{Cluster, Member};
use crate::events::{unix_ms, EventKind};
use crate::servers::ServerError;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Least time a member stays down (or stopped).
pub const DOWN_MIN_MS: u64 = 1_500;
/// Most time a fault may go without a commit and a new leader.
pub const DOWN_MAX_MS: u64 = 120_000;
/// How long a stopped server stays stopped, drawn per fault by the seed.
/// The other two servers reported a new stream leader 2.3-8.5 s after the
/// stop over five seeds, and 14.4 s once on a machine at load 30; the run
/// fails a stop that ends before one (see `KindRow::no_new_leader`).
pub const STOP_MS_MIN: u64 = 12_000;
pub const STOP_MS_MAX: u64 = 16_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    EtcdLeaderKill,
    EtcdFollowerKill,
    JsMetaLeaderKill,
    StreamLeaderKill,
    /// SIGSTOP of the stream leader's server past an election, then SIGCONT.
    NatsStop,
    RelayKill,
    WorkerKill,
}

impl FaultKind {
    pub const CLUSTER: [FaultKind; 5] = [
        FaultKind::EtcdLeaderKill,
        FaultKind::EtcdFollowerKill,
        FaultKind::JsMetaLeaderKill,
        FaultKind::StreamLeaderKill,
        FaultKind::NatsStop,
    ];
    pub const ALL: [FaultKind; 7] = [
        FaultKind::EtcdLeaderKill,
        FaultKind::EtcdFollowerKill,
        FaultKind::JsMetaLeaderKill,
        FaultKind::StreamLeaderKill,
        FaultKind::NatsStop,
        FaultKind::RelayKill,
        FaultKind::WorkerKill,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::EtcdLeaderKill => "SIGKILL etcd leader",
            FaultKind::EtcdFollowerKill => "SIGKILL etcd follower",
            FaultKind::JsMetaLeaderKill => "SIGKILL JetStream meta leader",
            FaultKind::StreamLeaderKill => "SIGKILL stream leader",
            FaultKind::NatsStop => "SIGSTOP nats-server, SIGCONT",
            FaultKind::RelayKill => "SIGKILL relay",
            FaultKind::WorkerKill => "SIGKILL worker",
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    pub kind: FaultKind,
    /// When the signal was sent (Unix ms).
    pub at_ms: u64,
    /// The member or process hit.
    pub target: String,
    /// The wait status that confirmed it.
    pub confirmed: String,
    /// Restarted (or continued) and answering again.
    pub restored: bool,
    /// How long the member was down (or stopped) before its restart began.
    pub down_ms: u64,
    /// A stopped server: when (ms after the signal) a live server first
    /// reported another stream leader; `None` if none did while it was stopped.
    #[serde(default)]
    pub new_leader_ms: Option<u64>,
}

/// One kind's line of the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KindRow {
    pub kind: FaultKind,
    pub count: u64,
    pub restored: u64,
    /// The longest a member of this kind was down (or stopped).
    pub down_ms_max: u64,
    /// Fault until the next commit, the slowest of this kind (None: never followed).
    pub recovery_ms_max: Option<u64>,
    pub recovery_ms_min: Option<u64>,
    /// Stream messages beyond an event's first copy, stored in this kind's windows.
    pub stream_copies: u64,
    pub redeliveries: u64,
    pub suppressed: u64,
    /// Stopped servers: the slowest new stream leader (ms after the stop),
    /// stops with none while stopped, and stops whose next commit came
    /// only after SIGCONT.
    #[serde(default)]
    pub new_leader_ms_max: Option<u64>,
    #[serde(default)]
    pub no_new_leader: u64,
    #[serde(default)]
    pub resumed_after_cont: u64,
}

/// Index of the fault an event at `t` is attributed to (the last one at or before it).
fn owner(faults: &[FaultRecord], t: u64) -> Option<usize> {
    faults.partition_point(|f| f.at_ms <= t).checked_sub(1)
}

/// The table of `kinds` (every one gets a row, zero counts included).
/// `faults` must be sorted by time; `events` too.
pub fn table(
    kinds: &[FaultKind],
    faults: &[FaultRecord],
    events: &[(u64, EventKind)],
    copies_at_ms: &[u64],
) -> Vec<KindRow> {
    let mut rows: Vec<KindRow> = kinds
        .iter()
        .map(|k| KindRow {
            kind: *k,
            count: 0,
            restored: 0,
            down_ms_max: 0,
            recovery_ms_max: None,
            recovery_ms_min: None,
            stream_copies: 0,
            redeliveries: 0,
            suppressed: 0,
            new_leader_ms_max: None,
            no_new_leader: 0,
            resumed_after_cont: 0,
        })
        .collect();
    let row_of = |k: FaultKind| kinds.iter().position(|x| *x == k);
    let commits: Vec<u64> = events
        .iter()
        .filter(|e| e.1 == EventKind::Commit)
        .map(|e| e.0)
        .collect();
    for f in faults {
        let Some(r) = row_of(f.kind) else { continue };
        let row = &mut rows[r];
        row.count += 1;
        row.restored += u64::from(f.restored);
        row.down_ms_max = row.down_ms_max.max(f.down_ms);
        let next = commits.partition_point(|t| *t <= f.at_ms);
        let recovery = commits.get(next).map(|t| t - f.at_ms);
        if let Some(ms) = recovery {
            row.recovery_ms_max = Some(row.recovery_ms_max.map_or(ms, |m| m.max(ms)));
            row.recovery_ms_min = Some(row.recovery_ms_min.map_or(ms, |m| m.min(ms)));
        }
        if f.kind == FaultKind::NatsStop {
            match f.new_leader_ms {
                Some(ms) => {
                    row.new_leader_ms_max = Some(row.new_leader_ms_max.unwrap_or(0).max(ms))
                }
                None => row.no_new_leader += 1,
            }
            if recovery.is_none_or(|ms| ms >= f.down_ms) {
                row.resumed_after_cont += 1;
            }
        }
    }
    let mut add = |t: u64, what: fn(&mut KindRow)| {
        if let Some(r) = owner(faults, t).and_then(|i| row_of(faults[i].kind)) {
            what(&mut rows[r]);
        }
    };
    for (t, kind) in events {
        match kind {
            EventKind::Redelivery => add(*t, |r| r.redeliveries += 1),
            EventKind::Suppress => add(*t, |r| r.suppressed += 1),
            EventKind::Commit => {}
        }
    }
    for t in copies_at_ms {
        add(*t, |r| r.stream_copies += 1);
    }
    rows
}

/// Why a table fails: a kind never injected, a fault no commit followed, a
/// cluster member not restored.
pub fn table_failures(rows: &[KindRow]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        if r.count == 0 {
            out.push(format!("{}: never injected", r.kind.as_str()));
        } else if r.recovery_ms_max.is_none() {
            out.push(format!("{}: no commit followed it", r.kind.as_str()));
        }
        if r.no_new_leader > 0 {
            out.push(format!(
                "{}: {} of {} stopped without another stream leader (stop too short)",
                r.kind.as_str(),
                r.no_new_leader,
                r.count
            ));
        }
        if r.resumed_after_cont > 0 {
            out.push(format!(
                "{}: in {} of {} commits resumed only after SIGCONT",
                r.kind.as_str(),
                r.resumed_after_cont,
                r.count
            ));
        }
        let cluster = FaultKind::CLUSTER.contains(&r.kind);
        if cluster && r.restored < r.count {
            out.push(format!(
                "{}: {} of {} members restored",
                r.kind.as_str(),
                r.restored,
                r.count
            ));
        }
    }
    out
}

/// The table, for people.
pub fn render_table(rows: &[KindRow]) -> String {
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
    let mut out = String::from(
        "| fault | n | restored | down ms (max) | new leader ms (max) | recovery ms (min-max) | stream copies | redeliveries | suppressed |\n\
         |---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {}-{} | {} | {} | {} |\n",
            r.kind.as_str(),
            r.count,
            if FaultKind::CLUSTER.contains(&r.kind) {
                r.restored.to_string()
            } else {
                "restarted".into()
            },
            if FaultKind::CLUSTER.contains(&r.kind) {
                r.down_ms_max.to_string()
            } else {
                "-".into()
            },
            ms(r.new_leader_ms_max),
            ms(r.recovery_ms_min),
            ms(r.recovery_ms_max),
            r.stream_copies,
            r.redeliveries,
            r.suppressed,
        ));
    }
    out
}

/// Which member a fault hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Etcd(usize),
    Nats(usize),
}

#[derive(Debug)]
enum Phase {
    Idle {
        not_before: Instant,
    },
    Down {
        target: Target,
        since: Instant,
        results_at: u64,
        record: usize,
        /// A stopped server is continued after this long, whatever happened.
        hold: Duration,
    },
    Done,
}

/// The cluster faults of one run, stepped by the run's loop.
pub struct ClusterChaos {
    plan: Vec<FaultKind>,
    next: usize,
    phase: Phase,
    rng: StdRng,
    tasks: u64,
    ready: Duration,
    /// The stream whose leader the stream faults hit.
    stream: String,
    pub records: Vec<FaultRecord>,
}

impl ClusterChaos {
    /// `rounds` times every cluster kind, shuffled by `rng`, against `stream`.
    pub fn new(mut rng: StdRng, rounds: u32, tasks: u64, ready: Duration, stream: &str) -> Self {
        let mut plan = Vec::new();
        for _ in 0..rounds {
            let mut round = FaultKind::CLUSTER.to_vec();
            round.shuffle(&mut rng);
            plan.extend(round);
        }
        ClusterChaos {
            plan,
            next: 0,
            phase: Phase::Idle {
                not_before: Instant::now() + Duration::from_millis(500),
            },
            rng,
            tasks,
            ready,
            stream: stream.to_string(),
            records: Vec::new(),
        }
    }

    /// Tasks the creator may have created before the first fault.
    pub fn first_release(&self) -> u64 {
        self.release_after(0)
    }

    fn release_after(&self, faults: usize) -> u64 {
        let n = self.plan.len() as u64 + 1;
        self.tasks * (faults as u64 + 1) / n
    }

    /// No cluster fault under way: the process kills may go on.
    pub fn is_idle(&self) -> bool {
        !matches!(self.phase, Phase::Down { .. })
    }

    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    /// One step: inject the next fault when its time has come, or restore
    /// the member once the cluster has moved on without it. A fault comes
    /// when the tasks released before it completed, or when the run is
    /// `stuck` short of them (nothing left to deliver: a broken protocol
    /// lost some, and the checker will say so).
    pub async fn tick(
        &mut self,
        cluster: &mut Cluster,
        broker: &Broker,
        completed: u64,
        stuck: bool,
        release: &AtomicU64,
    ) -> Result<(), ServerError> {
        match self.phase {
            Phase::Done => Ok(()),
            Phase::Idle { not_before } => {
                if self.next >= self.plan.len() {
                    release.store(self.tasks, Ordering::SeqCst);
                    self.phase = Phase::Done;
                    return Ok(());
                }
                let released_done = completed >= release.load(Ordering::SeqCst) || stuck;
                if Instant::now() < not_before || !released_done {
                    return Ok(());
                }
                self.inject(cluster, broker, completed, release).await
            }
            Phase::Down {
                target,
                since,
                results_at,
                record,
                hold,
            } => {
                let elapsed = since.elapsed();
                if elapsed > Duration::from_millis(DOWN_MAX_MS) {
                    return Err(ServerError::NotReady {
                        name: format!("the cluster after {}", self.plan[self.next].as_str()),
                        ms: DOWN_MAX_MS,
                        log_tail: "no commit followed the fault".into(),
                    });
                }
                // A killed member is restarted once a commit followed without
                // it; a stopped server is continued after its seeded hold,
                // whether or not commits resumed meanwhile (the table judges
                // that), and meanwhile the others' new stream leader is noted.
                let restore_now = if self.plan[self.next] == FaultKind::NatsStop {
                    self.note_new_leader(cluster, target, since, record).await;
                    elapsed >= hold
                } else {
                    completed > results_at && elapsed >= hold
                };
                if !restore_now {
                    return Ok(());
                }
                self.records[record].down_ms = elapsed.as_millis() as u64;
                self.restore(cluster, target).await?;
                self.records[record].restored = true;
                self.next += 1;
                let gap = self.rng.random_range(1_000..=2_500);
                self.phase = Phase::Idle {
                    not_before: Instant::now() + Duration::from_millis(gap),
                };
                Ok(())
            }
        }
    }

    /// Notes when a live server first reports a stream leader other than
    /// the stopped one (from its `/jsz`, which answers at once, unlike a
    /// stream info request that may be routed to the stopped server).
    async fn note_new_leader(
        &mut self,
        cluster: &Cluster,
        target: Target,
        since: Instant,
        record: usize,
    ) {
        let Target::Nats(i) = target else { return };
        if self.records[record].new_leader_ms.is_some() {
            return;
        }
        let leader = cluster.stream_leader_seen(&self.stream).await;
        if leader.is_some_and(|l| l != i) {
            self.records[record].new_leader_ms = Some(since.elapsed().as_millis() as u64);
        }
    }

    async fn find_target(&mut self, cluster: &Cluster, broker: &Broker) -> Option<Target> {
        match self.plan[self.next] {
            FaultKind::EtcdLeaderKill => cluster.etcd_leader().await.map(Target::Etcd),
            FaultKind::EtcdFollowerKill => {
                let leader = cluster.etcd_leader().await?;
                let followers: Vec<usize> = (0..cluster.etcd.len())
                    .filter(|i| *i != leader && cluster.etcd[*i].is_live())
                    .collect();
                followers
                    .get(self.rng.random_range(0..followers.len().max(1)))
                    .map(|i| Target::Etcd(*i))
            }
            FaultKind::JsMetaLeaderKill => cluster.meta_leader().await.map(Target::Nats),
            FaultKind::StreamLeaderKill | FaultKind::NatsStop => {
                let name = broker.stream_leader().await.ok()?.0?;
                cluster.nats_index(&name).map(Target::Nats)
            }
            FaultKind::RelayKill | FaultKind::WorkerKill => None,
        }
    }

    async fn inject(
        &mut self,
        cluster: &mut Cluster,
        broker: &Broker,
        completed: u64,
        release: &AtomicU64,
    ) -> Result<(), ServerError> {
        let kind = self.plan[self.next];
        // No leader known right now (an election under way): try next tick.
        let Some(target) = self.find_target(cluster, broker).await else {
            return Ok(());
        };
        let member: &mut Member = match target {
            Target::Etcd(i) => &mut cluster.etcd[i],
            Target::Nats(i) => &mut cluster.nats[i],
        };
        let at_ms = unix_ms();
        let confirmed = if kind == FaultKind::NatsStop {
            member.stop().await?
        } else {
            member.kill().await?
        };
        tracing::info!(fault = kind.as_str(), member = %member.name, %confirmed, "fault injected");
        self.records.push(FaultRecord {
            kind,
            at_ms,
            target: member.name.clone(),
            confirmed,
            restored: false,
            down_ms: 0,
            new_leader_ms: None,
        });
        release.store(self.release_after(self.next + 1), Ordering::SeqCst);
        let hold_ms = if kind == FaultKind::NatsStop {
            self.rng.random_range(STOP_MS_MIN..=STOP_MS_MAX)
        } else {
            DOWN_MIN_MS
        };
        self.phase = Phase::Down {
            target,
            since: Instant::now(),
            results_at: completed,
            record: self.records.len() - 1,
            hold: Duration::from_millis(hold_ms),
        };
        Ok(())
    }

    async fn restore(&self, cluster: &mut Cluster, target: Target) -> Result<(), ServerError> {
        match target {
            Target::Etcd(i) => cluster.etcd[i].restart(self.ready).await,
            Target::Nats(i) if cluster.nats[i].is_stopped() => {
                cluster.nats[i].cont(self.ready).await.map(|_| ())
            }
            Target::Nats(i) => cluster.nats[i].restart(self.ready).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: FaultKind, at_ms: u64) -> FaultRecord {
        FaultRecord {
            kind,
            at_ms,
            target: "x".into(),
            confirmed: "signal: 9".into(),
            restored: true,
            down_ms: 0,
            new_leader_ms: None,
        }
    }

    #[test]
    fn events_go_to_the_fault_before_them_and_recovery_is_the_next_commit() {
        let faults = vec![
            fault(FaultKind::EtcdLeaderKill, 100),
            fault(FaultKind::WorkerKill, 200),
        ];
        let events = vec![
            (50, EventKind::Commit),
            (90, EventKind::Suppress),
            (130, EventKind::Redelivery),
            (150, EventKind::Commit),
            (160, EventKind::Suppress),
            (250, EventKind::Commit),
            (260, EventKind::Redelivery),
        ];
        let rows = table(
            &[
                FaultKind::EtcdLeaderKill,
                FaultKind::WorkerKill,
                FaultKind::NatsStop,
            ],
            &faults,
            &events,
            &[120, 210, 220],
        );
        assert_eq!(rows[0].recovery_ms_max, Some(50));
        assert_eq!(
            (
                rows[0].redeliveries,
                rows[0].suppressed,
                rows[0].stream_copies
            ),
            (1, 1, 1)
        );
        assert_eq!(rows[1].recovery_ms_max, Some(50));
        assert_eq!(
            (
                rows[1].redeliveries,
                rows[1].suppressed,
                rows[1].stream_copies
            ),
            (1, 0, 2)
        );
        assert_eq!(rows[2].count, 0);
        let failures = table_failures(&rows);
        assert_eq!(
            failures,
            vec!["SIGSTOP nats-server, SIGCONT: never injected".to_string()]
        );
    }

    #[test]
    fn a_stop_fails_unless_a_new_leader_and_a_commit_came_before_sigcont() {
        let stop = |new_leader_ms: Option<u64>| FaultRecord {
            down_ms: 10_000,
            new_leader_ms,
            ..fault(FaultKind::NatsStop, 1_000)
        };
        let judge = |f: FaultRecord, commit_at: u64| {
            let rows = table(
                &[FaultKind::NatsStop],
                &[f],
                &[(commit_at, EventKind::Commit)],
                &[],
            );
            table_failures(&rows)
        };
        // A new leader at 6 s, a commit 5 s after the stop: it rode through.
        assert_eq!(judge(stop(Some(6_000)), 6_000), Vec::<String>::new());
        // The first commit 10 s after the stop: only after SIGCONT.
        let late = judge(stop(Some(6_000)), 11_000);
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].contains("only after SIGCONT"), "{late:?}");
        // No new leader while it was stopped: the stop was too short.
        let short = judge(stop(None), 6_000);
        assert_eq!(short.len(), 1, "{short:?}");
        assert!(
            short[0].contains("without another stream leader"),
            "{short:?}"
        );
    }

    #[test]
    fn a_fault_without_a_later_commit_or_restore_fails() {
        let mut f = fault(FaultKind::StreamLeaderKill, 300);
        f.restored = false;
        let rows = table(
            &[FaultKind::StreamLeaderKill],
            &[f],
            &[(100, EventKind::Commit)],
            &[],
        );
        let failures = table_failures(&rows);
        assert_eq!(failures.len(), 2, "{failures:?}");
    }
}
