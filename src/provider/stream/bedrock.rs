//! Streamed bedrock completions → the non-streamed body. See the module docs of `stream`.

use serde_json::Value;

use super::{Assembled, StreamError};
use crate::provider::Provider;

/// Assembles the events of one streamed response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let _ = events;
    Err(StreamError::NoTurn {
        provider: Provider::Bedrock,
        missing: "streamed input is not supported for this provider yet".to_owned(),
    })
}

/// TEMPORARY STUB (branch stream1): the real decoder of the base64 AWS event stream comes with
/// the Bedrock assembler from branch stream2; the merge takes theirs. Until then a raw Bedrock
/// string is a `Wire` error.
pub fn decode_eventstream(base64_text: &str) -> Result<Vec<Value>, StreamError> {
    let _ = base64_text;
    Err(StreamError::Wire {
        provider: Provider::Bedrock,
        reason: "the Bedrock event-stream decoder is not available in this build".to_owned(),
    })
}
