//! The neutral call and result types that every stage shares.
//!
//! `provider::*::parse` turns a raw completion into [`ToolCall`]s, the executor turns each call
//! into exactly one [`ToolResult`], and `provider::*::format` turns the results back into the
//! provider's own messages. Nothing here knows about a particular provider or backend.

use serde::{Serialize, Serializer, ser::SerializeMap};
use serde_json::{Map, Value};

/// One client-side tool call found in a completion, in body order.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id, verbatim; `None` where the provider gave none (Gemini without ids,
    /// Ollama on older servers, OpenAI legacy `function_call`). Kept as "no id" in everything
    /// sent back to that provider.
    pub id: Option<String>,
    /// The tool name, verbatim as the model wrote it.
    pub name: String,
    /// The arguments, normalised to an object where possible.
    pub arguments: Arguments,
}

/// Arguments after normalisation (`""` → `{}`; strings parsed as JSON).
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// A JSON object: the only shape that may be executed.
    Object(Map<String, Value>),
    /// Arguments that cannot be executed. The call still gets an error result.
    Invalid {
        /// What the model sent (the raw string, or the non-object value).
        raw: Value,
        /// Why it cannot be used.
        problem: ArgumentsProblem,
    },
}

/// Why a call's arguments cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgumentsProblem {
    /// The arguments string is not valid JSON (often cut off by a token limit).
    InvalidJson,
    /// Valid JSON, but not an object.
    NotAnObject,
}

impl Arguments {
    /// Normalises a JSON-string argument field (OpenAI Chat, Responses, Mistral, Cohere):
    /// blank → `{}`, invalid JSON → [`ArgumentsProblem::InvalidJson`], non-object →
    /// [`ArgumentsProblem::NotAnObject`].
    pub fn from_json_str(s: &str) -> Self {
        if s.trim().is_empty() {
            return Arguments::Object(Map::new());
        }
        match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(map)) => Arguments::Object(map),
            Ok(_) => Arguments::Invalid {
                raw: Value::String(s.to_owned()),
                problem: ArgumentsProblem::NotAnObject,
            },
            Err(_) => Arguments::Invalid {
                raw: Value::String(s.to_owned()),
                problem: ArgumentsProblem::InvalidJson,
            },
        }
    }

    /// Normalises an object-typed argument field (Anthropic, Gemini, Bedrock, Ollama): absent or
    /// `null` → `{}`; an object as is; anything else → [`ArgumentsProblem::NotAnObject`]. A JSON
    /// string is parsed like [`Arguments::from_json_str`] (Mistral sends either form).
    pub fn from_value(v: Option<&Value>) -> Self {
        match v {
            None | Some(Value::Null) => Arguments::Object(Map::new()),
            Some(Value::Object(map)) => Arguments::Object(map.clone()),
            Some(Value::String(s)) => Arguments::from_json_str(s),
            Some(other) => Arguments::Invalid {
                raw: other.clone(),
                problem: ArgumentsProblem::NotAnObject,
            },
        }
    }

    /// The arguments as shown in `results[].arguments`: the object, or the raw value.
    pub fn to_value(&self) -> Value {
        match self {
            Arguments::Object(map) => Value::Object(map.clone()),
            Arguments::Invalid { raw, .. } => raw.clone(),
        }
    }
}

/// Stable error kinds (DESIGN §4). The strings are part of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    UnknownTool,
    ArgsNotJson,
    InvalidArguments,
    Timeout,
    DeadlineExceeded,
    BackendUnreachable,
    BackendStatus,
    NonzeroExit,
    SpawnFailed,
    OutputTooLarge,
    Rejected,
    BackendUnavailable,
    Blocked,
    Internal,
}

impl ErrorKind {
    /// The stable wire string of this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::UnknownTool => "unknown_tool",
            ErrorKind::ArgsNotJson => "args_not_json",
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::Timeout => "timeout",
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::BackendUnreachable => "backend_unreachable",
            ErrorKind::BackendStatus => "backend_status",
            ErrorKind::NonzeroExit => "nonzero_exit",
            ErrorKind::SpawnFailed => "spawn_failed",
            ErrorKind::OutputTooLarge => "output_too_large",
            ErrorKind::Rejected => "rejected",
            ErrorKind::BackendUnavailable => "backend_unavailable",
            ErrorKind::Blocked => "blocked",
            ErrorKind::Internal => "internal",
        }
    }
}

/// One problem inside an error, e.g. a schema violation at a JSON pointer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorDetail {
    /// JSON pointer into the arguments (`""` for the root).
    pub path: String,
    /// What is wrong there, without echoing the value.
    pub message: String,
}

/// A failed call, written so that the model can read it and act on it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolError {
    pub kind: ErrorKind,
    /// What failed and what to change, for the model.
    pub message: String,
    /// May the agent (or model) try the same call again later?
    pub retryable: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<ErrorDetail>,
    /// Backend HTTP status, for `backend_status`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Exit code, for `nonzero_exit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Signal name (`SIGKILL`), when a process was killed by a signal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// When the agent may retry (from `Retry-After` or an open breaker).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ToolError {
    /// A new error with no extra fields.
    pub fn new(kind: ErrorKind, message: impl Into<String>, retryable: bool) -> Self {
        ToolError {
            kind,
            message: message.into(),
            retryable,
            details: Vec::new(),
            status: None,
            exit_code: None,
            signal: None,
            retry_after_ms: None,
        }
    }

    /// Adds details (e.g. schema violations).
    pub fn with_details(mut self, details: Vec<ErrorDetail>) -> Self {
        self.details = details;
        self
    }

    /// The text a model sees for this error: kind, message and one line per detail.
    pub fn model_text(&self) -> String {
        let mut text = format!("Error ({}): {}", self.kind.as_str(), self.message);
        for d in &self.details {
            let path = if d.path.is_empty() { "(root)" } else { &d.path };
            text.push_str(&format!("\n- {path}: {}", d.message));
        }
        text
    }
}

/// Success or failure of one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The backend's output: JSON stays JSON, text is a JSON string.
    Ok(Value),
    Err(ToolError),
}

/// Exactly one per call, in call order (DESIGN §4).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub id: Option<String>,
    pub name: String,
    /// The arguments as received (object, or the raw unusable value).
    pub arguments: Value,
    pub outcome: Outcome,
    /// The output was cut to the model-facing limit (a marker is in the output too).
    pub truncated: bool,
    /// Backend attempts made (0 when the call never reached a backend).
    pub attempts: u32,
    pub duration_ms: u64,
    /// The result was stored from an earlier run of the same call and returned again instead
    /// of executing twice (replay-safe execution).
    pub replayed: bool,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(call: &ToolCall, output: Value) -> Self {
        ToolResult {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.to_value(),
            outcome: Outcome::Ok(output),
            truncated: false,
            attempts: 1,
            duration_ms: 0,
            replayed: false,
        }
    }

    /// A failed result that never reached a backend.
    pub fn err(call: &ToolCall, error: ToolError) -> Self {
        ToolResult {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.to_value(),
            outcome: Outcome::Err(error),
            truncated: false,
            attempts: 0,
            duration_ms: 0,
            replayed: false,
        }
    }

    /// Did the call succeed?
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// The error, if the call failed.
    pub fn error(&self) -> Option<&ToolError> {
        match &self.outcome {
            Outcome::Ok(_) => None,
            Outcome::Err(e) => Some(e),
        }
    }

    /// The result as one string for providers whose tool messages are text: a string output as
    /// is, any other JSON compactly serialised, an error as [`ToolError::model_text`].
    pub fn model_text(&self) -> String {
        match &self.outcome {
            Outcome::Ok(Value::String(s)) => s.clone(),
            Outcome::Ok(v) => v.to_string(),
            Outcome::Err(e) => e.model_text(),
        }
    }
}

impl Serialize for ToolResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("arguments", &self.arguments)?;
        match &self.outcome {
            Outcome::Ok(output) => {
                map.serialize_entry("ok", &true)?;
                map.serialize_entry("output", output)?;
            }
            Outcome::Err(error) => {
                map.serialize_entry("ok", &false)?;
                map.serialize_entry("error", error)?;
            }
        }
        if self.truncated {
            map.serialize_entry("truncated", &true)?;
        }
        if self.replayed {
            map.serialize_entry("replayed", &true)?;
        }
        map.serialize_entry("attempts", &self.attempts)?;
        map.serialize_entry("duration_ms", &self.duration_ms)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blank_string_arguments_mean_empty_object() {
        assert_eq!(Arguments::from_json_str("  "), Arguments::Object(Map::new()));
    }

    #[test]
    fn cut_off_arguments_are_invalid_json() {
        let a = Arguments::from_json_str("{\"city\": \"Par");
        assert!(matches!(
            a,
            Arguments::Invalid {
                problem: ArgumentsProblem::InvalidJson,
                ..
            }
        ));
    }

    #[test]
    fn array_arguments_are_not_an_object() {
        let a = Arguments::from_value(Some(&json!([1])));
        assert!(matches!(
            a,
            Arguments::Invalid {
                problem: ArgumentsProblem::NotAnObject,
                ..
            }
        ));
    }

    #[test]
    fn result_serialises_ok_and_error_shapes() {
        let call = ToolCall {
            id: Some("c1".into()),
            name: "t".into(),
            arguments: Arguments::Object(Map::new()),
        };
        let ok = serde_json::to_value(ToolResult::ok(&call, json!({"a": 1}))).unwrap();
        assert_eq!(ok["ok"], json!(true));
        assert_eq!(ok["output"], json!({"a": 1}));
        let err = ToolResult::err(&call, ToolError::new(ErrorKind::Timeout, "slow", true));
        let err = serde_json::to_value(err).unwrap();
        assert_eq!(err["ok"], json!(false));
        assert_eq!(err["error"]["kind"], json!("timeout"));
        assert!(err.get("output").is_none());
    }
}
