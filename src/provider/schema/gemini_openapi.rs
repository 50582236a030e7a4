//! The Gemini OpenAPI subset ([`gemini_openapi`]): the `parameters` form of a function
//! declaration (`docs/providers.md#gemini-openapi-subset`).
//!
//! `parameters` is a fixed OpenAPI-3.0 subset, so the
//! output keeps only its documented fields (`type format title description nullable enum items
//! minItems maxItems properties required propertyOrdering minProperties maxProperties minLength
//! maxLength pattern minimum maximum anyOf default example`):
//! - types are upper-cased; `"null"` in a type array or an `anyOf` null branch becomes
//!   `nullable: true` (python-genai `handle_null_fields`); several non-null types become an
//!   `anyOf` of single types;
//! - every `$ref` is inlined and `$defs`/`definitions` removed (python-genai does the same);
//!   recursion cannot be inlined: `Err` (use `parametersJsonSchema` instead);
//! - `const` becomes `enum: [value]`; enum values must be strings of a `STRING` schema, so
//!   numbers and booleans are stringified and the type set to `STRING` (the model then sends
//!   strings); `null` in an enum becomes `nullable`;
//! - `format` is kept only where Gemini accepts it: STRING `enum`/`date-time`, NUMBER
//!   `float`/`double`, INTEGER `int32`/`int64` (the API answers 400 "only 'enum' and 'date-time'
//!   are supported for STRING type" otherwise — [2nd] google-gemini/gemini-cli#3178);
//! - `allOf` with one entry is merged into its parent; several entries: `Err` (as for OpenAI);
//! - `examples` becomes `example` (first value); anything else outside the list
//!   (`additionalProperties`, `$schema`, `exclusiveMinimum`, `prefixItems`, …) is
//!   removed with a note.

use serde_json::{Map, Value, json};

use super::{
    Walk, as_list, as_map, as_schema, at, check_object_root, child, flatten_all_of, overlay, reject_any_and_one_of,
    types_of,
};

const GEMINI_FIELDS: [&str; 22] = [
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "propertyOrdering",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "anyOf",
    "default",
    "example",
];

/// Gemini OpenAPI-subset `parameters` (`docs/providers.md#gemini-openapi-subset`): upper-case
/// types, type arrays → `nullable`, `$defs` inlined, `additionalProperties`/`$schema` removed,
/// `const` → `enum`, numeric enums stringified. `Err(reason)` when it cannot be expressed (e.g.
/// recursion).
pub fn gemini_openapi(schema: &Value) -> Result<(Value, Vec<String>), String> {
    let mut walk = Walk::new(schema)?;
    check_object_root(schema)?;
    if let Some(target) = walk.doc.cyclic.iter().min() {
        return Err(format!(
            "recursive $ref (#{target}) cannot be inlined into Gemini's OpenAPI schema; \
             use parametersJsonSchema instead"
        ));
    }
    let out = gemini_node(&mut walk, schema, "", 1)?;
    Ok((out, walk.notes))
}

fn gemini_node(walk: &mut Walk<'_>, schema: &Value, path: &str, depth: usize) -> Result<Value, String> {
    walk.enter(path, depth)?;
    let map = as_schema(schema, path)?;
    if let Some(reference) = map.get("$ref") {
        let reference = reference
            .as_str()
            .ok_or_else(|| format!("{}: $ref must be a string", at(path)))?;
        let merged = overlay(walk.doc.resolve(reference)?, map, "$ref", path)?;
        walk.note(path, format!("$ref {reference} inlined (Gemini has no $ref)"));
        return gemini_node(walk, &merged, path, depth + 1);
    }
    if let Some(all_of) = map.get("allOf") {
        let merged = flatten_all_of(map, all_of, path, "Gemini's OpenAPI schema")?;
        walk.note(path, "single-entry allOf merged (Gemini has no allOf)");
        return gemini_node(walk, &merged, path, depth + 1);
    }
    reject_any_and_one_of(map, path)?;

    let types = types_of(map, path)?;
    let non_null: Vec<&str> = types.iter().copied().filter(|t| *t != "null").collect();
    let enum_values = match (map.get("enum"), map.get("const")) {
        (Some(values), _) => Some(as_enum(values, path)?),
        (None, Some(value)) => Some(std::slice::from_ref(value)),
        (None, None) => None,
    };
    let stringify = enum_values.is_some_and(|vs| vs.iter().any(|v| !v.is_string() && !v.is_null()));
    // Gemini enums belong to STRING schemas only.
    let final_type: Option<String> = match (enum_values, non_null.as_slice()) {
        (Some(_), _) => Some("STRING".to_owned()),
        (None, [one]) => Some(one.to_ascii_uppercase()),
        (None, _) => None,
    };
    if enum_values.is_some() && !matches!(non_null.as_slice(), ["string"]) {
        let was = map
            .get("type")
            .map_or_else(|| "no type".to_owned(), |t| format!("type {t}"));
        walk.note(
            path,
            format!("type set to STRING for the enum (was {was}; Gemini enums are strings only)"),
        );
    }

    let mut out = Map::new();
    let mut nullable = false;
    let mut dropped: Vec<String> = Vec::new();
    for (key, value) in map {
        let here = child(path, key);
        match key.as_str() {
            "type" => {
                if types.len() > non_null.len() {
                    nullable = true;
                    if !non_null.is_empty() {
                        walk.note(path, format!("type {value} rewritten with nullable: true"));
                    }
                }
                match (&final_type, non_null.as_slice()) {
                    (Some(t), _) => {
                        out.insert(key.clone(), json!(t));
                    }
                    (None, []) => {
                        out.insert(key.clone(), json!("NULL"));
                    }
                    (None, several) => {
                        if map.contains_key("anyOf") || map.contains_key("oneOf") {
                            return Err(format!(
                                "{}: a type array next to anyOf cannot be expressed for Gemini",
                                at(path)
                            ));
                        }
                        let branches = several
                            .iter()
                            .map(|t| json!({ "type": t.to_ascii_uppercase() }))
                            .collect();
                        out.insert("anyOf".to_owned(), Value::Array(branches));
                        walk.note(
                            path,
                            format!("type {value} rewritten as anyOf (Gemini has no type arrays)"),
                        );
                    }
                }
            }
            "anyOf" | "oneOf" => {
                if key == "oneOf" {
                    walk.note(path, "oneOf rewritten as anyOf (Gemini has no oneOf)");
                }
                let branches = gemini_list(walk, value, &child(path, "anyOf"), depth)?;
                let (nulls, mut rest): (Vec<Value>, Vec<Value>) = branches
                    .into_iter()
                    .partition(|b| b.get("type") == Some(&json!("NULL")));
                if !nulls.is_empty() {
                    nullable = true;
                }
                match rest.len() {
                    0 => {
                        out.insert("type".to_owned(), json!("NULL"));
                    }
                    1 if nulls.len() == 1 && !map.contains_key("type") => {
                        if let Some(Value::Object(only)) = rest.pop() {
                            for (k, v) in only {
                                out.entry(k).or_insert(v);
                            }
                        }
                        walk.note(path, "anyOf with a null branch collapsed into nullable: true");
                    }
                    _ => {
                        out.insert("anyOf".to_owned(), Value::Array(rest));
                        if !nulls.is_empty() {
                            walk.note(path, "null branch of anyOf replaced by nullable: true");
                        }
                    }
                }
            }
            "properties" => {
                out.insert(key.clone(), gemini_map(walk, value, &here, depth)?);
            }
            "items" => {
                out.insert(key.clone(), gemini_node(walk, value, &here, depth + 1)?);
            }
            "enum" | "const" => {
                if key == "const" && map.contains_key("enum") {
                    dropped.push(key.clone());
                    continue;
                }
                let values = enum_values.unwrap_or_default();
                nullable |= values.contains(&Value::Null);
                let strings: Vec<Value> = values
                    .iter()
                    .filter(|v| !v.is_null())
                    .map(|v| Value::String(as_text(v)))
                    .collect();
                out.insert("enum".to_owned(), Value::Array(strings));
                if key == "const" {
                    walk.note(path, "const rewritten as a one-value enum (Gemini has no const)");
                }
                if stringify {
                    walk.note(path, "enum values converted to strings (Gemini enums are strings only)");
                }
                if values.contains(&Value::Null) {
                    walk.note(path, "null removed from the enum and nullable: true set");
                }
            }
            "format" => {
                let format = value.as_str().unwrap_or_default();
                let supported = matches!(
                    (final_type.as_deref(), format),
                    (Some("STRING"), "enum" | "date-time")
                        | (Some("NUMBER"), "float" | "double")
                        | (Some("INTEGER"), "int32" | "int64")
                );
                if supported {
                    out.insert(key.clone(), value.clone());
                } else {
                    dropped.push(format!("format {value}"));
                }
            }
            "nullable" => nullable |= value == &Value::Bool(true),
            "default" if stringify && !value.is_string() && !value.is_null() => {
                out.insert(key.clone(), Value::String(as_text(value)));
            }
            "examples" if !map.contains_key("example") && value.as_array().is_some_and(|v| !v.is_empty()) => {
                if let Some(first) = value.as_array().and_then(|v| v.first()) {
                    out.insert("example".to_owned(), first.clone());
                }
                walk.note(
                    path,
                    "examples replaced by its first value as example (Gemini has no examples)",
                );
            }
            "$defs" | "definitions" => walk.note(path, format!("{key} removed (references inlined)")),
            k if GEMINI_FIELDS.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            _ => dropped.push(key.clone()),
        }
    }
    if let Some(t) = final_type
        && !out.contains_key("type")
    {
        out.insert("type".to_owned(), Value::String(t));
    }
    if nullable {
        out.insert("nullable".to_owned(), Value::Bool(true));
    }
    if !dropped.is_empty() {
        walk.note(
            path,
            format!("{} removed (not in Gemini's OpenAPI schema subset)", dropped.join(", ")),
        );
    }
    Ok(Value::Object(out))
}

fn as_enum<'v>(value: &'v Value, path: &str) -> Result<&'v [Value], String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{}: enum must be an array", at(path)))
}

/// An enum value as Gemini's string form: strings as they are, anything else as its JSON.
fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn gemini_list(walk: &mut Walk<'_>, value: &Value, path: &str, depth: usize) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, branch) in as_list(value, path)?.iter().enumerate() {
        out.push(gemini_node(walk, branch, &format!("{path}/{i}"), depth + 1)?);
    }
    Ok(out)
}

fn gemini_map(walk: &mut Walk<'_>, value: &Value, path: &str, depth: usize) -> Result<Value, String> {
    let mut out = Map::new();
    for (name, schema) in as_map(value, path)? {
        out.insert(name.clone(), gemini_node(walk, schema, &child(path, name), depth + 1)?);
    }
    Ok(Value::Object(out))
}
