//! `courier enqueue`: enqueue actions straight into the database, through
//! the same SQL enqueue as every other caller (`courier.enqueue`, and its
//! set form for `--jsonl`): one action from flags, or many from JSON lines.

use super::common::DbArgs;
use anyhow::Context;
use courier_store::{EnqueueError, Enqueued, NewAction};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    /// The action's store (one action from flags).
    #[arg(long, required_unless_present = "jsonl", conflicts_with = "jsonl")]
    store: Option<String>,
    /// The recipient, E.164.
    #[arg(long, required_unless_present = "jsonl")]
    to: Option<String>,
    /// The text.
    #[arg(long, required_unless_present = "jsonl")]
    body: Option<String>,
    /// The idempotency key within the store.
    #[arg(long)]
    key: Option<String>,
    /// Many actions: one JSON object a line (`{"store", "to", "body",
    /// "key"}`), `-` for standard input; enqueued in batches of `--batch`,
    /// each all or nothing.
    #[arg(long, value_name = "FILE")]
    jsonl: Option<PathBuf>,
    /// Actions per batch with --jsonl.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=i64::from(courier_core::ENQUEUE_MANY_MAX)))]
    batch: u32,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = args.db.connect(1).await?;
    let Some(path) = &args.jsonl else {
        let new = NewAction {
            store: args.store.clone().unwrap_or_default(),
            to: args.to.clone().unwrap_or_default(),
            body: args.body.clone().unwrap_or_default(),
            key: args.key.clone(),
            ..Default::default()
        };
        return Ok(match store.action_enqueue(&new).await {
            Ok(e) => {
                print_one(0, e);
                ExitCode::SUCCESS
            }
            Err(e) => refused(e, 0)?,
        });
    };
    let lines = read_lines(path)?;
    let mut batch = Vec::with_capacity(args.batch as usize);
    let mut first = 0usize;
    for (i, line) in lines.enumerate() {
        let line = line.with_context(|| format!("reading line {}", i + 1))?;
        if line.trim().is_empty() {
            continue;
        }
        let new: NewAction = serde_json::from_str(&line)
            .with_context(|| format!("line {}: not an action", i + 1))?;
        batch.push(new);
        if batch.len() == args.batch as usize {
            if let Some(code) = send(&store, &batch, first).await? {
                return Ok(code);
            }
            first += batch.len();
            batch.clear();
        }
    }
    if let Some(code) = send(&store, &batch, first).await? {
        return Ok(code);
    }
    Ok(ExitCode::SUCCESS)
}

fn read_lines(path: &PathBuf) -> anyhow::Result<Box<dyn Iterator<Item = std::io::Result<String>>>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(std::io::stdin().lock().lines()));
    }
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(Box::new(std::io::BufReader::new(f).lines()))
}

/// One batch; `Some(exit code)` when it was refused.
async fn send(
    store: &courier_store::PgStore,
    batch: &[NewAction],
    first: usize,
) -> anyhow::Result<Option<ExitCode>> {
    match store.actions_enqueue_many(batch).await {
        Ok(made) => {
            for (i, e) in made.into_iter().enumerate() {
                print_one(first + i, e);
            }
            Ok(None)
        }
        Err(e) => refused(e, first).map(Some),
    }
}

/// `<n> created <id>` or `<n> repeat <id>` (n counts from 1).
fn print_one(n: usize, e: Enqueued) {
    let what = if e.created() { "created" } else { "repeat" };
    println!("{} {what} {}", n + 1, e.id());
}

/// Bad input: said on stderr, exit 2 (nothing of its batch was enqueued).
/// An unavailable database is an error (exit 1): retry, with the same keys.
fn refused(e: EnqueueError, first: usize) -> anyhow::Result<ExitCode> {
    // The message names the item within its batch; this, the line.
    let at = |index: Option<usize>| {
        index.map_or(String::new(), |i| format!(" (action {})", first + i + 1))
    };
    match e {
        EnqueueError::Invalid(i) => eprintln!("refused{}: {} ({})", at(i.index), i.message, i.code),
        EnqueueError::KeyReused { index, message, .. } => {
            eprintln!("refused{}: {message} (key_reused)", at(index))
        }
        EnqueueError::Store(e) => return Err(e.into()),
    }
    if first > 0 {
        eprintln!("the {first} actions before this batch were enqueued");
    }
    Ok(ExitCode::from(2))
}
