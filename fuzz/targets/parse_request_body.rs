//! Fuzz target `parse_request_body`: bytes as a request body, through the API's body parser
//! (`api::extract::parse`) as a `serde_json::Value` and as an `ExecuteRequest`; an execute
//! request that parses then goes through `turn::prepare` (provider resolution, parse, call
//! count and id checks).
//!
//! Invariants: no panic; `Value` parsing fails only as `InvalidJson`, `InvalidRequest` (blank)
//! or `Unprocessable` (well-formed, not an object); a prepared request has at most `MAX_CALLS` calls
//! with unique ids.

use std::collections::HashSet;

use serde_json::Value;
use toolwire::api::ApiError;
use toolwire::api::extract::parse;
use toolwire::turn::{ExecuteRequest, prepare};

/// The `limits.max_calls`-like bound passed to `prepare`.
const MAX_CALLS: usize = 64;

pub fn run(data: &[u8]) {
    match parse::<Value>(data) {
        Ok(_) => {}
        Err(ApiError::InvalidJson { line, .. }) => assert!(line >= 1 || data.is_empty()),
        Err(ApiError::InvalidRequest(_)) => assert!(data.iter().all(u8::is_ascii_whitespace)),
        // Request bodies must be JSON objects; any other well-formed JSON is a 422.
        Err(ApiError::Unprocessable(_)) => {
            assert!(serde_json::from_slice::<Value>(data).is_ok_and(|v| !v.is_object()))
        }
        Err(other) => panic!("unexpected error for a Value body: {other:?}"),
    }
    if let Ok(req) = parse::<ExecuteRequest>(data)
        && let Ok(toolwire::turn::Prepared { parsed, .. }) = prepare(&req, MAX_CALLS)
    {
        assert!(parsed.calls.len() <= MAX_CALLS);
        let mut seen = HashSet::new();
        assert!(
            parsed
                .calls
                .iter()
                .filter_map(|c| c.id.as_deref())
                .all(|id| seen.insert(id))
        );
    }
}
