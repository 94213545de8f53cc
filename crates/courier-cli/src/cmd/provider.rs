//! `courier provider` (to be written).

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("courier provider is not written yet")
}
