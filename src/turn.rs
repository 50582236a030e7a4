//! One agent turn — the use case behind `POST /v1/execute`, `POST /v1/tools/{name}/call` and the
//! `toolwire execute` / `toolwire call` commands, so the server and the CLI print the same JSON.
//!
//! completion → provider (named or detected) → parse → request checks → executor → format.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::call::{Arguments, ToolCall, ToolResult};
use crate::executor::{Batch, EventSink, Executor, RunOptions};
use crate::provider::stream::{self, Assembled, StreamError};
use crate::provider::{FormatOptions, ParseError, Parsed, Provider, detect};
use crate::registry::Registry;

/// Body of `POST /v1/execute`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExecuteRequest {
    /// Provider name or alias; detected from the completion's (or stream's) shape when absent.
    pub provider: Option<String>,
    /// The provider's raw response body, unmodified. Exactly one of `completion` and
    /// `completion_stream`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Value>,
    /// A streamed response instead: the array of its events in arrival order, or its raw wire
    /// text (see `docs/streaming.md`). It is assembled into the non-streamed body first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_stream: Option<Value>,
    /// Hidden context for backends; never shown to the model. An object, or absent.
    #[serde(default)]
    pub state: Value,
    #[serde(default)]
    pub options: ExecOptions,
}

/// Per-request options (`options` of `POST /v1/execute`). All optional.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExecOptions {
    /// Run calls concurrently (default true); false runs them one by one, in order.
    pub parallel: Option<bool>,
    /// Lower the per-request parallelism (never above the server's).
    pub max_concurrency: Option<usize>,
    /// Deadline of the whole request; never above the server's `request_timeout`.
    pub deadline_ms: Option<u64>,
    /// Only these tools may run in this request; other calls get `unknown_tool`.
    pub tools: Option<Vec<String>>,
    /// List each returned file's bytes (`results[].files[].data`, base64); default false: only
    /// name, type and size. Provider messages always carry the files either way.
    pub include_file_data: Option<bool>,
    /// OpenAI Chat only (tool messages are text there): also append one `user` message after
    /// the tool messages that carries the returned images (default false).
    pub files_as_user_message: Option<bool>,
}

impl ExecOptions {
    /// The executor's view of these options.
    pub fn run_options(&self) -> RunOptions<'_> {
        RunOptions {
            sequential: self.parallel == Some(false),
            max_concurrency: self.max_concurrency,
            deadline: self.deadline_ms.map(std::time::Duration::from_millis),
            allowed_tools: self.tools.as_deref(),
            include_file_data: self.include_file_data.unwrap_or(false),
        }
    }

    /// How these options change the provider messages.
    pub fn format_options(&self) -> FormatOptions {
        FormatOptions {
            files_as_user_message: self.files_as_user_message.unwrap_or(false),
        }
    }
}

/// Body of a `200` answer of `POST /v1/execute`.
#[derive(Debug, Clone, Serialize)]
pub struct ExecuteResponse {
    pub provider: Provider,
    /// True when there was no client tool call to run: the agent loop is done.
    pub finished: bool,
    /// The provider's raw stop signal for choice/candidate 0.
    pub stop_reason: Option<Value>,
    /// The model turn in the provider's request format, to append first.
    pub assistant: Value,
    /// The tool results in the provider's format, to append after `assistant`.
    pub messages: Vec<Value>,
    /// One per call, in call order.
    pub results: Vec<ToolResult>,
    /// Streamed input only: the assembled non-streamed response body, to log or store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion: Option<Value>,
    /// Streamed input only: what the assembly skipped or repaired (unknown event types, a
    /// stream cut before its final event, argument text that is not complete JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_warnings: Option<Vec<String>>,
}

/// A request ready to run: its provider, the parsed completion and, for streamed input, the
/// assembly.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub provider: Provider,
    pub parsed: Parsed,
    pub streamed: Option<Assembled>,
}

/// Why a request cannot be executed at all (nothing ran).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecuteError {
    #[error(
        "unknown provider `{0}`; use one of openai_chat, openai_responses, anthropic, gemini, bedrock, mistral, cohere, ollama"
    )]
    UnknownProvider(String),
    #[error("cannot tell which provider produced this completion; pass `provider`")]
    Undetectable,
    #[error("the completion is not shaped like a {named} response{}", detected.map(|d| format!(" (it looks like {d})")).unwrap_or_default())]
    Mismatch {
        named: Provider,
        detected: Option<Provider>,
    },
    #[error("{0}")]
    Shape(ParseError),
    #[error("the completion has {count} tool calls; at most {max} are allowed per request")]
    TooManyCalls { count: usize, max: usize },
    #[error("call id `{0}` appears more than once; every call id must be unique")]
    DuplicateCallId(String),
    #[error("`state` must be a JSON object")]
    BadState,
    #[error("give exactly one of `completion` and `completion_stream`")]
    CompletionOrStream,
    #[error("`completion_stream` must be an array of events or a string of raw stream text")]
    StreamShape,
    #[error("{0}")]
    Stream(StreamError),
}

/// Resolves the provider and parses the completion, checking what must hold before anything
/// runs (call count, unique ids, state shape). A streamed completion is assembled first.
pub fn prepare(req: &ExecuteRequest, max_calls: usize) -> Result<Prepared, ExecuteError> {
    if !(req.state.is_object() || req.state.is_null()) {
        return Err(ExecuteError::BadState);
    }
    let named = match &req.provider {
        Some(name) => Some(Provider::from_name(name).ok_or_else(|| ExecuteError::UnknownProvider(name.clone()))?),
        None => None,
    };
    let (provider, streamed) = match (&req.completion, &req.completion_stream) {
        (Some(c), None) => (resolve(named, c)?, None),
        (None, Some(s)) => {
            let (provider, assembled) = assemble_stream(named, s)?;
            (provider, Some(assembled))
        }
        _ => return Err(ExecuteError::CompletionOrStream),
    };
    let completion = match (&streamed, &req.completion) {
        (Some(a), _) => &a.completion,
        (None, Some(c)) => c,
        (None, None) => return Err(ExecuteError::CompletionOrStream),
    };
    let parsed = provider.parse(completion).map_err(ExecuteError::Shape)?;
    if parsed.calls.len() > max_calls {
        return Err(ExecuteError::TooManyCalls {
            count: parsed.calls.len(),
            max: max_calls,
        });
    }
    let mut seen = std::collections::HashSet::new();
    for id in parsed.calls.iter().filter_map(|c| c.id.as_deref()) {
        if !seen.insert(id) {
            return Err(ExecuteError::DuplicateCallId(id.to_owned()));
        }
    }
    Ok(Prepared {
        provider,
        parsed,
        streamed,
    })
}

/// The provider of a non-streamed completion: the named one (which must match its shape), or
/// the detected one.
fn resolve(named: Option<Provider>, completion: &Value) -> Result<Provider, ExecuteError> {
    match named {
        Some(p) => {
            if !detect::matches(p, completion) {
                return Err(ExecuteError::Mismatch {
                    named: p,
                    detected: detect::detect(completion),
                });
            }
            Ok(p)
        }
        None => detect::detect(completion).ok_or(ExecuteError::Undetectable),
    }
}

/// Assembles a `completion_stream` (events or raw text) into the non-streamed body.
///
/// The provider is the named one, or detected from the events' shape; raw text whose provider
/// is not named is decoded as SSE, else NDJSON, else the base64 AWS event stream, and the
/// provider is detected from the decoded events (`stream::wire::decode_detect`). A named
/// provider must agree with the events' shape (Mistral's chunks look like OpenAI Chat's, so
/// naming `mistral` for them is accepted).
pub fn assemble_stream(named: Option<Provider>, input: &Value) -> Result<(Provider, Assembled), ExecuteError> {
    let (provider, decoded);
    let events: &[Value] = match input {
        Value::Array(events) => {
            provider = match named {
                Some(p) => {
                    check_stream_provider(p, events)?;
                    p
                }
                None => mistral_marked(stream::detect(events).ok_or(ExecuteError::Undetectable)?, events),
            };
            events
        }
        Value::String(raw) => {
            (provider, decoded) = match named {
                Some(p) => {
                    let events = stream::decode(p, raw).map_err(ExecuteError::Stream)?;
                    check_stream_provider(p, &events)?;
                    (p, events)
                }
                None => match stream::wire::decode_detect(raw) {
                    Ok((p, events)) => (mistral_marked(p, &events), events),
                    Err(StreamError::Undetectable) => return Err(ExecuteError::Undetectable),
                    Err(e) => return Err(ExecuteError::Stream(e)),
                },
            };
            &decoded
        }
        _ => return Err(ExecuteError::StreamShape),
    };
    let assembled = stream::assemble(provider, events).map_err(ExecuteError::Stream)?;
    if !detect::matches(provider, &assembled.completion) {
        return Err(ExecuteError::Stream(StreamError::NoTurn {
            provider,
            missing: "the assembled body is not a complete response".to_owned(),
        }));
    }
    Ok((provider, assembled))
}

/// Mistral's chunks look like OpenAI Chat's, but its split calls repeat `id: "null"`, which
/// OpenAI's merge would glue onto the real id. A detected OpenAI Chat stream that carries a
/// Mistral marker — the padding field `p` on a chunk, or a call id `"null"` — is assembled (and
/// answered) as Mistral; a genuine OpenAI stream has neither.
fn mistral_marked(detected: Provider, events: &[Value]) -> Provider {
    if detected != Provider::OpenaiChat {
        return detected;
    }
    let marked = events.iter().any(|e| {
        e.get("p").is_some()
            || e.get("choices").and_then(Value::as_array).is_some_and(|choices| {
                choices.iter().any(|c| {
                    c.pointer("/delta/tool_calls")
                        .and_then(Value::as_array)
                        .is_some_and(|calls| {
                            calls
                                .iter()
                                .any(|t| t.get("id").and_then(Value::as_str) == Some("null"))
                        })
                })
            })
    });
    if marked { Provider::Mistral } else { detected }
}

/// A named provider must agree with the events it names.
fn check_stream_provider(named: Provider, events: &[Value]) -> Result<(), ExecuteError> {
    match stream::detect(events) {
        Some(d) if d != named && !(named == Provider::Mistral && d == Provider::OpenaiChat) => {
            Err(ExecuteError::Mismatch {
                named,
                detected: Some(d),
            })
        }
        _ => Ok(()),
    }
}

/// What a turn runs with besides its request: the executor, a registry snapshot, who asked,
/// and the cancellation of the server (or of a streaming client that left).
#[derive(Clone, Copy)]
pub struct Context<'a> {
    pub executor: &'a Executor,
    /// A snapshot: a reload during the request does not change the tools it runs.
    pub registry: &'a Registry,
    /// A digest of the matched auth token, or [`ANONYMOUS`]: scopes replay and `Idempotency-Key`.
    pub principal: &'a str,
    pub cancel: &'a CancellationToken,
}

/// The principal of requests made without auth (auth off, or the CLI).
pub const ANONYMOUS: &str = "anonymous";

/// Executes a prepared completion and formats the answer.
pub async fn run(ctx: Context<'_>, prepared: Prepared, req: &ExecuteRequest) -> ExecuteResponse {
    run_with_events(ctx, prepared, req, None).await
}

/// [`run`], reporting progress to `events` as it happens (streaming responses).
pub async fn run_with_events(
    ctx: Context<'_>,
    prepared: Prepared,
    req: &ExecuteRequest,
    events: Option<&EventSink>,
) -> ExecuteResponse {
    let Prepared {
        provider,
        parsed,
        streamed,
    } = prepared;
    let request_id = new_request_id();
    let batch = Batch {
        calls: &parsed.calls,
        state: &req.state,
        principal: ctx.principal,
        options: req.options.run_options(),
        request_id: &request_id,
        cancel: ctx.cancel,
        events,
    };
    let results = ctx.executor.execute(ctx.registry, &batch).await;
    let messages = provider.format(&parsed, &results, &req.options.format_options());
    ExecuteResponse {
        provider,
        finished: parsed.finished,
        stop_reason: parsed.stop_reason,
        assistant: parsed.assistant,
        messages,
        results,
        stream_warnings: streamed.as_ref().map(|s| s.warnings.clone()),
        completion: streamed.map(|s| s.completion),
    }
}

/// Runs one tool directly (no provider): the engine behind `POST /v1/tools/{name}/call`.
pub async fn call_tool(ctx: Context<'_>, name: &str, arguments: Option<&Value>, state: &Value) -> ToolResult {
    call_tool_with_id(ctx, None, name, arguments, state).await
}

/// [`call_tool`] with a call id: a repeat with the same id (and tool, arguments, principal and
/// visible state) is answered from the replay store, as a repeated provider call id is. MCP
/// clients name their calls this way (`_meta.toolwire/call_id`).
pub async fn call_tool_with_id(
    ctx: Context<'_>,
    id: Option<String>,
    name: &str,
    arguments: Option<&Value>,
    state: &Value,
) -> ToolResult {
    let calls = [ToolCall {
        id,
        name: name.to_owned(),
        arguments: Arguments::from_value(arguments),
    }];
    let request_id = new_request_id();
    let batch = Batch {
        calls: &calls,
        state,
        principal: ctx.principal,
        options: RunOptions::default(),
        request_id: &request_id,
        cancel: ctx.cancel,
        events: None,
    };
    let mut results = ctx.executor.execute(ctx.registry, &batch).await;
    results.pop().unwrap_or_else(|| {
        ToolResult::err(
            &calls[0],
            crate::call::ToolError::new(crate::call::ErrorKind::Internal, "no result", true),
        )
    })
}

/// A random request id: the prefix of every `Idempotency-Key` of the request.
pub fn new_request_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}
