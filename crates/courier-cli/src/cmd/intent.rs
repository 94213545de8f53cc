//! `courier cancel ID`, `courier redrive ID` and `courier resolve ID
//! sent|not-sent`: an operator's cancel, re-drive and resolution of an
//! action held `unknown`, straight on the database, through the same SQL
//! functions as the API's routes (`courier.cancel`, `courier.redrive`,
//! migration 23; `courier.resolve`, migration 25), with an admin's reach
//! (every store). The `events` row names the caller
//! `cli:<$USER>`.
//!
//! Exit codes: 0 done (a re-drive repeated answers the first one's action,
//! also 0); 1 refused, nothing changed, the reason on stderr; 2 no such
//! action, bad input (clap's own exit code), or the database unreachable.

use super::common::DbArgs;
use courier_core::ActionState;
use courier_store::{CancelOutcome, RedriveOutcome, Resolution, ResolveOutcome};
use std::process::ExitCode;

/// Longest caller name recorded (the rest of `$USER` is dropped).
const CALLER_NAME_CHARS_MAX: usize = 64;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    db: DbArgs,
    /// The action's id.
    id: i64,
}

/// `courier cancel`: a scheduled or pending action ends `cancelled`, and no
/// worker can claim it; a claimed, dispatched or final one is refused.
pub async fn cancel(args: Args) -> anyhow::Result<ExitCode> {
    let store = args.db.connect(1).await?;
    let id = args.id;
    Ok(match store.action_cancel(id, &caller(), None).await? {
        CancelOutcome::Cancelled => {
            println!("action {id} cancelled: no worker will claim it, nothing was sent");
            ExitCode::SUCCESS
        }
        CancelOutcome::NotFound => not_found(id),
        CancelOutcome::Refused(state) => {
            let why = match state {
                ActionState::Claimed => {
                    "a worker holds it: its first attempt is counted and a request may be on the wire; \
                     wait for its final status"
                }
                ActionState::Dispatched => "the provider has the message; wait for its final status",
                _ => "it has ended",
            };
            eprintln!("refused: action {id} is {state} and cannot be cancelled: {why}");
            ExitCode::from(1)
        }
    })
}

/// `courier redrive`: an action the provider refused with a 400 (which
/// created nothing) is sent again as a new action with a new key.
pub async fn redrive(args: Args) -> anyhow::Result<ExitCode> {
    let store = args.db.connect(1).await?;
    let id = args.id;
    Ok(match store.action_redrive(id, &caller(), None).await? {
        RedriveOutcome::Redriven(new) => {
            println!("action {id} re-driven as action {new}");
            ExitCode::SUCCESS
        }
        RedriveOutcome::Already(new) => {
            println!("action {id} was re-driven before, as action {new}");
            ExitCode::SUCCESS
        }
        RedriveOutcome::NotFound => not_found(id),
        RedriveOutcome::Refused { state, reason } => {
            eprintln!("refused: action {id} is {state} and cannot be re-driven: {reason}");
            ExitCode::from(1)
        }
    })
}

#[derive(clap::Args)]
pub struct ResolveArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The action's id (`courier status` lists the actions held unknown).
    id: i64,
    /// What you found out: `sent` (the provider has the message: the action
    /// ends done) or `not-sent` (nothing went out: it ends failed, and
    /// `courier redrive` may send it again with a new key).
    outcome: Resolution,
}

/// `courier resolve`: an action held `unknown` ends as the operator says.
pub async fn resolve(args: ResolveArgs) -> anyhow::Result<ExitCode> {
    let store = args.db.connect(1).await?;
    let (id, outcome) = (args.id, args.outcome);
    Ok(
        match store.action_resolve(id, outcome, &caller(), None).await? {
            ResolveOutcome::Resolved(state) => {
                let next = match outcome {
                    Resolution::Sent => String::new(),
                    Resolution::NotSent => {
                        format!("; `courier redrive {id}` sends it again with a new key")
                    }
                };
                println!("action {id} resolved as {outcome}: now {state}{next}");
                ExitCode::SUCCESS
            }
            ResolveOutcome::NotFound => not_found(id),
            ResolveOutcome::Refused(state) => {
                eprintln!("refused: action {id} is {state}, not unknown: nothing to resolve");
                ExitCode::from(1)
            }
        },
    )
}

fn not_found(id: i64) -> ExitCode {
    eprintln!("no action {id}");
    ExitCode::from(2)
}

/// `cli:` and the login name (`$USER`), or `cli:unknown`.
pub(super) fn caller() -> String {
    caller_of(std::env::var("USER").ok().as_deref())
}

/// Only the characters of ordinary login names are kept, so that the
/// `events` row's `by=<name> from=<state>` stays one word per field.
fn caller_of(user: Option<&str>) -> String {
    let name: String = user
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'))
        .take(CALLER_NAME_CHARS_MAX)
        .collect();
    if name.is_empty() {
        "cli:unknown".to_string()
    } else {
        format!("cli:{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::caller_of;

    #[test]
    fn the_caller_is_the_login_name_or_unknown() {
        assert_eq!(caller_of(Some("ops")), "cli:ops");
        assert_eq!(caller_of(None), "cli:unknown");
        assert_eq!(caller_of(Some("")), "cli:unknown");
        assert_eq!(caller_of(Some("a b=c")), "cli:abc");
        assert_eq!(caller_of(Some(&"x".repeat(100))).len(), 4 + 64);
    }
}
