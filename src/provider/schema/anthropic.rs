//! The Anthropic strict dialect ([`anthropic_strict`]), for Anthropic and Bedrock
//! (`docs/providers.md#anthropic-strict`).
//!
//! Follows the SDK's `transform_schema`: types, `enum`, `const`, `anyOf` (`oneOf` rewritten to it), `allOf`,
//! `$defs`/`$ref`, `description`, `title` are kept, objects are always closed, string `format` is
//! kept only in the supported list and array `minItems` only when 0 or 1; every other keyword is
//! removed and appended to `description` as text (`"(minimum: 1; maximum: 10)"`) so the model may
//! still follow it. Differences from the SDK: `$schema`/`$id`/`$comment` are dropped rather than
//! written into the description; a `$ref` with siblings becomes `allOf: [{"$ref"}]` plus the
//! siblings (the SDK silently drops them, losing the description); type arrays are kept and each
//! member type gets its type-specific handling. Recursion anywhere in the schema is an `Err`
//! (documented as unsupported).

use serde_json::{Map, Value, json};

use super::{Walk, as_list, as_map, as_schema, at, check_object_root, child, reject_any_and_one_of, types_of};

/// Schema metadata that carries no constraint; dropped rather than described.
const METADATA_KEYWORDS: [&str; 3] = ["$schema", "$id", "$comment"];

const ANTHROPIC_FORMATS: [&str; 10] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Anthropic strict mode (`docs/providers.md#anthropic-strict`): keep the supported subset, objects
/// closed, other constraints moved into `description` text.
pub fn anthropic_strict(schema: &Value) -> Result<(Value, Vec<String>), String> {
    let mut walk = Walk::new(schema)?;
    check_object_root(schema)?;
    if !walk.doc.cyclic.is_empty() {
        return Err("recursive schemas are not supported in Anthropic strict mode".to_owned());
    }
    let out = anthropic_node(&mut walk, schema, "", 1)?;
    Ok((out, walk.notes))
}

fn anthropic_node(walk: &mut Walk<'_>, schema: &Value, path: &str, depth: usize) -> Result<Value, String> {
    walk.enter(path, depth)?;
    let map = as_schema(schema, path)?;
    let types = types_of(map, path)?;
    if types.is_empty()
        && !["enum", "const", "anyOf", "oneOf", "allOf", "$ref"]
            .iter()
            .any(|k| map.contains_key(*k))
    {
        return Err(format!(
            "{}: the schema needs a type, enum, const, anyOf, oneOf, allOf or $ref in Anthropic strict mode",
            at(path)
        ));
    }
    reject_any_and_one_of(map, path)?;
    let ref_siblings = map.contains_key("$ref")
        && map
            .keys()
            .any(|k| !matches!(k.as_str(), "$ref" | "$defs" | "definitions"));
    if ref_siblings && map.contains_key("allOf") {
        return Err(format!(
            "{}: $ref next to allOf cannot be expressed in Anthropic strict mode",
            at(path)
        ));
    }
    let has = |t: &str| types.contains(&t);

    let mut out = Map::new();
    let mut moved: Vec<(&str, &Value)> = Vec::new();
    let mut dropped: Vec<&str> = Vec::new();
    for (key, value) in map {
        let here = child(path, key);
        match key.as_str() {
            "$ref" if ref_siblings => {
                out.insert("allOf".to_owned(), json!([{ "$ref": value }]));
                walk.note(
                    path,
                    "$ref with sibling keywords wrapped in allOf (Anthropic strict mode)",
                );
            }
            "$ref" | "type" | "enum" | "const" | "title" | "description" => {
                out.insert(key.clone(), value.clone());
            }
            "$defs" | "definitions" => {
                out.insert(key.clone(), anthropic_map(walk, value, &here, depth)?);
            }
            "anyOf" | "allOf" => {
                out.insert(key.clone(), anthropic_list(walk, value, &here, depth)?);
            }
            "oneOf" => {
                out.insert(
                    "anyOf".to_owned(),
                    anthropic_list(walk, value, &child(path, "anyOf"), depth)?,
                );
                walk.note(path, "oneOf rewritten as anyOf (Anthropic strict mode)");
            }
            "properties" if has("object") => {
                out.insert(key.clone(), anthropic_map(walk, value, &here, depth)?);
            }
            "required" if has("object") => {
                out.insert(key.clone(), value.clone());
            }
            "additionalProperties" if has("object") => {} // always false, below
            "format" if has("string") && value.as_str().is_some_and(|f| ANTHROPIC_FORMATS.contains(&f)) => {
                out.insert(key.clone(), value.clone());
            }
            "items" if has("array") && value.is_object() => {
                out.insert(key.clone(), anthropic_node(walk, value, &here, depth + 1)?);
            }
            "minItems" if has("array") && matches!(value.as_u64(), Some(0 | 1)) => {
                out.insert(key.clone(), value.clone());
            }
            k if METADATA_KEYWORDS.contains(&k) => dropped.push(k),
            k => moved.push((k, value)),
        }
    }

    if has("object") {
        match map.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            None => walk.note(
                path,
                "object closed with additionalProperties: false (Anthropic strict mode)",
            ),
            Some(_) => walk.note(
                path,
                "additional properties no longer allowed: additionalProperties set to false (Anthropic strict mode)",
            ),
        }
        out.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    if !dropped.is_empty() {
        walk.note(path, format!("{} dropped (schema metadata)", dropped.join(", ")));
    }
    if !moved.is_empty() {
        let text = moved
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let description = match out.get("description").and_then(Value::as_str) {
            Some(d) if !d.is_empty() => format!("{d} ({text})"),
            _ => format!("({text})"),
        };
        out.insert("description".to_owned(), Value::String(description));
        let names = moved.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ");
        walk.note(
            path,
            format!("{names} moved into the description (not supported in Anthropic strict mode)"),
        );
    }
    Ok(Value::Object(out))
}

fn anthropic_list(walk: &mut Walk<'_>, value: &Value, path: &str, depth: usize) -> Result<Value, String> {
    let mut out = Vec::new();
    for (i, branch) in as_list(value, path)?.iter().enumerate() {
        out.push(anthropic_node(walk, branch, &format!("{path}/{i}"), depth + 1)?);
    }
    Ok(Value::Array(out))
}

fn anthropic_map(walk: &mut Walk<'_>, value: &Value, path: &str, depth: usize) -> Result<Value, String> {
    let mut out = Map::new();
    for (name, schema) in as_map(value, path)? {
        out.insert(
            name.clone(),
            anthropic_node(walk, schema, &child(path, name), depth + 1)?,
        );
    }
    Ok(Value::Object(out))
}
