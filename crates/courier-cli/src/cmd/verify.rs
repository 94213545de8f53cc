//! `courier verify`: judges a provider's log against a promise (`--promise`,
//! exactly-once unless given), prints the table (or JSON) and exits 0 when
//! no check failed, 1 on any violation, 2 on unreadable input.
//!
//! The work is in `courier_verify`; this file reads flags and files.
//! The courier's expectations (what its database says about each action) come
//! from `--expectations FILE` or, once the store exists, from
//! [`expectations`] with `--database-url`.

use anyhow::Context;
use courier_verify::{read_expectations, verify_reader_under, Expectation, Promise, ReadLimits};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The provider's log: one JSON object a line (docs/provider-api.md).
    #[arg(long, value_name = "FILE")]
    pub provider_log: PathBuf,
    /// The courier's database, to compare its view of each action with the log.
    #[arg(long, env = "DATABASE_URL", value_name = "URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// The courier's view as a JSON array of {key, action_id, courier_final,
    /// refused, cancelled, expired, unknown, not_before, expires_at}, instead
    /// of the database. Takes precedence over --database-url.
    #[arg(long, value_name = "FILE")]
    pub expectations: Option<PathBuf>,
    /// The promise the log is judged against: exactly-once,
    /// exactly-once-by-resend (resends with no lookup are by design),
    /// at-most-once (an action with no effect must be held as unknown) or
    /// at-least-once (duplicates are counted, not violations).
    #[arg(long, value_name = "PROMISE", default_value_t = Promise::ExactlyOnce)]
    pub promise: Promise,
    /// Print the report as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// The exit status for a verdict.
fn exit_code(passed: bool) -> u8 {
    if passed {
        0
    } else {
        1
    }
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let expected = match (&args.expectations, &args.database_url) {
        (Some(path), url) => {
            if url.is_some() {
                eprintln!("note: --expectations is given, so the database URL is not used");
            }
            Some(expectations_file(path.clone()).await?)
        }
        (None, Some(url)) => Some(expectations(url).await?),
        (None, None) => None,
    };
    let path = args.provider_log.clone();
    let promise = args.promise;
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot open the provider log {}", path.display()))?;
        let r = std::io::BufReader::with_capacity(1 << 16, file);
        verify_reader_under(r, &ReadLimits::default(), expected.as_deref(), promise)
            .with_context(|| format!("cannot verify the provider log {}", path.display()))
    })
    .await
    .context("the verifier stopped unexpectedly")??;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.with_verdict())?);
    } else {
        print!("{report}");
    }
    Ok(ExitCode::from(exit_code(report.passed())))
}

/// The courier's expectations from its database.
///
/// Every action's key, id, final message status and whether the provider
/// refused it. The database is only read.
async fn expectations(database_url: &str) -> anyhow::Result<Vec<Expectation>> {
    let mut cfg = courier_store::StoreConfig::new(database_url);
    cfg.pool_size_max = 2;
    cfg.migrate = false;
    let store = courier_store::PgStore::connect(&cfg)
        .await
        .with_context(|| format!("connecting to {}", super::common::redact(database_url)))?;
    Ok(courier_rig::judge::expectations(&store).await?)
}

async fn expectations_file(path: PathBuf) -> anyhow::Result<Vec<Expectation>> {
    tokio::task::spawn_blocking(move || read_expectations_file(&path))
        .await
        .context("reading the expectations stopped unexpectedly")?
}

fn read_expectations_file(path: &Path) -> anyhow::Result<Vec<Expectation>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open the expectations {}", path.display()))?;
    read_expectations(std::io::BufReader::new(file), &ReadLimits::default())
        .with_context(|| format!("cannot read the expectations {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../courier-verify/tests/fixtures/verify")
            .join(name)
    }

    fn args(log: &str) -> Args {
        Args {
            provider_log: fixture(log),
            database_url: None,
            expectations: None,
            promise: Promise::ExactlyOnce,
            json: false,
        }
    }

    fn exit(code: ExitCode) -> String {
        format!("{code:?}")
    }

    #[tokio::test]
    async fn verify_exit_status_follows_the_verdict() {
        assert_eq!(exit_code(true), 0);
        assert_eq!(exit_code(false), 1);
        let clean = run(args("clean.jsonl")).await.unwrap();
        assert_eq!(format!("{clean:?}"), format!("{:?}", ExitCode::from(0)));
        let dup = run(args("duplicate.jsonl")).await.unwrap();
        assert_eq!(format!("{dup:?}"), format!("{:?}", ExitCode::from(1)));
        let with_file = Args {
            expectations: Some(fixture("clean-expectations.json")),
            json: true,
            ..args("clean.jsonl")
        };
        let code = run(with_file).await.unwrap();
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::from(0)));
    }

    #[tokio::test]
    async fn verify_judges_the_promise_given() {
        // Two effects for one action: a violation of exactly-once, counted
        // under at-least-once.
        for (promise, code) in [
            (Promise::ExactlyOnce, 1),
            (Promise::AtMostOnce, 1),
            (Promise::AtLeastOnce, 0),
        ] {
            let a = Args {
                promise,
                ..args("duplicate.jsonl")
            };
            assert_eq!(exit(run(a).await.unwrap()), exit(ExitCode::from(code)));
        }
    }

    #[test]
    fn verify_promise_flag_reads_names_and_defaults_to_exactly_once() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["verify", "--provider-log", "p.jsonl"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|c| c.args.promise)
        };
        assert_eq!(parse(&[]).unwrap(), Promise::ExactlyOnce);
        for p in Promise::ALL {
            assert_eq!(parse(&["--promise", p.as_str()]).unwrap(), p);
        }
        let err = parse(&["--promise", "twice"]).unwrap_err().to_string();
        assert!(err.contains("unknown promise"), "{err}");
    }

    #[tokio::test]
    async fn verify_unreadable_input_is_an_error() {
        let err = run(args("no-such-log.jsonl")).await.unwrap_err();
        assert!(format!("{err:#}").contains("cannot open the provider log"));
        let with_db = Args {
            database_url: Some("postgres://127.0.0.1/x".into()),
            ..args("clean.jsonl")
        };
        let err = run(with_db).await.unwrap_err();
        assert!(format!("{err:#}").contains("connecting to"), "{err:#}");
        // An expectations file that is not one is an error, not a verdict.
        let bad = Args {
            expectations: Some(fixture("clean.jsonl")),
            ..args("clean.jsonl")
        };
        let err = run(bad).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("invalid expectations"),
            "{err:#}"
        );
    }
}
