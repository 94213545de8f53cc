//! The report of a history run: each round's figures, the read times,
//! and its text.

use super::*;

/// One database's figures in one round.
#[derive(Debug, Clone, Serialize)]
pub struct RoundResult {
    pub database: &'static str,
    pub round: u32,
    /// Whether this database ran first in its round's pair.
    pub first: bool,
    pub claim_to_settle_per_s: f64,
    pub webhook_merges_per_s: f64,
    /// What the server did over the round (claims, settles and merges).
    pub server: ServerCounters,
    /// Autovacuum and autoanalyze passes over this database's tables that
    /// ended during the round.
    pub autovacuum_passes: i64,
    /// Seconds waited before the round for autovacuum's workers to finish.
    pub autovacuum_wait_s: f64,
    pub claim_to_settle_cpu: PhaseCpu,
    pub merges_cpu: PhaseCpu,
}

/// The CPU of one phase of a round (all zero when the server's process is
/// not known).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PhaseCpu {
    /// PostgreSQL's CPU (every server process, autovacuum's included) per
    /// action of the phase, in milliseconds.
    pub postgres_ms_per_action: f64,
    /// Autovacuum's workers' CPU over the phase, in cores (a floor: a worker
    /// that lives less than a reading interval is missed).
    pub autovacuum_cores: f64,
    /// The host's steal over the phase, in cores.
    pub steal_cores: f64,
}

/// Read times on one database, medians in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct ReadTimes {
    pub status_ms: f64,
    pub sample_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HistoryReport {
    pub seeded_actions: i64,
    /// Seconds the seeding took (0 when a seeded database was reused).
    pub seed_s: f64,
    pub full_db_bytes: i64,
    pub rounds: Vec<RoundResult>,
    pub claim_to_settle_ratio: f64,
    pub webhook_merges_ratio: f64,
    pub empty: ReadTimes,
    pub full: ReadTimes,
    /// A count by state with a full scan, as `courier status` did before.
    pub scanned_count_full_ms: f64,
    /// The costliest statements of the last pair of rounds on each database,
    /// trigger functions' statements included (empty without
    /// pg_stat_statements).
    pub statements_empty: Vec<StatementStat>,
    pub statements_full: Vec<StatementStat>,
    /// Actions per path and round (the statements' calls are per action of it).
    pub backlog: u64,
    pub load_average_start: String,
    pub load_average_end: String,
    pub wall_time_s: f64,
}

impl HistoryReport {
    pub fn table(&self) -> String {
        let med = |db: &str, f: fn(&RoundResult) -> f64| {
            crate::stats::median(self.rounds.iter().filter(|r| r.database == db).map(f))
        };
        let mut out = format!(
            "history: {} finished actions seeded ({:.0} s; {:.1} GB of tables and indexes); {} round(s)\n\n",
            self.seeded_actions,
            self.seed_s,
            self.full_db_bytes as f64 / 1e9,
            self.rounds.len() / 2
        );
        out.push_str("| path | empty database | with history | ratio (target >= 0.90) |\n|---|---:|---:|---:|\n");
        for (name, f, ratio) in [
            (
                "claim to settle (actions/s)",
                (|r: &RoundResult| r.claim_to_settle_per_s) as fn(&RoundResult) -> f64,
                self.claim_to_settle_ratio,
            ),
            (
                "webhook merges (merges/s)",
                |r: &RoundResult| r.webhook_merges_per_s,
                self.webhook_merges_ratio,
            ),
        ] {
            out.push_str(&format!(
                "| {name} | {:.0} | {:.0} | {ratio:.2}x |\n",
                med(EMPTY_DB, f),
                med(FULL_DB, f)
            ));
        }
        let rounds_lines = self.rounds_table();
        out.push_str(&format!(
            "| `courier status` (ms, target < 100) | {:.1} | {:.1} | |\n| dashboard sample (ms, target < 100) | {:.1} | {:.1} | |\n| count by state with a full scan (ms; before) | | {:.0} | |\n",
            self.empty.status_ms, self.full.status_ms, self.empty.sample_ms, self.full.sample_ms, self.scanned_count_full_ms
        ));
        out.push('\n');
        out.push_str(&rounds_lines);
        for (heading, stats) in [
            ("empty database", &self.statements_empty),
            ("with history", &self.statements_full),
        ] {
            if !stats.is_empty() {
                out.push_str(&crate::stats::statement_lines(
                    &format!("{heading}, last round, statements inside trigger functions too"),
                    stats,
                    self.backlog,
                ));
            }
        }
        out.push_str(&format!(
            "\nload average: {} at the start, {} at the end; wall time {:.0} s\n",
            self.load_average_start, self.load_average_end, self.wall_time_s
        ));
        out
    }

    /// The pairs' own ratios (full over empty, round by round) of one path.
    pub fn pair_ratios(&self, f: fn(&RoundResult) -> f64) -> Vec<f64> {
        let of = |db: &str, round: u32| {
            self.rounds
                .iter()
                .find(|r| r.database == db && r.round == round)
                .map(f)
        };
        let mut rounds: Vec<u32> = self.rounds.iter().map(|r| r.round).collect();
        rounds.dedup();
        rounds
            .into_iter()
            .filter_map(|n| Some(crate::stats::ratio(of(FULL_DB, n)?, of(EMPTY_DB, n)?)))
            .collect()
    }

    /// One line per round and database: its rates, its place in the pair,
    /// and what the server did meanwhile.
    fn rounds_table(&self) -> String {
        let mut out = String::from(
            "| round | database | ran | claim to settle /s | merges /s | WAL MB | full-page images | checkpoints | blocks read | blocks hit | autovacuum passes | waited for autovacuum (s) | PostgreSQL CPU per action, claim to settle / merge (ms) | autovacuum cores, claim to settle / merges | steal cores, claim to settle / merges |\n\
             |---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in &self.rounds {
            let c = &r.server;
            let (a, b) = (&r.claim_to_settle_cpu, &r.merges_cpu);
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {:.1} | {:.3} / {:.3} | {:.2} / {:.2} | {:.2} / {:.2} |\n",
                r.round,
                if r.database == FULL_DB {
                    "with history"
                } else {
                    "empty"
                },
                if r.first { "first" } else { "second" },
                r.claim_to_settle_per_s,
                r.webhook_merges_per_s,
                c.wal_bytes as f64 / 1e6,
                c.wal_fpi,
                c.checkpoints,
                c.blks_read,
                c.blks_hit,
                r.autovacuum_passes,
                r.autovacuum_wait_s,
                a.postgres_ms_per_action,
                b.postgres_ms_per_action,
                a.autovacuum_cores,
                b.autovacuum_cores,
                a.steal_cores,
                b.steal_cores,
            ));
        }
        out.push_str(&self.rounds_summary());
        out
    }

    /// Each pair's ratios, the PostgreSQL CPU per action, and the steal.
    fn rounds_summary(&self) -> String {
        let mut out = String::new();
        for (name, f) in [
            (
                "claim to settle",
                (|r: &RoundResult| r.claim_to_settle_per_s) as fn(&RoundResult) -> f64,
            ),
            ("webhook merges", |r: &RoundResult| r.webhook_merges_per_s),
        ] {
            let pairs = self.pair_ratios(f);
            out.push_str(&format!(
                "{name}, each pair's ratio: {} (median {:.2}x)\n",
                pairs
                    .iter()
                    .map(|x| format!("{x:.2}x"))
                    .collect::<Vec<_>>()
                    .join(", "),
                crate::stats::median(pairs.iter().copied())
            ));
        }
        let cpu = |db: &str, f: fn(&RoundResult) -> f64| {
            crate::stats::median(self.rounds.iter().filter(|r| r.database == db).map(f))
        };
        for (name, f) in [
            (
                "claim to settle",
                (|r: &RoundResult| r.claim_to_settle_cpu.postgres_ms_per_action)
                    as fn(&RoundResult) -> f64,
            ),
            ("a webhook merge", |r: &RoundResult| {
                r.merges_cpu.postgres_ms_per_action
            }),
        ] {
            let (e, h) = (cpu(EMPTY_DB, f), cpu(FULL_DB, f));
            out.push_str(&format!(
                "PostgreSQL CPU per action, {name} (medians): {e:.3} ms empty, {h:.3} ms with history ({:.2}x)\n",
                crate::stats::ratio(h, e)
            ));
        }
        let steal = self.steal_max();
        out.push_str(&if steal <= STEAL_MAX_CORES {
            format!("host steal: at most {steal:.2} cores in any phase (limit {STEAL_MAX_CORES:.2}): the run counts\n")
        } else {
            format!("host steal: {steal:.2} cores in a phase, over the limit of {STEAL_MAX_CORES:.2}: the host took CPU, the rounds do not compare the databases alone\n")
        });
        out
    }

    /// The most steal any phase of any round saw, in cores.
    pub fn steal_max(&self) -> f64 {
        self.rounds
            .iter()
            .flat_map(|r| [r.claim_to_settle_cpu.steal_cores, r.merges_cpu.steal_cores])
            .fold(0.0, f64::max)
    }
}
