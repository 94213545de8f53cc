//! The long-life benchmarks in small form, each on a PostgreSQL cluster of
//! its own: the history benchmark's structure (no timing is judged), and
//! the live migration, whose guarantees are judged: nothing lost, no claim
//! over a second, the schema current after.

use courier_bench::history::{self, HistoryConfig};
use courier_bench::live_migration::{self, LiveMigrationConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_smoke_measures_both_databases_and_both_reads() {
    let r = history::run(&HistoryConfig::smoke())
        .await
        .expect("the smoke run completes");
    assert!(r.seeded_actions >= 20_000, "{}", r.seeded_actions);
    assert_eq!(r.rounds.len(), 4, "two rounds of each database");
    for round in &r.rounds {
        assert!(round.claim_to_settle_per_s > 0.0 && round.webhook_merges_per_s > 0.0);
        // The round's own writes and reads, as the server counted them.
        assert!(
            round.server.wal_bytes > 0 && round.server.blks_hit > 0,
            "{round:?}"
        );
    }
    // The pair's order alternates: neither database always runs first.
    let firsts: Vec<(u32, &str)> = r
        .rounds
        .iter()
        .filter(|x| x.first)
        .map(|x| (x.round, x.database))
        .collect();
    assert_eq!(
        firsts,
        [(0, "courier_hist_empty"), (1, "courier_hist_full")],
        "{:?}",
        r.rounds
    );
    assert_eq!(r.pair_ratios(|x| x.claim_to_settle_per_s).len(), 2);
    assert!(r.claim_to_settle_ratio > 0.0 && r.webhook_merges_ratio > 0.0);
    assert!(r.full.status_ms > 0.0 && r.full.sample_ms > 0.0);
    assert!(r.table().contains("claim to settle"));
    // The server's CPU was read from /proc through each round's claims
    // (the merges of 500 webhooks may take less than one clock tick).
    let claims_cpu: f64 = r
        .rounds
        .iter()
        .map(|x| x.claim_to_settle_cpu.postgres_ms_per_action)
        .sum();
    assert!(claims_cpu > 0.0, "{:?}", r.rounds);
    assert!(r.table().contains("PostgreSQL CPU per action"));
}

fn small(actions: i64) -> LiveMigrationConfig {
    LiveMigrationConfig {
        backlog: 2_000,
        enqueued_during: 200,
        ..LiveMigrationConfig::new(actions)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_migration_applies_while_workers_run_and_nothing_is_lost() {
    let r = live_migration::run_own_cluster(&small(50_000))
        .await
        .expect("the run completes");
    assert_eq!(r.settled, r.expected, "{r:?}");
    assert_eq!(
        r.messages as u64, r.expected,
        "one message per action: {r:?}"
    );
    assert!(r.claim_ms_max <= 1_000.0, "{r:?}");
    assert!(r.passed, "{r:?}");
}

/// The size: 1,000,000 finished actions (a few minutes here).
/// `cargo nextest run -p courier-bench --run-ignored all -E 'test(million)'`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "seeds 1,000,000 actions: minutes"]
async fn the_next_migration_applies_under_load_on_a_million_actions() {
    let r = live_migration::run_own_cluster(&LiveMigrationConfig::new(1_000_000))
        .await
        .expect("the run completes");
    println!("{}", r.table());
    assert!(r.passed, "{r:?}");
}
