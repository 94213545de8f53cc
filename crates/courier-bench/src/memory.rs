//! Resident memory of this process, from `/proc/self/status` (Linux).
//!
//! `VmHWM` is the peak resident set since the process started or since the
//! last [`peak_reset`], which lets a benchmark measure one phase at a time.
//! Everything here is best effort: on a system without `/proc` the figures
//! are `None` and the benchmark says so instead of failing.

/// The peak resident set size, in KiB.
pub fn peak_kib() -> Option<u64> {
    status_field("VmHWM:")
}

/// The resident set size now, in KiB.
pub fn current_kib() -> Option<u64> {
    status_field("VmRSS:")
}

/// Resets the peak to the current resident set (writes `5` to
/// `/proc/self/clear_refs`); false when the kernel refuses.
pub fn peak_reset() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn status_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_field(&text, name)
}

fn parse_field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse() {
        let text = "Name:\tx\nVmHWM:\t   12345 kB\nVmRSS:\t  999 kB\n";
        assert_eq!(parse_field(text, "VmHWM:"), Some(12345));
        assert_eq!(parse_field(text, "VmRSS:"), Some(999));
        assert_eq!(parse_field(text, "VmSwap:"), None);
    }

    #[test]
    fn this_process_has_a_resident_set() {
        let (now, peak) = (current_kib().unwrap(), peak_kib().unwrap());
        assert!(now > 0 && peak >= now, "rss {now} peak {peak}");
    }
}
