//! What several provider modules share: reading the OpenAI-chat-shaped bodies (OpenAI Chat,
//! Mistral, Cohere v2, Ollama), the shape errors every `parse` reports, the "no result was
//! produced" answer of the providers that answer calls one-to-one (Anthropic, Bedrock, Gemini),
//! and the declaration steps (name check, strict transform, the Chat `function` object).
//!
//! Only logic that is the same for several providers lives here; what one wire format does
//! alone stays in its module, so each module reads as "the rules of this provider".

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, Provider, ToolDeclaration, schema};
use crate::call::{Arguments, ErrorKind, ToolCall, ToolError, ToolResult};

// ---------------------------------------------------------------------------------------------
// parse

/// Builds a [`ParseError::Shape`] for `provider`.
pub(crate) fn shape_error(provider: Provider, reason: impl Into<String>) -> ParseError {
    ParseError::Shape {
        expected: provider,
        reason: reason.into(),
    }
}

/// `value` when it is present and not JSON `null`.
pub(crate) fn non_null(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| !v.is_null())
}

/// The body as a JSON object, or a shape error.
pub(crate) fn root_object(provider: Provider, completion: &Value) -> Result<&Map<String, Value>, ParseError> {
    completion
        .as_object()
        .ok_or_else(|| shape_error(provider, "the body is not a JSON object"))
}

/// Whether a provider's `tool_calls[]` entries must carry an `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdRule {
    /// The result message needs the id (OpenAI Chat, Cohere): a missing id is a shape error.
    Required,
    /// The id is optional (Mistral, Ollama): a missing id stays `None`.
    Optional,
}

/// Reads `message.tool_calls[]` (absent or `null` → no calls) in the OpenAI-chat entry shape
/// shared by OpenAI Chat, Mistral, Cohere v2 and Ollama:
/// `{id?, type?: "function", function: {name, arguments: <string | object>}}`.
///
/// Decision on `type:"custom"` (OpenAI custom tools, `{id, type:"custom", custom:{name, input}}`):
/// they are client-executed calls that OpenAI requires to be answered like any other, so they
/// are returned as calls whose arguments are the object `{"input": <string>}` (a missing input
/// is `""`; a non-string input is invalid arguments). Any other `type` is a shape error rather
/// than a silently dropped call.
pub(crate) fn tool_calls_of(
    provider: Provider,
    message: &Map<String, Value>,
    at: &str,
    ids: IdRule,
) -> Result<Vec<ToolCall>, ParseError> {
    let Some(list) = non_null(message.get("tool_calls")) else {
        return Ok(Vec::new());
    };
    let list = list
        .as_array()
        .ok_or_else(|| shape_error(provider, format!("{at}.tool_calls is not an array")))?;
    let mut calls = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let here = format!("{at}.tool_calls[{i}]");
        let entry = entry
            .as_object()
            .ok_or_else(|| shape_error(provider, format!("{here} is not an object")))?;
        let id = match non_null(entry.get("id")) {
            Some(Value::String(id)) => Some(id.clone()),
            Some(_) => return Err(shape_error(provider, format!("{here}.id is not a string"))),
            None if ids == IdRule::Required => {
                return Err(shape_error(
                    provider,
                    format!("{here} has no `id`, so its result could not be matched to it"),
                ));
            }
            None => None,
        };
        let kind = match non_null(entry.get("type")) {
            None => "function",
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => {
                return Err(shape_error(provider, format!("{here}.type is not a string")));
            }
        };
        let (name, arguments) = match kind {
            "function" => {
                let function = object_field(provider, entry, "function", &here)?;
                let name = name_field(provider, function, &format!("{here}.function"))?;
                (name, Arguments::from_value(function.get("arguments")))
            }
            "custom" => {
                let custom = object_field(provider, entry, "custom", &here)?;
                let name = name_field(provider, custom, &format!("{here}.custom"))?;
                (name, custom_input(non_null(custom.get("input"))))
            }
            other => {
                return Err(shape_error(
                    provider,
                    format!("{here} has the unsupported tool call type {other:?}"),
                ));
            }
        };
        calls.push(ToolCall { id, name, arguments });
    }
    Ok(calls)
}

/// The arguments of a free-form (custom) tool call: `{"input": <text>}`.
pub(crate) fn custom_input(input: Option<&Value>) -> Arguments {
    match input {
        None => Arguments::Object(Map::from_iter([("input".to_owned(), Value::String(String::new()))])),
        Some(Value::String(text)) => {
            Arguments::Object(Map::from_iter([("input".to_owned(), Value::String(text.clone()))]))
        }
        Some(other) => Arguments::Invalid {
            raw: other.clone(),
            problem: crate::call::ArgumentsProblem::NotAnObject,
        },
    }
}

/// `parent[key]` as an object, or a shape error naming `at.key`.
pub(crate) fn object_field<'a>(
    provider: Provider,
    parent: &'a Map<String, Value>,
    key: &str,
    at: &str,
) -> Result<&'a Map<String, Value>, ParseError> {
    parent
        .get(key)
        .and_then(Value::as_object)
        .ok_or_else(|| shape_error(provider, format!("{at}.{key} is missing or not an object")))
}

/// `parent.name` as a string, or a shape error naming `at.name`.
pub(crate) fn name_field(provider: Provider, parent: &Map<String, Value>, at: &str) -> Result<String, ParseError> {
    parent
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| shape_error(provider, format!("{at}.name is missing or not a string")))
}

/// How an OpenAI-chat-shaped completion is read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRules {
    pub provider: Provider,
    pub ids: IdRule,
    /// Read the deprecated `message.function_call` too (OpenAI only).
    pub legacy_function_call: bool,
}

/// Parses `{choices: [{index, message, finish_reason}, …]}` (OpenAI Chat, Mistral).
pub(crate) fn parse_chat_shaped(completion: &Value, rules: ChatRules) -> Result<Parsed, ParseError> {
    let provider = rules.provider;
    let root = root_object(provider, completion)?;
    let choices = root
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| shape_error(provider, "the body has no `choices` array"))?;
    // Choice index 0: normally the first element; prefer an explicit `index: 0`.
    let choice = choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
        .or_else(|| choices.first())
        .ok_or_else(|| shape_error(provider, "`choices` is empty"))?;
    let choice = choice
        .as_object()
        .ok_or_else(|| shape_error(provider, "choices[0] is not an object"))?;
    let message = object_field(provider, choice, "message", "choices[0]")?;

    let mut calls = tool_calls_of(provider, message, "choices[0].message", rules.ids)?;
    if rules.legacy_function_call
        && let Some(fc) = non_null(message.get("function_call"))
    {
        let at = "choices[0].message.function_call";
        let fc = fc
            .as_object()
            .ok_or_else(|| shape_error(provider, format!("{at} is not an object")))?;
        let name = name_field(provider, fc, at)?;
        calls.push(ToolCall {
            id: None,
            name,
            arguments: Arguments::from_value(fc.get("arguments")),
        });
    }

    Ok(Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason: non_null(choice.get("finish_reason")).cloned(),
        assistant: Value::Object(message.clone()),
        server_side: Vec::new(),
    })
}

/// Parses `{message: {tool_calls?, …}, <stop_key>?}` (Cohere v2 with `finish_reason`, Ollama
/// with `done_reason`): the calls of `message`, `finished` when there is none (the stop signal
/// is `stop`/`COMPLETE` whether or not calls are present), the raw stop signal, and `message`
/// verbatim as the assistant turn.
pub(crate) fn parse_message_shaped(
    completion: &Value,
    provider: Provider,
    ids: IdRule,
    stop_key: &str,
) -> Result<Parsed, ParseError> {
    let root = root_object(provider, completion)?;
    let message = object_field(provider, root, "message", "the body")?;
    let calls = tool_calls_of(provider, message, "message", ids)?;
    Ok(Parsed {
        finished: calls.is_empty(),
        calls,
        stop_reason: non_null(root.get(stop_key)).cloned(),
        assistant: Value::Object(message.clone()),
        server_side: Vec::new(),
    })
}

// ---------------------------------------------------------------------------------------------
// format

/// `results[i]`, or for a call that got no result (a caller bug) an `internal` error, for the
/// providers whose answer is built from the calls (Anthropic, Bedrock, Gemini): they reject a
/// follow-up that leaves a call unanswered (Gemini: whose response count differs from its call
/// count), so every call gets an answer even when `results` is out of step.
pub(crate) fn result_for<'a>(results: &'a [ToolResult], i: usize, call: &ToolCall) -> Cow<'a, ToolResult> {
    match results.get(i) {
        Some(r) => Cow::Borrowed(r),
        None => Cow::Owned(ToolResult::err(
            call,
            ToolError::new(ErrorKind::Internal, "no result was produced for this call", false),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// declare

/// How the `strict` flag of a chat-shaped declaration is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StrictKey {
    /// Always send `strict` (OpenAI); with `opts.strict`, transform with `openai_strict`.
    Always,
    /// Send `strict: true` only when asked, schema as is (Mistral, `docs/providers.md#mistral`).
    WhenAsked,
    /// Never send `strict`; warn once per tool when it was asked (Cohere, Ollama).
    Never {
        /// Why strict is not available, for the warning.
        why: &'static str,
    },
}

/// The parameters and `strict` flag under OpenAI strict mode: the [`schema::openai_strict`]
/// transform with one `changed` warning per note, or, when the schema cannot be made strict,
/// the schema unchanged with `strict: false` and a warning saying why.
pub(crate) fn openai_strict_parameters(
    name: &str,
    parameters: &Value,
    strict: bool,
    warnings: &mut Vec<DeclareWarning>,
) -> (Value, bool) {
    strict_parameters_with(name, parameters, strict, warnings, schema::openai_strict)
}

/// [`openai_strict_parameters`] with any strict transform (Anthropic and Bedrock:
/// [`anthropic_strict_parameters`]).
pub(crate) fn strict_parameters_with(
    name: &str,
    parameters: &Value,
    strict: bool,
    warnings: &mut Vec<DeclareWarning>,
    transform: impl Fn(&Value) -> Result<(Value, Vec<String>), String>,
) -> (Value, bool) {
    if !strict {
        return (parameters.clone(), false);
    }
    match transform(parameters) {
        Ok((schema, notes)) => {
            warnings.extend(notes.into_iter().map(|note| DeclareWarning::changed(name, note)));
            (schema, true)
        }
        Err(reason) => {
            warnings.push(DeclareWarning::changed(
                name,
                format!("strict mode was not possible, declared with strict: false: {reason}"),
            ));
            (parameters.clone(), false)
        }
    }
}

/// [`strict_parameters_with`] the [`schema::anthropic_strict`] transform (Anthropic, and
/// Bedrock, whose structured-output grammar follows the Anthropic subset).
pub(crate) fn anthropic_strict_parameters(
    name: &str,
    parameters: &Value,
    strict: bool,
    warnings: &mut Vec<DeclareWarning>,
) -> (Value, bool) {
    strict_parameters_with(name, parameters, strict, warnings, schema::anthropic_strict)
}

/// `{"name", "description"?, "parameters"}`, plus `strict` when given; `description` is left
/// out when empty. Used for both the Chat `function` object and the flat Responses tool.
pub(crate) fn function_object(
    tool: &ToolDeclaration<'_>,
    parameters: Value,
    strict: Option<bool>,
) -> Map<String, Value> {
    let mut f = Map::new();
    f.insert("name".into(), Value::String(tool.name.to_owned()));
    if !tool.description.is_empty() {
        f.insert("description".into(), Value::String(tool.description.to_owned()));
    }
    f.insert("parameters".into(), parameters);
    if let Some(strict) = strict {
        f.insert("strict".into(), Value::Bool(strict));
    }
    f
}

/// Declares each tool whose name passes [`schema::check_name`] for `provider` with `entry`;
/// the others are left out with a `dropped` warning.
pub(crate) fn declare_each(
    provider: Provider,
    tools: &[ToolDeclaration<'_>],
    warnings: &mut Vec<DeclareWarning>,
    entry: impl FnMut(&ToolDeclaration<'_>, &mut Vec<DeclareWarning>) -> Value,
) -> Vec<Value> {
    declare_each_with(tools, warnings, |name| schema::check_name(provider, name), entry)
}

fn declare_each_with(
    tools: &[ToolDeclaration<'_>],
    warnings: &mut Vec<DeclareWarning>,
    check_name: impl Fn(&str) -> Result<(), String>,
    mut entry: impl FnMut(&ToolDeclaration<'_>, &mut Vec<DeclareWarning>) -> Value,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        match check_name(tool.name) {
            Ok(()) => out.push(entry(tool, warnings)),
            Err(reason) => warnings.push(DeclareWarning::dropped(tool.name, reason)),
        }
    }
    out
}

/// Declarations in the Chat shape `{"type":"function","function":{name, description?,
/// parameters, strict?}}`, shared by OpenAI Chat, Mistral, Cohere and Ollama.
pub(crate) fn declare_chat_shaped(
    provider: Provider,
    tools: &[ToolDeclaration<'_>],
    opts: &DeclareOptions,
    warnings: &mut Vec<DeclareWarning>,
    strict_key: StrictKey,
) -> Vec<Value> {
    declare_each(provider, tools, warnings, |tool, warnings| {
        let (parameters, strict) = match strict_key {
            StrictKey::Always => {
                let (p, s) = openai_strict_parameters(tool.name, tool.parameters, opts.strict, warnings);
                (p, Some(s))
            }
            StrictKey::WhenAsked => (tool.parameters.clone(), opts.strict.then_some(true)),
            StrictKey::Never { why } => {
                if opts.strict {
                    warnings.push(DeclareWarning::changed(tool.name, why));
                }
                (tool.parameters.clone(), None)
            }
        };
        json!({"type": "function", "function": function_object(tool, parameters, strict)})
    })
}

/// `{"name", "description"?}`, the description left out when blank (Bedrock refuses an empty
/// one when present): the start of an Anthropic, Bedrock or Gemini declaration.
pub(crate) fn name_and_description(tool: &ToolDeclaration<'_>) -> Map<String, Value> {
    let mut entry = Map::new();
    entry.insert("name".into(), json!(tool.name));
    if !tool.description.trim().is_empty() {
        entry.insert("description".into(), json!(tool.description));
    }
    entry
}

/// A declaration for the providers' unit tests.
#[cfg(test)]
pub(crate) fn decl<'a>(name: &'a str, description: &'a str, parameters: &'a Value) -> ToolDeclaration<'a> {
    ToolDeclaration {
        name,
        description,
        parameters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_failure_falls_back_to_non_strict_with_warning() {
        let params = json!({"type": "object"});
        let mut warnings = Vec::new();
        let (schema, strict) =
            strict_parameters_with("t", &params, true, &mut warnings, |_| Err("recursion".to_owned()));
        assert_eq!(schema, params);
        assert!(!strict);
        assert_eq!(warnings.len(), 1);
        assert!(!warnings[0].dropped);
        assert!(warnings[0].message.contains("strict mode was not possible"));
        assert!(warnings[0].message.contains("recursion"));
    }

    #[test]
    fn strict_notes_become_changed_warnings() {
        let params = json!({"type": "object"});
        let mut warnings = Vec::new();
        let (schema, strict) = strict_parameters_with("t", &params, true, &mut warnings, |s| {
            let mut s = s.clone();
            s["additionalProperties"] = json!(false);
            Ok((
                s,
                vec!["closed the root object".to_owned(), "made `a` nullable".to_owned()],
            ))
        });
        assert!(strict);
        assert_eq!(schema, json!({"type": "object", "additionalProperties": false}));
        let messages: Vec<_> = warnings
            .iter()
            .map(|w| (w.tool.as_str(), w.message.as_str(), w.dropped))
            .collect();
        assert_eq!(
            messages,
            [
                ("t", "closed the root object", false),
                ("t", "made `a` nullable", false)
            ]
        );
    }

    #[test]
    fn not_strict_leaves_schema_alone_without_calling_transform() {
        let params = json!({"type": "object"});
        let mut warnings = Vec::new();
        let (schema, strict) = strict_parameters_with("t", &params, false, &mut warnings, |_| {
            Err("must not be called".to_owned())
        });
        assert_eq!((schema, strict), (params, false));
        assert!(warnings.is_empty());
    }

    #[test]
    fn bad_names_are_dropped_with_warning() {
        let params = json!({"type": "object"});
        let tools = [decl("good", "", &params), decl("bad name", "", &params)];
        let mut warnings = Vec::new();
        let out = declare_each_with(
            &tools,
            &mut warnings,
            |n| {
                if n.contains(' ') {
                    Err("spaces are not allowed".to_owned())
                } else {
                    Ok(())
                }
            },
            |t, _| json!(t.name),
        );
        assert_eq!(out, vec![json!("good")]);
        assert_eq!(
            warnings,
            vec![DeclareWarning::dropped("bad name", "spaces are not allowed")]
        );
    }
}
