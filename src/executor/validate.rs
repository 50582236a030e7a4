//! Checks of a call before anything runs: usable arguments, depth, schema.
//!
//! Error messages never echo argument values (the model may have put secrets or injected
//! text there): schema errors use jsonschema's masked form, with a JSON pointer.

use serde_json::{Map, Value};

use crate::call::{Arguments, ArgumentsProblem, ErrorDetail, ErrorKind, ToolError};
use crate::tool::Tool;

/// Most schema errors reported per call.
pub const MAX_ERRORS: usize = 10;

/// The arguments object to run with, or the error result.
pub fn check_arguments(tool: &Tool, arguments: &Arguments, max_depth: usize) -> Result<Map<String, Value>, ToolError> {
    let args = match arguments {
        Arguments::Object(map) => map,
        Arguments::Invalid { problem, .. } => {
            let what = match problem {
                ArgumentsProblem::InvalidJson => "The arguments are not valid JSON (they may have been cut off)",
                ArgumentsProblem::NotAnObject => "The arguments must be a JSON object",
            };
            return Err(ToolError::new(
                ErrorKind::ArgsNotJson,
                format!(
                    "{what}. Call `{}` again with a complete JSON object matching its parameters.",
                    tool.name
                ),
                false,
            ));
        }
    };
    if depth(args, max_depth + 1) > max_depth {
        return Err(ToolError::new(
            ErrorKind::InvalidArguments,
            format!("The arguments are nested deeper than {max_depth} levels. Send a flatter object."),
            false,
        ));
    }
    let args = own_arguments(tool, args)?;
    let value = Value::Object(args);
    let details: Vec<ErrorDetail> = tool
        .validator
        .iter_errors(&value)
        .take(MAX_ERRORS)
        .map(|e| ErrorDetail {
            path: e.instance_path().to_string(),
            message: e.masked().to_string(),
        })
        .collect();
    if !details.is_empty() {
        return Err(ToolError::new(
            ErrorKind::InvalidArguments,
            format!(
                "The arguments do not match the parameters of `{}`. Fix the listed fields and call it again.",
                tool.name
            ),
            false,
        )
        .with_details(details));
    }
    match value {
        Value::Object(map) => Ok(map),
        _ => Ok(Map::new()),
    }
}

/// The model's arguments as the tool may receive them:
/// - injected keys are removed (they are filled from `state` only, never by the model);
/// - on a closed schema (see [`crate::tool::ArgumentRules`]) undeclared keys are refused,
///   naming them, so nothing the tool did not declare reaches a backend;
/// - a `null` for an optional declared property whose own schema refuses `null` is read as
///   "absent" (strict-mode declarations make models send it); every other `null` is kept.
fn own_arguments(tool: &Tool, args: &Map<String, Value>) -> Result<Map<String, Value>, ToolError> {
    let rules = &tool.arguments;
    let mut out = Map::with_capacity(args.len());
    let mut undeclared: Vec<&str> = Vec::new();
    for (k, v) in args {
        if tool.inject.iter().any(|i| &i.key == k) {
            continue;
        }
        if let Some(declared) = &rules.closed
            && !declared.contains(k)
            && !rules.patterns.iter().any(|re| re.is_match(k))
        {
            undeclared.push(k);
            continue;
        }
        if v.is_null() && rules.null_means_absent.contains(k) {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    if undeclared.is_empty() {
        return Ok(out);
    }
    let shown: Vec<String> = undeclared
        .iter()
        .take(MAX_ERRORS)
        .map(|k| format!("`{}`", printable_key(k)))
        .collect();
    let details = undeclared
        .iter()
        .take(MAX_ERRORS)
        .map(|k| ErrorDetail {
            path: format!("/{}", k.replace('~', "~0").replace('/', "~1")),
            message: "is not a parameter of this tool".to_owned(),
        })
        .collect();
    Err(ToolError::new(
        ErrorKind::InvalidArguments,
        format!(
            "`{}` has no parameter named {}. Remove {} and call it again with only its declared parameters.",
            tool.name,
            shown.join(", "),
            if undeclared.len() == 1 { "it" } else { "them" }
        ),
        false,
    )
    .with_details(details))
}

/// A model-chosen key as shown in a message: control characters escaped, at most 64 characters.
fn printable_key(k: &str) -> String {
    let mut out: String = k.chars().take(64).flat_map(char::escape_debug).collect();
    if k.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// Nesting depth of an object, stopping early past `limit`.
fn depth(map: &Map<String, Value>, limit: usize) -> usize {
    fn walk(v: &Value, d: usize, limit: usize) -> usize {
        if d > limit {
            return d;
        }
        match v {
            Value::Array(a) => a.iter().map(|x| walk(x, d + 1, limit)).max().unwrap_or(d),
            Value::Object(o) => o.values().map(|x| walk(x, d + 1, limit)).max().unwrap_or(d),
            _ => d,
        }
    }
    map.values().map(|v| walk(v, 1, limit)).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::config::ServerConfig;
    use crate::config::load::{LoadedDir, load_file};
    use crate::registry::Registry;

    /// A tool whose top-level properties are `$ref`s into its `$defs` (one nullable).
    fn ref_tool() -> std::sync::Arc<Tool> {
        let defaults = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap())
            .unwrap()
            .defaults;
        let file = json!({"tools": [{"name": "refs", "description": "d", "exec": {"command": ["true"]},
            "parameters": {"type": "object", "required": ["tree"],
                "$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}}},
                          "maybe": {"type": ["string", "null"]}},
                "properties": {"tree": {"$ref": "#/$defs/node"}, "owner": {"$ref": "#/$defs/node"},
                               "nick": {"$ref": "#/$defs/maybe"}}}}]});
        let mut loaded = LoadedDir::default();
        load_file(Path::new("t.json"), &file.to_string(), &|_| None, &mut loaded);
        let reg = Registry::build(loaded, &defaults).unwrap();
        std::sync::Arc::clone(&reg.tools()[0])
    }

    fn tool_with(parameters: Value, inject: Value) -> std::sync::Arc<Tool> {
        let defaults = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap())
            .unwrap()
            .defaults;
        let file = json!({"tools": [{"name": "t", "description": "d", "exec": {"command": ["true"]},
            "parameters": parameters, "inject": inject}]});
        let mut loaded = LoadedDir::default();
        load_file(Path::new("t.json"), &file.to_string(), &|_| None, &mut loaded);
        let reg = Registry::build(loaded, &defaults).unwrap();
        std::sync::Arc::clone(&reg.tools()[0])
    }

    #[test]
    fn undeclared_keys_are_refused_unless_the_schema_allows_them() {
        let closed = tool_with(
            json!({"type": "object", "properties": {"to": {"type": "string"}}}),
            json!({"user_id": "state.user_id"}),
        );
        let err = check_arguments(&closed, &Arguments::from_json_str(r#"{"to": "a", "admin": true}"#), 64).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
        assert!(err.message.contains("`admin`"), "{}", err.message);
        assert_eq!(err.details[0].path, "/admin");
        // Injected keys sent by the model are dropped, not refused and not kept.
        let ok = check_arguments(
            &closed,
            &Arguments::from_json_str(r#"{"to": "a", "user_id": "evil"}"#),
            64,
        )
        .unwrap();
        assert_eq!(Value::Object(ok), json!({"to": "a"}));

        let open = tool_with(
            json!({"type": "object", "properties": {"to": {"type": "string"}}, "additionalProperties": true}),
            json!({}),
        );
        let ok = check_arguments(
            &open,
            &Arguments::from_json_str(r#"{"to": null, "extra": null, "x": 1}"#),
            64,
        )
        .unwrap();
        // `to` refuses null and is optional: absent. The allowed extra keeps its null.
        assert_eq!(Value::Object(ok), json!({"extra": null, "x": 1}));

        let free = tool_with(json!({"type": "object"}), json!({}));
        let ok = check_arguments(&free, &Arguments::from_json_str(r#"{"anything": {"a": null}}"#), 64).unwrap();
        assert_eq!(Value::Object(ok), json!({"anything": {"a": null}}));
    }

    #[test]
    fn ref_properties_do_not_panic_and_optional_nulls_are_dropped() {
        let tool = ref_tool();
        let args = Arguments::from_json_str(r#"{"tree": {"value": 1}, "owner": null, "nick": null}"#);
        let ok = check_arguments(&tool, &args, 64).unwrap();
        // `owner`'s schema refuses null: absent. `nick` allows it (through its `$ref`): kept.
        assert_eq!(
            ok,
            json!({"tree": {"value": 1}, "nick": null}).as_object().unwrap().clone()
        );
        let bad = Arguments::from_json_str(r#"{"tree": {"value": "x"}}"#);
        let err = check_arguments(&tool, &bad, 64).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
        assert_eq!(err.details[0].path, "/tree/value");
    }
}
