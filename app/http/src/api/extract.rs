//! Extractors whose rejections are problem documents: a JSON body (`ApiJson`), path parameters
//! (`ApiPath`) and query parameters (`ApiQuery`). axum's own rejections answer plain text; these name the
//! offending field instead.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use super::problem::{FieldError, Problem};
use crate::state::ApiState;

/// How long a body may take without the limits layer (`super::limits::BodyTimeout` says otherwise).
const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A JSON request body, decoded with the path of the first field that does not fit.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Drops serde_json's " at line L column C" suffix: the field path says more.
fn without_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(at) if message[at..].contains(" column ") => &message[..at],
        _ => message,
    }
}

/// serde quotes the value it did not expect (`invalid type: string "…", expected a boolean`). A value sent
/// in the wrong field may still be a secret — a destination, a token — so only its kind is kept.
fn without_value(message: &str) -> String {
    for lead in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(lead) {
            let kind = rest.split(['`', '"', '\'', ',']).next().unwrap_or_default().trim();
            return match rest.rsplit_once(", expected ") {
                Some((_, expected)) => format!("{lead}{kind}, expected {expected}"),
                None => format!("{lead}{kind}"),
            };
        }
    }
    message.to_owned()
}

/// Fields whose values are secrets: their decoding errors never quote what was sent.
const SECRET_FIELDS: &[&str] = &["destination"];

/// Turns a decoding error into the field it concerns and a message fit to answer.
pub(crate) fn field_error(path: &str, message: &str) -> FieldError {
    let message = without_position(message);
    let prefix = if path == "." { String::new() } else { format!("{path}.") };
    for (lead, text) in [
        ("missing field `", "is required"),
        ("unknown field `", "is not a known field"),
        ("duplicate field `", "is given twice"),
    ] {
        if let Some(rest) = message.strip_prefix(lead) {
            if let Some((name, expected)) = rest.split_once('`') {
                // The path of an unknown field already ends with it; that of a missing one does not.
                let field = if path == name || path.ends_with(&format!(".{name}")) {
                    path.to_owned()
                } else {
                    format!("{prefix}{name}")
                };
                // serde lists the known fields after the unknown one: "…, expected one of `a`, `b`".
                let known = expected.split('`').skip(1).step_by(2);
                return match herald_core::names::nearest(name, known).filter(|_| lead == "unknown field `") {
                    Some(near) => FieldError::new(field, format!("{text}; did you mean `{near}`?")),
                    None => FieldError::new(field, text),
                };
            }
        }
    }
    // `$` names the document root, as in JSONPath (a field may itself be called `body`).
    let field = if path == "." { "$".to_owned() } else { path.to_owned() };
    if SECRET_FIELDS.iter().any(|secret| field == *secret) {
        return FieldError::new(field, "must be a string");
    }
    FieldError::new(field, without_value(message))
}

impl<T: DeserializeOwned> FromRequest<ApiState> for ApiJson<T> {
    type Rejection = Problem;

    async fn from_request(request: Request, state: &ApiState) -> Result<Self, Self::Rejection> {
        let content_type = request.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if !is_json(content_type) {
            return Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Unsupported media type",
                "the request body must be JSON (Content-Type: application/json)",
            ));
        }
        let timeout = request.extensions().get::<super::limits::BodyTimeout>().map_or(BODY_TIMEOUT, |t| t.0);
        let Ok(read) = tokio::time::timeout(timeout, Bytes::from_request(request, state)).await else {
            return Err(Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                format!("the request body did not arrive within {} ms", timeout.as_millis()),
            ));
        };
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                Problem::payload_too_large(state.body_limit)
            } else {
                Problem::bad_json("the request body could not be read", Vec::new())
            }
        })?;
        // A struct would also accept a JSON array (its fields by position): only an object is meant.
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first.is_some_and(|b| *b != b'{') && serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok() {
            return Err(Problem::validation(vec![FieldError::new("$", "must be a JSON object")]));
        }
        let mut deserializer = serde_json::Deserializer::from_slice(&bytes);
        match serde_path_to_error::deserialize(&mut deserializer) {
            Ok(value) => match deserializer.end() {
                Ok(()) => Ok(ApiJson(value)),
                Err(_) => Err(Problem::bad_json("the request body has data after the JSON document", Vec::new())),
            },
            Err(error) => {
                let path = error.path().to_string();
                let inner = error.into_inner();
                let message = inner.to_string();
                match inner.classify() {
                    serde_json::error::Category::Data => Err(Problem::validation(vec![field_error(&path, &message)])),
                    serde_json::error::Category::Syntax
                    | serde_json::error::Category::Eof
                    | serde_json::error::Category::Io => {
                        Err(Problem::bad_json(format!("the request body is not valid JSON: {message}"), Vec::new()))
                    }
                }
            }
        }
    }
}

/// Path parameters; a parameter that does not parse (a task id that is not a number) is a 404 problem,
/// since no such resource can exist.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T> FromRequestParts<ApiState> for ApiPath<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => {
                Err(Problem::not_found().with_detail(format!("no such resource: {}", rejection.body_text())))
            }
        }
    }
}

/// The error of a query string that did not decode: axum's `Query` decodes with serde_urlencoded through
/// serde_path_to_error and keeps that error, whose path names the parameter.
type QueryDecodingError = serde_path_to_error::Error<serde::de::value::Error>;

/// Names the parameter of a query-string decoding error from the decoder's own error, never from its text.
/// A rejection that holds no such error (a change inside axum; the unit tests pin it) names the query as a
/// whole.
fn query_error(rejection: &QueryRejection) -> FieldError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(rejection);
    while let Some(error) = source {
        if let Some(error) = error.downcast_ref::<QueryDecodingError>() {
            return field_error(&error.path().to_string(), &error.inner().to_string());
        }
        source = error.source();
    }
    FieldError::new("query", "is not a valid query string")
}

/// Query parameters; one that does not parse is a 422 problem naming it.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T> FromRequestParts<ApiState> for ApiQuery<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(Problem::validation(vec![query_error(&rejection)])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoding_errors_name_their_field() {
        assert_eq!(field_error(".", "missing field `user_id` at line 1 column 2").field, "user_id");
        assert_eq!(field_error("ttl", "unknown field `ttl`, expected one of `a`").field, "ttl");
        assert_eq!(field_error("digest", "missing field `every`").field, "digest.every");
        let e = field_error("ttl_seconds", "invalid type: string \"x\", expected u64 at line 1 column 20");
        assert_eq!((e.field.as_str(), e.message.as_str()), ("ttl_seconds", "invalid type: string, expected u64"));
        assert_eq!(field_error("recipients[2]", "invalid type: integer `5`").field, "recipients[2]");
        assert_eq!(field_error(".", "duplicate field `user_id` at line 1 column 30").field, "user_id");
    }

    #[test]
    fn an_unknown_field_near_a_known_one_is_suggested() {
        let e = field_error("userid", "unknown field `userid`, expected one of `user_id`, `event_key`, `body`");
        assert_eq!((e.field.as_str(), e.message.as_str()), ("userid", "is not a known field; did you mean `user_id`?"));
        let e = field_error("colour", "unknown field `colour`, expected one of `user_id`, `event_key`");
        assert_eq!(e.message, "is not a known field");
        let e = field_error("limt", "unknown field `limt`, expected `limit`");
        assert_eq!(e.message, "is not a known field; did you mean `limit`?");
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Limit {
        limit: Option<u32>,
    }

    fn query(uri: &str) -> FieldError {
        let uri: axum::http::Uri = uri.parse().expect("a URI");
        query_error(&Query::<Limit>::try_from_uri(&uri).expect_err("refused"))
    }

    #[test]
    fn query_errors_name_their_parameter() {
        let uri: axum::http::Uri = "/inbox?limit=2".parse().expect("a URI");
        assert_eq!(Query::<Limit>::try_from_uri(&uri).expect("decoded").0.limit, Some(2));
        let e = query("/inbox?limit=abc");
        assert_eq!((e.field.as_str(), e.message.as_str()), ("limit", "invalid digit found in string"));
        let e = query("/inbox?limt=5");
        assert_eq!((e.field.as_str(), e.message.as_str()), ("limt", "is not a known field; did you mean `limit`?"));
        let e = query("/inbox?limit=-1");
        assert_eq!(e.field, "limit");
        assert!(!query("/inbox?limit=secret-ish").message.contains("secret-ish"));
    }

    #[test]
    fn no_decoding_error_quotes_the_value() {
        let e = field_error("enabled", "invalid type: string \"dest, expected x\", expected a boolean");
        assert_eq!(e.message, "invalid type: string, expected a boolean");
        let e = field_error("ttl_seconds", "invalid value: integer `-5`, expected u64");
        assert_eq!(e.message, "invalid value: integer, expected u64");
        assert_eq!(
            field_error("note", "invalid type: map, expected a string").message,
            "invalid type: map, expected a string"
        );
    }

    #[test]
    fn secret_fields_never_quote_the_value() {
        let e = field_error("destination", "invalid type: map, expected a string containing secret-ish");
        assert_eq!(e.message, "must be a string");
    }

    #[test]
    fn json_media_types() {
        assert!(is_json("application/json"));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json(""));
    }
}
