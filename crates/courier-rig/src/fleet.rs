//! Child processes of the courier binary, and the fleet of worker slots.
//!
//! Each process is started from a typed spec (`crate::spec`), its stderr
//! appended to a log file in the run directory. A service is read for its
//! `listening on http://ADDR` line; every process is killed if its handle is
//! dropped, and reaped with its wait status.
//!
//! # Invariants
//! - [`Fleet::kill`] returns only after the wait status says SIGKILL; any
//!   other end is [`RigError::NotKilled`].
//! - At most one worker is frozen (SIGSTOP) at a time, and it is never the
//!   one a kill picks; every frozen worker is continued before the fleet stops.

use crate::spec::WorkerSpec;
use crate::RigError;
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a service may take to say where it listens.
pub const LISTENING_WAIT_S: u64 = 60;

/// A running child of ours.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub pid: i32,
}

impl Proc {
    pub fn signal(&self, sig: Signal) -> Result<(), RigError> {
        nix::sys::signal::kill(Pid::from_raw(self.pid), sig).map_err(|e| RigError::Process {
            name: self.name.clone(),
            detail: format!("sending {sig} to {}: {e}", self.pid),
        })
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) -> Result<ExitStatus, RigError> {
        let _ = self.signal(Signal::SIGTERM);
        let waited = tokio::time::timeout(grace, self.child.wait()).await;
        let status = match waited {
            Ok(status) => status,
            Err(_) => {
                let _ = self.signal(Signal::SIGKILL);
                self.child.wait().await
            }
        };
        status.map_err(|e| self.failed(format!("waiting for it: {e}")))
    }

    /// SIGKILL, confirmed from the wait status.
    pub async fn kill_confirmed(mut self) -> Result<(), RigError> {
        self.signal(Signal::SIGKILL)?;
        let status = self
            .child
            .wait()
            .await
            .map_err(|e| self.failed(format!("waiting for it: {e}")))?;
        if status.signal() == Some(Signal::SIGKILL as i32) {
            Ok(())
        } else {
            Err(RigError::NotKilled {
                name: self.name,
                signal: "SIGKILL".into(),
                status: status.to_string(),
            })
        }
    }

    fn failed(&self, detail: String) -> RigError {
        RigError::Process {
            name: self.name.clone(),
            detail,
        }
    }
}

/// The command to start `exe` with `args`, its stderr appended to `log`.
fn command(exe: &Path, args: &[String], log: &Path) -> Result<Command, RigError> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| RigError::io(log, e))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    Ok(cmd)
}

fn spawn(name: &str, mut cmd: Command) -> Result<(Child, i32), RigError> {
    let failed = |detail: String| RigError::Process {
        name: name.to_string(),
        detail,
    };
    let child = cmd
        .spawn()
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let pid = child.id().ok_or_else(|| failed("no pid".into()))? as i32;
    Ok((child, pid))
}

/// Starts a service and waits (bounded) for its `listening on http://ADDR`
/// line; returns the process and the URL.
pub async fn spawn_service(
    exe: &Path,
    name: &str,
    args: &[String],
    log: &Path,
) -> Result<(Proc, String), RigError> {
    let (mut child, pid) = spawn(name, command(exe, args, log)?)?;
    let failed = |detail: String| RigError::Process {
        name: name.to_string(),
        detail: format!("{detail}; see {}", log.display()),
    };
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| failed("no stdout".into()))?;
    let mut lines = BufReader::new(stdout).lines();
    let read = tokio::time::timeout(Duration::from_secs(LISTENING_WAIT_S), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(i) = line.find("listening on ") {
                return Some(line[i + "listening on ".len()..].trim().to_string());
            }
        }
        None
    })
    .await;
    let url = match read {
        Ok(Some(url)) => url,
        Ok(None) => return Err(failed("exited before it was listening".into())),
        Err(_) => {
            let detail = format!("did not say where it listens within {LISTENING_WAIT_S} s");
            return Err(failed(detail));
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let name = name.to_string();
    Ok((Proc { name, child, pid }, url))
}

/// Starts a process that does not listen (a worker).
pub fn spawn_plain(exe: &Path, name: &str, args: &[String], log: &Path) -> Result<Proc, RigError> {
    let mut cmd = command(exe, args, log)?;
    cmd.stdout(Stdio::null());
    let (child, pid) = spawn(name, cmd)?;
    let name = name.to_string();
    Ok(Proc { name, child, pid })
}

/// Worker processes in numbered slots, all started from one spec; a slot
/// emptied by a kill is filled by a new process (`worker-N`, N counting
/// every process started, each with its log `worker-N.log`).
pub struct Fleet {
    exe: PathBuf,
    spec: WorkerSpec,
    dir: PathBuf,
    slots: Vec<Option<Proc>>,
    started: usize,
    /// The frozen worker's slot, and when it is to be continued.
    frozen: Option<(usize, Instant)>,
}

impl Fleet {
    /// One worker per seed.
    pub fn start(
        exe: &Path,
        spec: WorkerSpec,
        dir: &Path,
        seeds: impl IntoIterator<Item = u64>,
    ) -> Result<Self, RigError> {
        let mut fleet = Fleet {
            exe: exe.to_path_buf(),
            spec,
            dir: dir.to_path_buf(),
            slots: Vec::new(),
            started: 0,
            frozen: None,
        };
        for seed in seeds {
            fleet.slots.push(None);
            fleet.spawn(fleet.slots.len() - 1, seed)?;
        }
        Ok(fleet)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Starts a worker in `slot`.
    pub fn spawn(&mut self, slot: usize, seed: u64) -> Result<(), RigError> {
        let n = self.started;
        let log = self.dir.join(format!("worker-{n}.log"));
        let p = spawn_plain(
            &self.exe,
            &format!("worker-{n}"),
            &self.spec.args(seed),
            &log,
        )?;
        self.started += 1;
        self.slots[slot] = Some(p);
        Ok(())
    }

    /// The slots a kill may pick: every one but the frozen worker's.
    pub fn killable(&self) -> Vec<usize> {
        let frozen = self.frozen.map(|(f, _)| f);
        (0..self.slots.len())
            .filter(|i| Some(*i) != frozen)
            .collect()
    }

    /// SIGKILLs the worker in `slot`, confirmed from its wait status; false
    /// when the slot was empty.
    pub async fn kill(&mut self, slot: usize) -> Result<bool, RigError> {
        match self.slots[slot].take() {
            Some(p) => p.kill_confirmed().await.map(|()| true),
            None => Ok(false),
        }
    }

    pub fn frozen(&self) -> bool {
        self.frozen.is_some()
    }

    /// SIGSTOPs the worker in `slot` until `until`; false when it is empty.
    pub fn freeze(&mut self, slot: usize, until: Instant) -> Result<bool, RigError> {
        let Some(p) = &self.slots[slot] else {
            return Ok(false);
        };
        p.signal(Signal::SIGSTOP)?;
        self.frozen = Some((slot, until));
        Ok(true)
    }

    /// Continues the frozen worker if its time has come (or `now` is None).
    pub fn thaw(&mut self, now: Option<Instant>) -> Result<(), RigError> {
        if let Some((slot, until)) = self.frozen {
            if now.is_none_or(|n| n >= until) {
                if let Some(p) = &self.slots[slot] {
                    p.signal(Signal::SIGCONT)?;
                }
                self.frozen = None;
            }
        }
        Ok(())
    }

    /// The slot of the process with this pid.
    pub fn slot_of(&self, pid: i32) -> Option<usize> {
        self.slots
            .iter()
            .position(|p| p.as_ref().is_some_and(|p| p.pid == pid))
    }

    /// Continues a frozen worker, then stops every worker (SIGTERM, SIGKILL
    /// after `grace`).
    pub async fn stop(mut self, grace: Duration) -> Result<(), RigError> {
        self.thaw(None)?;
        for p in std::mem::take(&mut self.slots).into_iter().flatten() {
            p.stop(grace).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_kill_counts_only_when_the_wait_status_says_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("procs.log");
        let sleeper = spawn_plain(Path::new("sleep"), "sleeper", &["30".into()], &log).unwrap();
        sleeper.kill_confirmed().await.unwrap();
        // A process that ended by itself before the signal was not killed
        // by it: the wait status says exit 0, and the kill is refused.
        let quitter = spawn_plain(Path::new("true"), "quitter", &[], &log).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let err = quitter.kill_confirmed().await.unwrap_err();
        assert!(matches!(err, RigError::NotKilled { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_service_that_never_listens_is_an_error_naming_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("quiet.log");
        let err = spawn_service(Path::new("true"), "quiet", &[], &log)
            .await
            .err()
            .expect("no listening line");
        let text = err.to_string();
        assert!(text.contains("exited before it was listening"), "{text}");
        assert!(text.contains("quiet.log"), "{text}");
    }
}
