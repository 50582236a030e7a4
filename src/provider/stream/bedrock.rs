//! Streamed Bedrock completions (`ConverseStream`) → the `Converse` body, and the AWS binary
//! event stream (`application/vnd.amazon.eventstream`) → the events as the AWS SDKs yield them.
//!
//! Events are single-key objects `{"<eventType>": payload}`:
//! `messageStart{role}` → per `contentBlockIndex`: `contentBlockStart{start.toolUse{toolUseId,
//! name, type?}}` (only tool use starts a block explicitly; text and reasoning blocks begin
//! with their first delta) → `contentBlockDelta{delta: text | toolUse.input | reasoningContent
//! {text | signature | redactedContent}}` → `contentBlockStop` → `messageStop{stopReason,
//! additionalModelResponseFields?}` → `metadata{usage, metrics, trace?}`.
//!
//! Assembly (`{"output": {"message": {role, content}}, stopReason, usage, metrics, …}`):
//! - blocks are ordered by `contentBlockIndex`; text and reasoning text/signature fragments are
//!   concatenated per index; `redactedContent` becomes its own `{"reasoningContent":
//!   {"redactedContent"}}` block.
//! - a tool use's `input` is the JSON of its concatenated `input` fragments; no fragment (a tool
//!   without arguments may get none) is `{}`; fragments that do not form JSON are kept as the
//!   text received, so the call is answered with a model-repairable `args_not_json` instead of
//!   being dropped.
//! - out of order: a text or reasoning delta for an index that was never started starts it
//!   (that is how those blocks begin anyway); a `toolUse` delta for an index without
//!   `contentBlockStart` is a [`StreamError::Event`] naming the index (the call has no id or
//!   name to answer with), and so is a delta whose kind differs from its block's.
//! - no `messageStop`: assembled with a warning and no `stopReason`; no `messageStart`: role
//!   `assistant` with a warning; unknown event types or delta kinds (e.g. `citation`): skipped
//!   with a warning; an exception event (`…Exception`) is a [`StreamError::Provider`].

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::{Assembled, MAX_EVENTS, StreamError};
use crate::provider::Provider;

const P: Provider = Provider::Bedrock;

/// One content block being assembled.
enum Block {
    Text(String),
    ToolUse {
        /// `toolUse` from `contentBlockStart` (id, name, type…), `input` added at the end.
        start: Map<String, Value>,
        input: String,
        fragments: usize,
    },
    Reasoning {
        text: String,
        signature: Option<String>,
        redacted: Option<String>,
    },
}

impl Block {
    fn kind(&self) -> &'static str {
        match self {
            Block::Text(_) => "text",
            Block::ToolUse { .. } => "toolUse",
            Block::Reasoning { .. } => "reasoningContent",
        }
    }

    /// The Converse content blocks for this block (a reasoning block with both text and
    /// redacted content gives two).
    fn into_values(self, out: &mut Vec<Value>) {
        match self {
            Block::Text(text) => out.push(json!({"text": text})),
            Block::ToolUse {
                mut start,
                input,
                fragments,
            } => {
                let input = if fragments == 0 || input.trim().is_empty() {
                    Value::Object(Map::new())
                } else {
                    serde_json::from_str::<Value>(&input).unwrap_or(Value::String(input))
                };
                start.insert("input".into(), input);
                out.push(json!({"toolUse": start}));
            }
            Block::Reasoning {
                text,
                signature,
                redacted,
            } => {
                if !text.is_empty() || signature.is_some() || redacted.is_none() {
                    let mut rt = Map::new();
                    rt.insert("text".into(), Value::String(text));
                    if let Some(sig) = signature {
                        rt.insert("signature".into(), Value::String(sig));
                    }
                    out.push(json!({"reasoningContent": {"reasoningText": rt}}));
                }
                if let Some(redacted) = redacted {
                    out.push(json!({"reasoningContent": {"redactedContent": redacted}}));
                }
            }
        }
    }
}

/// Assembles the events of one `ConverseStream` response.
pub fn assemble(events: &[Value]) -> Result<Assembled, StreamError> {
    let mut role: Option<Value> = None;
    let mut blocks: BTreeMap<u64, Block> = BTreeMap::new();
    let mut stopped: BTreeSet<u64> = BTreeSet::new();
    let mut stop: Option<Map<String, Value>> = None;
    let mut metadata = Map::new();
    let mut warnings = Vec::new();

    for (i, event) in events.iter().enumerate() {
        let bad = |reason: String| StreamError::Event {
            provider: P,
            index: i,
            reason,
        };
        let obj = event
            .as_object()
            .ok_or_else(|| bad("an event is not a JSON object".to_owned()))?;
        for (key, payload) in obj {
            match key.as_str() {
                "p" => {}
                "messageStart" => {
                    if let Some(r) = payload.get("role").filter(|r| !r.is_null()) {
                        role = Some(r.clone());
                    }
                }
                "contentBlockStart" => {
                    let index = block_index(payload).ok_or_else(|| bad("no integer `contentBlockIndex`".into()))?;
                    let start = payload.get("start").and_then(Value::as_object);
                    match start.and_then(|s| s.get("toolUse")).and_then(Value::as_object) {
                        Some(tool_use) => {
                            if blocks.contains_key(&index) {
                                return Err(bad(format!("content block {index} is started twice")));
                            }
                            let mut start = tool_use.clone();
                            start.remove("input");
                            blocks.insert(
                                index,
                                Block::ToolUse {
                                    start,
                                    input: String::new(),
                                    fragments: 0,
                                },
                            );
                        }
                        None => {
                            let kinds: Vec<&str> = start
                                .map(|s| s.keys().map(String::as_str).collect())
                                .unwrap_or_default();
                            warnings.push(format!(
                                "event {i}: content block {index} starts as {kinds:?}, which is not assembled; its deltas are skipped"
                            ));
                        }
                    }
                }
                "contentBlockDelta" => {
                    let index = block_index(payload).ok_or_else(|| bad("no integer `contentBlockIndex`".into()))?;
                    let delta = payload
                        .get("delta")
                        .and_then(Value::as_object)
                        .ok_or_else(|| bad(format!("content block {index}: the delta is not an object")))?;
                    apply_delta(&mut blocks, index, delta, i, &mut warnings)?;
                }
                "contentBlockStop" => {
                    let index = block_index(payload).ok_or_else(|| bad("no integer `contentBlockIndex`".into()))?;
                    stopped.insert(index);
                }
                "messageStop" => {
                    let fields = payload
                        .as_object()
                        .ok_or_else(|| bad("`messageStop` is not an object".into()))?;
                    stop = Some(fields.clone());
                }
                "metadata" => {
                    let fields = payload
                        .as_object()
                        .ok_or_else(|| bad("`metadata` is not an object".into()))?;
                    for (k, v) in fields {
                        if k != "p" {
                            metadata.insert(k.clone(), v.clone());
                        }
                    }
                }
                other if other.ends_with("Exception") || other == "error" => {
                    return Err(StreamError::Provider {
                        provider: P,
                        message: exception_text(other, payload),
                    });
                }
                other => warnings.push(format!("event {i}: unknown event type {other:?} skipped")),
            }
        }
    }

    if role.is_none() && blocks.is_empty() {
        return Err(StreamError::NoTurn {
            provider: P,
            missing: "no `messageStart` and no content block".to_owned(),
        });
    }
    let role = role.unwrap_or_else(|| {
        warnings.push("no `messageStart`: the role was taken to be `assistant`".to_owned());
        Value::String("assistant".to_owned())
    });
    let unstopped: Vec<u64> = blocks.keys().filter(|k| !stopped.contains(*k)).copied().collect();
    if !unstopped.is_empty() && stop.is_some() {
        warnings.push(format!("content blocks {unstopped:?} had no `contentBlockStop`"));
    }

    let mut content = Vec::with_capacity(blocks.len());
    for block in blocks.into_values() {
        block.into_values(&mut content);
    }
    let mut body = Map::new();
    body.insert("output".into(), json!({"message": {"role": role, "content": content}}));
    match stop {
        Some(fields) => {
            for (k, v) in fields {
                if k != "p" {
                    body.insert(k, v);
                }
            }
        }
        None => warnings.push(
            "no `messageStop`: the stream was cut short; what arrived was assembled without a stopReason".to_owned(),
        ),
    }
    body.extend(metadata);
    Ok(Assembled {
        completion: Value::Object(body),
        warnings,
    })
}

fn block_index(payload: &Value) -> Option<u64> {
    payload.get("contentBlockIndex").and_then(Value::as_u64)
}

/// Folds one `contentBlockDelta` into its block.
fn apply_delta(
    blocks: &mut BTreeMap<u64, Block>,
    index: u64,
    delta: &Map<String, Value>,
    event: usize,
    warnings: &mut Vec<String>,
) -> Result<(), StreamError> {
    let bad = |reason: String| StreamError::Event {
        provider: P,
        index: event,
        reason,
    };
    for (kind, value) in delta {
        match kind.as_str() {
            "p" => {}
            "text" => {
                let text = value
                    .as_str()
                    .ok_or_else(|| bad(format!("content block {index}: `text` is not a string")))?;
                match blocks.entry(index).or_insert_with(|| Block::Text(String::new())) {
                    Block::Text(buf) => buf.push_str(text),
                    other => return Err(mismatch(event, index, "text", other)),
                }
            }
            "toolUse" => {
                let Some(block) = blocks.get_mut(&index) else {
                    return Err(bad(format!(
                        "content block {index}: a toolUse delta arrived without its contentBlockStart, so the call has no id or name"
                    )));
                };
                let Block::ToolUse { input, fragments, .. } = block else {
                    return Err(mismatch(event, index, "toolUse", block));
                };
                match value.get("input") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(fragment)) => {
                        input.push_str(fragment);
                        *fragments += 1;
                    }
                    Some(_) => {
                        return Err(bad(format!("content block {index}: `toolUse.input` is not a string")));
                    }
                }
            }
            "reasoningContent" => {
                let rc = value
                    .as_object()
                    .ok_or_else(|| bad(format!("content block {index}: `reasoningContent` is not an object")))?;
                let block = blocks.entry(index).or_insert_with(|| Block::Reasoning {
                    text: String::new(),
                    signature: None,
                    redacted: None,
                });
                let Block::Reasoning {
                    text,
                    signature,
                    redacted,
                } = block
                else {
                    return Err(mismatch(event, index, "reasoningContent", block));
                };
                for (rk, rv) in rc {
                    let s = rv.as_str();
                    match (rk.as_str(), s) {
                        ("text", Some(s)) => text.push_str(s),
                        ("signature", Some(s)) => signature.get_or_insert_with(String::new).push_str(s),
                        ("redactedContent", Some(s)) => redacted.get_or_insert_with(String::new).push_str(s),
                        (_, None) if rv.is_null() => {}
                        ("p", _) => {}
                        _ => warnings.push(format!(
                            "event {event}: reasoningContent.{rk} of content block {index} skipped"
                        )),
                    }
                }
            }
            other => warnings.push(format!(
                "event {event}: the {other:?} delta of content block {index} is not assembled and was skipped"
            )),
        }
    }
    Ok(())
}

fn mismatch(event: usize, index: u64, got: &str, block: &Block) -> StreamError {
    StreamError::Event {
        provider: P,
        index: event,
        reason: format!(
            "content block {index} is a {} block but got a {got} delta",
            block.kind()
        ),
    }
}

/// `<exceptionType>: <message>` from an exception event or frame payload.
fn exception_text(kind: &str, payload: &Value) -> String {
    let message = payload
        .get("message")
        .or_else(|| payload.get("Message"))
        .and_then(Value::as_str);
    match message {
        Some(m) => format!("{kind}: {m}"),
        None => kind.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// The binary event stream

/// Largest frame accepted (the AWS SDKs cap messages at 16 MiB too).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// Prelude (total length, headers length, prelude CRC) + message CRC.
const FRAME_OVERHEAD: usize = 16;

fn wire(reason: impl Into<String>) -> StreamError {
    StreamError::Wire {
        provider: P,
        reason: reason.into(),
    }
}

/// The CRC-32 (IEEE 802.3 / zlib polynomial, reflected) lookup table.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 as the event stream uses it (same as zlib's `crc32`).
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    !c
}

/// A big-endian u32 at `at` (the caller checked the length).
fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_be_bytes(b))
}

/// The string headers of one frame (other header types are checked and skipped).
fn string_headers(mut h: &[u8]) -> Result<Vec<(String, String)>, StreamError> {
    let mut out = Vec::new();
    let short = || wire("a frame header runs past the headers section");
    while !h.is_empty() {
        let name_len = usize::from(h[0]);
        let name = h.get(1..1 + name_len).ok_or_else(short)?;
        let name = String::from_utf8_lossy(name).into_owned();
        h = &h[1 + name_len..];
        let (&ty, rest) = h.split_first().ok_or_else(short)?;
        h = rest;
        let fixed = match ty {
            0 | 1 => Some(0),
            2 => Some(1),
            3 => Some(2),
            4 => Some(4),
            5 | 8 => Some(8),
            9 => Some(16),
            6 | 7 => None,
            other => return Err(wire(format!("header {name:?} has the unknown value type {other}"))),
        };
        match fixed {
            Some(n) => {
                if h.len() < n {
                    return Err(short());
                }
                h = &h[n..];
            }
            None => {
                let len_bytes: [u8; 2] = h.get(..2).and_then(|b| b.try_into().ok()).ok_or_else(short)?;
                let len = usize::from(u16::from_be_bytes(len_bytes));
                let value = h.get(2..2 + len).ok_or_else(short)?;
                if ty == 7 {
                    out.push((name, String::from_utf8_lossy(value).into_owned()));
                }
                h = &h[2 + len..];
            }
        }
    }
    Ok(out)
}

/// Decodes the base64 of a `ConverseStream` HTTP body (the AWS event stream) into the events
/// as the SDKs yield them: `{"<:event-type>": <JSON payload without the padding key "p">}`.
///
/// ASCII whitespace in the base64 is ignored. Every frame's lengths and both CRCs are checked
/// (a bad one is [`StreamError::Wire`]); a frame over [`MAX_FRAME`] or cut short is refused
/// before anything is allocated for it. An `exception` (or `error`) frame ends the stream with
/// [`StreamError::Provider`] carrying the exception type and message.
pub fn decode_eventstream(base64_text: &str) -> Result<Vec<Value>, StreamError> {
    let compact: String = base64_text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .map_err(|e| wire(format!("the body is not base64: {e}")))?;
    let mut events = Vec::new();
    let mut rest: &[u8] = &bytes;
    let mut offset = 0usize;
    while !rest.is_empty() {
        if events.len() >= MAX_EVENTS {
            return Err(StreamError::TooManyEvents { max: MAX_EVENTS });
        }
        let at = |reason: String| wire(format!("frame at byte {offset}: {reason}"));
        if rest.len() < 12 {
            return Err(at(format!("truncated prelude ({} bytes)", rest.len())));
        }
        let total = be_u32(rest, 0).unwrap_or(0) as usize;
        let headers_len = be_u32(rest, 4).unwrap_or(0) as usize;
        let prelude_crc = be_u32(rest, 8).unwrap_or(0);
        if crc32(&rest[..8]) != prelude_crc {
            return Err(at("prelude CRC mismatch".into()));
        }
        if total > MAX_FRAME {
            return Err(at(format!("frame length {total} is over the {MAX_FRAME}-byte limit")));
        }
        if total < FRAME_OVERHEAD || headers_len > total - FRAME_OVERHEAD {
            return Err(at(format!(
                "inconsistent lengths (total {total}, headers {headers_len})"
            )));
        }
        if rest.len() < total {
            return Err(at(format!("truncated frame ({} of {total} bytes)", rest.len())));
        }
        let frame = &rest[..total];
        let message_crc = be_u32(frame, total - 4).unwrap_or(0);
        if crc32(&frame[..total - 4]) != message_crc {
            return Err(at("message CRC mismatch".into()));
        }
        let headers = string_headers(&frame[12..12 + headers_len])?;
        let payload = &frame[12 + headers_len..total - 4];
        let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        let json_payload = || -> Result<Value, StreamError> {
            if payload.is_empty() {
                return Ok(Value::Object(Map::new()));
            }
            serde_json::from_slice::<Value>(payload).map_err(|e| at(format!("the payload is not JSON: {e}")))
        };
        match header(":message-type") {
            Some("event") => {
                let event_type = header(":event-type").ok_or_else(|| at("an event without `:event-type`".into()))?;
                let mut value = json_payload()?;
                match &mut value {
                    Value::Object(map) => {
                        map.remove("p");
                    }
                    _ => return Err(at("the event payload is not a JSON object".into())),
                }
                let mut event = Map::new();
                event.insert(event_type.to_owned(), value);
                events.push(Value::Object(event));
            }
            Some("exception") => {
                let kind = header(":exception-type").unwrap_or("exception");
                let payload = json_payload()
                    .unwrap_or_else(|_| json!({"message": String::from_utf8_lossy(payload).into_owned()}));
                return Err(StreamError::Provider {
                    provider: P,
                    message: exception_text(kind, &payload),
                });
            }
            Some("error") => {
                let code = header(":error-code").unwrap_or("error");
                let message = header(":error-message").unwrap_or("");
                return Err(StreamError::Provider {
                    provider: P,
                    message: format!("{code}: {message}"),
                });
            }
            Some(other) => return Err(at(format!("unknown `:message-type` {other:?}"))),
            None => return Err(at("no `:message-type` header".into())),
        }
        rest = &rest[total..];
        offset += total;
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::ToolCall;
    use proptest::prelude::*;

    fn ok(events: &[Value]) -> Assembled {
        match assemble(events) {
            Ok(a) => a,
            Err(e) => panic!("assemble failed: {e}"),
        }
    }

    fn calls(body: &Value) -> Vec<ToolCall> {
        match Provider::Bedrock.parse(body) {
            Ok(p) => p.calls,
            Err(e) => panic!("parse failed: {e}"),
        }
    }

    fn start() -> Value {
        json!({"messageStart": {"role": "assistant"}})
    }
    fn tool_start(index: u64, id: &str, name: &str) -> Value {
        json!({"contentBlockStart": {"contentBlockIndex": index, "start": {"toolUse": {"toolUseId": id, "name": name}}}})
    }
    fn input(index: u64, fragment: &str) -> Value {
        json!({"contentBlockDelta": {"contentBlockIndex": index, "delta": {"toolUse": {"input": fragment}}}})
    }
    fn text(index: u64, t: &str) -> Value {
        json!({"contentBlockDelta": {"contentBlockIndex": index, "delta": {"text": t}}})
    }
    fn stop_block(index: u64) -> Value {
        json!({"contentBlockStop": {"contentBlockIndex": index}})
    }
    fn stop(reason: &str) -> Value {
        json!({"messageStop": {"stopReason": reason}})
    }
    fn metadata() -> Value {
        json!({"metadata": {"usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42}, "metrics": {"latencyMs": 812}}})
    }

    #[test]
    fn single_call_matches_the_unstreamed_body() {
        let events = [
            start(),
            tool_start(0, "tooluse_1", "top_song"),
            input(0, ""),
            input(0, "{\"sign\": \"W"),
            input(0, "ZPZ\"}"),
            stop_block(0),
            stop("tool_use"),
            metadata(),
        ];
        let a = ok(&events);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        insta::assert_json_snapshot!(a.completion);
        let expected = json!({"output": {"message": {"role": "assistant", "content": [
            {"toolUse": {"toolUseId": "tooluse_1", "name": "top_song", "input": {"sign": "WZPZ"}}}]}},
            "stopReason": "tool_use"});
        assert_eq!(calls(&a.completion), calls(&expected));
        assert_eq!(
            Provider::Bedrock.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            Some(json!("tool_use"))
        );
    }

    #[test]
    fn reasoning_text_then_parallel_calls() {
        let events = [
            start(),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "The user wants "}}}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "two cities."}}}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "RXVn"}}}}),
            stop_block(0),
            text(1, "Checking "),
            text(1, "both."),
            stop_block(1),
            tool_start(2, "t1", "weather"),
            input(2, "{\"city\":\"Paris\"}"),
            stop_block(2),
            tool_start(3, "t2", "weather"),
            input(3, "{\"city\":"),
            input(3, "\"Z\\u00fc"),
            input(3, "rich \\\"Z\\\"\"}"),
            stop_block(3),
            stop("tool_use"),
            metadata(),
        ];
        let a = ok(&events);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        insta::assert_json_snapshot!(a.completion);
        let got = calls(&a.completion);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].arguments.to_value(), json!({"city": "Zürich \"Z\""}));
        assert_eq!(
            a.completion["output"]["message"]["content"][0],
            json!({"reasoningContent": {"reasoningText": {"text": "The user wants two cities.", "signature": "RXVn"}}})
        );
    }

    #[test]
    fn final_answer_and_redacted_reasoning() {
        let events = [
            start(),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"reasoningContent": {"redactedContent": "b3BhcXVl"}}}}),
            stop_block(0),
            text(1, "Il fait 12 °C "),
            text(1, "à Paris."),
            stop_block(1),
            stop("end_turn"),
            metadata(),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        let parsed = Provider::Bedrock.parse(&a.completion).ok();
        assert_eq!(parsed.as_ref().map(|p| p.finished), Some(true));
    }

    #[test]
    fn empty_and_broken_arguments_keep_the_call() {
        let events = [
            start(),
            tool_start(0, "a", "now"),
            stop_block(0),
            tool_start(1, "b", "search"),
            input(1, "{\"q\": \"unfinish"),
            stop("tool_use"),
        ];
        let a = ok(&events);
        insta::assert_json_snapshot!(a.completion);
        let got = calls(&a.completion);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].arguments.to_value(), json!({}));
        assert!(matches!(
            got[1].arguments,
            crate::call::Arguments::Invalid {
                problem: crate::call::ArgumentsProblem::InvalidJson,
                ..
            }
        ));
        assert_eq!(a.warnings.len(), 1, "{:?}", a.warnings); // block 1 never stopped
    }

    #[test]
    fn broken_streams() {
        // No messageStop: assembled, warned, no stop reason.
        let a = ok(&[start(), text(0, "hal")]);
        assert_eq!(a.warnings.len(), 1);
        assert_eq!(
            Provider::Bedrock.parse(&a.completion).ok().and_then(|p| p.stop_reason),
            None
        );
        // Unknown event types and delta kinds are skipped with a warning.
        let a = ok(&[
            start(),
            json!({"somethingNew": {}}),
            json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"citation": {"title": "x"}}}}),
            stop("end_turn"),
        ]);
        assert_eq!(a.warnings.len(), 2);
        // A toolUse delta without its start names the index.
        let err = assemble(&[start(), input(4, "{}")]);
        assert!(matches!(&err, Err(StreamError::Event { index: 1, reason, .. }) if reason.contains("content block 4")));
        // A text delta on a tool block.
        assert!(matches!(
            assemble(&[start(), tool_start(0, "a", "t"), text(0, "x")]),
            Err(StreamError::Event { index: 2, .. })
        ));
        // Exceptions.
        assert!(matches!(
            assemble(&[start(), json!({"throttlingException": {"message": "slow down"}})]),
            Err(StreamError::Provider { message, .. }) if message == "throttlingException: slow down"
        ));
        // Nothing usable.
        assert!(matches!(assemble(&[metadata()]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(assemble(&[]), Err(StreamError::NoTurn { .. })));
        assert!(matches!(assemble(&[json!(1)]), Err(StreamError::Event { .. })));
    }

    #[test]
    fn fragments_split_mid_escape_and_mid_surrogate_pair() {
        let fragments = ["{\"e\": \"\\ud8", "3d\\ude", "00 \\", "\"x\\", "n\\u00", "e9\"}"];
        let mut events = vec![start(), tool_start(0, "t", "echo")];
        events.extend(fragments.iter().map(|f| input(0, f)));
        events.extend([stop_block(0), stop("tool_use")]);
        let a = ok(&events);
        assert_eq!(
            calls(&a.completion)[0].arguments.to_value(),
            json!({"e": "\u{1F600} \"x\n\u{e9}"})
        );
    }

    /// Many small fragments: assembly is linear (a quadratic rebuild of the argument string
    /// would not finish in any reasonable time here).
    #[test]
    fn many_fragments() {
        let mut events = vec![start(), tool_start(0, "t", "big"), input(0, "{\"s\": \"")];
        events.extend((0..100_000).map(|_| input(0, "0123456789")));
        events.extend([input(0, "\"}"), stop_block(0), stop("tool_use")]);
        let a = ok(&events);
        let got = calls(&a.completion);
        assert_eq!(got[0].arguments.to_value()["s"].as_str().map(str::len), Some(1_000_000));
    }

    proptest! {
        #[test]
        fn any_split_assembles_to_the_same_calls(
            cuts_a in proptest::collection::vec(0usize..200, 0..8),
            cuts_b in proptest::collection::vec(0usize..200, 0..8),
        ) {
            let args_a = r#"{"city": "Zürich \"Z\" \u00e9\n", "n": [1, 2.5, null], "emoji": "😀"}"#;
            let args_b = "{\n  \"q\": \"a\\\\b\",\n  \"deep\": {\"x\": true}\n}";
            let mut events = vec![start(), tool_start(0, "t1", "a")];
            for f in split(args_a, &cuts_a) { events.push(input(0, &f)); }
            events.push(stop_block(0));
            events.push(tool_start(1, "t2", "b"));
            for f in split(args_b, &cuts_b) { events.push(input(1, &f)); }
            events.push(stop_block(1));
            events.push(stop("tool_use"));
            let a = assemble(&events).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected = json!({"output": {"message": {"role": "assistant", "content": [
                {"toolUse": {"toolUseId": "t1", "name": "a", "input": serde_json::from_str::<Value>(args_a).unwrap_or_default()}},
                {"toolUse": {"toolUseId": "t2", "name": "b", "input": serde_json::from_str::<Value>(args_b).unwrap_or_default()}}]}},
                "stopReason": "tool_use"});
            prop_assert_eq!(calls(&a.completion), calls(&expected));
        }
    }

    /// `s` split at the given character positions (mid-escape and between any characters;
    /// fragments are strings, so a cut falls between characters, as in the JSON events).
    fn split(s: &str, cuts: &[usize]) -> Vec<String> {
        let chars: Vec<char> = s.chars().collect();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut last = 0;
        for c in cuts.into_iter().chain([chars.len()]) {
            out.push(chars[last..c].iter().collect());
            last = c;
        }
        out
    }

    // --- event stream -------------------------------------------------------------------

    /// Encodes one frame with string headers (and one header of every other type, to check
    /// they are skipped).
    fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        let mut h = Vec::new();
        for (name, value) in headers {
            h.push(name.len() as u8);
            h.extend_from_slice(name.as_bytes());
            h.push(7);
            h.extend_from_slice(&(value.len() as u16).to_be_bytes());
            h.extend_from_slice(value.as_bytes());
        }
        for (ty, bytes) in [
            (0u8, vec![]),
            (2, vec![1]),
            (3, vec![0, 1]),
            (4, vec![0; 4]),
            (5, vec![0; 8]),
            (8, vec![0; 8]),
            (9, vec![7; 16]),
        ] {
            h.push(1);
            h.push(b'x');
            h.push(ty);
            h.extend_from_slice(&bytes);
        }
        h.extend_from_slice(&[1, b'y', 6, 0, 2, 0xff, 0xfe]);
        let total = 16 + h.len() + payload.len();
        let mut f = Vec::new();
        f.extend_from_slice(&(total as u32).to_be_bytes());
        f.extend_from_slice(&(h.len() as u32).to_be_bytes());
        let crc = crc32(&f);
        f.extend_from_slice(&crc.to_be_bytes());
        f.extend_from_slice(&h);
        f.extend_from_slice(payload);
        let crc = crc32(&f);
        f.extend_from_slice(&crc.to_be_bytes());
        f
    }

    fn event_frame(event_type: &str, payload: &Value) -> Vec<u8> {
        frame(
            &[
                (":event-type", event_type),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.to_string().as_bytes(),
        )
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn crc32_known_vector() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn eventstream_round_trip() {
        let mut bytes = Vec::new();
        bytes.extend(event_frame(
            "messageStart",
            &json!({"p": "abcdefgh", "role": "assistant"}),
        ));
        bytes.extend(event_frame(
            "contentBlockStart",
            &json!({"contentBlockIndex": 0, "p": "ab",
            "start": {"toolUse": {"toolUseId": "t1", "name": "top_song"}}}),
        ));
        bytes.extend(event_frame(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{\"sign\":\"WZPZ\"}"}}, "p": "a"}),
        ));
        bytes.extend(event_frame(
            "contentBlockStop",
            &json!({"contentBlockIndex": 0, "p": "abc"}),
        ));
        bytes.extend(event_frame("messageStop", &json!({"stopReason": "tool_use", "p": "x"})));
        bytes.extend(event_frame("metadata", &json!({"usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3}, "metrics": {"latencyMs": 5}, "p": "y"})));
        // Base64 with line breaks, as a copied body may have.
        let text: String = b64(&bytes)
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect();
        let events = decode_eventstream(&text);
        insta::assert_json_snapshot!(events.as_ref().ok());
        let events = events.unwrap_or_default();
        assert_eq!(events.len(), 6);
        assert_eq!(events[0], json!({"messageStart": {"role": "assistant"}}));
        let a = ok(&events);
        assert_eq!(calls(&a.completion)[0].arguments.to_value(), json!({"sign": "WZPZ"}));
        assert!(decode_eventstream("").is_ok_and(|e| e.is_empty()));
    }

    #[test]
    fn eventstream_bad_input() {
        let good = event_frame("messageStart", &json!({"role": "assistant"}));
        // Bad message CRC.
        let mut bad = good.clone();
        let last = bad.len() - 5;
        bad[last] ^= 1;
        assert!(
            matches!(decode_eventstream(&b64(&bad)), Err(StreamError::Wire { reason, .. }) if reason.contains("message CRC"))
        );
        // Bad prelude CRC.
        let mut bad = good.clone();
        bad[9] ^= 1;
        assert!(
            matches!(decode_eventstream(&b64(&bad)), Err(StreamError::Wire { reason, .. }) if reason.contains("prelude CRC"))
        );
        // Truncated at every length: an error, never a panic.
        for cut in 1..good.len() {
            assert!(
                matches!(decode_eventstream(&b64(&good[..cut])), Err(StreamError::Wire { .. })),
                "cut {cut}"
            );
        }
        // A second frame cut short after a good one.
        let mut two = good.clone();
        two.extend_from_slice(&good[..20]);
        assert!(
            matches!(decode_eventstream(&b64(&two)), Err(StreamError::Wire { reason, .. }) if reason.contains("truncated"))
        );
        // Oversized length (with a valid prelude CRC).
        let mut huge = Vec::new();
        huge.extend_from_slice(&(u32::MAX).to_be_bytes());
        huge.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32(&huge);
        huge.extend_from_slice(&crc.to_be_bytes());
        assert!(
            matches!(decode_eventstream(&b64(&huge)), Err(StreamError::Wire { reason, .. }) if reason.contains("limit"))
        );
        // Headers longer than the frame.
        let mut inconsistent = Vec::new();
        inconsistent.extend_from_slice(&20u32.to_be_bytes());
        inconsistent.extend_from_slice(&10u32.to_be_bytes());
        let crc = crc32(&inconsistent);
        inconsistent.extend_from_slice(&crc.to_be_bytes());
        inconsistent.extend_from_slice(&[0; 8]);
        assert!(matches!(
            decode_eventstream(&b64(&inconsistent)),
            Err(StreamError::Wire { .. })
        ));
        // Not base64; payload not JSON.
        assert!(matches!(decode_eventstream("!!!"), Err(StreamError::Wire { .. })));
        let not_json = frame(&[(":event-type", "messageStart"), (":message-type", "event")], b"{nope");
        assert!(matches!(
            decode_eventstream(&b64(&not_json)),
            Err(StreamError::Wire { .. })
        ));
    }

    #[test]
    fn eventstream_exception_frame() {
        let mut bytes = event_frame("messageStart", &json!({"role": "assistant"}));
        bytes.extend(frame(
            &[
                (":exception-type", "modelStreamErrorException"),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            br#"{"message":"The model stream failed","originalStatusCode":500}"#,
        ));
        assert!(matches!(
            decode_eventstream(&b64(&bytes)),
            Err(StreamError::Provider { message, .. }) if message == "modelStreamErrorException: The model stream failed"
        ));
        let err = frame(
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "boom"),
            ],
            b"",
        );
        assert!(matches!(
            decode_eventstream(&b64(&err)),
            Err(StreamError::Provider { message, .. }) if message == "InternalFailure: boom"
        ));
    }
}
