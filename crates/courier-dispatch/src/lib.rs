//! courier-dispatch: the courier runtime.
//!
//! - [`worker`]: claimer, sender, heartbeat and reconciler of one worker process.
//! - [`group_commit`]: the batcher that commits many tasks' writes together.
//! - `broken` (feature `negative-controls`): the deliberately broken resend
//!   modes (a provider wrapper), for the chaos run's negative controls.
//! - `failpoint` (feature `failpoints`, tests only): the worker's named crash points.
//! - [`pruner`]: retention and the fold of the maintained counts, one of the
//!   loops a [`worker::Worker`] runs.
//! - [`server`]: the enqueue API and the provider's status webhooks;
//!   [`auth`]: who may call it (admin and store tokens).
//! - [`metrics`], [`dashboard`], [`openapi`]: operating courier: Prometheus
//!   metrics, the live dashboard, the API's OpenAPI description.

mod api_error;
pub mod auth;
#[cfg(feature = "negative-controls")]
pub mod broken;
pub mod dashboard;
#[cfg(feature = "failpoints")]
pub mod failpoint;
pub mod group_commit;
pub mod metrics;
pub mod openapi;
pub mod pruner;
pub mod server;
pub mod worker;

/// A lease owner's name for this process: host, pid and a random suffix, so a
/// restarted process never shares an identity with its predecessor.
pub fn owner_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".to_string());
    format!(
        "{host}:{}:{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}
