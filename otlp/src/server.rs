//! The OTLP/HTTP side: `POST /v1/{traces,metrics,logs}` with binary
//! protobuf bodies, answered 200 only once the body is kept at the
//! configured level.
//!
//! Statuses, as the OTLP/HTTP specification assigns them: 200 with an
//! empty `Export*ServiceResponse`; 401 with `WWW-Authenticate: Bearer`
//! when a bearer token is set and the request does not carry it (checked
//! first: nothing of the body is read); 400 for a body that does not decode
//! (nothing of it stored: the check runs before the append); 413 for a
//! body over the limit, before or after decompression; 415 for another
//! content type or encoding; 503 with `Retry-After` when the log is at its
//! size limit or closing (the exporter retries; the body was not stored).
//! Error bodies are a `google.rpc.Status` message, as the specification
//! asks.
//!
//! No runtime worker blocks: decoding, appending (which can wait for
//! staging space or for room in the log) and the baseline's fsync run on
//! tokio's blocking pool; waiting for the level is the ticket's future.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use prost::Message;
use tokio::sync::watch;

use crate::access::Token;
use crate::receiver::Receiver;
use crate::signal::Signal;

const PROTOBUF: &str = "application/x-protobuf";

/// Seconds a refused exporter is asked to wait before it retries.
const RETRY_AFTER_SECS: &str = "1";

/// Where bodies go.
pub enum Sink {
    /// The log, its flushers and blocks.
    Log(Receiver),
    /// The benchmark's baseline, what a collector author writes first:
    /// each body appended to one file and `fdatasync`ed before its 200.
    FsyncFile(Mutex<std::fs::File>),
}

/// The state every handler shares.
pub struct App {
    pub sink: Sink,
    /// The largest body accepted, on the wire and decompressed.
    pub max_body: usize,
    /// When set, an export without `Authorization: Bearer <token>` is
    /// refused with 401 before its body is read.
    pub token: Option<Token>,
    /// Set when the log can take nothing more (a failed write or sync
    /// poisoned it): the server then shuts down, exit status 1.
    pub fatal: watch::Sender<bool>,
}

/// The three routes; anything else is 404, another method 405.
pub fn router(app: Arc<App>) -> Router {
    let mut router = Router::new();
    for signal in Signal::ALL {
        router = router.route(
            signal.path(),
            post(
                move |State(app): State<Arc<App>>, headers: HeaderMap, body: Body| {
                    export(app, signal, headers, body)
                },
            ),
        );
    }
    router.with_state(app)
}

/// A refusal, as a status and a message for the `google.rpc.Status` body.
struct Refusal(StatusCode, String);

/// `google.rpc.Status`, the body of an OTLP/HTTP error response (details
/// left empty).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let Refusal(status, message) = self;
        // The gRPC codes that match: INVALID_ARGUMENT, UNAVAILABLE,
        // RESOURCE_EXHAUSTED, UNAUTHENTICATED, INTERNAL.
        let code = match status {
            StatusCode::BAD_REQUEST | StatusCode::UNSUPPORTED_MEDIA_TYPE => 3,
            StatusCode::SERVICE_UNAVAILABLE => 14,
            StatusCode::PAYLOAD_TOO_LARGE => 8,
            StatusCode::UNAUTHORIZED => 16,
            _ => 13,
        };
        let body = RpcStatus { code, message }.encode_to_vec();
        let mut response = (status, [(header::CONTENT_TYPE, PROTOBUF)], body).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

async fn export(app: Arc<App>, signal: Signal, headers: HeaderMap, body: Body) -> Response {
    match keep(app, signal, headers, body).await {
        Ok(()) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, PROTOBUF)],
            signal.success(),
        )
            .into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

/// Read, check and store one body; `Ok` once it reached the level.
async fn keep(
    app: Arc<App>,
    signal: Signal,
    headers: HeaderMap,
    body: Body,
) -> Result<(), Refusal> {
    check_token(&app, &headers)?;
    check_content_type(&headers)?;
    let encoding = Encoding::of(&headers)?;
    let wire = Limited::new(body, app.max_body)
        .collect()
        .await
        .map_err(|e| match e.downcast_ref::<LengthLimitError>() {
            Some(_) => too_large(app.max_body),
            None => Refusal(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
        })?
        .to_bytes();
    let worker = app.clone();
    let stored = tokio::task::spawn_blocking(move || {
        let body = encoding.decode(wire, worker.max_body)?;
        signal.check(&body).map_err(|e| {
            Refusal(
                StatusCode::BAD_REQUEST,
                format!("not an OTLP {} export request: {e}", signal.name()),
            )
        })?;
        store(&worker, signal, body)
    })
    .await
    .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??;
    match stored {
        None => Ok(()),
        Some(ticket) => {
            let Sink::Log(receiver) = &app.sink else {
                unreachable!("only the log hands out tickets");
            };
            let reached = ticket.reached(receiver.level()).await;
            reached.map_err(|e| log_refusal(&app, e))
        }
    }
}

/// Hand the checked body to the sink; a ticket to wait on, or `None` when
/// the body is kept already. Blocking.
fn store(app: &App, signal: Signal, body: Bytes) -> Result<Option<ringwal::Ticket>, Refusal> {
    match &app.sink {
        Sink::Log(receiver) => receiver
            .append(signal, body)
            .map(Some)
            .map_err(|e| log_refusal(app, e)),
        Sink::FsyncFile(file) => {
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            file.write_all(&body)
                .and_then(|()| file.sync_data())
                .map(|()| None)
                .map_err(|e| Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
    }
}

/// The answer to a log error, with its causes (a poisoned log's I/O
/// error). A poisoned log stores nothing more: the server is told to
/// stop.
fn log_refusal(app: &App, e: ringwal::Error) -> Refusal {
    match e {
        ringwal::Error::LogFull { .. } | ringwal::Error::Closed => {
            Refusal(StatusCode::SERVICE_UNAVAILABLE, e.chain().to_string())
        }
        ringwal::Error::TooLarge { .. } => {
            Refusal(StatusCode::PAYLOAD_TOO_LARGE, e.chain().to_string())
        }
        ringwal::Error::Poisoned { .. } | ringwal::Error::NoSpace { .. } => {
            let _ = app.fatal.send(true);
            Refusal(StatusCode::SERVICE_UNAVAILABLE, e.chain().to_string())
        }
        e => Refusal(StatusCode::INTERNAL_SERVER_ERROR, e.chain().to_string()),
    }
}

fn too_large(max: usize) -> Refusal {
    Refusal(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body exceeds the limit of {max} bytes"),
    )
}

fn check_token(app: &App, headers: &HeaderMap) -> Result<(), Refusal> {
    match &app.token {
        Some(token) if !token.admits(headers) => Err(Refusal(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token: send Authorization: Bearer <token>, \
             the token the receiver was given (--bearer-token)"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn check_content_type(headers: &HeaderMap) -> Result<(), Refusal> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = given.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case(PROTOBUF) {
        Ok(())
    } else {
        Err(Refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type {given:?}: only {PROTOBUF} is accepted"),
        ))
    }
}

/// A body's `Content-Encoding`.
#[derive(Clone, Copy)]
enum Encoding {
    Identity,
    Gzip,
    Deflate,
}

impl Encoding {
    fn of(headers: &HeaderMap) -> Result<Encoding, Refusal> {
        let Some(value) = headers.get(header::CONTENT_ENCODING) else {
            return Ok(Encoding::Identity);
        };
        match value.to_str().map(str::trim) {
            Ok(v) if v.eq_ignore_ascii_case("gzip") => Ok(Encoding::Gzip),
            Ok(v) if v.eq_ignore_ascii_case("deflate") => Ok(Encoding::Deflate),
            Ok(v) if v.eq_ignore_ascii_case("identity") || v.is_empty() => Ok(Encoding::Identity),
            _ => Err(Refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("content encoding {value:?}: gzip, deflate or none"),
            )),
        }
    }

    /// The body as sent, decompressed, and refused past `max` bytes
    /// whatever its compressed size. Cost: one pass and one buffer.
    fn decode(self, wire: Bytes, max: usize) -> Result<Bytes, Refusal> {
        let mut reader: Box<dyn Read> = match self {
            Encoding::Identity => return Ok(wire),
            Encoding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&wire[..])),
            Encoding::Deflate => Box::new(flate2::read::ZlibDecoder::new(&wire[..])),
        };
        let mut out = Vec::with_capacity(wire.len().saturating_mul(4).min(max));
        let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
        reader
            .by_ref()
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| {
                Refusal(
                    StatusCode::BAD_REQUEST,
                    format!("decompressing the body: {e}"),
                )
            })?;
        if out.len() > max {
            return Err(too_large(max));
        }
        Ok(Bytes::from(out))
    }
}

/// The state back from the server once every handler is done with it:
/// a handler whose client went away leaves its blocking append running,
/// and that append still holds the state for as long as it blocks (at
/// most the log's wait for room). Gives up after 30 seconds.
pub async fn into_app(mut app: Arc<App>) -> Result<App, String> {
    let give_up = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match Arc::try_unwrap(app) {
            Ok(app) => return Ok(app),
            Err(shared) if tokio::time::Instant::now() < give_up => {
                app = shared;
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            Err(_) => {
                return Err("requests were still running 30 s after the server stopped".into())
            }
        }
    }
}
