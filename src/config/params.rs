//! `parameters`: full JSON Schema, or the short form expanded to JSON Schema.
//!
//! Short form (one entry per parameter):
//! ```toml
//! parameters = { city = "string", days = { type = "integer", description = "Days ahead. Default 1.", optional = true }, units = "string?" }
//! ```
//! A string names the JSON type (`"string?"` = optional); a table is that property's JSON Schema
//! plus an optional `optional = true`. Parameters are required unless marked optional or given a
//! `default`. The model always sees the expanded JSON Schema.
//!
//! The full form is recognised by a root `type = "object"`, `properties`, `$schema` or `$ref`;
//! therefore a short-form parameter cannot be called `type`, `properties`, `$schema` or `$ref`.

use serde_json::{Map, Value, json};

const TYPES: &[&str] = &["string", "integer", "number", "boolean", "array", "object", "null"];

/// Expands `parameters` to a full JSON Schema; `Err` lists `(key path, message)` problems.
pub fn expand(parameters: Option<&Value>) -> Result<Value, Vec<(String, String)>> {
    let Some(value) = parameters else {
        return Ok(json!({"type": "object", "properties": {}}));
    };
    let Value::Object(map) = value else {
        return Err(vec![(
            String::new(),
            "must be a table/object: a JSON Schema or the short form".into(),
        )]);
    };
    if is_full_schema(map) {
        return Ok(value.clone());
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut errors = Vec::new();
    for (name, spec) in map {
        match expand_property(spec) {
            Ok((schema, optional)) => {
                if !optional {
                    required.push(Value::String(name.clone()));
                }
                properties.insert(name.clone(), schema);
            }
            Err(msg) => errors.push((name.clone(), msg)),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut schema = json!({"type": "object", "properties": properties});
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    Ok(schema)
}

fn is_full_schema(map: &Map<String, Value>) -> bool {
    map.get("type").and_then(Value::as_str) == Some("object")
        || map.contains_key("properties")
        || map.contains_key("$schema")
        || map.contains_key("$ref")
}

/// One short-form property → (schema, optional).
fn expand_property(spec: &Value) -> Result<(Value, bool), String> {
    match spec {
        Value::String(t) => {
            let (ty, optional) = match t.strip_suffix('?') {
                Some(ty) => (ty, true),
                None => (t.as_str(), false),
            };
            if !TYPES.contains(&ty) {
                return Err(format!("unknown type `{ty}`; use one of {}", TYPES.join(", ")));
            }
            Ok((json!({"type": ty}), optional))
        }
        Value::Object(obj) => {
            let mut schema = obj.clone();
            let optional = match schema.remove("optional") {
                None => false,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err("`optional` must be true or false".into()),
            };
            let optional = optional || schema.contains_key("default");
            if let Some(ty) = schema.get("type").and_then(Value::as_str)
                && !TYPES.contains(&ty)
            {
                return Err(format!("unknown type `{ty}`; use one of {}", TYPES.join(", ")));
            }
            Ok((Value::Object(schema), optional))
        }
        _ => Err("must be a type name (\"string\") or a table ({ type = \"integer\", description = \"…\" })".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_short_form() {
        let v = json!({"city": "string", "days": {"type": "integer", "description": "d", "optional": true}, "units": "string?"});
        let s = expand(Some(&v)).unwrap();
        assert_eq!(
            s,
            json!({"type": "object", "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer", "description": "d"},
                "units": {"type": "string"}
            }, "required": ["city"]})
        );
    }

    #[test]
    fn keeps_full_schema() {
        let v = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(expand(Some(&v)).unwrap(), v);
    }

    #[test]
    fn no_parameters_is_an_empty_object_schema() {
        assert_eq!(expand(None).unwrap(), json!({"type": "object", "properties": {}}));
    }

    #[test]
    fn reports_every_bad_short_form_entry() {
        let v = json!({"a": "strng", "b": 5, "c": "integer"});
        let errs = expand(Some(&v)).unwrap_err();
        assert_eq!(errs.len(), 2);
        assert_eq!(errs[0].0, "a");
        assert_eq!(errs[1].0, "b");
    }
}
