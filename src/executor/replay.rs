//! Replay-safe execution: re-sending the same completion must not repeat side effects.
//!
//! A call's result is stored under (call id, tool, canonical arguments) for a TTL. A repeat
//! gets the stored result (marked `replayed: true`) instead of running again; a repeat that
//! arrives while the first is still running waits for it. Calls without a provider id are not
//! deduplicated (two identical id-less calls may be meant twice), and tools with
//! `replay = false` (allowed for idempotent tools) always run. Argument errors are never
//! stored, so a corrected retry runs.
//!
//! The key also covers the call's *scope* ([`Scope`]): the authenticated principal and the part
//! of the request `state` the tool can see, so a repeated id from another user (or with other
//! hidden state) runs afresh instead of receiving someone else's result.
//!
//! Results live in a [`crate::store::ClaimStore`] (in memory by default, bounded by entries and
//! bytes, oldest evicted first; or in Redis, shared by every replica — `docs/scale.md`).

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::call::{Outcome, ToolError, ToolFile};

/// What one call produced, and what is stored per call.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub outcome: Outcome,
    /// Files returned beside a successful output (a replay returns them too).
    pub files: Vec<ToolFile>,
    pub truncated: bool,
    pub attempts: u32,
}

impl Stored {
    /// A failure that made no backend attempt.
    pub fn err(error: ToolError) -> Self {
        Stored {
            outcome: Outcome::Err(error),
            files: Vec::new(),
            truncated: false,
            attempts: 0,
        }
    }
}

impl crate::store::Weigh for Stored {
    fn weight(&self) -> usize {
        let payload = match &self.outcome {
            Outcome::Ok(v) => json_weight(v),
            Outcome::Err(e) => {
                e.message.len() + e.details.iter().map(|d| d.path.len() + d.message.len()).sum::<usize>()
            }
        };
        let files: usize = self
            .files
            .iter()
            .map(|f| f.size() + f.filename.len() + f.mime_type.len())
            .sum();
        payload + files
    }
}

/// The shared store's form of a result: JSON, files as base64. Written and read only here.
#[derive(serde::Serialize)]
struct WireOut<'a> {
    outcome: Result<&'a Value, &'a ToolError>,
    files: Vec<WireFile>,
    truncated: bool,
    attempts: u32,
}

#[derive(serde::Deserialize)]
struct WireIn {
    outcome: Result<Value, ToolError>,
    files: Vec<WireFile>,
    truncated: bool,
    attempts: u32,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct WireFile {
    filename: String,
    mime_type: String,
    data: String,
}

impl crate::store::Codec for Stored {
    fn encode(&self) -> Vec<u8> {
        let wire = WireOut {
            outcome: match &self.outcome {
                Outcome::Ok(v) => Ok(v),
                Outcome::Err(e) => Err(e),
            },
            files: self
                .files
                .iter()
                .map(|f| WireFile {
                    filename: f.filename.clone(),
                    mime_type: f.mime_type.clone(),
                    data: f.base64(),
                })
                .collect(),
            truncated: self.truncated,
            attempts: self.attempts,
        };
        // Serialising values that came from JSON cannot fail; an empty value never decodes.
        serde_json::to_vec(&wire).unwrap_or_default()
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        use base64::Engine as _;
        let wire: WireIn = serde_json::from_slice(bytes).ok()?;
        let mut files = Vec::with_capacity(wire.files.len());
        for f in wire.files {
            let data = base64::engine::general_purpose::STANDARD.decode(f.data).ok()?;
            files.push(ToolFile::try_new(&f.filename, &f.mime_type, data.into()).ok()?);
        }
        Some(Stored {
            outcome: match wire.outcome {
                Ok(v) => Outcome::Ok(v),
                Err(e) => Outcome::Err(e),
            },
            files,
            truncated: wire.truncated,
            attempts: wire.attempts,
        })
    }
}

/// Approximate bytes of a JSON value, without serialising it.
pub fn json_weight(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(json_weight).sum::<usize>(),
        Value::Object(o) => 2 + o.iter().map(|(k, v)| k.len() + 3 + json_weight(v)).sum::<usize>(),
    }
}

/// Where call results are kept.
pub type ReplayStore = crate::store::SharedStore<Stored>;

/// The longest a claim of a call is held: its deadline (the caller's own bound) is added to
/// this by the store; see `store::redis`.
pub fn lease(deadline: tokio::time::Instant) -> std::time::Duration {
    deadline.saturating_duration_since(tokio::time::Instant::now())
}

/// Who a call is run for, as far as replay is concerned: a repeat is only answered from the
/// store when it comes from the same principal with the same state the tool can see, so one
/// user never receives another user's stored result (ids like `call_0` repeat across users).
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// A digest naming the authenticated client (the matched token), or `anonymous`.
    pub principal: &'a str,
    /// The part of the request `state` the tool can see (see `Tool::visible_state`).
    pub state: &'a Value,
}

/// The replay key of a call: a digest of its id, tool name, canonical arguments and scope.
pub fn key(call_id: &str, tool: &str, args: &serde_json::Map<String, Value>, scope: Scope<'_>) -> String {
    let mut h = Sha256::new();
    for part in [call_id.as_bytes(), tool.as_bytes(), scope.principal.as_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let mut buf = String::new();
    canonical_object(args, &mut buf);
    h.update((buf.len() as u64).to_le_bytes());
    h.update(buf.as_bytes());
    buf.clear();
    canonical_into(scope.state, &mut buf);
    h.update(buf.as_bytes());
    crate::store::hex(&h.finalize())
}

/// JSON with object keys sorted at every level, so key order does not change a digest.
pub fn canonical(v: &Value) -> String {
    let mut out = String::new();
    canonical_into(v, &mut out);
    out
}

fn canonical_object(map: &serde_json::Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // A JSON string literal of the key: serialising a &str cannot fail.
        out.push_str(&serde_json::to_string(k).unwrap_or_default());
        out.push(':');
        canonical_into(v, out);
    }
    out.push('}');
}

fn canonical_into(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => canonical_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_into(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ANON: Scope<'static> = Scope {
        principal: "anonymous",
        state: &Value::Null,
    };

    #[test]
    fn canonical_ignores_key_order() {
        assert_eq!(
            canonical(&json!({"b": 1, "a": {"d": 2, "c": 3}})),
            canonical(&json!({"a": {"c": 3, "d": 2}, "b": 1}))
        );
        let a = json!({"x": 1, "y": 2});
        let b = json!({"y": 2, "x": 1});
        assert_eq!(
            key("c1", "t", a.as_object().unwrap(), ANON),
            key("c1", "t", b.as_object().unwrap(), ANON)
        );
        assert_ne!(
            key("c1", "t", a.as_object().unwrap(), ANON),
            key("c2", "t", a.as_object().unwrap(), ANON)
        );
    }

    #[test]
    fn stored_results_survive_the_shared_store_encoding() {
        use crate::call::ErrorKind;
        use crate::store::Codec as _;
        let ok = Stored {
            outcome: Outcome::Ok(json!({"a": [1, "x", null], "b": {"c": true}})),
            files: vec![
                ToolFile::try_new("chart.png", "image/png", bytes::Bytes::from_static(b"\x89PNG\0bin")).unwrap(),
            ],
            truncated: true,
            attempts: 2,
        };
        assert_eq!(Stored::decode(&ok.encode()), Some(ok));
        let null = Stored {
            outcome: Outcome::Ok(Value::Null),
            files: vec![],
            truncated: false,
            attempts: 1,
        };
        assert_eq!(Stored::decode(&null.encode()), Some(null));
        let mut e = ToolError::new(ErrorKind::BackendStatus, "nope", false);
        e.status = Some(400);
        let err = Stored::err(e);
        assert_eq!(Stored::decode(&err.encode()), Some(err));
        assert_eq!(Stored::decode(b"not json"), None);
        assert_eq!(Stored::decode(br#"{"outcome":{"Ok":1},"files":[{"filename":"a","mime_type":"x/y","data":"!!"}],"truncated":false,"attempts":1}"#), None);
    }

    #[test]
    fn the_scope_is_part_of_the_key() {
        let args = json!({"x": 1});
        let args = args.as_object().unwrap();
        let alice = json!({"user_id": "alice"});
        let bob = json!({"user_id": "bob"});
        let k = |principal, state| key("call_0", "t", args, Scope { principal, state });
        assert_ne!(k("anonymous", &alice), k("anonymous", &bob));
        assert_ne!(k("p1", &alice), k("p2", &alice));
        assert_eq!(k("p1", &alice), k("p1", &json!({"user_id": "alice"})));
    }
}
