//! What the worker processes of a run did, and when: one line per commit,
//! suppression and redelivery, appended to a file per process.
//!
//! Each line is one `write(2)` on a file opened for appending, so a SIGKILL
//! loses no line that was written, and the run can time each fault's
//! recovery (kill until the next commit) and attribute redeliveries and
//! suppressed duplicates to the fault before them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What a worker did with one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// The apply transaction committed the effect.
    Commit,
    /// The dedup record was there: no second effect.
    Suppress,
    /// A delivery after the first (`delivered` > 1).
    Redelivery,
}

impl EventKind {
    fn code(self) -> char {
        match self {
            EventKind::Commit => 'c',
            EventKind::Suppress => 's',
            EventKind::Redelivery => 'r',
        }
    }

    fn from_code(c: &str) -> Option<Self> {
        match c {
            "c" => Some(EventKind::Commit),
            "s" => Some(EventKind::Suppress),
            "r" => Some(EventKind::Redelivery),
            _ => None,
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch (the run compares these
/// with the fault times and the broker's timestamps, all on this machine).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// One process's event file. Cloning shares it.
#[derive(Debug, Clone)]
pub struct EventLog {
    file: Arc<Mutex<std::fs::File>>,
}

impl EventLog {
    /// Opens (appending) `<dir>/<name>.events`.
    pub fn open(dir: &Path, name: &str) -> std::io::Result<Self> {
        let path = dir.join(format!("{}.events", name.replace('#', "-")));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(EventLog {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Appends one line. A failed write is logged and dropped: the events
    /// are figures for the report, never an input of the protocol.
    pub fn record(&self, kind: EventKind) {
        let line = format!("{} {}\n", unix_ms(), kind.code());
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = f.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "event line not written");
        }
    }
}

/// Every event of every `*.events` file in `dir`, sorted by time.
pub fn read_all(dir: &Path) -> Vec<(u64, EventKind)> {
    let mut out = Vec::new();
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "events"))
                .collect()
        })
        .unwrap_or_default();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        out.extend(parse(&text));
    }
    out.sort();
    out
}

/// Parses event lines; a torn or foreign line is skipped.
pub fn parse(text: &str) -> Vec<(u64, EventKind)> {
    text.lines()
        .filter_map(|l| {
            let (at, code) = l.split_once(' ')?;
            Some((at.parse().ok()?, EventKind::from_code(code)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let log = EventLog::open(dir.path(), "worker#1").unwrap();
        log.record(EventKind::Commit);
        log.record(EventKind::Suppress);
        std::fs::write(dir.path().join("worker-2.events"), "5 r\n7 x\n9").unwrap();
        let all = read_all(dir.path());
        let kinds: Vec<EventKind> = all.iter().map(|e| e.1).collect();
        assert_eq!(
            kinds,
            vec![
                EventKind::Redelivery,
                EventKind::Commit,
                EventKind::Suppress
            ]
        );
        assert!(all[1].0 >= all[0].0);
    }
}
