//! `courier sim <scene> [--param name=value ...] [--seed N] [--json]`: runs one
//! seeded simulation of the lesson (crate `courier-sim`) and prints a table,
//! or the outcome as JSON. `courier sim list` prints the scenes and their
//! parameters. The seed is printed first so any run can be replayed.

use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context};
use courier_sim::Scene;

#[derive(clap::Args)]
pub struct Args {
    /// The scene: ack | key-lifetime | repeats | crash-points | ordering | write-order, or `list`.
    pub scene: String,
    /// A parameter as name=value (repeatable), e.g. --param crash_rate=0.02.
    #[arg(long = "param", short = 'p', value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// The seed of the random generator; a random one is drawn (and printed) if absent.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print the whole outcome as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = if args.scene == "list" {
        catalog_text()
    } else {
        let scene = Scene::from_name(&args.scene)?;
        let params = parse_params(&args.params)?;
        let seed = args.seed.unwrap_or_else(fresh_seed);
        let run = courier_sim::run(scene, &params, seed)
            .with_context(|| format!("courier sim {}", scene.name()))?;
        if args.json {
            format!("{}\n", serde_json::to_string_pretty(&run)?)
        } else {
            format!(
                "seed {seed}\n{}: {}\nparameters: {}\n\n{}\n{}\n",
                scene.name(),
                scene.title(),
                run.params,
                run.table,
                run.reading
            )
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // A reader that stopped early (`| head`) is not an error.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Turns `name=value` pairs into a JSON object: numbers and booleans become
/// JSON numbers and booleans (`1e6` and `1_000_000` are whole numbers),
/// anything else a string; the scene's own parsing then checks names and ranges.
fn parse_params(pairs: &[String]) -> anyhow::Result<serde_json::Value> {
    let mut map = serde_json::Map::new();
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--param takes name=value, got `{pair}`");
        };
        let name = name.trim();
        if name.is_empty() {
            bail!("--param `{pair}` has no name");
        }
        if map
            .insert(name.to_string(), json_value(value.trim()))
            .is_some()
        {
            bail!("--param {name} is given twice");
        }
    }
    Ok(serde_json::Value::Object(map))
}

fn json_value(text: &str) -> serde_json::Value {
    let plain = text.replace('_', "");
    if let Ok(n) = plain.parse::<u64>() {
        return n.into();
    }
    if let Ok(n) = plain.parse::<i64>() {
        return n.into();
    }
    if let Ok(x) = plain.parse::<f64>() {
        if x.is_finite() && x.fract() == 0.0 && x >= 0.0 && x < 2f64.powi(63) {
            return (x as u64).into();
        }
        if let Some(n) = serde_json::Number::from_f64(x) {
            return n.into();
        }
    }
    match text {
        "true" | "yes" | "on" => true.into(),
        "false" | "no" | "off" => false.into(),
        _ => text.into(),
    }
}

/// A seed from the operating system's per-process random hash keys.
fn fresh_seed() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

fn catalog_text() -> String {
    let mut out = String::new();
    for info in courier_sim::catalog() {
        out.push_str(&format!("{}: {}\n", info.scene.name(), info.title));
        for p in &info.params {
            out.push_str(&format!(
                "  --param {}=…  {} (default {}, allowed {})\n",
                p.name,
                p.label,
                p.default_text(),
                p.range_text()
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn params_become_typed_json() {
        let v = parse_params(&[
            "messages=1e6".into(),
            "crash_rate=0.02".into(),
            "operation=set".into(),
            "sequence_numbers=true".into(),
            "requests=5_000_000".into(),
        ])
        .unwrap();
        assert_eq!(
            v,
            json!({"messages": 1_000_000, "crash_rate": 0.02, "operation": "set",
                   "sequence_numbers": true, "requests": 5_000_000})
        );
        assert!(parse_params(&["oops".into()]).is_err());
        assert!(parse_params(&["a=1".into(), "a=2".into()]).is_err());
        assert_eq!(json_value("-3"), json!(-3));
    }
}
