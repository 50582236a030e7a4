//! An MCP `CallToolResult` (read as JSON, the wire form, so no SDK type leaks out) → toolwire's
//! [`Output`] (`docs/mcp.md#result-mapping`):
//!
//! - `text` blocks → the text output (several joined by a blank line);
//! - `structuredContent` → the JSON output (the text blocks, which mirror it, are dropped);
//! - `image` / `audio` → files (native blocks per provider, `docs/files.md`);
//! - `resource_link` → a line naming its URI, name and media type; an embedded `resource` →
//!   its text under a line naming its URI and media type, or a file for a `blob`;
//! - `isError: true` → [`BackendError::ToolReported`] with the text, which the model reads.
//!
//! Text is cut at `max_read_bytes` (the output is marked truncated); files beyond it in total
//! fail the call as `output_too_large`, like the other backends.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::Value;

use crate::backend::files::MAX_FILES;
use crate::backend::{BackendError, Output, head_cut};
use crate::call::ToolFile;

/// Most bytes of an `isError` text shown to the model.
const ERROR_TEXT_BYTES: usize = 4 * 1024;

/// Maps one result; `cap` is the tool's `max_read_bytes`.
pub(super) fn map_result(result: Value, cap: usize) -> Result<Output, BackendError> {
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut texts: Vec<String> = Vec::new();
    let mut files: Vec<ToolFile> = Vec::new();
    let mut file_bytes = 0usize;
    for block in blocks {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let s = |key: &str| block.get(key).and_then(Value::as_str);
        match kind {
            "text" => texts.push(s("text").unwrap_or_default().to_owned()),
            "image" | "audio" => {
                let mime = s("mimeType").unwrap_or("application/octet-stream");
                let file = decode_file(s("data").unwrap_or_default(), mime, None, cap, &mut file_bytes)?;
                files.push(file);
            }
            "resource_link" => {
                let uri = s("uri").unwrap_or_default();
                let mut line = format!("Resource link: {uri}");
                if let Some(name) = s("name") {
                    line.push_str(&format!(" (name: {name})"));
                }
                if let Some(mime) = s("mimeType") {
                    line.push_str(&format!(" [{mime}]"));
                }
                texts.push(line);
            }
            "resource" => {
                let res = block.get("resource").cloned().unwrap_or(Value::Null);
                let r = |key: &str| res.get(key).and_then(Value::as_str);
                let uri = r("uri").unwrap_or_default();
                let mime = r("mimeType");
                if let Some(text) = r("text") {
                    let mut line = format!("Resource {uri}");
                    if let Some(m) = mime {
                        line.push_str(&format!(" [{m}]"));
                    }
                    texts.push(format!("{line}:\n{text}"));
                } else if let Some(blob) = r("blob") {
                    let name = uri.rsplit('/').next().filter(|n| !n.is_empty());
                    let file = decode_file(
                        blob,
                        mime.unwrap_or("application/octet-stream"),
                        name,
                        cap,
                        &mut file_bytes,
                    )?;
                    files.push(file);
                }
            }
            // Unknown block kinds of later revisions are skipped, not fatal.
            _ => {}
        }
        if files.len() > MAX_FILES {
            return Err(BackendError::InvalidOutput(format!(
                "the MCP tool returned more than {MAX_FILES} files"
            )));
        }
    }
    let text = texts.join("\n\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = if text.is_empty() {
            "(no message)".to_owned()
        } else {
            head_cut(&text, ERROR_TEXT_BYTES).to_owned()
        };
        return Err(BackendError::ToolReported(text));
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        let size = serde_json::to_vec(structured).map_or(usize::MAX, |b| b.len());
        if size > cap {
            return Err(BackendError::OutputTooLarge { limit: cap });
        }
        return Ok(Output {
            value: structured.clone(),
            truncated: false,
            files,
        });
    }
    let (text, truncated) = if text.len() > cap {
        (head_cut(&text, cap).to_owned(), true)
    } else {
        (text, false)
    };
    let text = if text.is_empty() && !files.is_empty() {
        let list: Vec<String> = files
            .iter()
            .map(|f| format!("{} ({}, {} bytes)", f.filename, f.mime_type, f.size()))
            .collect();
        format!("The tool returned files: {}", list.join(", "))
    } else {
        text
    };
    Ok(Output {
        value: Value::String(text),
        truncated,
        files,
    })
}

/// Decodes one base64 payload into a file, counting its bytes against `cap`.
fn decode_file(
    data: &str,
    mime: &str,
    name: Option<&str>,
    cap: usize,
    total: &mut usize,
) -> Result<ToolFile, BackendError> {
    let compact: Vec<u8> = data.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    // The decoded size is known before decoding: refuse without allocating.
    *total = total.saturating_add(compact.len() / 4 * 3);
    if *total > cap {
        return Err(BackendError::OutputTooLarge { limit: cap });
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(&compact)
        .map_err(|e| BackendError::InvalidOutput(format!("the MCP tool returned invalid base64 ({e})")))?;
    ToolFile::try_new(name.unwrap_or(""), mime, Bytes::from(bytes))
        .map_err(|e| BackendError::InvalidOutput(format!("the MCP tool returned a bad media type: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_structured_files_and_errors() {
        let out = map_result(
            json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            100,
        )
        .unwrap();
        assert_eq!(out.value, json!("a\n\nb"));
        let out = map_result(
            json!({"content": [{"type": "text", "text": "{\"x\":1}"}], "structuredContent": {"x": 1}}),
            100,
        )
        .unwrap();
        assert_eq!(out.value, json!({"x": 1}));
        let out = map_result(
            json!({"content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]}),
            100,
        )
        .unwrap();
        assert_eq!(out.files.len(), 1);
        assert_eq!(out.files[0].mime_type, "image/png");
        assert!(out.value.as_str().unwrap().contains("image/png"));
        let err = map_result(
            json!({"content": [{"type": "text", "text": "nope"}], "isError": true}),
            100,
        )
        .unwrap_err();
        assert_eq!(err, BackendError::ToolReported("nope".into()));
        let out = map_result(
            json!({"content": [{"type": "resource_link", "uri": "file:///a.txt", "name": "a", "mimeType": "text/plain"}]}),
            100,
        )
        .unwrap();
        assert_eq!(out.value, json!("Resource link: file:///a.txt (name: a) [text/plain]"));
        let out = map_result(
            json!({"content": [{"type": "resource", "resource": {"uri": "mem://x", "mimeType": "text/plain", "text": "hi"}}]}),
            100,
        )
        .unwrap();
        assert_eq!(out.value, json!("Resource mem://x [text/plain]:\nhi"));
    }

    #[test]
    fn caps_apply() {
        let out = map_result(json!({"content": [{"type": "text", "text": "x".repeat(50)}]}), 10).unwrap();
        assert!(out.truncated);
        assert_eq!(out.value, json!("x".repeat(10)));
        let big = base64::engine::general_purpose::STANDARD.encode(vec![0u8; 100]);
        let err = map_result(
            json!({"content": [{"type": "image", "data": big, "mimeType": "image/png"}]}),
            10,
        )
        .unwrap_err();
        assert_eq!(err, BackendError::OutputTooLarge { limit: 10 });
        let err = map_result(json!({"content": [], "structuredContent": {"a": "x".repeat(50)}}), 10).unwrap_err();
        assert_eq!(err, BackendError::OutputTooLarge { limit: 10 });
    }
}
