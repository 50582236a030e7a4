//! Provider wire formats: one module per format, each with the same three jobs.
//!
//! - `parse`: raw completion body → [`Parsed`] (the client tool calls, `finished`, the raw stop
//!   signal, and the model turn in the provider's *request* format, kept verbatim);
//! - `format`: one [`ToolResult`] per call → the messages/blocks to append after `assistant`;
//! - `declare`: a tool declaration → the provider's entry for its request's `tools` field.
//!
//! Provider wire types are "typed where we act, pass-through elsewhere": modules read the few
//! fields they need from `serde_json::Value` and copy everything else unchanged, so fields we do
//! not know survive the round trip.
//!
//! Layout: one file per wire format; `common` holds what several of them share (the chat-shape
//! reader, shape errors, the missing-result answer, the declaration steps); [`schema`] holds the
//! JSON-Schema dialect transforms (one file per dialect); [`detect`] guesses the format of a
//! body; [`catalog`] declares a registry's tools.

pub mod anthropic;
pub mod bedrock;
pub mod catalog;
pub mod cohere;
pub(crate) mod common;
pub mod detect;
pub mod gemini;
pub mod mistral;
pub mod ollama;
pub mod openai_chat;
pub mod openai_responses;
pub mod schema;
pub mod stream;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::{ToolCall, ToolResult};

/// The wire formats toolwire reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    OpenaiChat,
    OpenaiResponses,
    Anthropic,
    Gemini,
    Bedrock,
    Mistral,
    Cohere,
    Ollama,
}

impl Provider {
    /// Every provider, in documentation order.
    pub const ALL: [Provider; 8] = [
        Provider::OpenaiChat,
        Provider::OpenaiResponses,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::Bedrock,
        Provider::Mistral,
        Provider::Cohere,
        Provider::Ollama,
    ];

    /// The canonical name (`openai_chat`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenaiChat => "openai_chat",
            Provider::OpenaiResponses => "openai_responses",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::Bedrock => "bedrock",
            Provider::Mistral => "mistral",
            Provider::Cohere => "cohere",
            Provider::Ollama => "ollama",
        }
    }

    /// Looks a provider up by canonical name or alias (`openai` → `openai_chat`,
    /// `google` → `gemini`, `claude` → `anthropic`, …), case-insensitively.
    pub fn from_name(name: &str) -> Option<Provider> {
        let lower = name.trim().to_ascii_lowercase();
        let p = match lower.as_str() {
            "openai_chat" | "openai" | "openai-chat" | "chat_completions" => Provider::OpenaiChat,
            "openai_responses" | "openai-responses" | "responses" => Provider::OpenaiResponses,
            "anthropic" | "claude" => Provider::Anthropic,
            "gemini" | "google" | "vertex" => Provider::Gemini,
            "bedrock" | "aws" | "converse" => Provider::Bedrock,
            "mistral" => Provider::Mistral,
            "cohere" => Provider::Cohere,
            "ollama" => Provider::Ollama,
            _ => return None,
        };
        Some(p)
    }

    /// Reads a raw completion body of this provider.
    pub fn parse(self, completion: &Value) -> Result<Parsed, ParseError> {
        match self {
            Provider::OpenaiChat => openai_chat::parse(completion),
            Provider::OpenaiResponses => openai_responses::parse(completion),
            Provider::Anthropic => anthropic::parse(completion),
            Provider::Gemini => gemini::parse(completion),
            Provider::Bedrock => bedrock::parse(completion),
            Provider::Mistral => mistral::parse(completion),
            Provider::Cohere => cohere::parse(completion),
            Provider::Ollama => ollama::parse(completion),
        }
    }

    /// Writes one result per call (`results[i]` answers `parsed.calls[i]`) as the messages to
    /// append after `parsed.assistant`. Empty when there are no calls.
    pub fn format(self, parsed: &Parsed, results: &[ToolResult], opts: &FormatOptions) -> Vec<Value> {
        match self {
            Provider::OpenaiChat => openai_chat::format(parsed, results, opts),
            Provider::OpenaiResponses => openai_responses::format(parsed, results),
            Provider::Anthropic => anthropic::format(parsed, results),
            Provider::Gemini => gemini::format(parsed, results),
            Provider::Bedrock => bedrock::format(parsed, results),
            Provider::Mistral => mistral::format(parsed, results),
            Provider::Cohere => cohere::format(parsed, results),
            Provider::Ollama => ollama::format(parsed, results),
        }
    }

    /// Declares tools for this provider: exactly the array for the request's `tools` field
    /// (Bedrock: `toolConfig.tools`; Gemini: one `{"functionDeclarations": [...]}` entry).
    /// Tools that cannot be expressed are left out, with a warning.
    pub fn declare(self, tools: &[ToolDeclaration<'_>], opts: &DeclareOptions) -> Declared {
        let mut warnings = Vec::new();
        let tools = match self {
            Provider::OpenaiChat => openai_chat::declare(tools, opts, &mut warnings),
            Provider::OpenaiResponses => openai_responses::declare(tools, opts, &mut warnings),
            Provider::Anthropic => anthropic::declare(tools, opts, &mut warnings),
            Provider::Gemini => gemini::declare(tools, opts, &mut warnings),
            Provider::Bedrock => bedrock::declare(tools, opts, &mut warnings),
            Provider::Mistral => mistral::declare(tools, opts, &mut warnings),
            Provider::Cohere => cohere::declare(tools, opts, &mut warnings),
            Provider::Ollama => ollama::declare(tools, opts, &mut warnings),
        };
        for w in &mut warnings {
            w.provider = self;
        }
        Declared { tools, warnings }
    }
}

impl std::fmt::Display for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `parse` found in a completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// Client-side tool calls of choice/candidate 0, in body order. Server-side tool blocks are
    /// never here.
    pub calls: Vec<ToolCall>,
    /// True when there is no client call to run and the turn does not ask to be continued.
    /// Decided from the content, not from the stop signal.
    pub finished: bool,
    /// The raw stop signal of choice/candidate 0 (`finish_reason`, `stop_reason`,
    /// `finishReason`, `stopReason`, `done_reason`, or the Responses `status`).
    pub stop_reason: Option<Value>,
    /// The model turn in the provider's *request* format, every block/part/item kept in order
    /// and unchanged. Responses: the array of output items to re-send as input.
    pub assistant: Value,
    /// Server-run tool blocks found (echoed inside `assistant`, never executed).
    pub server_side: Vec<Value>,
}

/// A completion that cannot be read as the named provider's response.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParseError {
    /// The body does not have this provider's response shape.
    #[error("the completion is not a {expected} response: {reason}")]
    Shape { expected: Provider, reason: String },
}

/// The provider-neutral facts a declaration is built from. `parameters` is the model-visible
/// JSON Schema (injected state parameters already removed), always with an object root.
#[derive(Debug, Clone, Copy)]
pub struct ToolDeclaration<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
}

/// Request options that change how results are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormatOptions {
    /// OpenAI Chat only: after the tool messages, add one `user` message carrying the returned
    /// images (tool messages can only hold text there).
    pub files_as_user_message: bool,
}

/// Options of `GET /v1/schemas`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeclareOptions {
    /// OpenAI-style strict mode (OpenAI Chat/Responses, Anthropic, Bedrock `strict`).
    pub strict: bool,
    /// Gemini only: emit the OpenAPI-subset `parameters` instead of `parametersJsonSchema`.
    pub gemini_openapi: bool,
}

/// Declarations for one provider plus what had to change to get them.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    pub tools: Vec<Value>,
    pub warnings: Vec<DeclareWarning>,
}

/// One change a transform made, or a tool that could not be expressed at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeclareWarning {
    pub tool: String,
    pub provider: Provider,
    /// The tool was left out of the declarations.
    pub dropped: bool,
    pub message: String,
}

impl DeclareWarning {
    /// A warning about a change; `provider` is filled in by [`Provider::declare`].
    pub fn changed(tool: &str, message: impl Into<String>) -> Self {
        DeclareWarning {
            tool: tool.to_owned(),
            provider: Provider::OpenaiChat,
            dropped: false,
            message: message.into(),
        }
    }

    /// A warning that the tool was left out; `provider` is filled in by [`Provider::declare`].
    pub fn dropped(tool: &str, message: impl Into<String>) -> Self {
        DeclareWarning {
            dropped: true,
            ..DeclareWarning::changed(tool, message)
        }
    }
}
