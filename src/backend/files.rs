//! Files from tools: the JSON files form and binary HTTP bodies (see `docs/files.md`).
//!
//! A backend returns files in one of two ways:
//!
//! - **JSON files form**: a JSON object with exactly the keys `content` and `files`, where
//!   `files` is an array of `{"filename", "mime_type", "data": <base64>}` (HTTP JSON bodies, and
//!   exec tools with `output = "json"`). `content` becomes the output the model reads. Anything
//!   else in that form (a missing or non-string field, a bad media type, invalid base64) breaks
//!   the contract and fails the call as `internal`; decoded bytes over `max_read_bytes` in total
//!   fail it as `output_too_large`. Objects with other keys are ordinary JSON output.
//! - **Binary HTTP body**: a 2xx response whose `Content-Type` is neither JSON, nor text, nor
//!   XML-ish (see [`classify`]) is one file holding the body's exact bytes; the output is a
//!   short sentence naming it. A body with no `Content-Type` is text when it is valid UTF-8 and
//!   a file (`application/octet-stream`) otherwise. Binary is never decoded as text.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use bytes::Bytes;
use serde_json::{Map, Value};

use super::{BackendError, Output};
use crate::call::{ToolFile, default_filename, media_type_essence};

/// Most files one call may return.
pub const MAX_FILES: usize = 32;

/// Standard alphabet; padding optional (some encoders drop it).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// How a 2xx HTTP body is read, from its `Content-Type`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json`, `*/*+json`.
    Json,
    /// `text/*`, XML-ish (`*/xml`, `*/*+xml`) and the few `application/*` types that are text.
    Text,
    /// Everything else: one file with this media type.
    Binary(String),
    /// No usable `Content-Type`: text if the body is UTF-8, else an octet-stream file.
    Unknown,
}

/// `application/*` subtypes that are text although not `text/*`.
const TEXT_APPLICATION_SUBTYPES: &[&str] = &[
    "javascript",
    "ecmascript",
    "x-javascript",
    "x-www-form-urlencoded",
    "yaml",
    "x-yaml",
    "toml",
    "x-ndjson",
    "jsonl",
    "x-jsonlines",
    "graphql",
    "sql",
    "x-sh",
    "csv",
];

/// Classifies a `Content-Type` header value (absent or unparseable → [`BodyKind::Unknown`]).
pub fn classify(content_type: Option<&str>) -> BodyKind {
    let Some(essence) = content_type.and_then(media_type_essence) else {
        return BodyKind::Unknown;
    };
    let Some((ty, sub)) = essence.split_once('/') else {
        return BodyKind::Unknown;
    };
    let xml = sub == "xml" || (sub.ends_with("+xml") && ty != "image");
    let text_application = ty == "application" && TEXT_APPLICATION_SUBTYPES.contains(&sub);
    if sub == "json" || sub.ends_with("+json") {
        BodyKind::Json
    } else if ty == "text" || xml || text_application {
        BodyKind::Text
    } else {
        BodyKind::Binary(essence)
    }
}

/// The output for a binary body: one file with the exact bytes, and a sentence naming it.
pub fn binary_output(bytes: Vec<u8>, mime_type: &str, content_disposition: Option<&str>) -> Output {
    let filename = content_disposition
        .and_then(filename_from_content_disposition)
        .unwrap_or_else(|| default_filename(mime_type));
    let data = Bytes::from(bytes);
    // `mime_type` comes from `classify` and is already a valid essence; the fallback only
    // keeps this total.
    let file = ToolFile::try_new(&filename, mime_type, data.clone()).unwrap_or_else(|_| ToolFile {
        filename: default_filename("application/octet-stream"),
        mime_type: "application/octet-stream".to_owned(),
        data,
    });
    let value = Value::String(format!(
        "The tool returned a file: {} ({}, {} bytes)",
        file.filename,
        file.mime_type,
        file.size()
    ));
    Output {
        value,
        truncated: false,
        files: vec![file],
    }
}

/// The file name of a `Content-Disposition` value: `filename*` (RFC 5987, UTF-8 or ISO-8859-1)
/// first, then `filename` (quoted or token). Directories are stripped later by
/// [`ToolFile::try_new`].
pub fn filename_from_content_disposition(value: &str) -> Option<String> {
    let params = split_params(value);
    let extended = params
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("filename*"))
        .and_then(|(_, v)| decode_ext_value(v));
    extended
        .or_else(|| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("filename"))
                .map(|(_, v)| v.clone())
        })
        .filter(|name| !name.trim().is_empty())
}

/// `key=value` parameters after the disposition type; quoted values unescaped.
fn split_params(value: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = value.split_once(';').map_or("", |(_, r)| r);
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key.trim().to_owned();
        let after = after.trim_start();
        let (val, next) = if let Some(quoted) = after.strip_prefix('"') {
            let mut val = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, escaped)) = chars.next() {
                            val.push(escaped);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => val.push(c),
                }
            }
            (val, quoted.get(end..).unwrap_or(""))
        } else {
            let (v, n) = after.split_once(';').unwrap_or((after, ""));
            (v.trim().to_owned(), n)
        };
        out.push((key, val));
        rest = next;
    }
    out
}

/// `charset'lang'percent-encoded` (RFC 5987).
fn decode_ext_value(v: &str) -> Option<String> {
    let mut parts = v.splitn(3, '\'');
    let charset = parts.next()?.to_ascii_lowercase();
    let _lang = parts.next()?;
    let encoded = parts.next()?;
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(encoded).collect();
    match charset.as_str() {
        "utf-8" => String::from_utf8(bytes).ok(),
        "iso-8859-1" => Some(bytes.iter().map(|&b| char::from(b)).collect()),
        _ => None,
    }
}

/// Is `value` the JSON files form (an object with exactly `content` and `files` keys, `files`
/// an array)?
fn is_files_form(map: &Map<String, Value>) -> bool {
    map.len() == 2 && map.contains_key("content") && map.get("files").is_some_and(Value::is_array)
}

fn broken(what: impl std::fmt::Display) -> BackendError {
    BackendError::InvalidOutput(format!("the tool broke the files contract: {what}"))
}

/// Splits the JSON files form into its content and files; any other value is returned as is
/// with no files. `cap` bounds the decoded bytes of all files together (and so of each).
pub fn split_json(value: Value, cap: usize) -> Result<(Value, Vec<ToolFile>), BackendError> {
    let mut map = match value {
        Value::Object(map) if is_files_form(&map) => map,
        other => return Ok((other, Vec::new())),
    };
    let content = map.remove("content").unwrap_or(Value::Null);
    let Some(Value::Array(entries)) = map.remove("files") else {
        return Ok((content, Vec::new()));
    };
    if entries.len() > MAX_FILES {
        return Err(broken(format_args!(
            "{} files returned, at most {MAX_FILES} are allowed",
            entries.len()
        )));
    }
    let mut files = Vec::with_capacity(entries.len());
    let mut total = 0usize;
    for (i, entry) in entries.iter().enumerate() {
        let field = |key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .ok_or_else(|| broken(format_args!("files[{i}].{key} is missing or not a string")))
        };
        let filename = field("filename")?;
        let mime_type = field("mime_type")?;
        let data = field("data")?;
        let compact: Vec<u8> = data.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        // The decoded size is known before decoding: refuse without allocating.
        let padding = compact.iter().rev().take_while(|&&b| b == b'=').count();
        let symbols = compact.len() - padding;
        total = total.saturating_add(symbols / 4 * 3 + (symbols % 4).saturating_sub(1));
        if total > cap {
            return Err(BackendError::OutputTooLarge { limit: cap });
        }
        let bytes = BASE64
            .decode(&compact)
            .map_err(|e| broken(format_args!("files[{i}].data is not valid base64 ({e})")))?;
        let file = ToolFile::try_new(filename, mime_type, Bytes::from(bytes))
            .map_err(|e| broken(format_args!("files[{i}].mime_type: {e}")))?;
        files.push(file);
    }
    let content = match content {
        Value::Null if !files.is_empty() => Value::String(files_sentence(&files)),
        other => other,
    };
    Ok((content, files))
}

/// `The tool returned files: a.png (image/png, 10 bytes), …` for a files form without content.
fn files_sentence(files: &[ToolFile]) -> String {
    let list: Vec<String> = files
        .iter()
        .map(|f| format!("{} ({}, {} bytes)", f.filename, f.mime_type, f.size()))
        .collect();
    format!("The tool returned files: {}", list.join(", "))
}

/// [`split_json`] applied to a successful output.
pub fn with_json_files(output: Output, cap: usize) -> Result<Output, BackendError> {
    let (value, files) = split_json(output.value, cap)?;
    Ok(Output {
        value,
        truncated: output.truncated,
        files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_are_classified() {
        assert_eq!(classify(Some("application/json; charset=utf-8")), BodyKind::Json);
        assert_eq!(classify(Some("application/problem+json")), BodyKind::Json);
        assert_eq!(classify(Some("text/html")), BodyKind::Text);
        assert_eq!(classify(Some("application/xml")), BodyKind::Text);
        assert_eq!(classify(Some("application/atom+xml")), BodyKind::Text);
        assert_eq!(classify(Some("application/x-ndjson")), BodyKind::Text);
        assert_eq!(classify(Some("image/png")), BodyKind::Binary("image/png".into()));
        assert_eq!(
            classify(Some("image/svg+xml")),
            BodyKind::Binary("image/svg+xml".into())
        );
        assert_eq!(
            classify(Some("Application/PDF")),
            BodyKind::Binary("application/pdf".into())
        );
        assert_eq!(
            classify(Some("application/octet-stream")),
            BodyKind::Binary("application/octet-stream".into())
        );
        assert_eq!(classify(None), BodyKind::Unknown);
        assert_eq!(classify(Some("garbage")), BodyKind::Unknown);
    }

    #[test]
    fn content_disposition_filenames() {
        let f = filename_from_content_disposition;
        assert_eq!(f("attachment; filename=\"report.pdf\"").as_deref(), Some("report.pdf"));
        assert_eq!(f("inline; filename=chart.png").as_deref(), Some("chart.png"));
        assert_eq!(
            f("attachment; filename=\"a.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf").as_deref(),
            Some("résumé.pdf")
        );
        assert_eq!(
            f("attachment; filename=\"q\\\"uote.txt\"").as_deref(),
            Some("q\"uote.txt")
        );
        assert_eq!(f("attachment"), None);
        assert_eq!(f("attachment; filename=\"\""), None);
    }

    #[test]
    fn binary_output_names_the_file() {
        let out = binary_output(
            vec![0, 159, 146, 150],
            "application/pdf",
            Some("attachment; filename=\"../x/r.pdf\""),
        );
        assert_eq!(out.files.len(), 1);
        assert_eq!(out.files[0].filename, "r.pdf");
        assert_eq!(&out.files[0].data[..], &[0, 159, 146, 150]);
        assert_eq!(
            out.value,
            json!("The tool returned a file: r.pdf (application/pdf, 4 bytes)")
        );
        let out = binary_output(vec![1], "image/png", None);
        assert_eq!(out.files[0].filename, "file.png");
    }

    #[test]
    fn json_files_form_is_split() {
        let v = json!({"content": {"rows": 3}, "files": [
            {"filename": "a.png", "mime_type": "image/png", "data": "iVBORw0K\nGgo="},
            {"filename": "b.txt", "mime_type": "Text/Plain; charset=utf-8", "data": "aGk"},
        ]});
        let (content, files) = split_json(v, 1024).unwrap();
        assert_eq!(content, json!({"rows": 3}));
        assert_eq!(&files[0].data[..], b"\x89PNG\r\n\x1a\n");
        assert_eq!(files[1].mime_type, "text/plain");
        assert_eq!(&files[1].data[..], b"hi");
    }

    #[test]
    fn other_json_is_left_alone() {
        for v in [
            json!({"content": 1}),
            json!({"content": 1, "files": ["a.txt"], "more": true}),
            json!({"files": [], "other": 1}),
            json!({"content": 1, "files": "x"}),
            json!([1]),
        ] {
            assert_eq!(split_json(v.clone(), 10).unwrap(), (v, vec![]));
        }
    }

    #[test]
    fn files_contract_violations() {
        let bad = |files: Value| split_json(json!({"content": null, "files": files}), 1024).unwrap_err();
        for files in [
            json!([{"filename": "a", "mime_type": "image/png"}]),
            json!([{"filename": "a", "mime_type": "image/png", "data": "!!!"}]),
            json!([{"filename": "a", "mime_type": "png", "data": "aGk="}]),
            json!([{"filename": 1, "mime_type": "image/png", "data": "aGk="}]),
            json!(["a.png"]),
        ] {
            match bad(files.clone()) {
                BackendError::InvalidOutput(m) => assert!(m.contains("files contract"), "{m}"),
                other => panic!("{files}: {other:?}"),
            }
        }
    }

    #[test]
    fn decoded_size_is_capped_in_total() {
        let file = json!({"filename": "a.bin", "mime_type": "application/octet-stream", "data": "AAAAAAAA"});
        assert!(split_json(json!({"content": null, "files": [&file]}), 6).is_ok());
        assert_eq!(
            split_json(json!({"content": null, "files": [file.clone(), file]}), 6).unwrap_err(),
            BackendError::OutputTooLarge { limit: 6 }
        );
    }

    #[test]
    fn null_content_names_the_files() {
        let v = json!({"content": null, "files": [{"filename": "a.png", "mime_type": "image/png", "data": "aGk="}]});
        let (content, _) = split_json(v, 100).unwrap();
        assert_eq!(content, json!("The tool returned files: a.png (image/png, 2 bytes)"));
    }
}
