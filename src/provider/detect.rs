//! Which wire format a raw completion body is in, from its shape alone (see
//! `docs/providers.md#detection`). No field values beyond these marks are trusted.
//!
//! Rules, tried in this order (the first that holds wins):
//!
//! 1. **openai_responses**: `object: "response"`, or an `output` *array* whose items are all
//!    objects with a string `type` (Bedrock's `output` is an object, so it never matches).
//! 2. **anthropic**: `type: "message"` and a `content` array.
//! 3. **gemini**: `candidates` or `promptFeedback` (or the SDK-dump `prompt_feedback`).
//! 4. **bedrock**: an `output.message` object and `stopReason`.
//! 5. **ollama**: a `message` object and one of `done`, `done_reason`, `created_at`.
//! 6. **cohere**: a `message` object, a string `finish_reason` at the top level (`TOOL_CALL`,
//!    `COMPLETE`, …) and no `choices`.
//! 7. **openai_chat / mistral**: a `choices` array. A Mistral body is OpenAI-Chat shaped, so it
//!    is detected as `openai_chat` unless choice 0 carries a mark that OpenAI never sends:
//!    a `tool_calls[].function.arguments` given as a JSON object (Mistral's
//!    `arguments: Union[Dict, str]`), or the Mistral-only `message.prefix` field. The ids
//!    (9 alphanumerics, no `chatcmpl-`) and `model` names are not used: OpenAI-compatible
//!    servers use all sorts of ids and model names. Treating Mistral as `openai_chat` is safe:
//!    Mistral accepts OpenAI-style tool messages.
//!
//! [`matches()`] asks the opposite question (does this body fit a named provider?) with the same
//! per-format shape tests; `openai_chat` and `mistral` accept each other's bodies.

use serde_json::Value;

use super::Provider;

/// Detects the provider from a completion's shape; `None` when no rule holds.
pub fn detect(completion: &Value) -> Option<Provider> {
    if !completion.is_object() {
        return None;
    }
    if is_openai_responses(completion) {
        Some(Provider::OpenaiResponses)
    } else if is_anthropic(completion) {
        Some(Provider::Anthropic)
    } else if is_gemini(completion) {
        Some(Provider::Gemini)
    } else if is_bedrock(completion) {
        Some(Provider::Bedrock)
    } else if is_ollama(completion) {
        Some(Provider::Ollama)
    } else if is_cohere(completion) {
        Some(Provider::Cohere)
    } else if is_chat(completion) {
        if has_mistral_mark(completion) {
            Some(Provider::Mistral)
        } else {
            Some(Provider::OpenaiChat)
        }
    } else {
        None
    }
}

/// Does the body fit `provider`'s response shape? `openai_chat` and `mistral` accept each
/// other's bodies (same shape). Meant for "named provider whose shape does not match": the
/// caller then names [`detect`]'s answer.
pub fn matches(provider: Provider, completion: &Value) -> bool {
    if !completion.is_object() {
        return false;
    }
    match provider {
        Provider::OpenaiResponses => is_openai_responses(completion),
        Provider::Anthropic => is_anthropic(completion),
        Provider::Gemini => is_gemini(completion),
        Provider::Bedrock => is_bedrock(completion),
        Provider::Ollama => is_ollama(completion),
        Provider::Cohere => is_cohere(completion),
        Provider::OpenaiChat | Provider::Mistral => is_chat(completion),
    }
}

fn is_openai_responses(v: &Value) -> bool {
    if v.get("object").and_then(Value::as_str) == Some("response") {
        return true;
    }
    v.get("output").and_then(Value::as_array).is_some_and(|items| {
        items
            .iter()
            .all(|item| item.get("type").and_then(Value::as_str).is_some())
    })
}

fn is_anthropic(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("message") && v.get("content").is_some_and(Value::is_array)
}

fn is_gemini(v: &Value) -> bool {
    ["candidates", "promptFeedback", "prompt_feedback"]
        .iter()
        .any(|k| v.get(k).is_some())
}

fn is_bedrock(v: &Value) -> bool {
    v.get("output")
        .and_then(|o| o.get("message"))
        .is_some_and(Value::is_object)
        && v.get("stopReason").is_some()
}

fn is_ollama(v: &Value) -> bool {
    v.get("message").is_some_and(Value::is_object)
        && ["done", "done_reason", "created_at"].iter().any(|k| v.get(k).is_some())
}

fn is_cohere(v: &Value) -> bool {
    v.get("message").is_some_and(Value::is_object)
        && v.get("finish_reason").is_some_and(Value::is_string)
        && v.get("choices").is_none()
}

fn is_chat(v: &Value) -> bool {
    v.get("choices").is_some_and(Value::is_array)
}

/// A Mistral-only mark on choice 0 (see rule 7).
fn has_mistral_mark(v: &Value) -> bool {
    let Some(message) = v.get("choices").and_then(|c| c.get(0)).and_then(|c| c.get("message")) else {
        return false;
    };
    if message.get("prefix").is_some_and(Value::is_boolean) {
        return true;
    }
    message
        .get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| {
            calls.iter().any(|c| {
                c.get("function")
                    .and_then(|f| f.get("arguments"))
                    .is_some_and(Value::is_object)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_objects_are_nothing() {
        for v in [json!(null), json!([]), json!("x"), json!(1), json!({})] {
            assert_eq!(detect(&v), None, "{v}");
            assert!(Provider::ALL.iter().all(|p| !matches(*p, &v)), "{v}");
        }
    }

    #[test]
    fn bedrock_output_object_is_not_responses() {
        let v = json!({"output": {"message": {"role": "assistant", "content": []}}, "stopReason": "end_turn"});
        assert_eq!(detect(&v), Some(Provider::Bedrock));
    }

    #[test]
    fn object_arguments_mark_mistral() {
        let v = json!({"choices": [{"message": {"role": "assistant", "tool_calls": [
            {"id": "abcdefghi", "function": {"name": "f", "arguments": {"a": 1}}}
        ]}, "finish_reason": "tool_calls"}]});
        assert_eq!(detect(&v), Some(Provider::Mistral));
        assert!(matches(Provider::OpenaiChat, &v));
    }
}
