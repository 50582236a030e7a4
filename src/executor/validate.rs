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
    let args = drop_null_optionals(tool, args);
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

/// Strict-mode declarations make optional parameters required-but-nullable, so models send
/// `null` for "not given". A top-level `null` for a parameter that is optional in the tool's
/// own schema and whose schema does not accept `null` is therefore read as "absent".
fn drop_null_optionals(tool: &Tool, args: &Map<String, Value>) -> Map<String, Value> {
    let required: Vec<&str> = tool
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let props = tool.parameters.get("properties").and_then(Value::as_object);
    args.iter()
        .filter(|(k, v)| {
            let optional_null = v.is_null() && !required.contains(&k.as_str());
            // Only asked for an optional `null` (compiling a schema is not free).
            !optional_null || props.and_then(|p| p.get(k.as_str())).is_some_and(accepts_null)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Does a property's schema, on its own, accept `null`? A schema that does not compile on its
/// own (a `$ref` into the tool's `$defs`) counts as "no": the `null` is then dropped, and an
/// absent optional parameter is valid either way. (`jsonschema::is_valid` panics on such a
/// schema: found by the `validate_args` fuzz target, see docs/fuzzing.md.)
fn accepts_null(schema: &Value) -> bool {
    jsonschema::options()
        .offline()
        .build(schema)
        .is_ok_and(|v| v.is_valid(&Value::Null))
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

    #[test]
    fn ref_properties_do_not_panic_and_optional_nulls_are_dropped() {
        let tool = ref_tool();
        let args = Arguments::from_json_str(r#"{"tree": {"value": 1}, "owner": null, "nick": null}"#);
        let ok = check_arguments(&tool, &args, 64).unwrap();
        assert_eq!(ok, json!({"tree": {"value": 1}}).as_object().unwrap().clone());
        let bad = Arguments::from_json_str(r#"{"tree": {"value": "x"}}"#);
        let err = check_arguments(&tool, &bad, 64).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
        assert_eq!(err.details[0].path, "/tree/value");
    }
}
