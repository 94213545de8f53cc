//! Patroni's REST API: who leads, on which timeline (`/cluster`), and the
//! switchover (`/switchover`).
//! Any node answers `/cluster` for the whole cluster (from etcd), so a
//! question goes to each node in turn until one answers.

use serde::Deserialize;
use std::time::Duration;

/// How long one request to Patroni may take: a paused node never answers.
pub const REST_TIMEOUT_MS: u64 = 1_000;

/// One member as `/cluster` reports it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Member {
    pub name: String,
    /// `leader`, `sync_standby`, `replica`, ...
    pub role: String,
    /// `running`, `starting`, `stopped`, `crashed`, ...
    pub state: String,
    pub port: u16,
    #[serde(default)]
    pub timeline: Option<u32>,
    /// Bytes behind the leader (a number, or "unknown").
    #[serde(default)]
    pub lag: Option<serde_json::Value>,
}

/// `/cluster`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
pub struct ClusterView {
    pub members: Vec<Member>,
}

impl ClusterView {
    /// The running leader, if any.
    pub fn leader(&self) -> Option<&Member> {
        (self.members.iter()).find(|m| m.role == "leader" && m.state == "running")
    }

    /// The running leader on a timeline after `after`.
    pub fn leader_after(&self, after: u32) -> Option<&Member> {
        self.leader().filter(|m| m.timeline.unwrap_or(0) > after)
    }

    /// Every node runs and one standby is synchronous (when asked for).
    pub fn healthy(&self, synchronous: bool) -> bool {
        let running = self.members.iter().filter(|m| m.state == "running").count();
        let sync = self.members.iter().any(|m| m.role == "sync_standby");
        running == super::MEMBERS && self.leader().is_some() && (sync || !synchronous)
    }

    /// The node index of a member named `nodeN`.
    pub fn index_of(m: &Member) -> Option<usize> {
        m.name.strip_prefix("node")?.parse().ok()
    }
}

/// A client of the nodes' REST APIs.
#[derive(Clone)]
pub struct Rest {
    http: reqwest::Client,
    ports: Vec<u16>,
}

impl Rest {
    pub fn new(ports: &[u16]) -> Self {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(REST_TIMEOUT_MS))
            .build()
            .expect("a plain HTTP client builds");
        Rest {
            http,
            ports: ports.to_vec(),
        }
    }

    /// `/cluster` from the first node that answers (all are asked at once:
    /// a paused node must not slow the question); None when none does.
    pub async fn cluster(&self) -> Option<ClusterView> {
        let asks = self.ports.iter().map(|p| {
            let url = format!("http://127.0.0.1:{p}/cluster");
            let http = self.http.clone();
            Box::pin(async move {
                let r = http.get(&url).send().await.map_err(|_| ())?;
                r.json::<ClusterView>().await.map_err(|_| ())
            })
        });
        futures::future::select_ok(asks).await.ok().map(|(v, _)| v)
    }

    /// Asks the leader (node `leader`, named `name`) to hand over to its
    /// synchronous standby (Patroni picks it).
    pub async fn switchover(&self, leader: usize, name: &str) -> Result<String, String> {
        let url = format!("http://127.0.0.1:{}/switchover", self.ports[leader]);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let r = (http.post(&url))
            .json(&serde_json::json!({ "leader": name }))
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = r.status();
        let text = r.text().await.unwrap_or_default();
        if status.is_success() {
            Ok(text)
        } else {
            Err(format!("POST {url}: {status} {text}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(json: &str) -> ClusterView {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_leader_counts_only_when_running_and_on_a_later_timeline() {
        let v = view(
            r#"{"members":[
            {"name":"node0","role":"sync_standby","state":"running","port":1,"timeline":2,"lag":0},
            {"name":"node1","role":"replica","state":"running","port":2,"timeline":2,"lag":"unknown"},
            {"name":"node2","role":"leader","state":"running","port":3,"timeline":2}]}"#,
        );
        assert_eq!(v.leader().map(|m| m.port), Some(3));
        assert!(v.leader_after(1).is_some() && v.leader_after(2).is_none());
        assert!(v.healthy(true));
        assert_eq!(ClusterView::index_of(v.leader().unwrap()), Some(2));
        let starting = view(
            r#"{"members":[{"name":"node2","role":"leader","state":"starting","port":3,"timeline":3}]}"#,
        );
        assert!(starting.leader().is_none() && !starting.healthy(false));
    }

    #[test]
    fn a_cluster_without_a_synchronous_standby_is_not_healthy_in_synchronous_mode() {
        let v = view(
            r#"{"members":[
            {"name":"node0","role":"replica","state":"running","port":1,"timeline":1},
            {"name":"node1","role":"replica","state":"running","port":2,"timeline":1},
            {"name":"node2","role":"leader","state":"running","port":3,"timeline":1}]}"#,
        );
        assert!(!v.healthy(true) && v.healthy(false));
    }
}
