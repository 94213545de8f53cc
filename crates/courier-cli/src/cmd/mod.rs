//! One module per subcommand: each has `Args` (clap) and `run(args)`.

pub mod bench;
pub mod bench_life;
pub mod chaos;
pub mod common;
pub mod db;
pub mod db_ha;
pub mod demo;
pub mod enqueue;
pub mod intent;
pub mod lesson;
pub mod provider;
pub mod providers;
#[cfg(feature = "relay")]
pub mod relay;
#[cfg(not(feature = "relay"))]
#[path = "relay_absent.rs"]
pub mod relay;
pub mod serve;
pub mod sim;
pub mod status;
pub mod store;
pub mod token;
pub mod verify;
pub mod worker;
