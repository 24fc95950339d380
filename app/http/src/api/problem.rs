//! RFC 9457 problem documents: every error the API answers is one of these, as
//! `application/problem+json`, naming the offending fields where there are any.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use herald_core::usecases::{AccessError, Forbidden};
use herald_ports::{ResolveError, StoreError};
use serde::Serialize;
use utoipa::ToSchema;

pub const CONTENT_TYPE: &str = "application/problem+json";

/// One field that failed validation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, ToSchema)]
pub struct FieldError {
    /// The field, as a JSON path from the body root (`recipients[3]`) or a path parameter name.
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { field: field.into(), message: message.into() }
    }
}

/// An RFC 9457 problem document.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    #[schema(value_type = u16)]
    #[serde(serialize_with = "status_code")]
    pub status: StatusCode,
    pub detail: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    /// The capability the caller's role lacks (`missing-capability` problems only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<&'static str>,
}

fn status_code<S: serde::Serializer>(status: &StatusCode, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u16(status.as_u16())
}

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Self {
        Problem {
            kind: format!("urn:herald:problem:{slug}"),
            title: title.to_owned(),
            status,
            detail: detail.into(),
            errors: Vec::new(),
            capability: None,
        }
    }

    /// 422: the request is well-formed JSON but its fields are not acceptable.
    #[must_use]
    pub fn validation(errors: Vec<FieldError>) -> Self {
        let detail = match errors.as_slice() {
            [one] => format!("{}: {}", one.field, one.message),
            _ => format!("{} fields are invalid", errors.len()),
        };
        Problem { errors, ..Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "validation", "Invalid request", detail) }
    }

    /// 400: the body is not the JSON document this endpoint takes.
    #[must_use]
    pub fn bad_json(detail: impl Into<String>, errors: Vec<FieldError>) -> Self {
        Problem { errors, ..Problem::new(StatusCode::BAD_REQUEST, "malformed-body", "Malformed request body", detail) }
    }

    #[must_use]
    pub fn unauthorized(detail: &str) -> Self {
        Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Authentication required", detail)
    }

    #[must_use]
    pub fn forbidden(detail: &str) -> Self {
        Problem::new(StatusCode::FORBIDDEN, "forbidden", "Not allowed", detail)
    }

    #[must_use]
    pub fn not_found() -> Self {
        Problem::new(StatusCode::NOT_FOUND, "not-found", "Not found", "no such resource")
    }

    #[must_use]
    pub fn payload_too_large(limit: usize) -> Self {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
            "Request body too large",
            format!("the request body exceeds the limit of {limit} bytes"),
        )
    }

    /// 409: an `(user_id, event_key)` already used for a notification that said something else. `fields`
    /// names, per field, what differs (`body`, or `recipients[3].body` for an event).
    #[must_use]
    pub fn submission_conflict(fields: Vec<FieldError>) -> Self {
        Problem {
            errors: fields,
            ..Problem::new(
                StatusCode::CONFLICT,
                "submission-conflict",
                "Event key already used for a different notification",
                "this (user_id, event_key) was submitted before with different content; nothing was written and \
                 the stored notification is unchanged — repeat the original submission, or use a new event_key \
                 for a new notification",
            )
        }
    }

    /// 410: the request writes for a user who was erased (SPEC §13). Nothing was written: an erased user's
    /// data does not come back.
    #[must_use]
    pub fn user_erased() -> Self {
        Problem::new(
            StatusCode::GONE,
            "user-erased",
            "User erased",
            "this user was erased; Herald stores nothing more for them and nothing was written",
        )
    }

    /// 500 with nothing of the cause: the cause is logged, never answered.
    #[must_use]
    pub fn internal() -> Self {
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "the request could not be completed; it has been logged",
        )
    }

    #[must_use]
    pub fn unavailable() -> Self {
        Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "Service unavailable",
            "the database is unavailable; retry later",
        )
    }

    /// Logs an unexpected store failure and answers an opaque 500 (or 503 when waiting helps).
    #[must_use]
    pub fn from_store(error: &StoreError) -> Self {
        match error {
            StoreError::Unavailable(cause) => {
                tracing::warn!(error = %cause, "database unavailable");
                Problem::unavailable()
            }
            StoreError::Unknown(cause) => {
                tracing::error!(error = ?cause, "store failure");
                Problem::internal()
            }
            StoreError::UserErased => Problem::user_erased(),
        }
    }

    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = detail.into();
        self
    }
}

impl From<StoreError> for Problem {
    fn from(error: StoreError) -> Self {
        Problem::from_store(&error)
    }
}

impl From<Forbidden> for Problem {
    fn from(refused: Forbidden) -> Self {
        Problem {
            capability: Some(refused.capability.as_str()),
            ..Problem::new(
                StatusCode::FORBIDDEN,
                "missing-capability",
                "Missing capability",
                format!(
                    "this needs the capability {}, which the role {} does not have; nothing was done",
                    refused.capability, refused.role
                ),
            )
        }
    }
}

impl From<AccessError> for Problem {
    fn from(error: AccessError) -> Self {
        match error {
            AccessError::Forbidden(refused) => refused.into(),
            AccessError::Store(store) => Problem::from_store(&store),
        }
    }
}

impl From<ResolveError> for Problem {
    fn from(error: ResolveError) -> Self {
        match error {
            ResolveError::NotFound => Problem::not_found().with_detail("no such task"),
            ResolveError::NotParked { state } => Problem::new(
                StatusCode::CONFLICT,
                "not-parked",
                "Task is not waiting for review",
                format!("task is {state} and not waiting for review; nothing changed"),
            ),
            ResolveError::Forbidden(refused) => refused.into(),
            ResolveError::Store(store) => Problem::from_store(&store),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = self.status;
        let unauthorized = status == StatusCode::UNAUTHORIZED;
        let body = serde_json::to_vec(&self).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if unauthorized {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
