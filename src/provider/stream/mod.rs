//! Streamed completions: what an agent holds after streaming a model call (the parsed stream
//! events, or the raw wire text) → the non-streamed response body the provider would have
//! returned. That body then goes through the same `parse` as any completion, so a streamed turn
//! is answered exactly like the equivalent non-streamed one.
//!
//! - [`wire`]: raw text → events (SSE for most providers, NDJSON for Ollama, the AWS binary
//!   event stream in base64 for Bedrock); bounded and never panicking.
//! - one assembler per provider (`openai_chat.rs` …): events → the non-streamed body, following
//!   the provider's own SDK accumulator where it has one (docs/streaming.md has the rules and
//!   sources per provider).
//! - [`detect`]: which provider produced a list of events.
//!
//! Outcomes are precise: unknown event types are skipped and reported as warnings; a call whose
//! argument fragments do not form complete JSON keeps the text it received (the call then gets
//! a model-repairable `args_not_json` result); a stream with no usable turn is a
//! [`StreamError::NoTurn`] naming what is missing. Nothing panics and no call is dropped.

pub mod anthropic;
pub mod bedrock;
pub mod cohere;
pub mod gemini;
pub mod mistral;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
pub mod wire;

use serde_json::Value;

use super::Provider;

/// Most events one stream may hold.
pub const MAX_EVENTS: usize = 200_000;

/// Why a stream cannot be turned into a completion (a request error: nothing runs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The raw text or bytes are not this provider's wire format.
    #[error("the {provider} stream cannot be decoded: {reason}")]
    Wire { provider: Provider, reason: String },
    /// An event is not shaped like this provider's stream events.
    #[error("event {index} is not a {provider} stream event: {reason}")]
    Event {
        provider: Provider,
        index: usize,
        reason: String,
    },
    /// The events hold no usable model turn.
    #[error("the {provider} stream has no usable turn: {missing}")]
    NoTurn { provider: Provider, missing: String },
    /// The stream ended with an error event from the provider.
    #[error("the {provider} stream reported an error: {message}")]
    Provider { provider: Provider, message: String },
    /// More events than [`MAX_EVENTS`].
    #[error("the stream has more than {max} events")]
    TooManyEvents { max: usize },
    /// The provider of the events could not be told from their shape.
    #[error("cannot tell which provider produced this stream; pass `provider`")]
    Undetectable,
}

/// A stream turned into a completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    /// The non-streamed response body, as the provider would have returned it.
    pub completion: Value,
    /// What was skipped or repaired on the way (unknown event types, a missing final event…),
    /// one sentence each, for the agent developer.
    pub warnings: Vec<String>,
}

impl Assembled {
    /// An assembled body without warnings.
    pub fn new(completion: Value) -> Self {
        Assembled {
            completion,
            warnings: Vec::new(),
        }
    }
}

/// Decodes a provider's raw wire text into its events (see [`wire`]).
pub fn decode(provider: Provider, raw: &str) -> Result<Vec<Value>, StreamError> {
    wire::decode(provider, raw)
}

/// Assembles the events of one streamed response into the non-streamed body.
pub fn assemble(provider: Provider, events: &[Value]) -> Result<Assembled, StreamError> {
    if events.len() > MAX_EVENTS {
        return Err(StreamError::TooManyEvents { max: MAX_EVENTS });
    }
    match provider {
        Provider::OpenaiChat => openai_chat::assemble(events),
        Provider::OpenaiResponses => openai_responses::assemble(events),
        Provider::Anthropic => anthropic::assemble(events),
        Provider::Gemini => gemini::assemble(events),
        Provider::Bedrock => bedrock::assemble(events),
        Provider::Mistral => mistral::assemble(events),
        Provider::Cohere => cohere::assemble(events),
        Provider::Ollama => ollama::assemble(events),
    }
}

/// Which provider produced these events, from their shape (the first events that tell).
pub fn detect(events: &[Value]) -> Option<Provider> {
    events.iter().take(8).find_map(detect_event)
}

/// The provider one event belongs to, when its shape says so.
fn detect_event(event: &Value) -> Option<Provider> {
    let obj = event.as_object()?;
    let ty = obj.get("type").and_then(Value::as_str).unwrap_or("");
    if ty.starts_with("response.") {
        return Some(Provider::OpenaiResponses);
    }
    if matches!(
        ty,
        "message_start"
            | "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
            | "ping"
    ) {
        return Some(Provider::Anthropic);
    }
    if matches!(
        ty,
        "message-start"
            | "message-end"
            | "tool-plan-delta"
            | "tool-call-start"
            | "tool-call-delta"
            | "tool-call-end"
            | "content-start"
            | "content-delta"
            | "content-end"
            | "citation-start"
            | "citation-end"
    ) {
        return Some(Provider::Cohere);
    }
    if [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    .iter()
    .any(|k| obj.contains_key(*k))
    {
        return Some(Provider::Bedrock);
    }
    if obj.contains_key("candidates") || obj.contains_key("usageMetadata") || obj.contains_key("promptFeedback") {
        return Some(Provider::Gemini);
    }
    if obj.contains_key("done") && (obj.contains_key("message") || obj.contains_key("model")) {
        return Some(Provider::Ollama);
    }
    if obj.get("object").and_then(Value::as_str) == Some("chat.completion.chunk") || obj.contains_key("choices") {
        // Mistral chunks are OpenAI-shaped; an explicit `provider` picks Mistral's rules.
        return Some(Provider::OpenaiChat);
    }
    None
}
