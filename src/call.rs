//! The neutral call and result types that every stage shares.
//!
//! `provider::*::parse` turns a raw completion into [`ToolCall`]s, the executor turns each call
//! into exactly one [`ToolResult`], and `provider::*::format` turns the results back into the
//! provider's own messages. Nothing here knows about a particular provider or backend.

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize, Serializer, ser::SerializeMap};
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

/// The portable tool-name rule `^[a-zA-Z0-9_-]{1,64}$` (OpenAI, Anthropic and Bedrock agree on
/// it). Tool files are held to it at load; a call naming anything else is answered with an
/// `unknown_tool` error result (the request still answers every call) and is never used as a
/// log field or metric label.
pub fn is_portable_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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

/// Stable error kinds (`docs/execution.md#error-kinds`). The strings are part of the API.
/// (`Deserialize`: results are read back from a shared replay store.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// The request `state` lacks a value a tool needs (an `inject` source): a fault of the
    /// application calling toolwire, not something the model can repair.
    MissingState,
    /// The TLS handshake with the backend failed (untrusted or wrong-name certificate, refused
    /// client certificate). Never retryable.
    TlsError,
    /// The shared replay store (Redis) did not answer, and the tool is not idempotent: running
    /// it without deduplication could run it twice. Retryable.
    StoreUnavailable,
    /// An MCP tool answered with `isError: true`: the tool ran and reported a failure the model
    /// should read. Not retried by toolwire.
    ToolError,
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
            ErrorKind::MissingState => "missing_state",
            ErrorKind::TlsError => "tls_error",
            ErrorKind::StoreUnavailable => "store_unavailable",
            ErrorKind::ToolError => "tool_error",
            ErrorKind::Internal => "internal",
        }
    }
}

/// One problem inside an error, e.g. a schema violation at a JSON pointer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// JSON pointer into the arguments (`""` for the root).
    pub path: String,
    /// What is wrong there, without echoing the value.
    pub message: String,
}

/// A failed call, written so that the model can read it and act on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    pub kind: ErrorKind,
    /// What failed and what to change, for the model.
    pub message: String,
    /// May the agent (or model) try the same call again later?
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
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

/// A file a tool returned beside its output (an image, a PDF, …). The bytes are kept as bytes
/// and are never decoded as text; providers get them in their native form (base64 blocks,
/// data URLs) or, where a format has none, as a one-line description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFile {
    /// A plain file name (no directories, no control characters), never empty.
    pub filename: String,
    /// The media type's essence (`type/subtype`), lowercase, without parameters.
    pub mime_type: String,
    pub data: Bytes,
}

/// What a provider can do with a file, decided from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// An image every image-capable provider takes: PNG, JPEG, GIF or WebP.
    Image(ImageFormat),
    /// `application/pdf`.
    Pdf,
    /// `text/*`.
    Text,
    /// Anything else.
    Other,
}

/// The four image formats the providers have in common.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageFormat {
    /// The short name (`png`, `jpeg`, `gif`, `webp`), as Bedrock's `image.format` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Gif => "gif",
            ImageFormat::Webp => "webp",
        }
    }
}

/// Longest file name kept, in bytes.
const MAX_FILENAME_BYTES: usize = 255;

impl ToolFile {
    /// A file with a checked media type and a sanitised name. Fails (with the reason) when
    /// `mime_type` is not a `type/subtype` media type; an unusable `filename` falls back to
    /// `file.<ext>`.
    pub fn try_new(filename: &str, mime_type: &str, data: Bytes) -> Result<Self, String> {
        let mime_type = media_type_essence(mime_type)
            .ok_or_else(|| format!("`{}` is not a media type (type/subtype)", mime_type.escape_debug()))?;
        let filename = sanitize_filename(filename).unwrap_or_else(|| default_filename(&mime_type));
        Ok(ToolFile {
            filename,
            mime_type,
            data,
        })
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// What providers can do with this file.
    pub fn kind(&self) -> FileKind {
        match self.mime_type.as_str() {
            "image/png" => FileKind::Image(ImageFormat::Png),
            "image/jpeg" | "image/jpg" => FileKind::Image(ImageFormat::Jpeg),
            "image/gif" => FileKind::Image(ImageFormat::Gif),
            "image/webp" => FileKind::Image(ImageFormat::Webp),
            "application/pdf" => FileKind::Pdf,
            m if m.starts_with("text/") => FileKind::Text,
            _ => FileKind::Other,
        }
    }

    /// The media type as providers expect it (`image/jpg` is written `image/jpeg`).
    pub fn media_type(&self) -> &str {
        match self.kind() {
            FileKind::Image(ImageFormat::Jpeg) => "image/jpeg",
            _ => &self.mime_type,
        }
    }

    /// The bytes, standard base64 with padding.
    pub fn base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }

    /// `data:<mime>;base64,<data>`.
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.media_type(), self.base64())
    }

    /// The bytes as UTF-8 text, for `text/*` files that are valid UTF-8.
    pub fn text(&self) -> Option<&str> {
        match self.kind() {
            FileKind::Text => std::str::from_utf8(&self.data).ok(),
            _ => None,
        }
    }

    /// `chart.png, image/png, 2048 bytes`.
    pub fn describe(&self) -> String {
        format!("{}, {}, {} bytes", self.filename, self.mime_type, self.size())
    }

    /// `[file: chart.png, image/png, 2048 bytes]`: how text-only formats mention the file.
    pub fn note(&self) -> String {
        format!("[file: {}]", self.describe())
    }
}

/// `type/subtype` of a media type (parameters dropped), lowercase, when both parts are RFC 6838
/// restricted names (`[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}`).
pub fn media_type_essence(value: &str) -> Option<String> {
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let (ty, sub) = essence.split_once('/')?;
    let restricted = |s: &str| {
        let mut bytes = s.bytes();
        bytes.next().is_some_and(|b| b.is_ascii_alphanumeric())
            && s.len() <= 127
            && bytes.all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    (restricted(ty) && restricted(sub)).then_some(essence)
}

/// The last path component of `name`, without control characters, trimmed, at most
/// [`MAX_FILENAME_BYTES`]; `None` when nothing usable is left.
fn sanitize_filename(name: &str) -> Option<String> {
    let base = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.is_empty() || clean == "." || clean == ".." {
        return None;
    }
    let mut end = clean.len().min(MAX_FILENAME_BYTES);
    while !clean.is_char_boundary(end) {
        end -= 1;
    }
    Some(clean[..end].to_owned())
}

/// `file.<ext>` for a media type.
pub fn default_filename(mime_type: &str) -> String {
    format!("file.{}", extension_for(mime_type))
}

/// The usual file extension of a media type (`bin` when unknown).
pub fn extension_for(mime_type: &str) -> &'static str {
    match mime_type {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "image/bmp" => "bmp",
        "image/tiff" => "tiff",
        "image/heic" => "heic",
        "application/pdf" => "pdf",
        "application/zip" => "zip",
        "application/gzip" => "gz",
        "application/msword" => "doc",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => "docx",
        "application/vnd.ms-excel" => "xls",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" => "xlsx",
        "text/plain" => "txt",
        "text/csv" => "csv",
        "text/html" => "html",
        "text/markdown" => "md",
        "audio/mpeg" => "mp3",
        "audio/wav" => "wav",
        "video/mp4" => "mp4",
        _ => "bin",
    }
}

/// Exactly one per call, in call order (`docs/execution.md#one-result-per-call`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub id: Option<String>,
    pub name: String,
    /// The arguments as received (object, or the raw unusable value).
    pub arguments: Value,
    pub outcome: Outcome,
    /// Files the tool returned beside its output (only on success).
    pub files: Vec<ToolFile>,
    /// Serialise each file's bytes (`files[].data`, base64) in `results[]` (request option
    /// `include_file_data`); by default only name, type and size are listed.
    pub include_file_data: bool,
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
            files: Vec::new(),
            include_file_data: false,
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
            files: Vec::new(),
            include_file_data: false,
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

    /// [`ToolResult::model_text`] followed by one [`ToolFile::note`] line per file: the result
    /// for formats that can only carry text.
    pub fn model_text_with_file_notes(&self) -> String {
        let mut text = self.model_text();
        for f in &self.files {
            text.push('\n');
            text.push_str(&f.note());
        }
        text
    }
}

/// A file as listed in `results[].files`: name, type, size, and the bytes only when asked.
struct FileEntry<'a>(&'a ToolFile, bool);

impl Serialize for FileEntry<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let FileEntry(file, with_data) = self;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("filename", &file.filename)?;
        map.serialize_entry("mime_type", &file.mime_type)?;
        map.serialize_entry("size", &file.size())?;
        if *with_data {
            map.serialize_entry("data", &file.base64())?;
        }
        map.end()
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
                if !self.files.is_empty() {
                    let files: Vec<FileEntry<'_>> = self
                        .files
                        .iter()
                        .map(|f| FileEntry(f, self.include_file_data))
                        .collect();
                    map.serialize_entry("files", &files)?;
                }
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
