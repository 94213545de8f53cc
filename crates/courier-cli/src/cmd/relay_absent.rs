//! `courier relay` in a build without the `relay` feature: the relay needs
//! an etcd client whose build needs protoc, which the rest of courier does
//! not, so it is left out unless asked for. This says how to get it.

use std::process::ExitCode;

#[derive(clap::Args)]
pub struct Args {
    /// The relay's arguments (this build has no relay).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "this courier was built without the relay; build it with the `relay` feature \
         (it needs protoc and libprotobuf-dev: scripts/install-deps.sh installs them), e.g. \
         `cargo run --release -p courier-cli --features relay -- relay lab`"
    )
}
