//! `courier status`: counts by state (every state of `ActionState::ALL`,
//! in that order, zeros included), the actions held `unknown` (newest
//! first, for an operator to resolve), per-store backlog, oldest open
//! intent, the node written to and its standbys' lag.

use super::common::DbArgs;
use courier_core::{ActionState, Limits};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    /// The provider's key retention, for the age alert.
    #[arg(long, default_value_t = Limits::default().key_retention_s)]
    key_retention_s: u64,
    #[arg(long, default_value_t = Limits::default().intent_age_alert_percent)]
    intent_age_alert_percent: u32,
    /// Stores to list (noisiest first).
    #[arg(long, default_value_t = 10)]
    stores: usize,
    /// Actions held unknown to list (newest hold first).
    #[arg(long, default_value_t = 20)]
    unknown: i64,
    #[arg(long)]
    json: bool,
}

/// The most scheduled actions `courier status` counts as due soon.
const SCHEDULED_DUE_COUNTED_MAX: i64 = 10_000;

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = args.db.connect(2).await?;
    let alert_s = args.key_retention_s * u64::from(args.intent_age_alert_percent) / 100;
    let s = store.summary(alert_s).await?;
    let r = store.replication().await?;
    let due = store.scheduled_due(SCHEDULED_DUE_COUNTED_MAX).await?;
    let unknown = store.actions_unknown(args.unknown.max(0), None).await?;
    let by_state: Vec<(ActionState, i64)> = ActionState::ALL
        .iter()
        .map(|st| (*st, s.state(st)))
        .collect();
    if args.json {
        let mut v = serde_json::to_value(&s)?;
        v["by_state"] = serde_json::to_value(&by_state)?;
        v["replication"] = serde_json::to_value(&r)?;
        v["scheduled_due"] = serde_json::to_value(due)?;
        v["unknown"] = serde_json::to_value(&unknown)?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_replication(&r);
    println!("actions by state:");
    for (k, v) in &by_state {
        println!("  {k:<12} {v:>8}");
    }
    let counted = |n: i64| {
        if n >= SCHEDULED_DUE_COUNTED_MAX {
            format!("{n} or more")
        } else {
            n.to_string()
        }
    };
    println!(
        "scheduled due: {} within a minute, {} within an hour",
        counted(due.within_minute),
        counted(due.within_hour)
    );
    print_unknown(s.state(ActionState::Unknown), &unknown);
    println!("messages by status:");
    for (k, v) in &s.by_status {
        println!("  {k:<12} {v:>8}");
    }
    println!(
        "attempts {} · lookups by the reconciler {}",
        s.attempts_total, s.lookups_total
    );
    // The count past the alert stops at its cap (a walk of the oldest).
    let past = if s.intents_older_than_alert >= courier_store::INTENTS_PAST_ALERT_COUNTED_MAX {
        format!("{} or more", s.intents_older_than_alert)
    } else {
        s.intents_older_than_alert.to_string()
    };
    match s.oldest_open_intent_s {
        Some(age) => {
            println!("oldest open intent: {age:.1} s (alert at {alert_s} s; {past} past it)")
        }
        None => println!("oldest open intent: none open"),
    }
    if s.intents_older_than_alert > 0 {
        println!(
            "ALERT: {past} intents are older than {alert_s} s; past the provider's key retention a resend could be a second message"
        );
    }
    println!("events:");
    for (k, v) in &s.events {
        println!("  {k:<18} {v:>8}");
    }
    println!("stores (noisiest first):");
    println!("  {:<20} {:>8} {:>9}", "store", "pending", "in flight");
    for b in s.stores.iter().take(args.stores) {
        println!("  {:<20} {:>8} {:>9}", b.store, b.pending, b.in_flight);
    }
    Ok(ExitCode::SUCCESS)
}

/// The actions held unknown: how many, and the newest of them.
fn print_unknown(count: i64, listed: &[courier_store::HeldUnknown]) {
    if count == 0 {
        return;
    }
    println!(
        "ALERT: {count} actions held unknown (an attempt may have reached the provider and \
         its tier cannot tell); resolve each with `courier resolve ID sent|not-sent`:"
    );
    println!(
        "  {:>10} {:<20} {:<24} {:>8} {:<30}",
        "id", "store", "held at", "attempts", "reason"
    );
    for u in listed {
        println!(
            "  {:>10} {:<20} {:<24} {:>8} {:<30}",
            u.id, u.store, u.held_at, u.attempts, u.reason
        );
    }
    if (listed.len() as i64) < count {
        println!(
            "  ... {} more (--unknown N lists more)",
            count - listed.len() as i64
        );
    }
}

/// The node and its standbys; no standby lines when there are none.
fn print_replication(r: &courier_store::Replication) {
    let role = if r.primary {
        "primary"
    } else {
        "standby (read-only)"
    };
    let timeline = r
        .timeline
        .map_or(String::new(), |t| format!(", timeline {t}"));
    println!("database node: {} ({role}{timeline})", r.node);
    if r.standbys.is_empty() {
        return;
    }
    println!(
        "  {:<16} {:<16} {:<10} {:<9} {:>12} {:>13} {:>14}",
        "standby", "address", "state", "sync", "write lag ms", "replay lag ms", "bytes behind"
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for st in &r.standbys {
        println!(
            "  {:<16} {:<16} {:<10} {:<9} {:>12} {:>13} {:>14}",
            st.name,
            st.addr.as_deref().unwrap_or("-"),
            st.state,
            st.sync_state,
            ms(st.write_lag_ms),
            ms(st.replay_lag_ms),
            st.replay_behind_bytes
                .map_or("-".to_string(), |b| b.to_string())
        );
    }
}
