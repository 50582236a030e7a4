//! Raw stream text → events. SSE (`event:`/`data:` lines, comments, `[DONE]`, CRLF or LF) for
//! openai_chat, openai_responses, anthropic, gemini, mistral and cohere; NDJSON for ollama; for
//! bedrock the base64 of the `application/vnd.amazon.eventstream` body (frames and CRCs checked).
//!
//! The text is already bounded by the request body limit; decoding is one pass over it, and the
//! number of events is capped at [`MAX_EVENTS`] so a body of blank events cannot make a huge
//! vector of tiny values.

use serde_json::Value;

use super::{MAX_EVENTS, StreamError};
use crate::provider::Provider;

/// Decodes `raw` as `provider`'s wire format.
pub fn decode(provider: Provider, raw: &str) -> Result<Vec<Value>, StreamError> {
    let wire = |reason: String| StreamError::Wire { provider, reason };
    match provider {
        Provider::Bedrock => super::bedrock::decode_eventstream(raw),
        Provider::Ollama => ndjson(raw).map_err(wire),
        _ => sse(raw, typed_events(provider)).map_err(wire),
    }
}

/// Decodes raw text whose provider was not named: SSE first (six of the eight providers), then
/// NDJSON (Ollama), then the base64 AWS event stream (Bedrock); the provider is then detected
/// from the events' shape. SSE wins whenever the text has at least one `data:` line, because an
/// NDJSON body never starts a line with `data:`.
pub fn decode_detect(raw: &str) -> Result<(Provider, Vec<Value>), StreamError> {
    let events = match sse(raw, true) {
        Ok(events) if !events.is_empty() => events,
        Ok(_) | Err(_) => match ndjson(raw) {
            Ok(events) if !events.is_empty() => events,
            _ => match super::bedrock::decode_eventstream(raw) {
                Ok(events) => return Ok((Provider::Bedrock, events)),
                Err(_) => return Err(StreamError::Undetectable),
            },
        },
    };
    let provider = super::detect(&events).ok_or(StreamError::Undetectable)?;
    Ok((provider, events))
}

/// Whether the provider's SSE events are discriminated by their `event:` name (so an event
/// whose data lacks `type` gets it from the name).
fn typed_events(provider: Provider) -> bool {
    matches!(
        provider,
        Provider::OpenaiResponses | Provider::Anthropic | Provider::Cohere
    )
}

/// Server-sent events (WHATWG HTML §9.2.6): lines end in CRLF, LF or CR; `:` starts a comment;
/// `data:` lines of one event are joined with `\n`; a blank line dispatches the event; an event
/// with no data is ignored; `id:`/`retry:` and unknown fields are ignored. Each data payload
/// must be JSON, except the `[DONE]` sentinel of OpenAI-style streams, which is skipped (events
/// after it are kept: the assemblers judge order). With `typed`, an object without `type` takes
/// the `event:` name as its type, so `event: ping` + `data: {}` still reads as a ping.
fn sse(raw: &str, typed: bool) -> Result<Vec<Value>, String> {
    let raw = raw.strip_prefix('\u{feff}').unwrap_or(raw);
    let mut events = Vec::new();
    let mut data: Option<String> = None;
    let mut name: Option<&str> = None;
    let mut line_no = 0usize;
    let mut event_line = 0usize;
    let mut lines = split_lines(raw);
    loop {
        let line = lines.next();
        line_no += 1;
        match line {
            Some(l) if !l.is_empty() => {
                if l.starts_with(':') {
                    continue;
                }
                let (field, value) = match l.find(':') {
                    Some(at) => (&l[..at], l[at + 1..].strip_prefix(' ').unwrap_or(&l[at + 1..])),
                    None => (l, ""),
                };
                match field {
                    "data" => match &mut data {
                        None => {
                            event_line = line_no;
                            data = Some(value.to_owned());
                        }
                        Some(d) => {
                            d.push('\n');
                            d.push_str(value);
                        }
                    },
                    "event" => name = Some(value),
                    _ => {}
                }
            }
            _ => {
                // Blank line or end of text: dispatch what was gathered.
                if let Some(d) = data.take().filter(|d| d.trim() != "[DONE]") {
                    let mut v: Value = serde_json::from_str(&d)
                        .map_err(|e| format!("the data of the event at line {event_line} is not JSON: {e}"))?;
                    if typed
                        && let (Some(n), Some(obj)) = (name, v.as_object_mut())
                        && !obj.contains_key("type")
                        && !n.is_empty()
                    {
                        obj.insert("type".into(), Value::String(n.to_owned()));
                    }
                    if events.len() >= MAX_EVENTS {
                        return Err(format!("more than {MAX_EVENTS} events"));
                    }
                    events.push(v);
                }
                name = None;
                if line.is_none() {
                    break;
                }
            }
        }
    }
    Ok(events)
}

/// Lines split at CRLF, LF or a lone CR (the three SSE line ends).
fn split_lines(raw: &str) -> impl Iterator<Item = &str> {
    let bytes = raw.as_bytes();
    let mut start = 0usize;
    let mut i = 0usize;
    std::iter::from_fn(move || {
        if start > bytes.len() {
            return None;
        }
        while i < bytes.len() {
            match bytes[i] {
                b'\n' | b'\r' => {
                    let line = &raw[start..i];
                    let crlf = bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n');
                    i += if crlf { 2 } else { 1 };
                    start = i;
                    return Some(line);
                }
                _ => i += 1,
            }
        }
        // The last line (possibly empty after a final line end, which is harmless).
        let line = &raw[start..];
        start = bytes.len() + 1;
        if line.is_empty() { None } else { Some(line) }
    })
}

/// Newline-delimited JSON: one JSON value per non-blank line (CRLF tolerated).
fn ndjson(raw: &str) -> Result<Vec<Value>, String> {
    let mut events = Vec::new();
    for (i, line) in raw.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {} is not JSON: {e}", i + 1))?;
        if events.len() >= MAX_EVENTS {
            return Err(format!("more than {MAX_EVENTS} events"));
        }
        events.push(v);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn sse_handles_crlf_comments_multiline_data_and_done() {
        let raw = ": keep-alive\r\nevent: message_start\r\ndata: {\"type\":\"message_start\",\r\ndata: \"x\":1}\r\n\r\nevent: ping\ndata: {}\n\ndata: [DONE]\n\n";
        let events = decode(Provider::Anthropic, raw).unwrap();
        assert_eq!(
            events,
            vec![json!({"type": "message_start", "x": 1}), json!({"type": "ping"})]
        );
    }

    #[test]
    fn sse_without_trailing_blank_line_still_dispatches_the_last_event() {
        // A lone CR is a line end: these two data lines are one event, joined by `\n`.
        assert!(decode(Provider::OpenaiChat, "data: {\"a\":1}\rdata: {\"b\":2}").is_err());
        let events = decode(Provider::OpenaiChat, "data: [1,\rdata: 2]").unwrap();
        assert_eq!(events, vec![json!([1, 2])]);
        let events = decode(Provider::OpenaiChat, "data: {\"a\":1}\r\rdata: {\"b\":2}").unwrap();
        assert_eq!(events, vec![json!({"a": 1}), json!({"b": 2})]);
    }

    #[test]
    fn sse_data_that_is_not_json_names_the_line() {
        let err = decode(Provider::Mistral, "data: {\"a\":1}\n\ndata: {oops\n\n").unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
    }

    #[test]
    fn ndjson_reads_one_value_per_line() {
        let events = decode(Provider::Ollama, "{\"done\":false}\r\n\n{\"done\":true}\n").unwrap();
        assert_eq!(events, vec![json!({"done": false}), json!({"done": true})]);
        assert!(decode(Provider::Ollama, "{\"done\":false}\nnope\n").is_err());
    }

    #[test]
    fn raw_text_detects_sse_then_ndjson() {
        let (p, _) = decode_detect("event: message_start\ndata: {\"type\":\"message_start\"}\n\n").unwrap();
        assert_eq!(p, Provider::Anthropic);
        let (p, _) = decode_detect("{\"model\":\"m\",\"message\":{},\"done\":true}\n").unwrap();
        assert_eq!(p, Provider::Ollama);
        assert_eq!(decode_detect("hello"), Err(StreamError::Undetectable));
    }
}
