//! The three OTLP signals: their paths, their log streams, their block
//! directories and the check that a body is one of their export requests.

use opentelemetry_proto::tonic::collector::{
    logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse},
    metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse},
    trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse},
};
use prost::Message;

/// One OTLP signal. Each has its own log stream, flusher and block
/// directory, so one signal's blocks never wait for another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    Traces,
    Metrics,
    Logs,
}

impl Signal {
    /// Every signal, in stream order (a signal's index here is its
    /// stream minus one).
    pub const ALL: [Signal; 3] = [Signal::Traces, Signal::Metrics, Signal::Logs];

    /// The log stream its bodies are appended to. Fixed forever: a log
    /// written by one version is replayed by the next.
    pub fn stream(self) -> u16 {
        match self {
            Signal::Traces => 1,
            Signal::Metrics => 2,
            Signal::Logs => 3,
        }
    }

    /// Its place in [`Signal::ALL`].
    pub fn index(self) -> usize {
        usize::from(self.stream() - 1)
    }

    /// The signal whose bodies go to `stream`, if any.
    pub fn of_stream(stream: u16) -> Option<Signal> {
        Signal::ALL.into_iter().find(|s| s.stream() == stream)
    }

    /// Its name: the last part of its URL path and its block directory.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }

    /// The URL path OTLP/HTTP exporters post it to.
    pub fn path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
            Signal::Logs => "/v1/logs",
        }
    }

    /// Whether `body` decodes as this signal's `Export*ServiceRequest`.
    /// Cost: a full decode into owned messages (allocations in
    /// proportion to the body), dropped at once.
    pub fn check(self, body: &[u8]) -> Result<(), prost::DecodeError> {
        match self {
            Signal::Traces => ExportTraceServiceRequest::decode(body).map(drop),
            Signal::Metrics => ExportMetricsServiceRequest::decode(body).map(drop),
            Signal::Logs => ExportLogsServiceRequest::decode(body).map(drop),
        }
    }

    /// The encoded empty `Export*ServiceResponse`: full success, no
    /// partial-success field.
    pub fn success(self) -> Vec<u8> {
        match self {
            Signal::Traces => ExportTraceServiceResponse::default().encode_to_vec(),
            Signal::Metrics => ExportMetricsServiceResponse::default().encode_to_vec(),
            Signal::Logs => ExportLogsServiceResponse::default().encode_to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_and_indexes_round_trip() {
        for s in Signal::ALL {
            assert_eq!(Signal::of_stream(s.stream()), Some(s));
            assert_eq!(Signal::ALL[s.index()], s);
            assert!(s.path().ends_with(s.name()));
        }
        assert_eq!(Signal::of_stream(0), None);
        assert_eq!(Signal::of_stream(ringwal::collector::FILLER_STREAM), None);
    }

    #[test]
    fn a_body_of_another_message_or_garbage_is_refused() {
        // Field 1 of a request is a repeated message; a varint there is
        // a wire-type mismatch.
        assert!(Signal::Traces.check(&[0x08, 0x01]).is_err());
        // A length running past the end.
        assert!(Signal::Logs.check(&[0x0a, 0x05, 0x00]).is_err());
        assert!(Signal::Metrics.check(b"").is_ok());
        assert!(Signal::Traces.success().is_empty());
    }
}
