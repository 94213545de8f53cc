//! The contract's JSON shapes, shared by the client, the fake and the verifier.
//!
//! Readers are lenient where the contract allows other implementations to add
//! fields (unknown fields are ignored when reading answers and log lines);
//! the fake's request parsing is strict.

use courier_core::Status;
use serde::{Deserialize, Serialize};

/// `POST /v1/messages` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    pub to: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_callback: Option<String>,
}

/// A message as the provider reports it (send answer and lookup answer).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageView {
    pub id: String,
    pub key: String,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// Every error answer: `{"error": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// A status webhook's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEvent {
    pub event_id: String,
    pub message_id: String,
    pub key: String,
    pub status: Status,
    pub occurred_at: String,
}

/// One line of the provider's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    pub seq: u64,
    pub at: String,
    #[serde(flatten)]
    pub op: LogOp,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum LogOp {
    Send {
        /// Absent when the request carried no usable key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        result: SendResult,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    Lookup {
        key: String,
        result: LookupResult,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<Status>,
    },
    Status {
        key: String,
        message_id: String,
        status: Status,
        #[serde(rename = "final")]
        is_final: bool,
    },
    Webhook {
        key: String,
        event_id: String,
        status: Status,
        attempt: u32,
        answer: WebhookAnswer,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SendResult {
    Created,
    Replayed,
    Conflict,
    Reused,
    Rejected,
    Faulted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LookupResult {
    Found,
    NotFound,
    Faulted,
}

/// The receiver's status code, or `"timeout"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WebhookAnswer {
    Code(u16),
    Other(String),
}

impl WebhookAnswer {
    pub fn timeout() -> Self {
        WebhookAnswer::Other("timeout".to_string())
    }
    pub fn is_success(&self) -> bool {
        matches!(self, WebhookAnswer::Code(c) if (200..300).contains(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_read_as_the_contract_writes_them() {
        let line = r#"{"seq":3,"at":"2026-01-01T00:00:00Z","op":"send","key":"k1","result":"created","message_id":"msg_1","extra":1}"#;
        let e: LogEntry = serde_json::from_str(line).unwrap();
        assert_eq!(e.seq, 3);
        assert_eq!(
            e.op,
            LogOp::Send {
                key: Some("k1".into()),
                result: SendResult::Created,
                message_id: Some("msg_1".into())
            }
        );
        let line = r#"{"seq":4,"at":"x","op":"status","key":"k1","message_id":"msg_1","status":"delivered","final":true}"#;
        let e: LogEntry = serde_json::from_str(line).unwrap();
        assert!(matches!(e.op, LogOp::Status { is_final: true, .. }));
        let line = r#"{"seq":5,"at":"x","op":"webhook","key":"k1","event_id":"e","status":"sent","attempt":2,"answer":"timeout"}"#;
        let e: LogEntry = serde_json::from_str(line).unwrap();
        assert!(matches!(
            e.op,
            LogOp::Webhook {
                answer: WebhookAnswer::Other(_),
                ..
            }
        ));
        let line = r#"{"seq":6,"at":"x","op":"lookup","key":"k1","result":"not_found"}"#;
        let e: LogEntry = serde_json::from_str(line).unwrap();
        assert!(matches!(
            e.op,
            LogOp::Lookup {
                result: LookupResult::NotFound,
                ..
            }
        ));
    }

    #[test]
    fn log_lines_round_trip() {
        let e = LogEntry {
            seq: 1,
            at: "2026-01-01T00:00:00Z".into(),
            op: LogOp::Webhook {
                key: "k".into(),
                event_id: "evt_1".into(),
                status: Status::Sent,
                attempt: 1,
                answer: WebhookAnswer::Code(200),
            },
        };
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains(r#""op":"webhook""#), "{text}");
        assert_eq!(serde_json::from_str::<LogEntry>(&text).unwrap(), e);
    }
}
