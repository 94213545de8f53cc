//! Runs PostgreSQL's own `pgbench` with a custom script, as the unprivileged
//! user that runs the cluster when we are root, and reads its figures.
//!
//! # Invariants
//! - pgbench never runs without a deadline (its own length plus a minute).

use crate::BenchError;
use serde::Serialize;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// What pgbench reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PgbenchResult {
    pub clients: u32,
    pub seconds: u64,
    /// Transactions per second, without connection set-up.
    pub tps: f64,
    pub transactions: u64,
    pub failed: u64,
}

/// How to run it.
pub(crate) struct PgbenchRun<'a> {
    pub port: u16,
    pub database: &'a str,
    pub script: &'a str,
    pub clients: u32,
    pub threads: u32,
    pub seconds: u64,
    /// A directory the unprivileged user can read (the script goes there).
    pub dir: &'a Path,
}

pub(crate) async fn run(r: PgbenchRun<'_>) -> Result<PgbenchResult, BenchError> {
    let pgbench = courier_store::cluster::find_binary("pgbench")?;
    let script = r.dir.join("pgbench-script.sql");
    std::fs::write(&script, r.script)?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644))?;
    let mut cmd = tokio::process::Command::new(&pgbench);
    cmd.args(["-n", "-M", "prepared", "-h", "127.0.0.1", "-U", "postgres"])
        .arg("-p")
        .arg(r.port.to_string())
        .arg("-c")
        .arg(r.clients.to_string())
        .arg("-j")
        .arg(r.threads.min(r.clients).max(1).to_string())
        .arg("-T")
        .arg(r.seconds.to_string())
        .arg("-f")
        .arg(&script)
        .arg(r.database)
        .current_dir(r.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if nix::unistd::Uid::effective().is_root() {
        // Like the cluster's own commands: PostgreSQL's tools run as its user.
        let user = nix::unistd::User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or_else(|| {
                BenchError::Pgbench(
                    "running as root and no 'postgres' user exists to run pgbench".into(),
                )
            })?;
        cmd.uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .env("HOME", r.dir);
    }
    let limit = Duration::from_secs(r.seconds + 60);
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .map_err(|_| BenchError::Timeout {
            what: "pgbench".into(),
            limit,
            detail: format!("{} clients, {} s", r.clients, r.seconds),
        })??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError::Pgbench(format!(
            "{} exited with {}: {}",
            pgbench.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    parse(&stdout, r.clients, r.seconds)
        .ok_or_else(|| BenchError::Pgbench(format!("cannot read its output: {stdout}")))
}

/// Reads `tps = ...` and the transaction counts from pgbench's report.
fn parse(text: &str, clients: u32, seconds: u64) -> Option<PgbenchResult> {
    let number_after = |prefix: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
    };
    let tps = number_after("tps = ")?.parse().ok()?;
    let transactions = number_after("number of transactions actually processed:")?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    let failed = number_after("number of failed transactions:")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Some(PgbenchResult {
        clients,
        seconds,
        tps,
        transactions,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_15_output_parses() {
        let text = "pgbench (15.14 (Debian 15.14-0+deb12u1))
transaction type: script.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 5 s
number of transactions actually processed: 61234
number of failed transactions: 0 (0.000%)
latency average = 0.653 ms
initial connection time = 9.123 ms
tps = 12246.812345 (without initial connection time)
";
        let r = parse(text, 8, 5).unwrap();
        assert_eq!((r.transactions, r.failed), (61234, 0));
        assert!((r.tps - 12246.812345).abs() < 1e-6);
        assert_eq!(parse("garbage", 8, 5), None);
    }
}
