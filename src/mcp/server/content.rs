//! A toolwire result as an MCP `CallToolResult`, the way MCP backends' results map in, reversed:
//! JSON output → `structuredContent` plus its text, text → a text block, files → image/audio
//! blocks (base64 + MIME type) or embedded resources, a failure → `isError: true` with the
//! model-facing (already redacted) message.

use rmcp::model::{CallToolResult, ContentBlock, MetaObject, ResourceContents};
use serde_json::{Value, json};

use crate::call::{Outcome, ToolFile, ToolResult};

/// The MCP result of one call. `modern`: the client speaks 2026-07-28, where
/// `structuredContent` may be any JSON value (before, only an object).
pub(super) fn to_mcp(result: &ToolResult, modern: bool) -> CallToolResult {
    match &result.outcome {
        Outcome::Err(e) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(e.model_text())]);
            let mut meta = MetaObject::default();
            let mut error = json!({"kind": e.kind.as_str(), "retryable": e.retryable});
            if let Some(ms) = e.retry_after_ms {
                error["retry_after_ms"] = json!(ms);
            }
            meta.insert(super::ERROR_META_KEY.to_owned(), error);
            r.meta = Some(meta);
            r
        }
        Outcome::Ok(value) => {
            let mut blocks = Vec::with_capacity(1 + result.files.len());
            let structured = match value {
                Value::String(s) => {
                    blocks.push(ContentBlock::text(s.clone()));
                    None
                }
                v => {
                    // The text mirror, for clients that read only `content`.
                    blocks.push(ContentBlock::text(v.to_string()));
                    (v.is_object() || modern).then(|| v.clone())
                }
            };
            blocks.extend(result.files.iter().map(file_block));
            let mut r = CallToolResult::success(blocks);
            r.structured_content = structured;
            if result.replayed {
                // Answered from the replay store (a repeated `toolwire/call_id`): nothing ran.
                let mut meta = MetaObject::default();
                meta.insert(super::REPLAYED_META_KEY.to_owned(), Value::Bool(true));
                r.meta = Some(meta);
            }
            r
        }
    }
}

/// An error result for a call refused because every stdio slot is busy.
pub(super) fn overloaded() -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(
        "Error (rejected): toolwire is running as many calls as it may; retry shortly",
    )]);
    let mut meta = MetaObject::default();
    meta.insert(
        super::ERROR_META_KEY.to_owned(),
        json!({"kind": "rejected", "retryable": true}),
    );
    r.meta = Some(meta);
    r
}

/// A returned file as a content block: images and audio natively, UTF-8 text as an embedded
/// text resource, anything else as an embedded blob.
fn file_block(f: &ToolFile) -> ContentBlock {
    let mime = f.media_type();
    if mime.starts_with("image/") {
        return ContentBlock::image(f.base64(), mime);
    }
    if mime.starts_with("audio/") {
        return ContentBlock::audio(f.base64(), mime);
    }
    let uri = file_uri(&f.filename);
    let contents = match f.text() {
        Some(text) => ResourceContents::text(text, uri),
        None => ResourceContents::blob(f.base64(), uri),
    };
    ContentBlock::resource(contents.with_mime_type(mime))
}

/// `toolwire://files/<name>`, the name percent-encoded: the file has no address of its own,
/// so the URI only names it.
fn file_uri(filename: &str) -> String {
    let mut uri = String::from("toolwire://files/");
    for b in filename.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Arguments, ErrorKind, ToolCall, ToolError};

    fn call() -> ToolCall {
        ToolCall {
            id: None,
            name: "t".into(),
            arguments: Arguments::from_value(None),
        }
    }

    fn wire(r: &CallToolResult) -> Value {
        serde_json::to_value(r).unwrap()
    }

    #[test]
    fn json_output_is_structured_and_mirrored_as_text() {
        let r = to_mcp(&ToolResult::ok(&call(), json!({"a": 1})), false);
        let w = wire(&r);
        assert_eq!(w["structuredContent"], json!({"a": 1}));
        assert_eq!(w["content"][0], json!({"type": "text", "text": "{\"a\":1}"}));
        assert_eq!(w["isError"], false);
    }

    #[test]
    fn non_object_json_is_structured_only_for_modern_clients() {
        let out = ToolResult::ok(&call(), json!([1, 2]));
        assert!(wire(&to_mcp(&out, false)).get("structuredContent").is_none());
        assert_eq!(wire(&to_mcp(&out, true))["structuredContent"], json!([1, 2]));
    }

    #[test]
    fn text_output_is_one_text_block() {
        let w = wire(&to_mcp(&ToolResult::ok(&call(), json!("hello")), true));
        assert_eq!(w["content"], json!([{"type": "text", "text": "hello"}]));
        assert!(w.get("structuredContent").is_none());
    }

    #[test]
    fn failures_are_is_error_with_the_model_text() {
        let e = ToolError::new(ErrorKind::Timeout, "took too long", true);
        let w = wire(&to_mcp(&ToolResult::err(&call(), e), false));
        assert_eq!(w["isError"], true);
        assert_eq!(w["content"][0]["text"], "Error (timeout): took too long");
        assert_eq!(
            w["_meta"]["toolwire/error"],
            json!({"kind": "timeout", "retryable": true})
        );
    }

    #[test]
    fn files_become_image_audio_and_resource_blocks() {
        let mut r = ToolResult::ok(&call(), json!("see files"));
        for (name, mime, data) in [
            ("a.png", "image/png", &b"\x89PNG"[..]),
            ("b.mp3", "audio/mpeg", b"ID3"),
            ("c d.txt", "text/plain", b"hi"),
            ("e.pdf", "application/pdf", b"%PDF"),
        ] {
            r.files
                .push(ToolFile::try_new(name, mime, bytes::Bytes::from_static(data)).unwrap());
        }
        let w = wire(&to_mcp(&r, false));
        let c = &w["content"];
        assert_eq!(
            c[1],
            json!({"type": "image", "data": "iVBORw==", "mimeType": "image/png"})
        );
        assert_eq!(c[2], json!({"type": "audio", "data": "SUQz", "mimeType": "audio/mpeg"}));
        assert_eq!(c[3]["resource"]["uri"], "toolwire://files/c%20d.txt");
        assert_eq!(c[3]["resource"]["text"], "hi");
        assert_eq!(c[4]["resource"]["blob"], "JVBERg==");
        assert_eq!(c[4]["resource"]["mimeType"], "application/pdf");
    }
}
