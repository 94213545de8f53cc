//! The classification of answers: pure functions of a status and a body,
//! public so that their tests (and a caller with its own transport) can use
//! them.

use crate::wire::{Action, BatchAnswer, EnqueuedItem, ErrorBody};
use crate::{ClientError, Enqueued};
use serde::de::DeserializeOwned;

/// Classifies an answer to `POST /v1/actions`.
pub fn classify_enqueue(status: u16, body: &[u8]) -> Result<Enqueued, ClientError> {
    match status {
        201 => read_action(status, body).map(Enqueued::Created),
        // The API answers a repeat with 200 (and `idempotent-replayed: true`);
        // the status alone tells it apart.
        200 => read_action(status, body).map(Enqueued::Repeat),
        _ => Err(failure(status, body)),
    }
}

/// Classifies an answer to `POST /v1/actions:batch` of `sent` actions.
pub fn classify_batch(
    status: u16,
    body: &[u8],
    sent: usize,
) -> Result<Vec<EnqueuedItem>, ClientError> {
    if status != 200 {
        return Err(failure(status, body));
    }
    match serde_json::from_slice::<BatchAnswer>(body) {
        Ok(a) if a.actions.len() == sent => Ok(a.actions),
        // The batch committed or not as a whole, but an answer that does not
        // match the request says nothing definite about which.
        Ok(a) => Err(ClientError::Unknown(format!(
            "a batch of {sent} answered with {} items",
            a.actions.len()
        ))),
        Err(e) => Err(ClientError::Unknown(format!("unreadable 200 answer: {e}"))),
    }
}

/// Classifies an answer to `GET /v1/actions/{id}`: `None` for the API's own
/// 404 (`not_found`). A 404 from anything else (a wrong base URL, a proxy)
/// is not evidence that the action is missing: it is a refusal.
pub fn classify_get(status: u16, body: &[u8]) -> Result<Option<Action>, ClientError> {
    match status {
        200 => read_action(status, body).map(Some),
        404 if error_body(body).is_some_and(|e| e.error == "not_found") => Ok(None),
        _ => Err(failure(status, body)),
    }
}

/// Classifies an answer to `POST /v1/actions/{id}/cancel`: `None` for the
/// API's own 404, and a 409 (the action is claimed, dispatched or final,
/// and nothing changed) is a definite refusal, not an unknown outcome.
pub fn classify_cancel(status: u16, body: &[u8]) -> Result<Option<Action>, ClientError> {
    match status {
        200 => read_action(status, body).map(Some),
        404 if error_body(body).is_some_and(|e| e.error == "not_found") => Ok(None),
        409 => Err(refused(status, body)),
        _ => Err(failure(status, body)),
    }
}

/// Classifies an answer to a settings change (`PUT /v1/stores/{store}`,
/// `PUT /v1/providers/{name}`) or to the list of configured stores
/// (`GET /v1/stores`): `T` is what the route answers with (`StoreFlow`,
/// `ProviderFlow`, `StoreFlowList`). A change replaces the settings whole,
/// so sending it again after an unknown outcome is harmless.
pub fn classify_settings<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, ClientError> {
    match status {
        200 => read(status, body),
        _ => Err(failure(status, body)),
    }
}

/// Classifies an answer to a settings read (`GET /v1/stores/{store}`,
/// `GET /v1/providers/{name}`): `None` for the API's own 404 (`not_found`:
/// no such store, or no such gate).
pub fn classify_settings_get<T: DeserializeOwned>(
    status: u16,
    body: &[u8],
) -> Result<Option<T>, ClientError> {
    match status {
        200 => read(status, body).map(Some),
        404 if error_body(body).is_some_and(|e| e.error == "not_found") => Ok(None),
        _ => Err(failure(status, body)),
    }
}

/// A success we cannot read tells us nothing definite.
fn read_action(status: u16, body: &[u8]) -> Result<Action, ClientError> {
    read(status, body)
}

fn read<T: DeserializeOwned>(status: u16, body: &[u8]) -> Result<T, ClientError> {
    serde_json::from_slice(body)
        .map_err(|e| ClientError::Unknown(format!("unreadable {status} answer: {e}")))
}

/// Any answer that is not the route's success.
fn failure(status: u16, body: &[u8]) -> ClientError {
    match status {
        401 => ClientError::Unauthorized {
            message: described(status, body).message,
        },
        403 => {
            let d = described(status, body);
            ClientError::Forbidden {
                reason: d.reason,
                message: d.message,
            }
        }
        // The request ran out of time (perhaps after its commit), conflicts
        // with one in progress, was shed, or met a server fault: unknown.
        408 | 409 | 429 | 500..=599 => {
            let d = described(status, body);
            ClientError::Unknown(format!(
                "server answered {status} {}: {}",
                d.reason, d.message
            ))
        }
        400..=499 => refused(status, body),
        // 1xx, 3xx, another 2xx: nothing we can rely on.
        other => ClientError::Unknown(format!("unexpected answer {other}")),
    }
}

/// A definite no, with the API's error code, field and index when it gave them.
fn refused(status: u16, body: &[u8]) -> ClientError {
    let d = described(status, body);
    ClientError::Refused {
        status,
        reason: d.reason,
        message: d.message,
        field: d.field,
        index: d.index,
    }
}

/// What an error answer says: the API's error body, or (any other body)
/// `http_<status>` and the body's first 200 bytes.
struct Described {
    reason: String,
    message: String,
    field: Option<String>,
    index: Option<usize>,
}

fn described(status: u16, body: &[u8]) -> Described {
    match error_body(body) {
        Some(e) => Described {
            reason: e.error,
            message: e.message,
            field: e.field,
            index: e.index,
        },
        None => Described {
            reason: format!("http_{status}"),
            message: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            field: None,
            index: None,
        },
    }
}

fn error_body(body: &[u8]) -> Option<ErrorBody> {
    serde_json::from_slice(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use courier_core::ActionState;

    const ACTION: &[u8] = br#"{"id":7,"store":"s1","key":"k1","to":"+15551234567",
        "state":"pending","epoch":0,"status":null,"idempotency_key":null,"attempts":0,
        "message_id":null,"fail_reason":null,"enqueued_at":"2026-01-01T00:00:00.000Z"}"#;

    #[test]
    fn created_and_repeat_are_told_apart_by_status() {
        let created = classify_enqueue(201, ACTION).unwrap();
        assert!(created.created());
        assert_eq!(created.action().id, 7);
        assert_eq!(created.action().state, ActionState::Pending);
        let repeat = classify_enqueue(200, ACTION).unwrap();
        assert!(matches!(repeat, Enqueued::Repeat(ref a) if a.id == 7));
    }

    #[test]
    fn refusals_carry_reason_field_and_index() {
        let body = br#"{"error":"bad_phone","message":"to must be E.164","field":"to"}"#;
        assert_eq!(
            classify_enqueue(400, body).unwrap_err(),
            ClientError::Refused {
                status: 400,
                reason: "bad_phone".into(),
                message: "to must be E.164".into(),
                field: Some("to".into()),
                index: None,
            }
        );
        let body = br#"{"error":"key_reused","message":"m","field":"key","index":3}"#;
        let e = classify_batch(422, body, 5).unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { status: 422, reason, field: Some(f), index: Some(3), .. }
                if reason == "key_reused" && f == "key"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "refused with 422 key_reused at actions[3].key: m"
        );
        // Too large: refused before anything was read.
        assert!(matches!(
            classify_enqueue(413, br#"{"error":"payload_too_large","message":"m"}"#),
            Err(ClientError::Refused { status: 413, .. })
        ));
    }

    #[test]
    fn a_refusal_that_is_not_the_apis_json_names_its_status() {
        let e = classify_enqueue(404, b"<html>not here</html>").unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { reason, field: None, index: None, .. }
                if reason == "http_404"),
            "{e:?}"
        );
    }

    #[test]
    fn credentials_are_not_the_requests_fault() {
        let body = br#"{"error":"unauthorized","message":"missing or wrong bearer token"}"#;
        for e in [
            classify_enqueue(401, body).unwrap_err(),
            classify_batch(401, body, 1).unwrap_err(),
            classify_get(401, body).unwrap_err(),
        ] {
            assert!(matches!(e, ClientError::Unauthorized { .. }), "{e:?}");
        }
        let body = br#"{"error":"forbidden_store","message":"not your store"}"#;
        assert_eq!(
            classify_enqueue(403, body).unwrap_err(),
            ClientError::Forbidden {
                reason: "forbidden_store".into(),
                message: "not your store".into()
            }
        );
    }

    #[test]
    fn unknown_is_never_no() {
        let body = br#"{"error":"unavailable","message":"retry"}"#;
        for status in [408, 409, 429, 500, 502, 503, 504] {
            for e in [
                classify_enqueue(status, body).unwrap_err(),
                classify_batch(status, body, 1).unwrap_err(),
                classify_get(status, body).unwrap_err(),
            ] {
                assert!(e.is_unknown(), "{status}: {e:?}");
            }
        }
        // A success we cannot read, and answers no route gives.
        for (status, body) in [
            (201, &b"not json"[..]),
            (200, b"{}"),
            (302, b""),
            (204, b""),
        ] {
            assert!(
                classify_enqueue(status, body).unwrap_err().is_unknown(),
                "{status}"
            );
        }
    }

    #[test]
    fn a_batch_answer_must_match_the_request() {
        let body = br#"{"actions":[{"id":1,"created":true},{"id":1,"created":false}]}"#;
        let items = classify_batch(200, body, 2).unwrap();
        assert_eq!(
            items,
            [
                EnqueuedItem {
                    id: 1,
                    created: true
                },
                EnqueuedItem {
                    id: 1,
                    created: false
                }
            ]
        );
        assert!(classify_batch(200, body, 3).unwrap_err().is_unknown());
        assert!(classify_batch(200, b"[]", 0).unwrap_err().is_unknown());
    }

    #[test]
    fn only_the_apis_404_is_not_found() {
        assert_eq!(
            classify_get(404, br#"{"error":"not_found","message":"no action 9"}"#),
            Ok(None)
        );
        assert!(matches!(
            classify_get(404, br#"{"error":"no_route","message":"no such route"}"#),
            Err(ClientError::Refused { status: 404, .. })
        ));
        assert!(matches!(
            classify_get(404, b"<html>"),
            Err(ClientError::Refused { status: 404, .. })
        ));
        assert_eq!(classify_get(200, ACTION).unwrap().unwrap().id, 7);
    }

    #[test]
    fn a_cancels_409_is_a_refusal_and_its_404_is_none() {
        let body =
            br#"{"error":"claimed","message":"action 7 is claimed and cannot be cancelled"}"#;
        let e = classify_cancel(409, body).unwrap_err();
        assert!(
            matches!(&e, ClientError::Refused { status: 409, reason, field: None, index: None, .. }
                if reason == "claimed"),
            "{e:?}"
        );
        assert!(!e.is_unknown());
        // An enqueue's 409 is still an unknown outcome.
        assert!(classify_enqueue(409, body).unwrap_err().is_unknown());
        assert_eq!(
            classify_cancel(404, br#"{"error":"not_found","message":"no action 9"}"#),
            Ok(None)
        );
        assert_eq!(classify_cancel(200, ACTION).unwrap().unwrap().id, 7);
        for status in [408, 429, 503] {
            assert!(
                classify_cancel(status, body).unwrap_err().is_unknown(),
                "{status}"
            );
        }
        assert!(classify_cancel(200, b"not json").unwrap_err().is_unknown());
    }

    #[test]
    fn unknown_fields_of_an_answer_are_ignored() {
        let mut v: serde_json::Value = serde_json::from_slice(ACTION).unwrap();
        v["cancelled_at"] = serde_json::json!(null);
        let body = serde_json::to_vec(&v).unwrap();
        assert!(classify_enqueue(201, &body).unwrap().created());
    }

    const STORE: &[u8] = br#"{"store":"s1","settings":{"rate_per_s":5.0,"burst":5,
        "in_flight_max":null,"later":1},"in_flight":0,"tokens":5.0,
        "configured_at":"2026-01-01T00:00:00.123456Z","more":true}"#;

    #[test]
    fn settings_answers_are_read_leniently_and_classified() {
        use crate::wire::StoreFlow;
        let flow: StoreFlow = classify_settings(200, STORE).unwrap();
        assert_eq!(flow.settings.burst, Some(5));
        assert_eq!(flow.settings.in_flight_max, None);
        let got: Option<StoreFlow> = classify_settings_get(200, STORE).unwrap();
        assert_eq!(got, Some(flow));
        let none: Option<StoreFlow> =
            classify_settings_get(404, br#"{"error":"not_found","message":"no store"}"#).unwrap();
        assert_eq!(none, None);
        let body = br#"{"error":"bad_settings","message":"burst: 0 is outside","field":"burst"}"#;
        assert!(matches!(
            classify_settings::<StoreFlow>(400, body),
            Err(ClientError::Refused { status: 400, field: Some(ref f), .. }) if f == "burst"
        ));
        let body = br#"{"error":"admin_only","message":"settings need an admin token"}"#;
        assert!(matches!(
            classify_settings_get::<StoreFlow>(403, body),
            Err(ClientError::Forbidden { ref reason, .. }) if reason == "admin_only"
        ));
        for status in [408, 409, 503] {
            assert!(classify_settings::<StoreFlow>(status, body)
                .unwrap_err()
                .is_unknown());
        }
        assert!(classify_settings::<StoreFlow>(200, b"{}")
            .unwrap_err()
            .is_unknown());
        // Not the API's 404: not evidence that the store is missing.
        assert!(matches!(
            classify_settings_get::<StoreFlow>(404, b"<html>"),
            Err(ClientError::Refused { status: 404, .. })
        ));
    }
}
