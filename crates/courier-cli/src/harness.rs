//! Child processes for the demo, the chaos run and the benchmarks: real
//! processes of this same binary, started with arguments, read for their
//! "listening on" line, signalled, and reaped with their wait status.

use anyhow::{bail, Context};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A running child of ours.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub pid: i32,
}

impl Proc {
    pub fn signal(&self, sig: Signal) -> anyhow::Result<()> {
        nix::sys::signal::kill(Pid::from_raw(self.pid), sig)
            .with_context(|| format!("sending {sig} to {} ({})", self.name, self.pid))
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn stop(mut self, grace: Duration) -> anyhow::Result<ExitStatus> {
        let _ = self.signal(Signal::SIGTERM);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                let _ = self.signal(Signal::SIGKILL);
                Ok(self.child.wait().await?)
            }
        }
    }
}

/// The command to start this binary with `args`, its stderr appended to `log`.
pub fn command(args: &[String], log: &Path) -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("locating the courier binary")?;
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .kill_on_drop(true);
    Ok(cmd)
}

/// Starts a service and waits (bounded) for its `listening on http://ADDR`
/// line; returns the process and the URL.
pub async fn spawn_service(
    name: &str,
    args: &[String],
    log: &Path,
) -> anyhow::Result<(Proc, String)> {
    let mut child = command(args, log)?
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let pid = child.id().context("child has no pid")? as i32;
    let stdout = child.stdout.take().context("child has no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await? {
            if let Some(i) = line.find("listening on ") {
                return Ok::<_, anyhow::Error>(
                    line[i + "listening on ".len()..].trim().to_string(),
                );
            }
        }
        bail!(
            "{name} exited before it was listening; see {}",
            log.display()
        )
    })
    .await
    .with_context(|| {
        format!(
            "{name} did not say where it listens within 60 s; see {}",
            log.display()
        )
    })??;
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((
        Proc {
            name: name.to_string(),
            child,
            pid,
        },
        url,
    ))
}

/// Starts a process that does not listen (a worker).
pub fn spawn_plain(name: &str, args: &[String], log: &Path) -> anyhow::Result<Proc> {
    let mut child = command(args, log)?
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let pid = child.id().context("child has no pid")? as i32;
    child.stdout.take();
    Ok(Proc {
        name: name.to_string(),
        child,
        pid,
    })
}

/// A run directory for logs and files, created fresh.
pub fn run_dir(base: &Path) -> anyhow::Result<PathBuf> {
    if base.exists() {
        std::fs::remove_dir_all(base).with_context(|| format!("clearing {}", base.display()))?;
    }
    std::fs::create_dir_all(base).with_context(|| format!("creating {}", base.display()))?;
    Ok(base.to_path_buf())
}

/// Strings from anything displayable, for argument lists (an array; use
/// `.to_vec()` to extend it).
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$($a.to_string()),*] };
}
