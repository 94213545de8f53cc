//! Number formatting for readings and tables: thousands separators,
//! percentages and durations, so every sentence reads the same way.

/// `1234567` as `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    let first_group = match digits.len() % 3 {
        0 => 3,
        r => r,
    };
    for (i, c) in digits.chars().enumerate() {
        if i >= first_group && (i - first_group) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A signed count with separators.
pub fn signed(n: i64) -> String {
    if n < 0 {
        format!("-{}", count(n.unsigned_abs()))
    } else {
        count(n as u64)
    }
}

/// A rate per million, rounded to a whole number with separators.
pub fn per_million(x: f64) -> String {
    count(x.max(0.0).round() as u64)
}

/// A share in [0, 1] as a percentage with `decimals` places: `0.1566` -> `15.66%`.
pub fn pct(share: f64, decimals: usize) -> String {
    format!("{:.*}%", decimals, share * 100.0)
}

/// A share as a percentage with as few places as show its size
/// (`0.01` -> `1%`, `0.005` -> `0.5%`, `0.0001` -> `0.01%`).
pub fn rate(share: f64) -> String {
    let p = share * 100.0;
    let mut decimals = 0;
    while decimals < 4 && (p * 10f64.powi(decimals as i32)).fract().abs() > 1e-9 {
        decimals += 1;
    }
    format!("{:.*}%", decimals, p)
}

/// A duration in seconds in its most natural unit: `90` -> `1.5 min`,
/// `300` -> `5 min`, `86400` -> `1 d`.
pub fn duration_s(s: f64) -> String {
    let (v, unit) = if s < 60.0 {
        (s, "s")
    } else if s < 3_600.0 {
        (s / 60.0, "min")
    } else if s < 86_400.0 {
        (s / 3_600.0, "h")
    } else {
        (s / 86_400.0, "d")
    };
    let rounded = (v * 10.0).round() / 10.0;
    if rounded.fract() == 0.0 {
        format!("{rounded:.0} {unit}")
    } else {
        format!("{rounded:.1} {unit}")
    }
}

/// Lays out rows as a left-aligned text table with a header rule.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(cell);
            if i + 1 < cells.len() {
                s.push_str(&" ".repeat(widths[i] - cell.chars().count()));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(header.to_vec());
    let total: usize = widths.iter().sum::<usize>() + 2 * (cols.saturating_sub(1));
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(5_000_000), "5,000,000");
        assert_eq!(signed(-100_000), "-100,000");
        assert_eq!(pct(0.1566, 2), "15.66%");
        assert_eq!(rate(0.01), "1%");
        assert_eq!(rate(0.005), "0.5%");
        assert_eq!(rate(0.0001), "0.01%");
        assert_eq!(duration_s(300.0), "5 min");
        assert_eq!(duration_s(90.0), "1.5 min");
        assert_eq!(duration_s(86_400.0), "1 d");
        assert_eq!(duration_s(20.0), "20 s");
        let t = table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\n-------\nxxx  y\n");
    }
}
