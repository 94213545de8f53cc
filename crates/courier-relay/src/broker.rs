//! The only module that speaks to NATS JetStream.
//!
//! One file-store stream per namespace, one durable pull consumer on it.
//! Publications carry the event id in the payload and in the
//! [`EVENT_ID_HEADER`] header, and never a `Nats-Msg-Id`: JetStream's own
//! duplicate window would hide a consumer without dedup inside the window and
//! nothing outside it, so the lab does not lean on it.
//!
//! # Invariants
//! - A publication counts as done only with JetStream's ACK in hand
//!   ([`PublishOutcome::Acked`]); anything else is unknown, never "not stored".
//! - The stream refuses new messages when full (discard "new") and the
//!   consumer redelivers without limit (`max_deliver` unset): neither drops an
//!   event on its own.

use crate::limits::RelayLimits;
use crate::model::{event_id_for, validate_task_id, Event, Keys, EVENT_ID_HEADER};
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Stream, subject and consumer of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    pub stream: String,
    pub subject: String,
    pub consumer: String,
}

impl Names {
    pub fn new(keys: &Keys) -> Self {
        let ns = keys.namespace();
        Names {
            stream: format!("courier-relay-{ns}"),
            subject: format!("courier.relay.{ns}.events"),
            consumer: "workers".to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The broker is unreachable: try again later.
    #[error("cannot reach nats-server at {url}: {reason}")]
    Connect { url: String, reason: String },
    /// A JetStream request failed or timed out: try again later.
    #[error("JetStream {what} failed: {reason}")]
    Request { what: &'static str, reason: String },
}

/// How often the client pings its server; two unanswered pings drop the
/// connection and the client moves on to another server of the list.
pub const PING_INTERVAL: Duration = Duration::from_millis(500);
/// How long the census waits before it fetches again after a failed fetch.
const CENSUS_RETRY_AFTER: Duration = Duration::from_millis(200);

/// Parses a comma-separated list of server URLs.
pub fn server_list(url: &str) -> Result<Vec<async_nats::ServerAddr>, String> {
    let list: Result<Vec<_>, _> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|e| format!("{u}: {e}"))
        })
        .collect();
    match list? {
        l if l.is_empty() => Err("no server URL".into()),
        l => Ok(l),
    }
}

fn request(what: &'static str) -> impl Fn(String) -> BrokerError {
    move |reason| BrokerError::Request { what, reason }
}

/// What a publication ended in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// JetStream stored it at this sequence.
    Acked { stream_sequence: u64 },
    /// No ACK: the message may or may not be stored. Do not mark; publish again later.
    Unknown(String),
}

/// The consumer's counters, as the broker reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConsumerState {
    /// Deliveries so far, redeliveries included.
    pub delivered: u64,
    /// Delivered and not yet acknowledged.
    pub ack_pending: u64,
    /// In the stream and not yet delivered.
    pub undelivered: u64,
}

/// The stream's content, read back message by message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    pub messages: u64,
    /// Copies per event id.
    pub copies: BTreeMap<String, u64>,
    /// When each copy beyond an event's first was stored (Unix ms, the
    /// broker's clock), in stream order.
    pub extra_copies_at_ms: Vec<u64>,
}

#[derive(Clone)]
pub struct Broker {
    client: async_nats::Client,
    js: jetstream::Context,
    names: Names,
    publish_ack_timeout: Duration,
    url: String,
}

impl Broker {
    /// Connects once; the client reconnects by itself afterwards (every
    /// 50-500 ms), so a broker restart costs a pause, not a process. `url`
    /// may list several servers of one cluster, comma-separated: the client
    /// connects to one and moves to another when it is lost. A server that
    /// stops answering (SIGSTOP, a frozen machine) is given up after two
    /// missed pings ([`PING_INTERVAL`] apart), not after minutes.
    pub async fn connect(
        url: &str,
        names: Names,
        limits: &RelayLimits,
    ) -> Result<Self, BrokerError> {
        let timeout = Duration::from_millis(limits.nats_request_timeout_ms);
        let servers = server_list(url).map_err(|reason| BrokerError::Connect {
            url: url.into(),
            reason,
        })?;
        let options = async_nats::ConnectOptions::new()
            .connection_timeout(timeout)
            .request_timeout(Some(timeout))
            .ping_interval(PING_INTERVAL)
            .max_reconnects(None)
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((attempts as u64 * 50).clamp(50, 500))
            });
        let client = tokio::time::timeout(timeout * 2, options.connect(servers))
            .await
            .map_err(|_| BrokerError::Connect {
                url: url.into(),
                reason: "timed out".into(),
            })?
            .map_err(|e| BrokerError::Connect {
                url: url.into(),
                reason: e.to_string(),
            })?;
        let js = jetstream::ContextBuilder::new()
            .timeout(timeout)
            .max_ack_inflight(limits.outbox_scan_max as usize)
            .backpressure_on_inflight(true)
            .build(client.clone());
        Ok(Broker {
            client,
            js,
            names,
            publish_ack_timeout: Duration::from_millis(limits.publish_ack_timeout_ms),
            url: url.to_string(),
        })
    }

    pub fn names(&self) -> &Names {
        &self.names
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Creates the stream and the durable consumer if they do not exist.
    pub async fn ensure(&self, limits: &RelayLimits) -> Result<(), BrokerError> {
        let config = stream::Config {
            name: self.names.stream.clone(),
            subjects: vec![self.names.subject.clone()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            discard: stream::DiscardPolicy::New,
            max_bytes: limits.stream_bytes_max,
            max_messages: limits.stream_messages_max,
            max_message_size: limits.event_bytes_max as i32,
            num_replicas: limits.stream_replicas as usize,
            max_age: Duration::from_millis(limits.stream_max_age_ms),
            ..Default::default()
        };
        let stream = self
            .js
            .get_or_create_stream(config)
            .await
            .map_err(|e| request("stream create")(e.to_string()))?;
        let consumer = consumer::pull::Config {
            durable_name: Some(self.names.consumer.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_millis(limits.ack_wait_ms),
            max_ack_pending: i64::from(limits.ack_pending_max),
            ..Default::default()
        };
        stream
            .get_or_create_consumer(&self.names.consumer, consumer)
            .await
            .map_err(|e| request("consumer create")(e.to_string()))?;
        Ok(())
    }

    fn headers(event: &Event) -> async_nats::HeaderMap {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(EVENT_ID_HEADER, event.event_id.as_str());
        headers
    }

    fn payload(event: &Event) -> bytes::Bytes {
        serde_json::to_vec(event).unwrap_or_default().into()
    }

    /// Sends a publication and returns the future of its ACK, so that many
    /// publications can be in flight at once.
    pub async fn publish_start(
        &self,
        event: &Event,
    ) -> Result<jetstream::context::PublishAckFuture, String> {
        self.js
            .publish_with_headers(
                self.names.subject.clone(),
                Self::headers(event),
                Self::payload(event),
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// Waits (bounded) for the ACK of a started publication.
    pub async fn publish_finish(
        &self,
        started: Result<jetstream::context::PublishAckFuture, String>,
    ) -> PublishOutcome {
        let ack = match started {
            Ok(ack) => ack,
            Err(e) => return PublishOutcome::Unknown(e),
        };
        match tokio::time::timeout(self.publish_ack_timeout, ack).await {
            Ok(Ok(ack)) => PublishOutcome::Acked {
                stream_sequence: ack.sequence,
            },
            Ok(Err(e)) => PublishOutcome::Unknown(e.to_string()),
            Err(_) => PublishOutcome::Unknown(format!(
                "no ACK within {} ms",
                self.publish_ack_timeout.as_millis()
            )),
        }
    }

    /// Publishes and waits for the ACK.
    pub async fn publish(&self, event: &Event) -> PublishOutcome {
        let started = self.publish_start(event).await;
        self.publish_finish(started).await
    }

    /// FAULT HOOK (lab only): publishes with a reply inbox nobody listens on,
    /// so JetStream stores the message and sends its ACK into the void. The
    /// relay then waits its publish-ACK time-out, as for any lost ACK.
    pub async fn publish_losing_ack(&self, event: &Event) -> PublishOutcome {
        let nobody = self.client.new_inbox();
        let sent = self
            .client
            .publish_with_reply_and_headers(
                self.names.subject.clone(),
                nobody,
                Self::headers(event),
                Self::payload(event),
            )
            .await;
        if let Err(e) = sent {
            return PublishOutcome::Unknown(e.to_string());
        }
        if let Err(e) = self.client.flush().await {
            return PublishOutcome::Unknown(e.to_string());
        }
        tokio::time::sleep(self.publish_ack_timeout).await;
        PublishOutcome::Unknown(format!(
            "ACK sent to an inbox nobody listens on; none within {} ms",
            self.publish_ack_timeout.as_millis()
        ))
    }

    /// The durable pull consumer the workers share.
    pub async fn consumer(&self) -> Result<consumer::PullConsumer, BrokerError> {
        let stream = self
            .js
            .get_stream(&self.names.stream)
            .await
            .map_err(|e| request("stream lookup")(e.to_string()))?;
        stream
            .get_consumer(&self.names.consumer)
            .await
            .map_err(|e| request("consumer lookup")(e.to_string()))
    }

    pub async fn consumer_state(&self) -> Result<ConsumerState, BrokerError> {
        let consumer = self.consumer().await?;
        let info = consumer
            .get_info()
            .await
            .map_err(|e| request("consumer info")(e.to_string()))?;
        Ok(ConsumerState {
            delivered: info.delivered.consumer_sequence,
            ack_pending: info.num_ack_pending as u64,
            undelivered: info.num_pending,
        })
    }

    /// The stream's leader (a server name) and its last sequence, from the
    /// stream's info.
    pub async fn stream_leader(&self) -> Result<(Option<String>, u64), BrokerError> {
        let stream = self
            .js
            .get_stream(&self.names.stream)
            .await
            .map_err(|e| request("stream lookup")(e.to_string()))?;
        let info = stream
            .get_info()
            .await
            .map_err(|e| request("stream info")(e.to_string()))?;
        let leader = info.cluster.as_ref().and_then(|c| c.leader.clone());
        Ok((leader, info.state.last_sequence))
    }

    /// Messages in the stream.
    pub async fn stream_messages(&self) -> Result<u64, BrokerError> {
        let stream = self
            .js
            .get_stream(&self.names.stream)
            .await
            .map_err(|e| request("stream lookup")(e.to_string()))?;
        let info = stream
            .get_info()
            .await
            .map_err(|e| request("stream info")(e.to_string()))?;
        Ok(info.state.messages)
    }

    /// Reads every message of the stream once, through a temporary consumer
    /// that acknowledges nothing, and counts the copies of each event.
    ///
    /// Every request here can fail while the cluster settles after a fault
    /// (503 "JetStream system temporarily unavailable", no responders while
    /// the stream elects a leader): each is tried again until `deadline`.
    pub async fn census(&self, deadline: Duration) -> Result<Census, BrokerError> {
        let started = Instant::now();
        let (stream, total) = until_deadline(started, deadline, || async {
            let mut stream = self
                .js
                .get_stream(&self.names.stream)
                .await
                .map_err(|e| request("stream lookup")(e.to_string()))?;
            let total = stream
                .info()
                .await
                .map_err(|e| request("stream info")(e.to_string()))?
                .state
                .messages;
            Ok((stream, total))
        })
        .await?;
        let mut census = Census {
            messages: total,
            ..Census::default()
        };
        if total == 0 {
            return Ok(census);
        }
        // A consumer created by an attempt whose answer was lost is unnamed
        // and expires on its own.
        let reader: consumer::PullConsumer = until_deadline(started, deadline, || async {
            stream
                .create_consumer(consumer::pull::Config {
                    ack_policy: consumer::AckPolicy::None,
                    deliver_policy: consumer::DeliverPolicy::All,
                    inactive_threshold: Duration::from_secs(30),
                    ..Default::default()
                })
                .await
                .map_err(|e| request("census consumer")(e.to_string()))
        })
        .await?;
        census_read(&reader, &mut census, started, deadline).await?;
        let name = reader.cached_info().name.clone();
        // The temporary consumer expires on its own if this delete is lost.
        let _ = stream.delete_consumer(&name).await;
        Ok(census)
    }

    /// Deletes the stream (used on servers the lab did not start).
    pub async fn delete_stream(&self) -> Result<(), BrokerError> {
        self.js
            .delete_stream(&self.names.stream)
            .await
            .map(|_| ())
            .map_err(|e| request("stream delete")(e.to_string()))
    }
}

/// Runs `attempt` until it answers, pausing [`CENSUS_RETRY_AFTER`]
/// between tries; past `deadline` (from `started`) its last error is the
/// answer.
async fn until_deadline<T, F, Fut>(
    started: Instant,
    deadline: Duration,
    mut attempt: F,
) -> Result<T, BrokerError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, BrokerError>>,
{
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(e) if started.elapsed() < deadline => {
                tracing::debug!(error = %e, "census: not answered yet; trying again");
                tokio::time::sleep(CENSUS_RETRY_AFTER).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads the census's `messages` through `reader`, counting each event's
/// copies. A fetch that fails is tried again until the deadline; the
/// consumer acknowledges nothing and its position moves only past messages
/// delivered, so none is counted twice.
async fn census_read(
    reader: &consumer::PullConsumer,
    census: &mut Census,
    started: Instant,
    deadline: Duration,
) -> Result<(), BrokerError> {
    let (total, mut seen) = (census.messages, 0u64);
    let mut last_error = String::new();
    while seen < total {
        if started.elapsed() > deadline {
            let last = if last_error.is_empty() {
                String::new()
            } else {
                format!("; last fetch error: {last_error}")
            };
            return Err(request("census")(format!(
                "read {seen} of {total} messages in {} ms{last}",
                deadline.as_millis()
            )));
        }
        let fetched = reader
            .batch()
            .max_messages(500)
            .expires(Duration::from_millis(500))
            .messages()
            .await;
        let mut batch = match fetched {
            Ok(batch) => batch,
            Err(e) => {
                last_error = e.to_string();
                tokio::time::sleep(CENSUS_RETRY_AFTER).await;
                continue;
            }
        };
        while let Some(msg) = batch.next().await {
            match msg {
                Ok(msg) => {
                    census_count(census, &msg);
                    seen += 1;
                }
                Err(e) => {
                    last_error = e.to_string();
                    tokio::time::sleep(CENSUS_RETRY_AFTER).await;
                    break;
                }
            }
        }
    }
    Ok(())
}

/// One message of the census: its event's copies, and when an extra copy
/// was published.
fn census_count(census: &mut Census, msg: &jetstream::Message) {
    let id = msg
        .headers
        .as_ref()
        .and_then(|h| h.get(EVENT_ID_HEADER))
        .map(|v| v.as_str().to_string())
        .unwrap_or_else(|| "<no event id>".into());
    let copies = census.copies.entry(id).or_default();
    *copies += 1;
    if *copies > 1 {
        let at = msg
            .info()
            .map(|i| i.published.unix_timestamp_nanos() / 1_000_000);
        census
            .extra_copies_at_ms
            .push(at.unwrap_or(0).max(0) as u64);
    }
}

/// Reads a delivered message as an event, refusing anything malformed: an
/// oversized payload, a header that disagrees with the payload, an event id
/// that is not its task's.
pub fn parse_event(
    headers: Option<&async_nats::HeaderMap>,
    payload: &[u8],
    limits: &RelayLimits,
) -> Result<Event, String> {
    if payload.len() > limits.event_bytes_max as usize {
        return Err(format!(
            "payload of {} bytes is over event_bytes_max",
            payload.len()
        ));
    }
    let header = headers
        .and_then(|h| h.get(EVENT_ID_HEADER))
        .map(|v| v.as_str().to_string())
        .ok_or_else(|| format!("no {EVENT_ID_HEADER} header"))?;
    let event: Event = serde_json::from_slice(payload).map_err(|e| format!("payload: {e}"))?;
    validate_task_id(&event.task_id).map_err(|e| e.to_string())?;
    if event.event_id != header || event.event_id != event_id_for(&event.task_id) {
        return Err(format!(
            "event id mismatch: header {header:?}, payload {:?}, task {}",
            event.event_id, event.task_id
        ));
    }
    if event.amount == 0 || event.amount > limits.amount_max {
        return Err(format!(
            "amount {} is outside 1..={}",
            event.amount, limits.amount_max
        ));
    }
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(id: &str) -> async_nats::HeaderMap {
        let mut h = async_nats::HeaderMap::new();
        h.insert(EVENT_ID_HEADER, id);
        h
    }

    #[test]
    fn well_formed_events_parse_and_others_are_refused() {
        let l = RelayLimits::default();
        let ok = br#"{"event_id":"evt-t1","task_id":"t1","amount":2}"#;
        assert_eq!(
            parse_event(Some(&headers("evt-t1")), ok, &l),
            Ok(Event {
                event_id: "evt-t1".into(),
                task_id: "t1".into(),
                amount: 2
            })
        );
        assert!(parse_event(None, ok, &l).is_err());
        assert!(parse_event(Some(&headers("evt-t2")), ok, &l).is_err());
        let foreign = br#"{"event_id":"x","task_id":"t1","amount":2}"#;
        assert!(parse_event(Some(&headers("x")), foreign, &l).is_err());
        let zero = br#"{"event_id":"evt-t1","task_id":"t1","amount":0}"#;
        assert!(parse_event(Some(&headers("evt-t1")), zero, &l).is_err());
        assert!(parse_event(Some(&headers("evt-t1")), b"not json", &l).is_err());
        let big = vec![b' '; 2_000];
        assert!(parse_event(Some(&headers("evt-t1")), &big, &l).is_err());
    }

    #[test]
    fn names_are_valid_nats_names() {
        let n = Names::new(&Keys::new("lab-s1_x").unwrap());
        assert!(!n.stream.contains('.') && !n.stream.contains(' '));
        assert_eq!(n.subject, "courier.relay.lab-s1_x.events");
    }
}
