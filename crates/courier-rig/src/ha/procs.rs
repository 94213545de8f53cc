//! The PostgreSQL processes under a Patroni: not our children (Patroni
//! starts the postmaster), so they are found in `/proc` and their end is
//! confirmed there (the pid is gone, or a zombie awaiting its reaper).

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a SIGKILLed process may take to vanish.
pub const GONE_WAIT_MS: u64 = 5_000;

/// The postmaster's pid from its `postmaster.pid` (first line), if it runs.
pub fn postmaster_pid(data: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    alive(pid).then_some(pid)
}

/// `/proc/PID/stat`'s state and parent pid.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: read after it.
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// The process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    matches!(stat(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

/// The process title (PostgreSQL rewrites its argv: `postgres: walreceiver ...`).
pub fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .to_string()
}

/// The live children of `parent`.
pub fn children(parent: i32) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| matches!(stat(*pid), Some((s, pp)) if pp == parent && s != 'Z'))
        .collect()
}

/// The postmaster and every process it started.
pub fn postgres_tree(postmaster: i32) -> Vec<i32> {
    let mut all = vec![postmaster];
    all.extend(children(postmaster));
    all
}

/// Sends `sig` to each pid (a pid already gone is skipped).
pub fn signal_all(pids: &[i32], sig: Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(Pid::from_raw(*pid), sig);
    }
}

/// Waits until none of `pids` is alive; false if one still is after
/// [`GONE_WAIT_MS`].
pub async fn gone(pids: &[i32]) -> bool {
    let deadline = Instant::now() + Duration::from_millis(GONE_WAIT_MS);
    while Instant::now() < deadline {
        if !pids.iter().any(|p| alive(*p)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_killed_grandchild_is_seen_gone_and_a_live_one_is_not() {
        // sh starts sleep and waits: sleep is our grandchild, as a
        // postmaster is Patroni's child and the rig's grandchild.
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let sh_pid = sh.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        // A child seen between fork and exec still shows sh's command
        // line: wait until it is sleep.
        let kids = loop {
            let k = children(sh_pid);
            let execed = k.len() == 1 && cmdline(k[0]).starts_with("sleep 30");
            if execed || Instant::now() > deadline {
                break k;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(kids.len(), 1, "sleep is sh's one child");
        assert!(cmdline(kids[0]).starts_with("sleep 30"));
        assert!(alive(kids[0]));
        signal_all(&kids, Signal::SIGKILL);
        assert!(gone(&kids).await, "the killed sleep is gone");
        let _ = sh.wait();
        assert!(!alive(sh_pid));
    }
}
