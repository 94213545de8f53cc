//! The `Provider` trait: the contract as a worker sees it.

use crate::client::{LookupOutcome, ProviderClient, SendOutcome};
use std::future::Future;

/// What the worker needs of a provider: the contract's send and lookup, with
/// answers classified by what the caller does next. [`ProviderClient`] is the
/// real one (HTTP); benchmarks plug in an in-process stub to measure the
/// claim-to-settle path alone, and courier-dispatch's `broken` module wraps
/// one in the broken modes of the chaos run's negative controls.
pub trait Provider: Send + Sync + 'static {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send;
    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send;
}

impl Provider for ProviderClient {
    fn send(&self, key: &str, to: &str, body: &str) -> impl Future<Output = SendOutcome> + Send {
        ProviderClient::send(self, key, to, body)
    }
    fn lookup(&self, key: &str) -> impl Future<Output = LookupOutcome> + Send {
        ProviderClient::lookup(self, key)
    }
}
