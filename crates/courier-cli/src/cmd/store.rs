//! `courier store set | show | list`: a store's flow-control settings (its
//! rate, burst and in-flight cap, `courier_core::rate`), straight on the
//! database through the same SQL function as `PUT /v1/stores/{store}`
//! (`courier.store_configure`, migration 27), which writes an `events` row
//! (`store_settings`) naming the caller `cli:<$USER>`. Running workers
//! obey a change at their next claim.
//!
//! Exit codes: 0 done; 2 a value refused (the field and why on stderr;
//! nothing changed), no such store, bad flags (clap's own exit code), or
//! the database unreachable.

use super::common::DbArgs;
pub(super) use super::intent::caller;
use courier_core::rate::{validate_name, SettingsError, StoreSettings};
use courier_store::{FlowError, StoreFlow};
use std::process::ExitCode;

/// The most stores `courier store list` prints.
const STORES_LISTED_MAX: i64 = 1_000;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Set a store's settings, replacing all three: a flag left out goes
    /// back to its default. Creates the store if it was never seen.
    Set {
        #[command(flatten)]
        db: DbArgs,
        /// The store's name (1 to 64 of A-Z a-z 0-9 . _ -).
        store: String,
        /// Sends a second at most, shared by every worker (0.001 to
        /// 100000). Left out: no rate.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        rate_per_s: Option<f64>,
        /// How many sends may leave at once after a quiet spell (1 to
        /// 100000; only with --rate-per-s). Left out: one second's worth.
        #[arg(long, value_name = "B", allow_negative_numbers = true)]
        burst: Option<u32>,
        /// At most this many of the store's actions in flight at once (1 to
        /// 10000). Left out: each worker's --store-in-flight-max.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        in_flight_max: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// A store's settings, its actions in flight and its bucket's tokens.
    Show {
        #[command(flatten)]
        db: DbArgs,
        store: String,
        #[arg(long)]
        json: bool,
    },
    /// The stores with a rate or an in-flight cap set, by name (at most
    /// 1,000).
    List {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Set {
            db,
            store,
            rate_per_s,
            burst,
            in_flight_max,
            json,
        } => {
            let settings = StoreSettings {
                rate_per_s,
                burst,
                in_flight_max,
            };
            // Checked before connecting: a refusal needs no database.
            let checked = validate_name("store", &store).and_then(|()| settings.validate());
            if let Err(e) = checked {
                return Ok(refused(&e));
            }
            let db = db.connect(1).await?;
            match db.store_configure(&store, &settings, &caller()).await {
                Ok(flow) => {
                    print_flow(&flow, json)?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(FlowError::Invalid(e)) => Ok(refused(&e)),
                Err(FlowError::Store(e)) => Err(e.into()),
            }
        }
        What::Show { db, store, json } => {
            let db = db.connect(1).await?;
            match db.store_flow(&store).await? {
                Some(flow) => {
                    print_flow(&flow, json)?;
                    Ok(ExitCode::SUCCESS)
                }
                None => {
                    eprintln!("no store {store:?}: never configured, and no action enqueued");
                    Ok(ExitCode::from(2))
                }
            }
        }
        What::List { db, json } => {
            let db = db.connect(1).await?;
            let stores = db.stores_configured(STORES_LISTED_MAX).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stores)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:<24} {:>10} {:>7} {:>7} {:>9} {:>9}  configured",
                "store", "rate/s", "burst", "cap", "in flight", "tokens"
            );
            for f in &stores {
                let s = &f.settings;
                println!(
                    "{:<24} {:>10} {:>7} {:>7} {:>9} {:>9}  {}",
                    f.store,
                    s.rate_per_s.map_or("-".into(), |r| r.to_string()),
                    s.burst.map_or("-".into(), |b| b.to_string()),
                    s.in_flight_max.map_or("-".into(), |c| c.to_string()),
                    f.in_flight,
                    tokens_text(f.tokens),
                    f.configured_at
                        .map_or("-".into(), |t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
                );
            }
            if stores.len() as i64 == STORES_LISTED_MAX {
                println!("(the first {STORES_LISTED_MAX}; more may be configured)");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn print_flow(f: &StoreFlow, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(f)?);
        return Ok(());
    }
    let s = &f.settings;
    println!("store {}", f.store);
    println!("  rate           {}", rate_text(s.rate_per_s, s.burst));
    println!(
        "  in-flight cap  {}",
        s.in_flight_max
            .map_or("each worker's --store-in-flight-max".into(), |c| c
                .to_string())
    );
    println!("  in flight now  {}", f.in_flight);
    println!("  tokens now     {}", tokens_text(f.tokens));
    println!(
        "  configured     {}",
        f.configured_at.map_or("never".into(), |t| t
            .format("%Y-%m-%d %H:%M:%S UTC")
            .to_string())
    );
    Ok(())
}

/// `5 a second, burst 10`, or `none`.
pub(super) fn rate_text(rate_per_s: Option<f64>, burst: Option<u32>) -> String {
    match (rate_per_s, burst) {
        (Some(r), Some(b)) => format!("{r} a second, burst {b}"),
        (Some(r), None) => format!("{r} a second"),
        _ => "none".to_string(),
    }
}

/// A bucket's tokens to one decimal, or `-` without a rate.
pub(super) fn tokens_text(tokens: Option<f64>) -> String {
    tokens.map_or("-".into(), |t| format!("{t:.1}"))
}

/// Settings refused: the flag (or the argument) at fault and why, exit 2.
pub(super) fn refused(e: &SettingsError) -> ExitCode {
    eprintln!(
        "refused: {}: {} (nothing changed)",
        flag_of(e.field),
        e.reason
    );
    ExitCode::from(2)
}

/// The flag of a settings field (`--rate-per-s`), or the argument of a
/// name (`STORE`).
fn flag_of(field: &str) -> String {
    match field {
        "store" | "provider" => field.to_uppercase(),
        _ => format!("--{}", field.replace('_', "-")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_flag() {
        let e = StoreSettings {
            rate_per_s: None,
            burst: Some(3),
            in_flight_max: None,
        }
        .validate()
        .unwrap_err();
        assert_eq!(e.field, "burst");
        assert_eq!(refused(&e), ExitCode::from(2));
        assert_eq!(rate_text(Some(5.0), Some(10)), "5 a second, burst 10");
        assert_eq!(rate_text(None, None), "none");
        assert_eq!(tokens_text(Some(2.345)), "2.3");
        assert_eq!(flag_of("in_flight_max"), "--in-flight-max");
        assert_eq!(flag_of("store"), "STORE");
    }
}
