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
            // Only for an optional `null` (compiling a schema is costly), and never panicking:
            // a property schema that cannot stand alone (a `$ref` into the root's `$defs`) is
            // read as not accepting `null`.
            !optional_null
                || props
                    .and_then(|p| p.get(k.as_str()))
                    .and_then(|schema| jsonschema::options().offline().build(schema).ok())
                    .is_some_and(|validator| validator.is_valid(&Value::Null))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
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
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;
    use crate::config::ServerConfig;
    use crate::registry::Registry;

    /// A registry with one tool whose parameters are `schema`.
    fn registry(schema: &Value) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let file = json!({"tools": [{
            "name": "t",
            "description": "A test tool; returns what it printed.",
            "parameters": schema,
            "exec": {"command": ["/bin/true"]},
        }]});
        std::fs::write(dir.path().join("t.json"), file.to_string()).unwrap();
        let cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
        Registry::load(dir.path(), &cfg.defaults).unwrap()
    }

    fn check(reg: &Registry, args: Value) -> Result<Map<String, Value>, ToolError> {
        check_arguments(reg.get("t").unwrap(), &Arguments::from_value(Some(&args)), 64)
    }

    /// A property that `$ref`s the root's `$defs` (pydantic's usual output) must not make every
    /// call fail: the subschema cannot be compiled on its own.
    #[test]
    fn ref_properties_are_checked_against_the_whole_schema() {
        let reg = registry(&json!({
            "type": "object",
            "$defs": {"Unit": {"type": "string", "enum": ["km", "mi"]}},
            "properties": {
                "unit": {"$ref": "#/$defs/Unit"},
                "alt": {"$ref": "#/$defs/Unit"},
            },
            "required": ["unit"],
        }));
        assert_eq!(check(&reg, json!({"unit": "km"})).unwrap()["unit"], json!("km"));
        let args = check(&reg, json!({"unit": "mi", "alt": null})).unwrap();
        assert!(!args.contains_key("alt"), "an optional null is read as absent");
        let err = check(&reg, json!({"unit": "parsec"})).unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
    }

    #[test]
    fn optional_nulls_are_dropped_unless_the_schema_accepts_null() {
        let reg = registry(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": ["string", "null"]},
            },
        }));
        let args = check(&reg, json!({"a": null, "b": null})).unwrap();
        assert!(!args.contains_key("a"));
        assert_eq!(args["b"], Value::Null);
    }
}
