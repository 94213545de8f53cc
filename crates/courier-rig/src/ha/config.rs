//! The cluster's settings and the files and flags they become: pure, so the
//! settings that carry the guarantee are checked without starting anything.
//!
//! # Invariants
//! - A synchronous cluster has `synchronous_mode` and
//!   `synchronous_mode_strict` on: a commit is acknowledged only once a
//!   standby has it, and with no standby left the primary waits rather than
//!   acknowledging alone.
//! - `loop_wait + 2 * retry_timeout <= ttl` (Patroni's own rule: a leader
//!   that cannot reach etcd for one retry cycle demotes before its key
//!   expires, so two primaries never both hold the key).

use std::path::Path;

/// Members of each kind: 3 etcd members, 3 PostgreSQL nodes.
pub const MEMBERS: usize = 3;

/// The settings of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaSettings {
    /// Patroni's `synchronous_mode` and `synchronous_mode_strict`.
    pub synchronous: bool,
    /// How long the leader key lives without renewal.
    pub ttl_s: u32,
    /// Patroni's cycle.
    pub loop_wait_s: u32,
    /// How long Patroni retries etcd and PostgreSQL before giving up a cycle.
    pub retry_timeout_s: u32,
    /// A standby further behind than this is never promoted.
    pub maximum_lag_on_failover_bytes: u64,
}

impl HaSettings {
    /// No acknowledged commit lost: synchronous and strict. The lag bound is
    /// 0: only a standby with every byte the leader last reported (at most
    /// `loop_wait_s` old) may be promoted, and in synchronous mode only the
    /// synchronous standby, which has every acknowledged commit, is a
    /// candidate anyway.
    pub fn synchronous() -> Self {
        HaSettings {
            synchronous: true,
            ttl_s: 6,
            loop_wait_s: 1,
            retry_timeout_s: 2,
            maximum_lag_on_failover_bytes: 0,
        }
    }

    /// The negative control: asynchronous replication, and any standby
    /// within 1 GiB of the leader may be promoted, so an acknowledged tail
    /// of the WAL can be lost.
    pub fn asynchronous() -> Self {
        HaSettings {
            synchronous: false,
            maximum_lag_on_failover_bytes: 1 << 30,
            ..Self::synchronous()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.loop_wait_s == 0 || self.retry_timeout_s == 0 {
            return Err("loop_wait_s and retry_timeout_s must be at least 1".into());
        }
        if self.loop_wait_s + 2 * self.retry_timeout_s > self.ttl_s {
            return Err(format!(
                "loop_wait_s + 2 * retry_timeout_s ({}) must not exceed ttl_s ({})",
                self.loop_wait_s + 2 * self.retry_timeout_s,
                self.ttl_s
            ));
        }
        Ok(())
    }
}

/// The loopback ports of a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Ports {
    pub etcd_client: [u16; MEMBERS],
    pub etcd_peer: [u16; MEMBERS],
    /// Patroni's REST API, per node.
    pub rest: [u16; MEMBERS],
    /// PostgreSQL, per node.
    pub pg: [u16; MEMBERS],
}

impl Ports {
    /// The multi-host URL of the `courier` database: clients find the
    /// writable node themselves.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.pg.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!(
            "postgres://postgres@{}/courier?target_session_attrs=read-write",
            hosts.join(",")
        )
    }

    fn etcd_hosts(&self) -> String {
        let hosts: Vec<String> = (self.etcd_client.iter())
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        hosts.join(",")
    }
}

/// The flags of etcd member `i`: fast elections on loopback (10 ms
/// heartbeats, 100 ms election timeout; ENVIRONMENT.md).
pub fn etcd_args(ports: &Ports, i: usize, data: &Path) -> Vec<String> {
    let peer = |j: usize| format!("http://127.0.0.1:{}", ports.etcd_peer[j]);
    let initial: Vec<String> = (0..MEMBERS).map(|j| format!("e{j}={}", peer(j))).collect();
    let client = format!("http://127.0.0.1:{}", ports.etcd_client[i]);
    [
        ("--name", format!("e{i}")),
        ("--data-dir", data.display().to_string()),
        ("--listen-client-urls", client.clone()),
        ("--advertise-client-urls", client),
        ("--listen-peer-urls", peer(i)),
        ("--initial-advertise-peer-urls", peer(i)),
        ("--initial-cluster", initial.join(",")),
        ("--initial-cluster-state", "new".into()),
        ("--initial-cluster-token", "courier-ha".into()),
        ("--heartbeat-interval", "10".into()),
        ("--election-timeout", "100".into()),
    ]
    .into_iter()
    // Patroni talks to etcd through its v2 API (see `patroni_yaml`).
    .flat_map(|(k, v)| [k.to_string(), v])
    // A boolean flag takes its value after `=` only.
    .chain(["--enable-v2=true".to_string()])
    .collect()
}

/// A path as a YAML scalar (a JSON string is valid YAML).
fn q(p: &Path) -> String {
    serde_json::to_string(&p.display().to_string()).expect("a string encodes")
}

/// Patroni's configuration of node `i`, living in `node_dir`.
///
/// Patroni reaches etcd through its v2 API (`etcd:`, python3-etcd), not
/// `etcd3:`. Patroni 3.0.2's etcd3 backend let a primary woken from a pause
/// past the TTL take the leader key back from the standby just promoted: on
/// waking it grants itself a new lease and, trusting its cached view of the
/// cluster, writes the leader key without a compare (`_update_leader`), so
/// the promoted node demoted itself and the old primary went on (seen in
/// our first failover run: two primaries for 1.6 s). The v2 backend renews
/// the key only with `prevValue` = its own name, which fails once another
/// node holds it.
pub fn patroni_yaml(
    s: &HaSettings,
    ports: &Ports,
    i: usize,
    node_dir: &Path,
    bin_dir: &Path,
) -> String {
    format!(
        r#"scope: courier
name: node{i}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd:
  hosts: {etcd}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry}
    maximum_lag_on_failover: {lag}
    synchronous_mode: {sync}
    synchronous_mode_strict: {sync}
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        max_connections: 300
        wal_keep_size: 256MB
        synchronous_commit: 'on'
  initdb:
    - encoding: UTF8
    - no-locale
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg}
  connect_address: 127.0.0.1:{pg}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {pgpass}
  authentication:
    superuser: {{username: postgres, password: courier}}
    replication: {{username: replicator, password: courier}}
    rewind: {{username: postgres, password: courier}}
  parameters:
    unix_socket_directories: {sock}
"#,
        rest = ports.rest[i],
        etcd = ports.etcd_hosts(),
        ttl = s.ttl_s,
        loop_wait = s.loop_wait_s,
        retry = s.retry_timeout_s,
        lag = s.maximum_lag_on_failover_bytes,
        sync = s.synchronous,
        pg = ports.pg[i],
        data = q(&node_dir.join("data")),
        bin = q(bin_dir),
        pgpass = q(&node_dir.join("pgpass")),
        sock = q(node_dir),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ports() -> Ports {
        Ports {
            etcd_client: [1, 2, 3],
            etcd_peer: [4, 5, 6],
            rest: [7, 8, 9],
            pg: [10, 11, 12],
        }
    }

    #[test]
    fn the_synchronous_cluster_is_strict_and_the_control_is_not() {
        let dir = Path::new("/x/node1");
        let bin = Path::new("/usr/lib/postgresql/15/bin");
        let sync = patroni_yaml(&HaSettings::synchronous(), &ports(), 1, dir, bin);
        assert!(sync.contains("    synchronous_mode: true\n"), "{sync}");
        assert!(
            sync.contains("    synchronous_mode_strict: true\n"),
            "{sync}"
        );
        assert!(sync.contains("maximum_lag_on_failover: 0\n"), "{sync}");
        assert!(sync.contains("use_pg_rewind: true") && sync.contains("wal_log_hints: 'on'"));
        assert!(
            sync.contains("listen: 127.0.0.1:11\n")
                && sync.contains("hosts: 127.0.0.1:1,127.0.0.1:2,127.0.0.1:3\n")
        );
        assert!(sync.contains(r#"data_dir: "/x/node1/data""#), "{sync}");
        let control = patroni_yaml(&HaSettings::asynchronous(), &ports(), 1, dir, bin);
        assert!(
            control.contains("    synchronous_mode: false\n"),
            "{control}"
        );
        assert!(control.contains("maximum_lag_on_failover: 1073741824\n"));
    }

    #[test]
    fn the_url_names_every_node_and_asks_for_the_writable_one() {
        assert_eq!(
            ports().url(),
            "postgres://postgres@127.0.0.1:10,127.0.0.1:11,127.0.0.1:12/courier?target_session_attrs=read-write"
        );
    }

    #[test]
    fn a_ttl_shorter_than_a_cycle_and_two_retries_is_refused() {
        assert!(HaSettings::synchronous().validate().is_ok());
        let bad = HaSettings {
            ttl_s: 4,
            ..HaSettings::synchronous()
        };
        assert!(bad
            .validate()
            .unwrap_err()
            .contains("must not exceed ttl_s"));
    }

    #[test]
    fn etcd_members_know_each_other_and_elect_fast() {
        let a = etcd_args(&ports(), 2, Path::new("/d"));
        let at = |k: &str| a[a.iter().position(|x| x == k).unwrap() + 1].clone();
        assert_eq!(at("--name"), "e2");
        assert_eq!(at("--listen-client-urls"), "http://127.0.0.1:3");
        assert_eq!(
            at("--initial-cluster"),
            "e0=http://127.0.0.1:4,e1=http://127.0.0.1:5,e2=http://127.0.0.1:6"
        );
        assert_eq!(at("--election-timeout"), "100");
    }
}
