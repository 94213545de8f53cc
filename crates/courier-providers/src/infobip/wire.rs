//! Infobip's SMS API v3 on the wire: the send body, the answers of send and
//! logs classified by what the caller does next, the delivery report, and
//! statuses mapped onto courier's forward-only order.
//!
//! The types are Infobip's JSON shapes (the SDK's `SmsRequest`,
//! `SmsResponse`, `SmsLogsResponse`, `SmsDeliveryResult`, the error bodies;
//! `tests/fixtures/infobip/`). Reading is lenient: unknown fields are
//! ignored and most fields are optional, so an answer is judged by the
//! fields courier needs. The fake's double (`courier-fake`, dialect
//! `infobip`) writes the same types.

use courier_core::Status;
use courier_provider::wire::MessageView;
use courier_provider::{LookupOutcome, SendOutcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The status of a repeat rejected by Infobip's duplicate check; never the
/// message's own status (module docs of [`super`]).
pub const DUPLICATE_STATUS: &str = "REJECTED_DUPLICATE_MESSAGE_ID";
/// The status group of messages Infobip refused to send.
pub const GROUP_REJECTED: &str = "REJECTED";
/// Their ids in Infobip's status list.
pub const DUPLICATE_STATUS_ID: u32 = 23;
pub const GROUP_REJECTED_ID: u32 = 5;

/// `POST /sms/3/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendBody {
    pub messages: Vec<SmsMessage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmsMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    pub destinations: Vec<Destination>,
    pub content: Content,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<MessageWebhooks>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Destination {
    /// The number in international format, digits only (`41793026727`).
    pub to: String,
    /// The client-assigned id: courier's key.
    #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageWebhooks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryWebhook>,
    #[serde(
        rename = "contentType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub content_type: Option<String>,
    /// "Included in the message Delivery Report".
    #[serde(
        rename = "callbackData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub callback_data: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryWebhook {
    pub url: String,
    /// Also report intermediate statuses (`DELIVERED_TO_OPERATOR`: courier's
    /// `sent`), not only the final one.
    #[serde(
        rename = "intermediateReport",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub intermediate_report: Option<bool>,
}

/// A message's status, as every answer and report carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusObject {
    #[serde(rename = "groupId", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    #[serde(rename = "groupName")]
    pub group_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl StatusObject {
    /// The courier status this one maps onto ([`map_status`]).
    pub fn courier_status(&self) -> Option<Status> {
        if self.is_duplicate() {
            return None;
        }
        map_status(&self.group_name, &self.name)
    }

    /// A repeat rejected by the duplicate check.
    pub fn is_duplicate(&self) -> bool {
        self.name == DUPLICATE_STATUS
            || (self.id == Some(DUPLICATE_STATUS_ID) && self.is_rejected())
    }

    /// Refused: not sent (by this submission).
    pub fn is_rejected(&self) -> bool {
        self.group_name == GROUP_REJECTED || self.group_id == Some(GROUP_REJECTED_ID)
    }
}

/// The `200` answer of a send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendResponse {
    #[serde(rename = "bulkId", default, skip_serializing_if = "Option::is_none")]
    pub bulk_id: Option<String>,
    pub messages: Vec<SentMessage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
}

/// The `200` answer of `GET /sms/3/logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogsResponse {
    pub results: Vec<LogEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(rename = "bulkId", default, skip_serializing_if = "Option::is_none")]
    pub bulk_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    #[serde(rename = "sentAt", default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    #[serde(rename = "doneAt", default, skip_serializing_if = "Option::is_none")]
    pub done_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusObject>,
}

/// A delivery report, as Infobip posts it to the delivery URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryReport {
    pub results: Vec<DeliveryResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryResult {
    #[serde(rename = "bulkId", default, skip_serializing_if = "Option::is_none")]
    pub bulk_id: Option<String>,
    #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    #[serde(rename = "sentAt", default, skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<String>,
    #[serde(rename = "doneAt", default, skip_serializing_if = "Option::is_none")]
    pub done_at: Option<String>,
    #[serde(
        rename = "messageCount",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub message_count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<DeliveryError>,
    #[serde(
        rename = "callbackData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub callback_data: Option<String>,
}

/// Why a message failed (or `NO_ERROR`), in a report or a log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryError {
    #[serde(rename = "groupId", default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<u32>,
    #[serde(rename = "groupName", default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permanent: Option<bool>,
}

/// An error answer: the `requestError.serviceException` shape the SDK's
/// tests answer with, or the v3 `ApiError` shape (`errorCode`,
/// `description`, `action`, `violations`); both are read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    #[serde(
        rename = "requestError",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub request_error: Option<RequestError>,
    #[serde(rename = "errorCode", default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violations: Option<Vec<Violation>>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestError {
    #[serde(
        rename = "serviceException",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_exception: Option<ServiceException>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceException {
    /// The error's code (`BAD_REQUEST`, `UNAUTHORIZED`), not a message's id.
    #[serde(rename = "messageId", default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(
        rename = "validationErrors",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub validation_errors: Option<BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
}

impl ErrorResponse {
    /// `{"requestError": {"serviceException": {"messageId": code, "text": text}}}`.
    pub fn service_exception(code: &str, text: &str) -> Self {
        ErrorResponse {
            request_error: Some(RequestError {
                service_exception: Some(ServiceException {
                    message_id: Some(code.to_string()),
                    text: Some(text.to_string()),
                    validation_errors: None,
                }),
            }),
            ..ErrorResponse::default()
        }
    }

    /// One line: the code, the text and each field's complaints.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(e) = self
            .request_error
            .as_ref()
            .and_then(|r| r.service_exception.as_ref())
        {
            parts.extend(e.message_id.clone());
            parts.extend(e.text.clone());
            for (field, why) in e.validation_errors.iter().flatten() {
                parts.push(format!("{field}: {}", why.join(", ")));
            }
        }
        parts.extend(self.error_code.clone());
        parts.extend(self.description.clone());
        for v in self.violations.iter().flatten() {
            let field = v.property.as_deref().unwrap_or("?");
            parts.push(format!("{field}: {}", v.violation.as_deref().unwrap_or("")));
        }
        parts.join(": ")
    }
}

/// Courier's number (`+41793026727`) as Infobip takes it (`41793026727`).
fn infobip_number(to: &str) -> &str {
    to.strip_prefix('+').unwrap_or(to)
}

/// The send body of one message to one number: `messageId` = `key`, and,
/// given courier's delivery URL (with its key and token: [`super::notify_url`]),
/// delivery reports to it as JSON with intermediate statuses and the key as
/// `callbackData`.
pub fn send_body(
    sender: &str,
    key: &str,
    to: &str,
    text: &str,
    notify_url: Option<&str>,
) -> SendBody {
    SendBody {
        messages: vec![SmsMessage {
            sender: Some(sender.to_string()),
            destinations: vec![Destination {
                to: infobip_number(to).to_string(),
                message_id: Some(key.to_string()),
            }],
            content: Content {
                text: text.to_string(),
            },
            webhooks: notify_url.map(|url| MessageWebhooks {
                delivery: Some(DeliveryWebhook {
                    url: url.to_string(),
                    intermediate_report: Some(true),
                }),
                content_type: Some("application/json".to_string()),
                callback_data: Some(key.to_string()),
            }),
        }],
    }
}

/// Infobip's status onto courier's order (`docs/providers.md`, "Statuses"):
/// groups `PENDING` and `ACCEPTED` are `accepted` (`PENDING_WAITING_DELIVERY`,
/// handed to the operator, too, until Infobip confirms it may be read as
/// `sent`); `DELIVERED_TO_HANDSET` is `delivered` and any other status of
/// group `DELIVERED` (`DELIVERED_TO_OPERATOR`) `sent`; groups
/// `UNDELIVERABLE`, `EXPIRED` and `REJECTED` are `failed`. The duplicate
/// check's rejection ([`DUPLICATE_STATUS`]) is not the message's status,
/// and any other group is unknown: `None`.
pub fn map_status(group_name: &str, status_name: &str) -> Option<Status> {
    if status_name == DUPLICATE_STATUS {
        return None;
    }
    match group_name {
        "PENDING" | "ACCEPTED" => Some(Status::Accepted),
        "DELIVERED" if status_name == "DELIVERED_TO_HANDSET" => Some(Status::Delivered),
        "DELIVERED" => Some(Status::Sent),
        "UNDELIVERABLE" | "EXPIRED" | GROUP_REJECTED => Some(Status::Failed),
        _ => None,
    }
}

/// Classifies a send's answer by what the caller does next:
///
/// | answer | outcome |
/// |---|---|
/// | `200`, our message in a group other than `REJECTED` | accepted, its status mapped |
/// | `200`, our message in group `REJECTED` (the duplicate check's or any other) | unknown: look it up |
/// | `400` naming a duplicate | unknown: look it up |
/// | `400` | rejected: a definite refusal, nothing created |
/// | `401`, `403` | rejected, read as credentials refused |
/// | `429`, `5xx`, any other status, an unreadable `200` | unknown |
///
/// "Our message" is the one whose `messageId` is `key`, or the only one.
pub fn classify_send(status: u16, body: &[u8], key: &str) -> SendOutcome {
    match status {
        200 => classify_sent(body, key),
        400 if names_a_duplicate(body) => SendOutcome::Unknown(format!(
            "infobip answered 400 naming a duplicate (a repeat's rejection?): {}",
            error_text(body, key)
        )),
        400 | 401 | 403 => SendOutcome::Rejected {
            status,
            error: error_text(body, key),
        },
        // Too many requests: unknown as well, and a pause for every worker.
        429 => SendOutcome::Throttled {
            status,
            error: error_text(body, key),
            retry_after_ms: None,
        },
        500..=599 => SendOutcome::Unknown(format!(
            "infobip answered {status}: {}",
            error_text(body, key)
        )),
        other => SendOutcome::Unknown(format!(
            "infobip answered {other}, which its send does not declare: {}",
            error_text(body, key)
        )),
    }
}

fn classify_sent(body: &[u8], key: &str) -> SendOutcome {
    let answer: SendResponse = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => return SendOutcome::Unknown(format!("unreadable 200 answer: {e}")),
    };
    let ours = match answer.messages.as_slice() {
        [only] => only,
        several => match several
            .iter()
            .find(|m| m.message_id.as_deref() == Some(key))
        {
            Some(m) => m,
            None => {
                return SendOutcome::Unknown(format!(
                    "a 200 answer of {} messages, none with our messageId",
                    several.len()
                ))
            }
        },
    };
    let Some(st) = &ours.status else {
        return SendOutcome::Unknown("a 200 answer without the message's status".into());
    };
    if st.is_duplicate() {
        return SendOutcome::Unknown(format!(
            "a repeat rejected as {}: the first message exists, look it up",
            st.name
        ));
    }
    if st.is_rejected() {
        return SendOutcome::Unknown(format!(
            "the message was rejected ({}): a repeat's rejection cannot be told from a new \
             message's, look it up",
            st.name
        ));
    }
    match st.courier_status() {
        Some(status) => SendOutcome::Accepted(MessageView {
            // The id Infobip answered with: courier's key, unless Infobip
            // assigned its own (then reports and lookups will not name it,
            // but the message exists: settling it accepted sends no other).
            id: ours.message_id.clone().unwrap_or_else(|| key.to_string()),
            key: key.to_string(),
            status,
            updated_at: None,
        }),
        None => SendOutcome::Unknown(format!(
            "a 200 answer with an unknown status {}/{}",
            st.group_name, st.name
        )),
    }
}

/// Classifies the answer of `GET /sms/3/logs?messageId={key}`:
///
/// | answer | outcome |
/// |---|---|
/// | `200`, `results` empty | not found (a definite answer: courier may resend with the same `messageId`) |
/// | `200`, entries with our `messageId` | found: the most advanced status among the entries not rejected; `failed` if every entry was rejected |
/// | `200`, only the duplicate check's rejections of ours | unknown: the original is not visible yet |
/// | `200`, entries of other messages only | unknown (the filter was not applied) |
/// | anything else (`401`/`403` included) | unknown: ask again |
pub fn classify_lookup(status: u16, body: &[u8], key: &str) -> LookupOutcome {
    if status != 200 {
        let why = if matches!(status, 401 | 403) {
            "credentials refused"
        } else {
            "no answer"
        };
        return LookupOutcome::Unknown(format!(
            "infobip logs answered {status} ({why}): {}",
            error_text(body, key)
        ));
    }
    let logs: LogsResponse = match serde_json::from_slice(body) {
        Ok(l) => l,
        Err(e) => return LookupOutcome::Unknown(format!("unreadable 200 logs answer: {e}")),
    };
    if logs.results.is_empty() {
        return LookupOutcome::NotFound;
    }
    let ours: Vec<&LogEntry> = logs
        .results
        .iter()
        .filter(|e| e.message_id.as_deref() == Some(key))
        .collect();
    if ours.is_empty() {
        return LookupOutcome::Unknown(format!(
            "{} log entries, none with our messageId",
            logs.results.len()
        ));
    }
    match settled_entry(&ours) {
        Some((entry, status)) => LookupOutcome::Found(MessageView {
            id: key.to_string(),
            key: key.to_string(),
            status,
            updated_at: entry.done_at.clone().or_else(|| entry.sent_at.clone()),
        }),
        None if ours
            .iter()
            .any(|e| e.status.as_ref().is_some_and(StatusObject::is_duplicate)) =>
        {
            LookupOutcome::Unknown(
                "only a rejected repeat is logged: the first message is not visible yet".into(),
            )
        }
        None => LookupOutcome::Unknown("no log entry of ours has a known status".into()),
    }
}

/// The entry that says what became of the message: a submission that was
/// not rejected outranks any rejected one (a rejected repeat says nothing
/// of the original), the most advanced of them first; only when every
/// submission was rejected is the message `failed`.
fn settled_entry<'a>(ours: &[&'a LogEntry]) -> Option<(&'a LogEntry, Status)> {
    let mapped = ours.iter().filter_map(|e| {
        let st = e.status.as_ref()?;
        Some((*e, st.courier_status()?, st.is_rejected()))
    });
    let mut best: Option<(&LogEntry, Status, bool)> = None;
    for (entry, status, rejected) in mapped {
        let better = match best {
            None => true,
            Some((_, b_status, b_rejected)) => {
                (b_rejected && !rejected)
                    || (b_rejected == rejected && status.rank() > b_status.rank())
            }
        };
        if better {
            best = Some((entry, status, rejected));
        }
    }
    best.map(|(e, s, _)| (e, s))
}

/// Whether an error body names a duplicate (the rejected-repeat shape is
/// not documented; this is the conservative reading of a `400`).
fn names_a_duplicate(body: &[u8]) -> bool {
    String::from_utf8_lossy(body)
        .to_ascii_lowercase()
        .contains("duplicate")
}

/// An error body in one line, at most 300 characters, the key redacted.
fn error_text(body: &[u8], key: &str) -> String {
    let text = match serde_json::from_slice::<ErrorResponse>(body) {
        Ok(e) if !e.summary().is_empty() => e.summary(),
        _ => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    };
    let text: String = text.chars().take(300).collect();
    if key.is_empty() {
        text
    } else {
        text.replace(key, "<key>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(message_id: &str, group: &str, name: &str) -> LogEntry {
        LogEntry {
            message_id: Some(message_id.to_string()),
            bulk_id: None,
            destination: None,
            sent_at: None,
            done_at: None,
            status: Some(StatusObject {
                group_id: None,
                group_name: group.to_string(),
                id: None,
                name: name.to_string(),
                description: None,
            }),
        }
    }

    #[test]
    fn a_submission_not_rejected_outranks_rejected_ones() {
        let sent = log("k", "DELIVERED", "DELIVERED_TO_OPERATOR");
        let flood = log("k", "REJECTED", "REJECTED_FLOODING_FILTER");
        let pending = log("k", "PENDING", "PENDING_ACCEPTED");
        let (_, s) = settled_entry(&[&flood, &pending, &sent]).unwrap();
        assert_eq!(s, Status::Sent);
        let (_, s) = settled_entry(&[&flood]).unwrap();
        assert_eq!(s, Status::Failed);
        let dup = log("k", "REJECTED", DUPLICATE_STATUS);
        assert!(settled_entry(&[&dup]).is_none());
    }

    #[test]
    fn error_texts_never_carry_the_key() {
        let body = br#"{"requestError":{"serviceException":{"messageId":"BAD_REQUEST","text":"messageId courier-k1 is bad"}}}"#;
        let text = error_text(body, "courier-k1");
        assert_eq!(text, "BAD_REQUEST: messageId <key> is bad");
        assert_eq!(
            error_text(b"courier-k1 <html>", "courier-k1"),
            "<key> <html>"
        );
    }
}
