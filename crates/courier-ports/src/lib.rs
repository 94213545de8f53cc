//! Loopback TCP ports that stay ours until the server we start binds them.
//!
//! Asking the kernel for port 0 and closing the socket leaves a window in
//! which anything else may get the same port: another test's PostgreSQL, or a
//! listener that binds port 0 in the same process. A fresh-machine run lost a
//! Patroni cluster that way (its node's PostgreSQL found the port taken and
//! Patroni went on talking to the other test's server).
//!
//! A lease closes both gaps:
//! - ports come from just below the kernel's ephemeral range
//!   (`/proc/sys/net/ipv4/ip_local_port_range`), where binding port 0 and
//!   outgoing connections never land;
//! - a port is ours while we hold an exclusive `flock` on
//!   `$TMPDIR/courier-ports/<port>.lock`, which every courier process
//!   honours; the kernel drops the lock when the process dies, so a killed
//!   run leaves nothing stale.
//!
//! Hold the lease until the server listens (or for as long as the server may
//! restart on the same port). Lock files are never removed: removing one
//! could let two processes lock two different files for the same port.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::ops::Range;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};

/// Ports below the ephemeral range that leases are drawn from, at most.
pub const SPAN_MAX: u16 = 12_000;
/// The lowest port a lease may take.
const FLOOR: u16 = 10_000;
/// Used when the kernel's range cannot be read.
const FALLBACK: Range<u16> = 20_000..32_000;

#[derive(Debug)]
pub struct PortError(String);

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "leasing a loopback port: {}", self.0)
    }
}

impl std::error::Error for PortError {}

/// A loopback port held for this process; dropping it lets others take it.
#[derive(Debug)]
pub struct PortLease {
    port: u16,
    _lock: Flock<File>,
}

impl PortLease {
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// One free port, leased.
pub fn lease() -> Result<PortLease, PortError> {
    let range = leasable_range();
    let span = u32::from(range.end - range.start);
    let start = random_u64() % u64::from(span);
    let dir = lock_dir()?;
    for i in 0..span {
        let port = range.start + ((start as u32 + i) % span) as u16;
        if let Some(l) = try_lease(&dir, port)? {
            return Ok(l);
        }
    }
    Err(PortError(format!(
        "no port in {}..{} is both free and unleased",
        range.start, range.end
    )))
}

/// `n` distinct free ports, leased.
pub fn lease_many(n: usize) -> Result<Vec<PortLease>, PortError> {
    (0..n).map(|_| lease()).collect()
}

/// `port` if it is free and unleased (a restart that wants its old port
/// back), else any other.
pub fn lease_preferring(port: u16) -> Result<PortLease, PortError> {
    match try_lease(&lock_dir()?, port)? {
        Some(l) => Ok(l),
        None => lease(),
    }
}

fn try_lease(dir: &std::path::Path, port: u16) -> Result<Option<PortLease>, PortError> {
    let path = dir.join(format!("{port}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| PortError(format!("{}: {e}", path.display())))?;
    // Shared with other users (a test run as another user).
    let _ = file.set_permissions(std::fs::Permissions::from_mode(0o666));
    let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        // Another courier process holds it.
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
        Err((_, e)) => return Err(PortError(format!("flock {}: {e}", path.display()))),
    };
    // Leased by nobody, but something outside courier may listen on it.
    if TcpListener::bind(("127.0.0.1", port)).is_err() {
        return Ok(None);
    }
    Ok(Some(PortLease { port, _lock: lock }))
}

fn lock_dir() -> Result<PathBuf, PortError> {
    let dir = std::env::temp_dir().join("courier-ports");
    std::fs::create_dir_all(&dir).map_err(|e| PortError(format!("{}: {e}", dir.display())))?;
    // Sticky and writable by all, like /tmp: the first creator may be root.
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    Ok(dir)
}

/// The `SPAN_MAX` ports below the kernel's ephemeral range (never below
/// `FLOOR`), or the span above it when the range starts too low.
fn leasable_range() -> Range<u16> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let bounds = text.and_then(|t| {
        let mut it = t.split_whitespace().map(|s| s.parse::<u16>().ok());
        Some((it.next()??, it.next()??))
    });
    match bounds {
        Some((low, high)) => range_beside(low, high),
        None => FALLBACK,
    }
}

fn range_beside(low: u16, high: u16) -> Range<u16> {
    let below = low.saturating_sub(SPAN_MAX).max(FLOOR)..low;
    if below.end > below.start && below.end - below.start >= 1_000 {
        return below;
    }
    let start = high.saturating_add(1);
    let above = start..start.saturating_add(SPAN_MAX);
    if above.end > above.start && above.end - above.start >= 1_000 {
        return above;
    }
    FALLBACK
}

fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leased_ports_are_distinct_and_outside_the_ephemeral_range() {
        let leases = lease_many(20).unwrap();
        let mut ports: Vec<u16> = leases.iter().map(|l| l.port()).collect();
        let range = leasable_range();
        assert!(
            ports.iter().all(|p| range.contains(p)),
            "{ports:?} outside {range:?}"
        );
        ports.sort();
        ports.dedup();
        assert_eq!(ports.len(), 20);
    }

    #[test]
    fn a_held_lease_is_not_handed_out_again_and_a_dropped_one_is() {
        let first = lease().unwrap();
        let p = first.port();
        let second = lease_preferring(p).unwrap();
        assert_ne!(second.port(), p, "a held port was leased twice");
        drop(first);
        let third = lease_preferring(p).unwrap();
        assert_eq!(third.port(), p, "a released port was not available again");
    }

    #[test]
    fn a_port_something_else_listens_on_is_skipped() {
        let probe = lease().unwrap();
        let p = probe.port();
        drop(probe);
        let _squatter = TcpListener::bind(("127.0.0.1", p)).unwrap();
        let l = lease_preferring(p).unwrap();
        assert_ne!(l.port(), p);
    }

    #[test]
    fn the_range_sits_beside_the_kernels_ephemeral_range() {
        assert_eq!(range_beside(32_768, 60_999), 20_768..32_768);
        assert_eq!(range_beside(15_000, 60_999), 10_000..15_000);
        // No room below: take the span above.
        assert_eq!(range_beside(1_024, 30_000), 30_001..42_001);
        assert_eq!(range_beside(1_024, 65_000), FALLBACK);
    }
}
