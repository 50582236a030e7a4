//! Backends: where one attempt of a tool call actually runs.
//!
//! The executor owns retries, deadlines and concurrency; a backend runs exactly one attempt and
//! reports a typed [`BackendError`] that says whether the request was sent, which decides if a
//! retry is safe. Each backend enforces the attempt's `timeout` itself, because only it knows
//! how to stop cleanly (drop the HTTP request; TERM then KILL a process group).

pub mod egress;
pub mod files;
pub mod http;
pub mod reaper;
pub mod shim;
pub mod subprocess;
pub mod tls;

use std::time::Duration;

use serde_json::{Map, Value};

use crate::call::{ErrorKind, ToolError, ToolFile};
use crate::tool::{BackendSpec, McpSpec, Policy};

/// A boxed future of one MCP attempt (the trait below must stay object-safe).
pub type McpFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Output, BackendError>> + Send + 'a>>;

/// Where calls of MCP-backed tools go: implemented by `crate::mcp` (which owns the live server
/// connections), so that this module does not depend on it.
pub trait McpCaller: Send + Sync {
    /// Runs one attempt of tool `spec.tool` on server `spec.server`, within `attempt.timeout`.
    fn call<'a>(&'a self, spec: &'a McpSpec, attempt: &'a Attempt<'a>) -> McpFuture<'a>;
}

/// Every backend kind behind one entry point: the executor hands over a tool's [`BackendSpec`]
/// and one attempt, and never matches on kinds itself (a new kind is added here only).
pub struct Backends {
    http: http::HttpBackend,
    /// The exec shim and the reaper for subprocess tools (none unless set by the binary).
    pub exec: subprocess::ExecContext,
    /// The MCP servers' connections (none: MCP tools fail as `backend_unavailable`).
    pub mcp: Option<std::sync::Arc<dyn McpCaller>>,
}

impl Backends {
    /// The backends with the server's shared HTTP client.
    pub fn new(http: http::HttpBackend) -> Self {
        Backends {
            http,
            exec: subprocess::ExecContext::default(),
            mcp: None,
        }
    }

    /// The shared HTTP backend (its client carries the egress policy).
    pub fn http(&self) -> &http::HttpBackend {
        &self.http
    }

    /// Runs one attempt against the tool's backend.
    pub async fn call(&self, spec: &BackendSpec, attempt: &Attempt<'_>) -> Result<Output, BackendError> {
        match spec {
            BackendSpec::Http(spec) => self.http.call(spec, attempt).await,
            BackendSpec::Exec(spec) => subprocess::call_in(&self.exec, spec, attempt).await,
            BackendSpec::Mcp(spec) => match &self.mcp {
                Some(mcp) => mcp.call(spec, attempt).await,
                None => Err(BackendError::ServerDown {
                    message: format!("MCP server `{}` is not connected in this process", spec.server),
                    retry_after: None,
                }),
            },
        }
    }

    /// Extra time an attempt of `spec` may take past its timeout to stop cleanly: a process
    /// group gets TERM, `kill_grace`, then KILL; an HTTP request is dropped at once; an MCP
    /// request is cancelled (a notification or a closed stream) at once.
    pub fn stop_grace(spec: &BackendSpec, policy: &Policy) -> Duration {
        match spec {
            BackendSpec::Exec(_) => policy.kill_grace + Duration::from_secs(2),
            BackendSpec::Http(_) => Duration::ZERO,
            BackendSpec::Mcp(_) => Duration::from_millis(500),
        }
    }
}

/// Everything one attempt needs.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The provider's call id, if any.
    pub call_id: Option<&'a str>,
    /// 1-based attempt number.
    pub attempt: u32,
    /// The model's arguments plus the injected state values.
    pub arguments: &'a Map<String, Value>,
    /// The request `state` (never shown to the model).
    pub state: &'a Value,
    /// Stable across every attempt of one call; sent as `Idempotency-Key` to HTTP backends.
    pub idempotency_key: &'a str,
    /// The budget of this attempt: the tool's timeout, cut to what the deadline leaves.
    pub timeout: Duration,
    pub policy: &'a Policy,
}

/// What a successful attempt produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// JSON stays JSON; text is a JSON string.
    pub value: Value,
    /// The backend produced more than `max_read_bytes`; `value` holds the first part.
    pub truncated: bool,
    /// Files returned beside the output (see [`files`]).
    pub files: Vec<ToolFile>,
}

impl Output {
    /// An output without files.
    pub fn new(value: Value, truncated: bool) -> Self {
        Output {
            value,
            truncated,
            files: Vec::new(),
        }
    }
}

/// How much of a non-2xx response body the model sees.
pub const EXCERPT_BYTES: usize = 512;

/// How much of the end of a failed program's stderr the model sees.
pub const STDERR_TAIL_BYTES: usize = 2 * 1024;

/// The first `max` bytes of `s` at most, cut at a character boundary.
pub fn head_cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The last `max` bytes of `s` at most, starting at a character boundary.
pub fn tail_cut(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl BackendError {
    /// Every text this error carries that may echo what a backend saw (URLs, bodies, stderr),
    /// for masking secrets in place before the error is shown or logged.
    pub fn texts_mut(&mut self) -> Vec<&mut String> {
        match self {
            BackendError::Connect(t)
            | BackendError::Io(t)
            | BackendError::Spawn(t)
            | BackendError::InvalidArgument(t)
            | BackendError::InvalidOutput(t)
            | BackendError::Blocked(t)
            | BackendError::Tls(t)
            | BackendError::ToolReported(t)
            | BackendError::Disconnected(t)
            | BackendError::ServerDown { message: t, .. } => vec![t],
            BackendError::Status { body_excerpt, .. } => vec![body_excerpt],
            BackendError::NonzeroExit { stderr_tail, .. } | BackendError::Signaled { stderr_tail, .. } => {
                vec![stderr_tail]
            }
            BackendError::Timeout { .. } | BackendError::OutputTooLarge { .. } | BackendError::Unavailable { .. } => {
                Vec::new()
            }
        }
    }
}

/// Why one attempt failed. `sent` fields say whether the backend may have acted on the request,
/// which is what decides whether retrying is safe.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// No connection could be made; nothing was sent.
    #[error("could not connect to the backend: {0}")]
    Connect(String),
    /// The attempt ran out of time.
    #[error("the backend did not answer within {timeout:?}")]
    Timeout {
        timeout: Duration,
        sent: bool,
        signal: Option<String>,
    },
    /// The backend answered with a non-2xx status.
    #[error("the backend answered HTTP {status}")]
    Status {
        status: u16,
        body_excerpt: String,
        retry_after: Option<Duration>,
    },
    /// The connection broke after the request was sent (reset, truncated body).
    #[error("the connection to the backend broke: {0}")]
    Io(String),
    /// More output than the read cap, in a form that cannot be cut (e.g. JSON).
    #[error("the backend returned more than {limit} bytes")]
    OutputTooLarge { limit: usize },
    /// The program could not be started.
    #[error("the program could not be started: {0}")]
    Spawn(String),
    /// An argument cannot be passed (e.g. a NUL byte in an argv element).
    #[error("{0}")]
    InvalidArgument(String),
    /// The program exited with a non-zero code.
    #[error("the program exited with code {code}")]
    NonzeroExit { code: i32, stderr_tail: String },
    /// The program was killed by a signal it did not get from us.
    #[error("the program was killed by {signal}")]
    Signaled { signal: String, stderr_tail: String },
    /// The backend broke its output contract (e.g. `output = "json"` but stdout is not JSON).
    #[error("{0}")]
    InvalidOutput(String),
    /// The egress policy refused the destination.
    #[error("{0}")]
    Blocked(String),
    /// The TLS handshake failed: the backend's certificate is not trusted or not valid for its
    /// name, the backend refused our client certificate (or that none was sent), or the two
    /// sides share no protocol. A configuration problem on one side or the other, so retrying
    /// the same call cannot help.
    #[error("the TLS connection to the backend failed: {0}")]
    Tls(String),
    /// The backend's circuit breaker is open: failing fast without trying.
    #[error("the backend is failing and is being given time to recover")]
    Unavailable { retry_after: Duration },
    /// An MCP tool ran and reported a failure (`isError: true`); the text is the tool's own.
    #[error("the tool reported an error: {0}")]
    ToolReported(String),
    /// The connection to an MCP server broke while the call was in flight (the stdio server
    /// exited, the HTTP stream closed): the server may or may not have acted on it.
    #[error("the MCP server went away during the call: {0}")]
    Disconnected(String),
    /// The MCP server is not connected (starting, failing, restarting): nothing was sent.
    #[error("{message}")]
    ServerDown {
        message: String,
        retry_after: Option<Duration>,
    },
}

impl BackendError {
    /// May the executor try again? Safe when nothing was sent, when the backend said it was
    /// unavailable or rate-limited (429, 502, 503, 504), or when the tool is idempotent and the
    /// failure is transient. Client errors (other 4xx), spawn failures, bad arguments and
    /// crashes by signal are never retried.
    pub fn is_retryable(&self, idempotent: bool) -> bool {
        match self {
            BackendError::Connect(_) => true,
            BackendError::Timeout { sent, .. } => !sent || idempotent,
            BackendError::Status { status, .. } => match status {
                429 | 502 | 503 | 504 => true,
                500..=599 => idempotent,
                _ => false,
            },
            BackendError::Io(_) | BackendError::NonzeroExit { .. } | BackendError::Disconnected(_) => idempotent,
            BackendError::OutputTooLarge { .. }
            | BackendError::Spawn(_)
            | BackendError::InvalidArgument(_)
            | BackendError::Signaled { .. }
            | BackendError::InvalidOutput(_)
            | BackendError::Blocked(_)
            | BackendError::Tls(_)
            | BackendError::Unavailable { .. }
            // Fails fast: the server is down now, retrying within the call would only wait.
            | BackendError::ServerDown { .. }
            | BackendError::ToolReported(_) => false,
        }
    }

    /// The backend's own `Retry-After`, if it sent one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            BackendError::Status { retry_after, .. } => *retry_after,
            BackendError::Unavailable { retry_after } => Some(*retry_after),
            BackendError::ServerDown { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The error result the model sees after the last attempt.
    pub fn to_tool_error(&self) -> ToolError {
        let (kind, retryable, advice) = match self {
            BackendError::Connect(_) => (
                ErrorKind::BackendUnreachable,
                true,
                "The service may be down; try again later.",
            ),
            BackendError::Timeout { .. } => (ErrorKind::Timeout, true, "Try again later, or with a smaller request."),
            BackendError::Status { status, .. } => match status {
                429 => (
                    ErrorKind::BackendStatus,
                    true,
                    "The service is rate-limiting; wait before trying again.",
                ),
                500..=599 => (ErrorKind::BackendStatus, true, "The service failed; try again later."),
                _ => (
                    ErrorKind::BackendStatus,
                    false,
                    "The service rejected the request; check the arguments before calling again.",
                ),
            },
            BackendError::Io(_) => (ErrorKind::BackendUnreachable, true, "Try again later."),
            BackendError::OutputTooLarge { .. } => (
                ErrorKind::OutputTooLarge,
                false,
                "Ask for less data (narrower query, fewer items).",
            ),
            BackendError::Spawn(_) => (
                ErrorKind::SpawnFailed,
                false,
                "The tool is misconfigured; do not call it again in this conversation.",
            ),
            BackendError::InvalidArgument(_) => (ErrorKind::InvalidArguments, false, "Change the arguments."),
            BackendError::NonzeroExit { .. } => (
                ErrorKind::NonzeroExit,
                false,
                "Read the error output and change the arguments.",
            ),
            BackendError::Signaled { .. } => (
                ErrorKind::NonzeroExit,
                false,
                "The tool crashed; do not retry with the same arguments.",
            ),
            BackendError::InvalidOutput(_) => (
                ErrorKind::Internal,
                false,
                "The tool is broken; do not call it again in this conversation.",
            ),
            BackendError::Blocked(_) => (
                ErrorKind::Blocked,
                false,
                "This destination is not allowed; do not retry.",
            ),
            BackendError::Tls(_) => (
                ErrorKind::TlsError,
                false,
                "The service's certificate or the tool's TLS settings (ca_file, client certificate) are wrong; this does not change on retry, so do not call this tool again in this conversation.",
            ),
            BackendError::Unavailable { .. } => {
                (ErrorKind::BackendUnavailable, true, "Try again after `retry_after_ms`.")
            }
            BackendError::ToolReported(_) => (
                ErrorKind::ToolError,
                false,
                "Read the tool's message; change the arguments or the approach before calling it again.",
            ),
            BackendError::Disconnected(_) => (
                ErrorKind::BackendUnavailable,
                true,
                "The tool's server is being restarted; try again later.",
            ),
            BackendError::ServerDown { .. } => (
                ErrorKind::BackendUnavailable,
                true,
                "The tool's server is not available right now; try again later.",
            ),
        };
        let mut message = format!("{self}. {advice}");
        // The excerpt and the tail are cut here, not where they were read, so that whoever
        // masks secrets (the executor) does it on the longer text first.
        match self {
            BackendError::Status { body_excerpt, .. } if !body_excerpt.is_empty() => {
                message.push_str(&format!(" Response body: {}", head_cut(body_excerpt, EXCERPT_BYTES)));
            }
            BackendError::NonzeroExit { stderr_tail, .. } | BackendError::Signaled { stderr_tail, .. }
                if !stderr_tail.is_empty() =>
            {
                message.push_str(&format!(" Error output: {}", tail_cut(stderr_tail, STDERR_TAIL_BYTES)));
            }
            _ => {}
        }
        let mut err = ToolError::new(kind, message, retryable);
        match self {
            BackendError::Status {
                status, retry_after, ..
            } => {
                err.status = Some(*status);
                err.retry_after_ms = retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
            }
            BackendError::NonzeroExit { code, .. } => err.exit_code = Some(*code),
            BackendError::Signaled { signal, .. } => err.signal = Some(signal.clone()),
            BackendError::Timeout { signal, .. } => err.signal.clone_from(signal),
            BackendError::Unavailable { retry_after }
            | BackendError::ServerDown {
                retry_after: Some(retry_after),
                ..
            } => {
                err.retry_after_ms = Some(u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX));
            }
            _ => {}
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_rules_follow_docs_execution_retries() {
        let status = |s| BackendError::Status {
            status: s,
            body_excerpt: String::new(),
            retry_after: None,
        };
        assert!(BackendError::Connect("x".into()).is_retryable(false));
        for s in [429, 502, 503, 504] {
            assert!(status(s).is_retryable(false), "{s}");
        }
        assert!(!status(500).is_retryable(false));
        assert!(status(500).is_retryable(true));
        for s in [400, 401, 404, 409, 422] {
            assert!(!status(s).is_retryable(true), "{s}");
        }
        let t = |sent| BackendError::Timeout {
            timeout: Duration::from_secs(1),
            sent,
            signal: None,
        };
        assert!(t(false).is_retryable(false));
        assert!(!t(true).is_retryable(false));
        assert!(t(true).is_retryable(true));
        assert!(!BackendError::Spawn("x".into()).is_retryable(true));
        assert!(!BackendError::Tls("x".into()).is_retryable(true));
    }

    #[test]
    fn tool_errors_carry_status_and_exit_details() {
        let e = BackendError::Status {
            status: 404,
            body_excerpt: "nope".into(),
            retry_after: None,
        }
        .to_tool_error();
        assert_eq!(e.kind, ErrorKind::BackendStatus);
        assert_eq!(e.status, Some(404));
        assert!(!e.retryable);
        assert!(e.message.contains("nope"));
        let e = BackendError::NonzeroExit {
            code: 3,
            stderr_tail: "bad".into(),
        }
        .to_tool_error();
        assert_eq!(e.exit_code, Some(3));
        assert_eq!(e.kind, ErrorKind::NonzeroExit);
    }
}
