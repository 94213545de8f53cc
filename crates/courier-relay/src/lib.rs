//! courier-relay: a transactional outbox in etcd, relayed to NATS JetStream,
//! applied once by a deduplicating consumer.
//!
//! ```text
//!   create ──(etcd txn A: task + idem + outbox)──> etcd
//!   relay  ── reads outbox ── publish ──> JetStream ── publish ACK ──> mark (etcd txn)
//!   worker <── pull ── JetStream
//!   worker ──(etcd txn B: dedup + result + task + counter)──> etcd ── then ──> consumer ACK
//! ```
//!
//! Two atomic boundaries (txn A, txn B), both in etcd, and between them a
//! broker that may deliver an event more than once. Nothing spans etcd and
//! NATS; the event id and the dedup record connect them. See `docs/relay.md`.
//!
//! - [`model`]: records, keys, protocols and the apply decision (pure).
//! - [`check`]: the shared checker every protocol is judged by (pure).
//! - [`store`], [`broker`]: the only modules that speak to etcd and NATS.
//! - [`reference`], [`starter`], [`broken`]: the protocols' steps, answering
//!   with the types of [`outcome`]; [`protocol`] picks one.
//! - [`relay`], [`worker`]: the shared transport, with lab-only fault hooks.
//! - [`servers`]: real etcd and nats-server processes on loopback ports.
//! - [`lab`]: the three crash scenarios; [`run`]: the long run with real kills.
//! - [`cluster`]: 3 etcd members and 3 JetStream servers, their leaders found;
//!   [`faults`]: the cluster faults of a run and the table that judges them;
//!   [`events`]: the workers' commit, suppression and redelivery lines.
//!
//! # Invariants
//! - Every accepted task keeps its publication intent until JetStream has
//!   acknowledged its event (reference order).
//! - An event's effect is committed at most once while its dedup record is
//!   kept (at least `dedup_retention_ms`, longer than any copy can still
//!   arrive): the dedup record, result, task and counter are written in one
//!   guarded transaction.
//! - A consumer ACK follows the commit; a crash between them costs a
//!   redelivery, never an effect.

pub mod broken;
pub mod broker;
pub mod check;
pub mod cluster;
pub mod events;
pub mod faults;
pub mod lab;
pub mod limits;
pub mod model;
pub mod outcome;
pub mod protocol;
pub mod reference;
pub mod relay;
pub mod run;
pub mod servers;
pub mod starter;
pub mod store;
pub mod trace;
pub mod worker;

pub use check::{check, Invariant, Violation};
pub use lab::{run_lab, LabConfig, LabReport, Scenario};
pub use limits::RelayLimits;
pub use model::Protocol;
pub use run::{run, run_proc, ProcConfig, RunConfig, RunReport};
