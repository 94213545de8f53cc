//! The API's error answer: a status and `{"error": code, "message": text}`
//! (with the field and the batch item at fault, when there is one), and the
//! store's errors as answers. Its own module so that the server and the
//! authentication it runs before the handlers both use it without depending
//! on each other.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use courier_store::StoreError;
use serde_json::json;

/// An error answer: a status and `{"error": code, "message": text}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// The request's field at fault, when one is.
    field: Option<String>,
    /// The item of a batch at fault (0-based), when one is.
    index: Option<usize>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            index: None,
        }
    }
    pub(crate) fn at(mut self, field: Option<String>, index: Option<usize>) -> Self {
        self.field = field;
        self.index = index;
        self
    }
    pub(crate) fn bad(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        )
    }
    pub fn status(&self) -> StatusCode {
        self.status
    }
    pub fn code(&self) -> &'static str {
        self.code
    }
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"error": self.code, "message": self.message});
        if let Some(field) = self.field {
            body["field"] = json!(field);
        }
        if let Some(index) = self.index {
            body["index"] = json!(index);
        }
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => {
                tracing::warn!(error = m, "database unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the database is unavailable; retry",
                )
            }
            StoreError::Query(m) => {
                tracing::error!(error = m, "database error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error",
                )
            }
        }
    }
}
