//! What the pool's writable check costs per checkout: a private cluster,
//! two pools on it (`RecycleCheck::Open`, `RecycleCheck::Writable`), tasks
//! that each check a connection out and run one short write (a one-row
//! `UPDATE`, the shape of a heartbeat), in alternating rounds so both see the
//! same machine. Prints the mean time per checkout-and-write of each and the
//! difference.
//!
//! `cargo run --release -p courier-store --example recycle_check_cost -- [ROUNDS] [TASKS]`

use courier_store::cluster::{Cluster, StopMode};
use courier_store::{PgStore, RecycleCheck, StoreConfig};
use std::time::{Duration, Instant};

const WRITES_PER_TASK: usize = 2_000;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let tasks: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let dir = tempfile::Builder::new()
        .prefix("courier-recycle-cost-")
        .tempdir_in("/tmp")
        .expect("a directory");
    let cluster = Cluster::new(dir.path()).setting("synchronous_commit", "off");
    let url = cluster.start().expect("start a private cluster");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(measure(&url, rounds, tasks));
    drop(rt);
    let _ = cluster.stop(StopMode::Immediate);
}

async fn measure(url: &str, rounds: usize, tasks: usize) {
    let open = store(url, RecycleCheck::Open, tasks).await;
    let writable = store(url, RecycleCheck::Writable, tasks).await;
    open.client()
        .await
        .expect("a connection")
        .batch_execute(&format!(
            "CREATE TABLE beat (id int PRIMARY KEY, n bigint); \
             INSERT INTO beat SELECT i, 0 FROM generate_series(1, {tasks}) i"
        ))
        .await
        .expect("the table");
    println!(
        "{tasks} tasks x {WRITES_PER_TASK} checkouts, each one UPDATE of the task's row, \
         synchronous_commit off; us per checkout and write, as one task sees it"
    );
    println!(
        "{:>5} {:>10} {:>10} {:>8}",
        "round", "open", "writable", "ratio"
    );
    let (mut t_open, mut t_writable) = (Duration::ZERO, Duration::ZERO);
    for round in 1..=rounds {
        let o = run(&open, tasks).await;
        let w = run(&writable, tasks).await;
        t_open += o;
        t_writable += w;
        let per = |d: Duration| d.as_secs_f64() * 1e6 / WRITES_PER_TASK as f64;
        println!(
            "{round:>5} {:>10.1} {:>10.1} {:>7.2}x",
            per(o),
            per(w),
            per(w) / per(o)
        );
    }
    let ops = (rounds * tasks * WRITES_PER_TASK) as f64;
    let (o, w) = (t_open.as_secs_f64(), t_writable.as_secs_f64());
    println!(
        "all rounds: open {:.0} ops/s, writable {:.0} ops/s ({:.2}x); the check adds {:.1} us to each checkout",
        ops / o,
        ops / w,
        o / w,
        (w - o) * 1e6 * tasks as f64 / ops
    );
}

async fn store(url: &str, check: RecycleCheck, tasks: usize) -> PgStore {
    let mut cfg = StoreConfig::new(url);
    cfg.migrate = false;
    cfg.pool_size_max = tasks;
    cfg.recycle_check = check;
    PgStore::connect(&cfg).await.expect("connect")
}

/// Every task's checkouts and writes; the wall time.
async fn run(store: &PgStore, tasks: usize) -> Duration {
    let t0 = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for id in 1..=tasks as i32 {
        let store = store.clone();
        set.spawn(async move {
            for _ in 0..WRITES_PER_TASK {
                let c = store.client().await.expect("a connection");
                c.execute("UPDATE beat SET n = n + 1 WHERE id = $1", &[&id])
                    .await
                    .expect("the write");
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("a task");
    }
    t0.elapsed()
}
