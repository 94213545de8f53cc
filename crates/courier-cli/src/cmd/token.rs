//! `courier token create | list | revoke`: who may send (migration 22).
//! A new token is printed once; only the SHA-256 of its secret is kept.

use super::common::DbArgs;
use courier_dispatch::auth::{secret_new, token_text};
use courier_store::TokenError;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// A new token for these stores (or an admin's), printed once.
    Create {
        #[command(flatten)]
        db: DbArgs,
        /// A store the token may enqueue for and read; repeat for more.
        #[arg(
            long = "store",
            required_unless_present = "admin",
            conflicts_with = "admin"
        )]
        stores: Vec<String>,
        /// Every store, the dashboard's data and /metrics.
        #[arg(long)]
        admin: bool,
        /// A name to recognise it by in `list` and in events.
        #[arg(long)]
        name: Option<String>,
    },
    /// Every token (never the secrets), revoked ones too.
    List {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a token: every server refuses it within a second.
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        id: i64,
    },
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Create {
            db,
            stores,
            admin,
            name,
        } => {
            let store = db.connect(1).await?;
            let name = name.unwrap_or_else(|| {
                if admin {
                    "admin".into()
                } else {
                    stores.join(",").chars().take(64).collect()
                }
            });
            let (secret, sha) = secret_new();
            match store.token_create(&name, admin, &stores, &sha).await {
                Ok(id) => {
                    eprintln!("token {id} ({name}); shown once, keep it secret:");
                    println!("{}", token_text(id, &secret));
                    Ok(ExitCode::SUCCESS)
                }
                Err(TokenError::Invalid(why)) => {
                    eprintln!("refused: {why}");
                    Ok(ExitCode::from(2))
                }
                Err(TokenError::Store(e)) => Err(e.into()),
            }
        }
        What::List { db, json } => {
            let store = db.connect(1).await?;
            let tokens = store.token_list().await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&tokens)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "{:>5}  {:<20} {:<8} {:<21} {:<21} stores",
                "id", "name", "kind", "created", "revoked"
            );
            for t in tokens {
                println!(
                    "{:>5}  {:<20} {:<8} {:<21} {:<21} {}",
                    t.id,
                    t.name,
                    if t.admin { "admin" } else { "stores" },
                    t.created_at,
                    t.revoked_at.as_deref().unwrap_or("-"),
                    t.stores.join(",")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        What::Revoke { db, id } => {
            let store = db.connect(1).await?;
            if store.token_revoke(id).await? {
                println!("token {id} revoked");
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!("no active token {id}");
                Ok(ExitCode::from(2))
            }
        }
    }
}
