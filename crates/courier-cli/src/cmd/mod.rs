//! One module per subcommand: each has `Args` (clap) and `run(args)`.

pub mod lesson;
pub mod provider;
pub mod relay;
pub mod sim;
pub mod verify;
