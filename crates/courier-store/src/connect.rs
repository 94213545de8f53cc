//! Dialling a URL of several hosts, one host at a time, each within the
//! connect time-out.
//!
//! tokio-postgres tries the hosts of a multi-host URL in order, but its
//! `connect_timeout` bounds only the TCP connect: a host whose kernel
//! accepts the connection while PostgreSQL does not answer (a frozen node:
//! SIGSTOP, a paused VM) holds the startup handshake forever, and the hosts
//! after it are never tried. A frozen old primary named first in the URL
//! would then keep every new connection from the promoted standby. So the
//! pool dials each host as a URL of its own, the whole handshake (with the
//! `target_session_attrs` check) bounded by the time-out, and keeps the
//! first that succeeds.
//!
//! # Invariants
//! - Each host is given the time-out once, in the URL's order; a dial costs
//!   at most `hosts x time-out`.

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config, Error, NoTls};

/// The hosts of one URL, each as a configuration of its own.
pub(crate) struct EachHost {
    hosts: Vec<Config>,
    limit: Duration,
}

impl EachHost {
    pub(crate) fn new(all: &Config, limit: Duration) -> EachHost {
        let mut hosts: Vec<Config> = (0..all.get_hosts().len())
            .map(|i| single_host(all, i))
            .collect();
        if hosts.is_empty() {
            // No host: tokio-postgres's own connect says what is missing.
            hosts.push(all.clone());
        }
        EachHost { hosts, limit }
    }

    /// How long a dial may take at most.
    pub(crate) fn dial_max(&self) -> Duration {
        self.limit * u32::try_from(self.hosts.len().max(1)).unwrap_or(u32::MAX)
    }
}

impl Connect for EachHost {
    fn connect(&self, _all: &Config) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), Error>> {
        Box::pin(async move {
            // tokio-postgres's own time-out error (its constructor is public
            // but hidden; pinned by Cargo.lock), replaced by any other.
            let mut last = Error::__private_api_timeout();
            for one in &self.hosts {
                match tokio::time::timeout(self.limit, one.connect(NoTls)).await {
                    Ok(Ok((client, connection))) => {
                        let task = tokio::spawn(async move {
                            if let Err(e) = connection.await {
                                tracing::warn!(error = %e, "database connection ended");
                            }
                        });
                        return Ok((client, task));
                    }
                    Ok(Err(e)) => last = e,
                    Err(_) => last = Error::__private_api_timeout(),
                }
            }
            Err(last)
        })
    }
}

/// Host `i` of `all`, with every setting courier's URLs may carry.
fn single_host(all: &Config, i: usize) -> Config {
    let mut c = Config::new();
    if let Some(v) = all.get_user() {
        c.user(v);
    }
    if let Some(v) = all.get_password() {
        c.password(v);
    }
    if let Some(v) = all.get_dbname() {
        c.dbname(v);
    }
    if let Some(v) = all.get_options() {
        c.options(v);
    }
    if let Some(v) = all.get_application_name() {
        c.application_name(v);
    }
    c.ssl_mode(all.get_ssl_mode())
        .target_session_attrs(all.get_target_session_attrs())
        .channel_binding(all.get_channel_binding())
        .keepalives(all.get_keepalives())
        .keepalives_idle(all.get_keepalives_idle());
    if let Some(v) = all.get_connect_timeout() {
        c.connect_timeout(*v);
    }
    if let Some(v) = all.get_tcp_user_timeout() {
        c.tcp_user_timeout(*v);
    }
    match &all.get_hosts()[i] {
        Host::Tcp(h) => c.host(h),
        Host::Unix(p) => c.host_path(p),
    };
    // One port for every host, or one per host (tokio-postgres's rule).
    let ports = all.get_ports();
    c.port(ports.get(i).or(ports.first()).copied().unwrap_or(5432));
    if let Some(addr) = all.get_hostaddrs().get(i) {
        c.hostaddr(*addr);
    }
    c
}
