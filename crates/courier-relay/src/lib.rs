//! courier-relay: Transactional outbox in etcd, relayed to NATS JetStream, applied once by a deduplicating consumer.
