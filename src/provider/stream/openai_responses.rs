//! Streamed openai_responses completions → the non-streamed body. See the module docs of `stream`.

use serde_json::Value;

use super::{Assembled, StreamError};
use crate::provider::Provider;

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let _ = events;
    Err(StreamError::NoTurn {
        provider: Provider::OpenaiResponses,
        missing: "streamed input is not supported for this provider yet".to_owned(),
    })
}
