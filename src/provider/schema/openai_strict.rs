//! The OpenAI strict dialect ([`openai_strict`]), for Chat and Responses
//! (`docs/providers.md#openai-strict`).
//!
//! The API rejects a strict schema that does not conform, so the transform mirrors the SDK's
//! strictifier (`_ensure_strict_json_schema`) and then goes further, to what the published
//! "supported schemas" list allows:
//! - every object gets `additionalProperties: false` and `required` = all its property keys;
//!   formerly optional properties are made nullable (`type` gains `"null"`, `enum` gains `null`,
//!   an `anyOf` gains a `{"type":"null"}` branch, anything else such as a bare `$ref` or a
//!   `const` is wrapped in `anyOf: [<schema>, {"type":"null"}]`);
//! - an object that explicitly allows additional properties (`true` or a schema) cannot be made
//!   strict without changing what it accepts: `Err`;
//! - a `$ref` with sibling keywords is inlined like the SDK does (target merged with the
//!   siblings, siblings win). When the target is recursive it cannot be inlined, so the
//!   siblings are dropped instead (with a note). Plain `$ref`s, recursion included, are kept;
//! - `allOf` with one entry is flattened (the SDK does it); several entries: `Err`, because a
//!   general merge is lossy (conflicting keywords) and strict mode rejects `allOf`;
//! - `oneOf` becomes `anyOf` (the branches may then overlap) with a note;
//! - keywords outside the supported list are dropped with a note: `not`, `if/then/else`,
//!   `dependent*`, `patternProperties`, `unevaluated*`, `propertyNames`, `min/maxProperties`,
//!   `contains`, `min/maxContains`, `uniqueItems`, `minLength/maxLength`, `default` (the SDK
//!   strips `default: null`; other defaults are not in the list either), `$schema`, …;
//!   string `format` is kept only for date-time, time, date, duration, email, hostname, ipv4,
//!   ipv6, uuid;
//! - a schema without `type` (and without `anyOf`/`$ref`/`enum`/`const`) is rejected by the API,
//!   so it is an `Err`, except a typeless schema with `properties`, which gets `type: object`;
//! - the cheap limits are enforced: 10 levels of object nesting (measured from the root and,
//!   for `$defs`, from each definition), 5000 properties, 1000 enum values, 120 000 characters
//!   of property names, definition names and string enum/const values.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::{
    Walk, as_list, as_map, as_schema, at, check_object_root, child, flatten_all_of, overlay, reject_any_and_one_of,
    types_of,
};

const OPENAI_KEYWORDS: [&str; 23] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "anyOf",
    "enum",
    "const",
    "$ref",
    "$defs",
    "definitions",
    "title",
    "description",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];
const OPENAI_FORMATS: [&str; 9] = [
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];
const OPENAI_MAX_OBJECT_NESTING: usize = 10;
const OPENAI_MAX_PROPERTIES: usize = 5_000;
const OPENAI_MAX_ENUM_VALUES: usize = 1_000;
const OPENAI_MAX_CHARS: usize = 120_000;

/// OpenAI strict mode (Chat and Responses): every object gets `additionalProperties: false`,
/// every property becomes required with formerly optional ones made nullable, `$ref` with
/// siblings is inlined, unsupported keywords are dropped.
/// Returns `Err(reason)` when the schema cannot be expressed in strict mode at all.
pub fn openai_strict(schema: &Value) -> Result<(Value, Vec<String>), String> {
    let mut strict = OpenAiStrict {
        walk: Walk::new(schema)?,
        properties: 0,
        enum_values: 0,
        chars: 0,
    };
    check_object_root(schema)?;
    let out = strict.node(schema, "", 1, 0)?;
    Ok((out, strict.walk.notes))
}

struct OpenAiStrict<'a> {
    walk: Walk<'a>,
    properties: usize,
    enum_values: usize,
    chars: usize,
}

impl OpenAiStrict<'_> {
    /// `objects`: how many object schemas enclose this one.
    fn node(&mut self, schema: &Value, path: &str, depth: usize, objects: usize) -> Result<Value, String> {
        self.walk.enter(path, depth)?;
        let map = as_schema(schema, path)?;
        if let Some(reference) = map.get("$ref")
            && map.len() > 1
        {
            return self.ref_with_siblings(map, reference, path, depth, objects);
        }
        if let Some(all_of) = map.get("allOf") {
            let merged = flatten_all_of(map, all_of, path, "OpenAI strict mode")?;
            self.walk.note(path, "single-entry allOf flattened (strict mode)");
            return self.node(&merged, path, depth + 1, objects);
        }
        reject_any_and_one_of(map, path)?;

        let types = types_of(map, path)?;
        let typeless_object = types.is_empty() && map.contains_key("properties");
        let is_object = types.contains(&"object") || typeless_object;
        if types.is_empty()
            && !typeless_object
            && !["anyOf", "oneOf", "$ref", "enum", "const"]
                .iter()
                .any(|k| map.contains_key(*k))
        {
            return Err(format!(
                "{}: the schema has no type, which strict mode requires",
                at(path)
            ));
        }
        let level = objects + usize::from(is_object);
        if level > OPENAI_MAX_OBJECT_NESTING {
            return Err(format!(
                "{}: objects are nested more than {OPENAI_MAX_OBJECT_NESTING} levels deep (strict mode limit)",
                at(path)
            ));
        }

        let mut out = Map::new();
        let mut dropped: Vec<String> = Vec::new();
        if typeless_object {
            out.insert("type".to_owned(), json!("object"));
            self.walk
                .note(path, "type object added to a schema with properties (strict mode)");
        }
        for (key, value) in map {
            let here = child(path, key);
            match key.as_str() {
                "properties" => {
                    let properties = self.properties(map, value, &here, depth, level)?;
                    out.insert(key.clone(), properties);
                }
                "required" | "additionalProperties" if is_object => {} // rewritten below
                "items" => {
                    out.insert(key.clone(), self.node(value, &here, depth + 1, level)?);
                }
                "prefixItems" | "anyOf" => {
                    out.insert(key.clone(), self.list(value, &here, depth, level)?);
                }
                "oneOf" => {
                    let branches = self.list(value, &child(path, "anyOf"), depth, level)?;
                    out.insert("anyOf".to_owned(), branches);
                    self.walk
                        .note(path, "oneOf rewritten as anyOf (strict mode has no oneOf)");
                }
                "$defs" | "definitions" => {
                    out.insert(key.clone(), self.defs(value, &here, depth)?);
                }
                "$ref" => {
                    let reference = value
                        .as_str()
                        .ok_or_else(|| format!("{}: $ref must be a string", at(path)))?;
                    self.walk.doc.resolve(reference)?;
                    out.insert(key.clone(), value.clone());
                }
                "enum" => {
                    self.count_enum(value, path)?;
                    out.insert(key.clone(), value.clone());
                }
                "const" => {
                    self.count_chars(value.as_str().map_or(0, str::len), path)?;
                    out.insert(key.clone(), value.clone());
                }
                "format" => match value.as_str() {
                    Some(format) if OPENAI_FORMATS.contains(&format) => {
                        out.insert(key.clone(), value.clone());
                    }
                    _ => dropped.push(format!("format {value}")),
                },
                k if OPENAI_KEYWORDS.contains(&k) => {
                    out.insert(key.clone(), value.clone());
                }
                _ => dropped.push(key.clone()),
            }
        }
        if !dropped.is_empty() {
            self.walk.note(
                path,
                format!("{} dropped (not supported in OpenAI strict mode)", dropped.join(", ")),
            );
        }
        if is_object {
            self.close_object(map, &mut out, path)?;
        }
        Ok(Value::Object(out))
    }

    /// `additionalProperties: false` and `required` = every property.
    fn close_object(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        path: &str,
    ) -> Result<(), String> {
        match map.get("additionalProperties") {
            Some(Value::Bool(false)) => {}
            None if map.contains_key("properties") => {
                self.walk.note(path, "object closed with additionalProperties: false (strict mode)");
            }
            None => self.walk.note(
                path,
                "object without properties closed with additionalProperties: false, so only {} can be sent (strict mode)",
            ),
            Some(_) => {
                return Err(format!(
                    "{}: the object allows additional properties, which strict mode cannot express",
                    at(path)
                ));
            }
        }
        if let Some(properties) = out.get("properties").and_then(Value::as_object) {
            let names = properties.keys().map(|k| Value::String(k.clone())).collect();
            out.insert("required".to_owned(), Value::Array(names));
        }
        out.insert("additionalProperties".to_owned(), Value::Bool(false));
        Ok(())
    }

    fn properties(
        &mut self,
        map: &Map<String, Value>,
        value: &Value,
        path: &str,
        depth: usize,
        level: usize,
    ) -> Result<Value, String> {
        let properties = as_map(value, path)?;
        self.properties += properties.len();
        if self.properties > OPENAI_MAX_PROPERTIES {
            return Err(format!(
                "the schema has more than {OPENAI_MAX_PROPERTIES} properties (strict mode limit)"
            ));
        }
        let required: HashSet<&str> = map
            .get("required")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut out = Map::new();
        for (name, property) in properties {
            self.count_chars(name.len(), path)?;
            let here = child(path, name);
            let mut schema = self.node(property, &here, depth + 1, level)?;
            if !required.contains(name.as_str()) {
                let changed;
                (schema, changed) = make_nullable(schema);
                let message = if changed {
                    "optional property made required and nullable (strict mode)"
                } else {
                    "optional property made required; it already accepts null (strict mode)"
                };
                self.walk.note(&here, message);
            }
            out.insert(name.clone(), schema);
        }
        Ok(Value::Object(out))
    }

    fn ref_with_siblings(
        &mut self,
        map: &Map<String, Value>,
        reference: &Value,
        path: &str,
        depth: usize,
        objects: usize,
    ) -> Result<Value, String> {
        let reference = reference
            .as_str()
            .ok_or_else(|| format!("{}: $ref must be a string", at(path)))?;
        let target = self.walk.doc.resolve(reference)?;
        if self.walk.doc.is_recursive(reference) {
            let siblings: Vec<&str> = map.keys().map(String::as_str).filter(|k| *k != "$ref").collect();
            self.walk.note(
                path,
                format!(
                    "{} dropped next to the recursive $ref {reference} (strict mode allows no $ref siblings)",
                    siblings.join(", ")
                ),
            );
            return Ok(json!({ "$ref": reference }));
        }
        let merged = overlay(target, map, "$ref", path)?;
        self.walk.note(
            path,
            format!("$ref {reference} inlined because it has sibling keywords (strict mode)"),
        );
        self.node(&merged, path, depth + 1, objects)
    }

    fn list(&mut self, value: &Value, path: &str, depth: usize, level: usize) -> Result<Value, String> {
        let branches = as_list(value, path)?;
        let mut out = Vec::with_capacity(branches.len());
        for (i, branch) in branches.iter().enumerate() {
            out.push(self.node(branch, &format!("{path}/{i}"), depth + 1, level)?);
        }
        Ok(Value::Array(out))
    }

    /// Definitions count their object nesting from themselves.
    fn defs(&mut self, value: &Value, path: &str, depth: usize) -> Result<Value, String> {
        let mut out = Map::new();
        for (name, def) in as_map(value, path)? {
            self.count_chars(name.len(), path)?;
            out.insert(name.clone(), self.node(def, &child(path, name), depth + 1, 0)?);
        }
        Ok(Value::Object(out))
    }

    fn count_enum(&mut self, value: &Value, path: &str) -> Result<(), String> {
        let values = value
            .as_array()
            .ok_or_else(|| format!("{}: enum must be an array", at(path)))?;
        self.enum_values += values.len();
        if self.enum_values > OPENAI_MAX_ENUM_VALUES {
            return Err(format!(
                "the schema has more than {OPENAI_MAX_ENUM_VALUES} enum values (strict mode limit)"
            ));
        }
        self.count_chars(values.iter().filter_map(Value::as_str).map(str::len).sum(), path)
    }

    fn count_chars(&mut self, n: usize, path: &str) -> Result<(), String> {
        self.chars += n;
        if self.chars > OPENAI_MAX_CHARS {
            return Err(format!(
                "{}: property names, definition names and enum/const values exceed \
                 {OPENAI_MAX_CHARS} characters (strict mode limit)",
                at(path)
            ));
        }
        Ok(())
    }
}

/// Makes a strict property schema accept `null`; the flag is false when it already did.
fn make_nullable(schema: Value) -> (Value, bool) {
    let Value::Object(mut map) = schema else {
        return (schema, false);
    };
    if accepts_null(&map) {
        return (Value::Object(map), false);
    }
    if !map.contains_key("const") {
        if let Some(ty) = map.get_mut("type") {
            match ty {
                Value::String(t) => {
                    let t = std::mem::take(t);
                    *ty = json!([t, "null"]);
                }
                Value::Array(types) if !types.contains(&json!("null")) => types.push(json!("null")),
                _ => {}
            }
            if let Some(Value::Array(values)) = map.get_mut("enum")
                && !values.contains(&Value::Null)
            {
                values.push(Value::Null);
            }
            return (Value::Object(map), true);
        }
        if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
            branches.push(json!({ "type": "null" }));
            return (Value::Object(map), true);
        }
        if !map.contains_key("$ref")
            && let Some(Value::Array(values)) = map.get_mut("enum")
        {
            values.push(Value::Null);
            return (Value::Object(map), true);
        }
    }
    // `$ref`, `const`, …: wrap, keeping the annotations on the outside.
    let mut outer = Map::new();
    for key in ["title", "description"] {
        if let Some(value) = map.shift_remove(key) {
            outer.insert(key.to_owned(), value);
        }
    }
    outer.insert("anyOf".to_owned(), json!([Value::Object(map), { "type": "null" }]));
    (Value::Object(outer), true)
}

fn accepts_null(map: &Map<String, Value>) -> bool {
    if let Some(value) = map.get("const") {
        return value.is_null();
    }
    let enum_allows = map
        .get("enum")
        .and_then(Value::as_array)
        .is_none_or(|values| values.contains(&Value::Null));
    if let Some(ty) = map.get("type") {
        let typed_null = match ty {
            Value::String(t) => t == "null",
            Value::Array(types) => types.contains(&json!("null")),
            _ => false,
        };
        return typed_null && enum_allows;
    }
    if let Some(branches) = map.get("anyOf").and_then(Value::as_array) {
        return enum_allows && branches.iter().any(|b| b.as_object().is_some_and(accepts_null));
    }
    map.contains_key("enum") && enum_allows
}
