//! JSON-Schema transforms shared by the `declare` step of several providers
//! (see `docs/providers.md#schema-dialects`).
//!
//! Every function is pure: it takes the canonical model-visible schema (object root) and returns
//! the transformed copy plus one note per change, or `Err(reason)` when the schema cannot be
//! expressed in the dialect at all (the caller then declares the tool another way or leaves it
//! out). A note is one sentence that starts with the JSON pointer it concerns, in the *output*
//! schema (`(root)` for the root), e.g.
//! `/properties/units: optional property made required and nullable (strict mode)`.
//!
//! # Dialects
//!
//! **OpenAI strict** ([`openai_strict`], Chat and Responses, `docs/providers.md#openai-strict`).
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
//!
//! **Anthropic strict** ([`anthropic_strict`], `docs/providers.md#anthropic-strict`). Follows the
//! SDK's `transform_schema`: types, `enum`, `const`, `anyOf` (`oneOf` rewritten to it), `allOf`,
//! `$defs`/`$ref`, `description`, `title` are kept, objects are always closed, string `format` is
//! kept only in the supported list and array `minItems` only when 0 or 1; every other keyword is
//! removed and appended to `description` as text (`"(minimum: 1; maximum: 10)"`) so the model may
//! still follow it. Differences from the SDK: `$schema`/`$id`/`$comment` are dropped rather than
//! written into the description; a `$ref` with siblings becomes `allOf: [{"$ref"}]` plus the
//! siblings (the SDK silently drops them, losing the description); type arrays are kept and each
//! member type gets its type-specific handling. Recursion anywhere in the schema is an `Err`
//! (documented as unsupported).
//!
//! **Gemini OpenAPI subset** ([`gemini_openapi`], the `parameters` form,
//! `docs/providers.md#gemini-openapi-subset`). `parameters` is a fixed OpenAPI-3.0 subset, so the
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
//!
//! # Robustness
//!
//! Before any walk, the input is scanned once without recursion: raw JSON nesting deeper than
//! 256 levels is an `Err` (so no later clone, walk or drop can overflow the stack), and the
//! `$ref` graph is analysed for cycles. Walkers stop at 64 schema levels and 20 000 produced
//! subschemas (bounding the blow-up of inlining shared definitions). Only local references
//! (`#`, `#/$defs/…`, any `#/…` JSON pointer) are resolved; percent-encoded pointers are not.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Display;

use serde_json::{Map, Value, json};

use super::Provider;

/// Schema levels a walker descends (each `properties/x`, `items`, `anyOf/i`, inlined `$ref`, …).
const MAX_DEPTH: usize = 64;
/// Raw JSON nesting accepted on input, checked without recursion before anything else.
const MAX_VALUE_DEPTH: usize = 256;
/// Subschemas one transform may produce; bounds the blow-up of inlining shared `$ref`s.
const MAX_NODES: usize = 20_000;
/// `$ref`s in one schema; bounds the cycle analysis, which is quadratic in their number.
const MAX_REFS: usize = 1_000;

const JSON_TYPES: [&str; 7] = ["object", "array", "string", "integer", "number", "boolean", "null"];
/// Schema metadata that carries no constraint; dropped rather than described.
const METADATA_KEYWORDS: [&str; 3] = ["$schema", "$id", "$comment"];

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

/// Checks a tool name against a provider's name rule; `Err(reason)` if it does not fit.
///
/// Every provider accepts `^[a-zA-Z0-9_-]{1,64}$` (`docs/providers.md#declarations`); Gemini also
/// requires a letter or an underscore first (it would allow `.`, `:` and 128 characters, which
/// the common rule already excludes).
pub fn check_name(provider: Provider, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{provider} requires a non-empty tool name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "tool name {name:?} contains {c:?}; {provider} allows only letters, digits, '_' and '-'"
        ));
    }
    if name.len() > 64 {
        return Err(format!(
            "tool name {name:?} is {} characters long; {provider} allows at most 64",
            name.len()
        ));
    }
    if provider == Provider::Gemini && !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return Err(format!(
            "tool name {name:?} must start with a letter or an underscore for {provider}"
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Shared analysis and helpers

/// What every transform needs to know about the whole input, gathered once without recursion.
struct Doc<'a> {
    root: &'a Value,
    /// `$ref` targets (JSON pointers without the leading `#`) from which a reference cycle can
    /// be reached: expanding them would never end.
    cyclic: HashSet<String>,
}

impl<'a> Doc<'a> {
    /// Checks the raw nesting depth and collects every local `$ref` with its location.
    fn analyse(root: &'a Value) -> Result<Self, String> {
        let mut refs: Vec<(String, String)> = Vec::new();
        let mut stack: Vec<(&Value, String, usize)> = vec![(root, String::new(), 1)];
        while let Some((value, location, depth)) = stack.pop() {
            if depth > MAX_VALUE_DEPTH {
                return Err(format!("the schema is nested more than {MAX_VALUE_DEPTH} levels deep"));
            }
            match value {
                Value::Object(map) => {
                    let target = map
                        .get("$ref")
                        .and_then(Value::as_str)
                        .and_then(|r| r.strip_prefix('#'));
                    if let Some(target) = target {
                        if refs.len() == MAX_REFS {
                            return Err(format!("the schema has more than {MAX_REFS} $ref"));
                        }
                        refs.push((location.clone(), target.to_owned()));
                    }
                    for (key, child) in map {
                        stack.push((child, format!("{location}/{}", escape(key)), depth + 1));
                    }
                }
                Value::Array(items) => {
                    for (i, child) in items.iter().enumerate() {
                        stack.push((child, format!("{location}/{i}"), depth + 1));
                    }
                }
                _ => {}
            }
        }
        Ok(Doc {
            root,
            cyclic: cyclic_targets(&refs),
        })
    }

    fn resolve(&self, reference: &str) -> Result<&'a Value, String> {
        let pointer = reference
            .strip_prefix('#')
            .ok_or_else(|| format!("$ref {reference:?} is not local (only \"#…\" references are supported)"))?;
        self.root
            .pointer(pointer)
            .ok_or_else(|| format!("$ref {reference:?} does not resolve"))
    }

    fn is_recursive(&self, reference: &str) -> bool {
        reference.strip_prefix('#').is_some_and(|p| self.cyclic.contains(p))
    }
}

/// The targets from which a `$ref` cycle is reachable. Target `T` has an edge to `U` when a
/// `$ref` to `U` lies inside `T`; nodes that only lead to dead ends are peeled off repeatedly
/// and whatever remains reaches a cycle.
fn cyclic_targets(refs: &[(String, String)]) -> HashSet<String> {
    let targets: BTreeSet<&str> = refs.iter().map(|(_, target)| target.as_str()).collect();
    let edges: HashMap<&str, Vec<&str>> = targets
        .iter()
        .map(|&t| {
            let out = refs
                .iter()
                .filter(|(loc, _)| is_within(loc, t))
                .map(|(_, u)| u.as_str());
            (t, out.collect())
        })
        .collect();
    let mut live = targets;
    loop {
        let dead_ends: Vec<&str> = live
            .iter()
            .copied()
            .filter(|t| edges.get(t).is_none_or(|out| out.iter().all(|u| !live.contains(u))))
            .collect();
        if dead_ends.is_empty() {
            break;
        }
        for t in dead_ends {
            live.remove(t);
        }
    }
    live.into_iter().map(str::to_owned).collect()
}

/// Whether JSON pointer `location` is `ancestor` itself or lies inside it.
fn is_within(location: &str, ancestor: &str) -> bool {
    location
        .strip_prefix(ancestor)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// State shared by the three walkers: the analysed input, the notes, the node budget.
struct Walk<'a> {
    doc: Doc<'a>,
    notes: Vec<String>,
    nodes: usize,
}

impl<'a> Walk<'a> {
    fn new(schema: &'a Value) -> Result<Self, String> {
        Ok(Walk {
            doc: Doc::analyse(schema)?,
            notes: Vec::new(),
            nodes: 0,
        })
    }

    /// Called on entering every subschema: enforces the depth and size bounds.
    fn enter(&mut self, path: &str, depth: usize) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err(format!(
                "{}: the schema is nested more than {MAX_DEPTH} levels deep",
                at(path)
            ));
        }
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(format!(
                "the schema has more than {MAX_NODES} subschemas (after inlining $ref)"
            ));
        }
        Ok(())
    }

    fn note(&mut self, path: &str, message: impl Display) {
        self.notes.push(format!("{}: {message}", at(path)));
    }
}

/// A JSON pointer for notes and errors; the root (`""`) is spelled out.
fn at(path: &str) -> &str {
    if path.is_empty() { "(root)" } else { path }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn child(path: &str, key: &str) -> String {
    format!("{path}/{}", escape(key))
}

fn as_schema<'v>(schema: &'v Value, path: &str) -> Result<&'v Map<String, Value>, String> {
    schema.as_object().ok_or_else(|| {
        let found = match schema {
            Value::Null => "null",
            Value::Bool(_) => "a boolean schema",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        format!("{}: expected a schema object, found {found}", at(path))
    })
}

fn as_list<'v>(value: &'v Value, path: &str) -> Result<&'v Vec<Value>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{}: expected an array of schemas", at(path)))
}

fn as_map<'v>(value: &'v Value, path: &str) -> Result<&'v Map<String, Value>, String> {
    value
        .as_object()
        .ok_or_else(|| format!("{}: expected an object of schemas", at(path)))
}

/// The `type` keyword as a list (empty when absent); unknown type names are an error.
fn types_of<'v>(map: &'v Map<String, Value>, path: &str) -> Result<Vec<&'v str>, String> {
    let bad = || format!("{}: type must be a JSON type name or an array of them", at(path));
    let names: Vec<&str> = match map.get("type") {
        None => return Ok(Vec::new()),
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .map(|t| t.as_str().ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    match names.iter().find(|t| !JSON_TYPES.contains(t)) {
        Some(unknown) => Err(format!("{}: unknown type {unknown:?}", at(path))),
        None => Ok(names),
    }
}

/// The root must be an object schema (`type: "object"`, or `properties` without a type).
fn check_object_root(schema: &Value) -> Result<(), String> {
    let map = as_schema(schema, "")?;
    let object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        None => map.contains_key("properties"),
        Some(_) => false,
    };
    if object && !["anyOf", "oneOf", "$ref"].iter().any(|k| map.contains_key(*k)) {
        Ok(())
    } else {
        Err("the root schema must be a plain object schema (\"type\": \"object\")".to_owned())
    }
}

/// `base` with every key of `over` (except `skip`) written over it.
fn overlay(base: &Value, over: &Map<String, Value>, skip: &str, path: &str) -> Result<Value, String> {
    let mut merged = as_schema(base, path)?.clone();
    for (key, value) in over {
        if key != skip {
            merged.insert(key.clone(), value.clone());
        }
    }
    Ok(Value::Object(merged))
}

/// A node whose single `allOf` entry is merged into it (the node's own keywords win);
/// several entries cannot be merged without loss.
fn flatten_all_of(map: &Map<String, Value>, all_of: &Value, path: &str, dialect: &str) -> Result<Value, String> {
    match all_of.as_array().map(Vec::as_slice) {
        Some([only]) => overlay(only, map, "allOf", path),
        Some(entries) => Err(format!(
            "{}: allOf with {} entries cannot be expressed in {dialect}",
            at(path),
            entries.len()
        )),
        None => Err(format!("{}: allOf must be an array", at(path))),
    }
}

fn reject_any_and_one_of(map: &Map<String, Value>, path: &str) -> Result<(), String> {
    if map.contains_key("anyOf") && map.contains_key("oneOf") {
        return Err(format!(
            "{}: anyOf and oneOf on the same schema cannot be combined",
            at(path)
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OpenAI strict

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

// ---------------------------------------------------------------------------------------------
// Anthropic strict

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

// ---------------------------------------------------------------------------------------------
// Gemini OpenAPI subset

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

#[cfg(test)]
mod tests {
    use super::*;

    type Transform = fn(&Value) -> Result<(Value, Vec<String>), String>;

    /// Runs a transform that must succeed.
    fn ok(f: Transform, schema: Value) -> (Value, Vec<String>) {
        match f(&schema) {
            Ok(done) => done,
            Err(e) => panic!("unexpected Err: {e}"),
        }
    }

    fn err(f: Transform, schema: Value) -> String {
        match f(&schema) {
            Ok((out, _)) => panic!("expected Err, got {out}"),
            Err(e) => e,
        }
    }

    fn has_note(notes: &[String], path: &str, words: &str) -> bool {
        notes
            .iter()
            .any(|n| n.starts_with(&format!("{path}: ")) && n.contains(words))
    }

    #[track_caller]
    fn assert_note(notes: &[String], path: &str, words: &str) {
        assert!(
            has_note(notes, path, words),
            "no note at {path} containing {words:?} in {notes:#?}"
        );
    }

    fn object(properties: Value, required: Value) -> Value {
        json!({ "type": "object", "properties": properties, "required": required })
    }

    fn kitchen_sink() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "create_order",
            "type": "object",
            "description": "Create an order for a customer.",
            "properties": {
                "customer": { "$ref": "#/$defs/customer", "description": "Who pays." },
                "ship_to": { "$ref": "#/$defs/address" },
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 50,
                    "items": {
                        "type": "object",
                        "properties": {
                            "sku": { "type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$" },
                            "quantity": { "type": "integer", "minimum": 1, "maximum": 100, "default": 1 },
                            "gift_wrap": { "type": "boolean", "default": false }
                        },
                        "required": ["sku"]
                    }
                },
                "priority": { "type": "integer", "enum": [1, 2, 3], "description": "1 = highest." },
                "channel": { "type": "string", "enum": ["web", "phone", "store"] },
                "notes": { "type": ["string", "null"], "maxLength": 500, "default": null },
                "deliver_after": { "type": "string", "format": "date-time" },
                "coupon": { "anyOf": [{ "type": "string", "minLength": 4 }, { "type": "null" }] },
                "payment": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": { "card_token": { "type": "string" } },
                            "required": ["card_token"]
                        },
                        {
                            "type": "object",
                            "properties": { "invoice_email": { "type": "string", "format": "email" } },
                            "required": ["invoice_email"]
                        }
                    ]
                },
                "callback_url": { "type": "string", "format": "uri" },
                "currency": { "const": "EUR" }
            },
            "required": ["customer", "items", "currency"],
            "$defs": {
                "address": {
                    "type": "object",
                    "properties": {
                        "street": { "type": "string" },
                        "city": { "type": "string" },
                        "postcode": { "type": "string", "pattern": "^[0-9]{5}$" }
                    },
                    "required": ["street", "city"]
                },
                "customer": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "string", "format": "uuid" },
                        "email": { "type": "string", "format": "email" },
                        "billing": { "$ref": "#/$defs/address" }
                    },
                    "required": ["id"],
                    "additionalProperties": false
                }
            }
        })
    }

    fn recursive_def() -> Value {
        json!({
            "type": "object",
            "properties": { "tree": { "$ref": "#/$defs/node" } },
            "required": ["tree"],
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "label": { "type": "string" },
                        "children": { "type": "array", "items": { "$ref": "#/$defs/node" } }
                    },
                    "required": ["label", "children"],
                    "additionalProperties": false
                }
            },
            "additionalProperties": false
        })
    }

    /// `levels` objects, each with one property `a` holding the next.
    fn nested(levels: usize) -> Value {
        let mut schema = json!({ "type": "string" });
        for _ in 0..levels {
            // Moved in, not interpolated: `json!` would re-serialize the whole value each time.
            let mut object = Map::new();
            object.insert("type".to_owned(), json!("object"));
            object.insert(
                "properties".to_owned(),
                Value::Object(Map::from_iter([("a".to_owned(), schema)])),
            );
            object.insert("required".to_owned(), json!(["a"]));
            schema = Value::Object(object);
        }
        schema
    }

    // ---- snapshots -------------------------------------------------------------------------

    #[test]
    fn kitchen_sink_openai_strict() {
        let (schema, notes) = ok(openai_strict, kitchen_sink());
        insta::assert_json_snapshot!(json!({ "schema": schema, "notes": notes }));
    }

    #[test]
    fn kitchen_sink_anthropic_strict() {
        let (schema, notes) = ok(anthropic_strict, kitchen_sink());
        insta::assert_json_snapshot!(json!({ "schema": schema, "notes": notes }));
    }

    #[test]
    fn kitchen_sink_gemini_openapi() {
        let (schema, notes) = ok(gemini_openapi, kitchen_sink());
        insta::assert_json_snapshot!(json!({ "schema": schema, "notes": notes }));
    }

    // ---- OpenAI strict ---------------------------------------------------------------------

    #[test]
    fn openai_conforming_schema_is_unchanged() {
        // OpenAI's own strict declaration example is already strict.
        let schema = json!({
            "type": "object",
            "properties": {
                "city": { "type": "string" },
                "units": { "type": ["string", "null"], "enum": ["c", "f", null] }
            },
            "required": ["city", "units"],
            "additionalProperties": false
        });
        let (out, notes) = ok(openai_strict, schema.clone());
        assert_eq!(out, schema);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn openai_closes_objects_and_makes_optional_properties_nullable() {
        let schema = object(
            json!({
                "city": { "type": "string" },
                "units": { "type": "string", "enum": ["c", "f"] },
                "when": { "anyOf": [{ "type": "string" }, { "type": "integer" }] },
                "level": { "enum": [1, 2] }
            }),
            json!(["city"]),
        );
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "city": { "type": "string" },
                    "units": { "type": ["string", "null"], "enum": ["c", "f", null] },
                    "when": { "anyOf": [{ "type": "string" }, { "type": "integer" }, { "type": "null" }] },
                    "level": { "enum": [1, 2, null] }
                },
                "required": ["city", "units", "when", "level"],
                "additionalProperties": false
            })
        );
        assert_note(&notes, "(root)", "additionalProperties: false");
        for p in ["units", "when", "level"] {
            assert_note(
                &notes,
                &format!("/properties/{p}"),
                "optional property made required and nullable",
            );
        }
        assert!(!has_note(&notes, "/properties/city", "optional"));
    }

    #[test]
    fn openai_wraps_optional_ref_and_const_in_any_of() {
        let schema = json!({
            "type": "object",
            "properties": {
                "home": { "$ref": "#/$defs/place" },
                "mode": { "const": "fast", "description": "Speed." }
            },
            "$defs": { "place": { "type": "object", "properties": {}, "additionalProperties": false } }
        });
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out["properties"]["home"],
            json!({ "anyOf": [{ "$ref": "#/$defs/place" }, { "type": "null" }] })
        );
        assert_eq!(
            out["properties"]["mode"],
            json!({ "description": "Speed.", "anyOf": [{ "const": "fast" }, { "type": "null" }] })
        );
        assert_note(&notes, "/properties/home", "made required and nullable");
        assert_note(&notes, "/properties/mode", "made required and nullable");
    }

    #[test]
    fn openai_optional_property_that_accepts_null_is_only_made_required() {
        let schema = object(json!({ "n": { "type": ["integer", "null"] } }), json!([]));
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(out["properties"]["n"], json!({ "type": ["integer", "null"] }));
        assert_eq!(out["required"], json!(["n"]));
        assert_note(&notes, "/properties/n", "already accepts null");
    }

    #[test]
    fn openai_rejects_objects_that_allow_additional_properties() {
        for extra in [json!(true), json!({ "type": "string" })] {
            let schema = json!({
                "type": "object",
                "properties": { "tags": { "type": "object", "additionalProperties": extra } }
            });
            let e = err(openai_strict, schema);
            assert!(
                e.starts_with("/properties/tags: ") && e.contains("additional properties"),
                "{e}"
            );
        }
    }

    #[test]
    fn openai_inlines_ref_with_siblings() {
        let schema = json!({
            "type": "object",
            "properties": { "to": { "$ref": "#/definitions/addr", "description": "Destination." } },
            "required": ["to"],
            "definitions": { "addr": { "type": "object", "properties": { "city": { "type": "string" } } } }
        });
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out["properties"]["to"],
            json!({
                "type": "object",
                "properties": { "city": { "type": ["string", "null"] } },
                "description": "Destination.",
                "required": ["city"],
                "additionalProperties": false
            })
        );
        assert_note(&notes, "/properties/to", "$ref #/definitions/addr inlined");
        assert_note(&notes, "/definitions/addr", "additionalProperties: false");
    }

    #[test]
    fn openai_flattens_single_all_of_and_rejects_several() {
        let schema = object(
            json!({ "n": { "allOf": [{ "type": "integer", "minimum": 0 }], "description": "Count." } }),
            json!(["n"]),
        );
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out["properties"]["n"],
            json!({ "type": "integer", "minimum": 0, "description": "Count." })
        );
        assert_note(&notes, "/properties/n", "allOf flattened");

        let schema = object(
            json!({ "n": { "allOf": [{ "type": "integer" }, { "minimum": 0 }] } }),
            json!(["n"]),
        );
        assert!(err(openai_strict, schema).contains("allOf with 2 entries"));
    }

    #[test]
    fn openai_drops_unsupported_keywords_and_formats() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "name": { "type": "string", "minLength": 1, "format": "uri", "default": null, "not": { "const": "x" } },
                "day": { "type": "string", "format": "date" },
                "tags": { "type": "array", "items": { "type": "string" }, "uniqueItems": true, "maxItems": 5 }
            },
            "required": ["name", "day", "tags"],
            "additionalProperties": false,
            "minProperties": 1
        });
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(out["properties"]["name"], json!({ "type": "string" }));
        assert_eq!(out["properties"]["day"], json!({ "type": "string", "format": "date" }));
        assert_eq!(
            out["properties"]["tags"],
            json!({ "type": "array", "items": { "type": "string" }, "maxItems": 5 })
        );
        assert!(out.get("$schema").is_none() && out.get("minProperties").is_none());
        assert_note(
            &notes,
            "/properties/name",
            "minLength, format \"uri\", default, not dropped",
        );
        assert_note(&notes, "/properties/tags", "uniqueItems dropped");
        assert_note(&notes, "(root)", "$schema, minProperties dropped");
    }

    #[test]
    fn openai_rewrites_one_of_as_any_of() {
        let schema = object(
            json!({ "id": { "oneOf": [{ "type": "string" }, { "type": "integer" }] } }),
            json!(["id"]),
        );
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out["properties"]["id"],
            json!({ "anyOf": [{ "type": "string" }, { "type": "integer" }] })
        );
        assert_note(&notes, "/properties/id", "oneOf rewritten as anyOf");
    }

    #[test]
    fn openai_requires_object_root_and_typed_schemas() {
        assert!(err(openai_strict, json!({ "type": "string" })).contains("root"));
        assert!(err(openai_strict, json!({ "anyOf": [{ "type": "object" }] })).contains("root"));
        let untyped = object(json!({ "x": { "description": "anything" } }), json!(["x"]));
        assert!(err(openai_strict, untyped).starts_with("/properties/x: "));
    }

    #[test]
    fn openai_limits_object_nesting_to_ten_levels() {
        assert!(openai_strict(&nested(10)).is_ok());
        let e = err(openai_strict, nested(11));
        assert!(e.contains("more than 10 levels"), "{e}");
    }

    #[test]
    fn openai_limits_enum_values() {
        let values: Vec<Value> = (0..1001).map(|i| json!(i)).collect();
        let schema = object(json!({ "n": { "type": "integer", "enum": values } }), json!(["n"]));
        assert!(err(openai_strict, schema).contains("1000 enum values"));
    }

    // ---- Anthropic strict ------------------------------------------------------------------

    #[test]
    fn anthropic_moves_constraints_into_description() {
        let schema = object(
            json!({
                "n": { "type": "integer", "minimum": 1, "maximum": 10, "description": "Count." },
                "code": { "type": "string", "pattern": "^[A-Z]+$", "maxLength": 8 }
            }),
            json!(["n", "code"]),
        );
        let (out, notes) = ok(anthropic_strict, schema);
        assert_eq!(
            out["properties"]["n"],
            json!({ "type": "integer", "description": "Count. (minimum: 1; maximum: 10)" })
        );
        assert_eq!(
            out["properties"]["code"],
            json!({ "type": "string", "description": "(pattern: \"^[A-Z]+$\"; maxLength: 8)" })
        );
        assert_note(&notes, "/properties/n", "minimum, maximum moved into the description");
        assert_note(
            &notes,
            "/properties/code",
            "pattern, maxLength moved into the description",
        );
    }

    #[test]
    fn anthropic_filters_formats_and_min_items() {
        let schema = object(
            json!({
                "site": { "type": "string", "format": "uri" },
                "ip": { "type": "string", "format": "ipv4" },
                "card": { "type": "string", "format": "credit-card" },
                "one": { "type": "array", "items": { "type": "string" }, "minItems": 1 },
                "five": { "type": "array", "items": { "type": "string" }, "minItems": 5 }
            }),
            json!(["site", "ip", "card", "one", "five"]),
        );
        let (out, notes) = ok(anthropic_strict, schema);
        let p = &out["properties"];
        assert_eq!(p["site"], json!({ "type": "string", "format": "uri" }));
        assert_eq!(p["ip"], json!({ "type": "string", "format": "ipv4" }));
        assert_eq!(
            p["card"],
            json!({ "type": "string", "description": "(format: \"credit-card\")" })
        );
        assert_eq!(p["one"]["minItems"], json!(1));
        assert_eq!(
            p["five"],
            json!({ "type": "array", "items": { "type": "string" }, "description": "(minItems: 5)" })
        );
        assert_note(&notes, "/properties/card", "format moved");
        assert_note(&notes, "/properties/five", "minItems moved");
    }

    #[test]
    fn anthropic_closes_every_object() {
        let schema = json!({
            "type": "object",
            "properties": {
                "open": { "type": "object", "additionalProperties": true },
                "inner": { "type": "object", "properties": { "a": { "type": "boolean" } } }
            },
            "additionalProperties": false
        });
        let (out, notes) = ok(anthropic_strict, schema);
        assert_eq!(
            out["properties"]["open"],
            json!({ "type": "object", "additionalProperties": false })
        );
        assert_eq!(out["properties"]["inner"]["additionalProperties"], json!(false));
        assert_eq!(out["additionalProperties"], json!(false));
        assert_note(&notes, "/properties/open", "additional properties no longer allowed");
        assert_note(&notes, "/properties/inner", "object closed");
        assert!(!has_note(&notes, "(root)", "closed"));
    }

    #[test]
    fn anthropic_keeps_supported_keywords_and_rewrites_one_of() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "title": "t",
            "properties": {
                "id": { "oneOf": [{ "type": "string" }, { "type": "integer" }] },
                "kind": { "enum": ["a", "b"] },
                "fixed": { "const": 3 },
                "both": { "allOf": [{ "$ref": "#/$defs/x" }] },
                "to": { "$ref": "#/$defs/x", "description": "Target." }
            },
            "required": ["id"],
            "additionalProperties": false,
            "$defs": { "x": { "type": "null" } }
        });
        let (out, notes) = ok(anthropic_strict, schema);
        let p = &out["properties"];
        assert_eq!(
            p["id"],
            json!({ "anyOf": [{ "type": "string" }, { "type": "integer" }] })
        );
        assert_eq!(p["kind"], json!({ "enum": ["a", "b"] }));
        assert_eq!(p["fixed"], json!({ "const": 3 }));
        assert_eq!(p["both"], json!({ "allOf": [{ "$ref": "#/$defs/x" }] }));
        assert_eq!(
            p["to"],
            json!({ "allOf": [{ "$ref": "#/$defs/x" }], "description": "Target." })
        );
        assert_eq!(out["required"], json!(["id"]));
        assert!(out.get("$schema").is_none());
        assert_note(&notes, "/properties/id", "oneOf rewritten as anyOf");
        assert_note(&notes, "/properties/to", "wrapped in allOf");
        assert_note(&notes, "(root)", "$schema dropped");
    }

    #[test]
    fn anthropic_requires_a_type_or_combinator() {
        let schema = object(json!({ "x": { "description": "anything" } }), json!(["x"]));
        assert!(err(anthropic_strict, schema).starts_with("/properties/x: "));
    }

    // ---- Gemini OpenAPI --------------------------------------------------------------------

    #[test]
    fn gemini_upper_cases_types_and_turns_null_into_nullable() {
        let schema = object(
            json!({
                "city": { "type": "string" },
                "unit": { "type": ["string", "null"], "enum": ["c", "f"] },
                "when": { "anyOf": [{ "type": "integer" }, { "type": "null" }], "description": "Epoch." },
                "either": { "type": ["string", "integer"] }
            }),
            json!(["city"]),
        );
        let (out, notes) = ok(gemini_openapi, schema);
        assert_eq!(
            out,
            json!({
                "type": "OBJECT",
                "properties": {
                    "city": { "type": "STRING" },
                    "unit": { "type": "STRING", "enum": ["c", "f"], "nullable": true },
                    "when": { "type": "INTEGER", "description": "Epoch.", "nullable": true },
                    "either": { "anyOf": [{ "type": "STRING" }, { "type": "INTEGER" }] }
                },
                "required": ["city"]
            })
        );
        assert_note(&notes, "/properties/unit", "nullable: true");
        assert_note(&notes, "/properties/when", "anyOf with a null branch collapsed");
        assert_note(&notes, "/properties/either", "rewritten as anyOf");
    }

    #[test]
    fn gemini_inlines_defs_and_removes_unsupported_keywords() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "who": { "$ref": "#/$defs/person", "description": "Attendee." },
                "n": { "type": "number", "exclusiveMinimum": 0, "maximum": 5 }
            },
            "required": ["who"],
            "additionalProperties": false,
            "$defs": {
                "person": {
                    "type": "object",
                    "properties": { "email": { "type": "string", "format": "email" } },
                    "required": ["email"],
                    "additionalProperties": false
                }
            }
        });
        let (out, notes) = ok(gemini_openapi, schema);
        assert_eq!(
            out,
            json!({
                "type": "OBJECT",
                "properties": {
                    "who": {
                        "type": "OBJECT",
                        "properties": { "email": { "type": "STRING" } },
                        "required": ["email"],
                        "description": "Attendee."
                    },
                    "n": { "type": "NUMBER", "maximum": 5 }
                },
                "required": ["who"]
            })
        );
        assert_note(&notes, "/properties/who", "$ref #/$defs/person inlined");
        assert_note(&notes, "/properties/who", "additionalProperties removed");
        assert_note(&notes, "/properties/who/properties/email", "format \"email\" removed");
        assert_note(&notes, "/properties/n", "exclusiveMinimum removed");
        assert_note(&notes, "(root)", "$schema, additionalProperties removed");
        assert_note(&notes, "(root)", "$defs removed (references inlined)");
    }

    #[test]
    fn gemini_rewrites_const_and_stringifies_enums() {
        let schema = object(
            json!({
                "mode": { "const": "fast" },
                "level": { "type": "integer", "enum": [1, 2, null], "default": 1 },
                "flag": { "enum": [true, false] }
            }),
            json!([]),
        );
        let (out, notes) = ok(gemini_openapi, schema);
        let p = &out["properties"];
        assert_eq!(p["mode"], json!({ "enum": ["fast"], "type": "STRING" }));
        assert_eq!(
            p["level"],
            json!({ "type": "STRING", "enum": ["1", "2"], "default": "1", "nullable": true })
        );
        assert_eq!(p["flag"], json!({ "enum": ["true", "false"], "type": "STRING" }));
        assert_note(&notes, "/properties/mode", "const rewritten as a one-value enum");
        assert_note(&notes, "/properties/level", "enum values converted to strings");
        assert_note(&notes, "/properties/level", "type set to STRING");
        assert_note(&notes, "/properties/level", "null removed from the enum");
    }

    #[test]
    fn gemini_rewrites_one_of_and_merges_single_all_of() {
        let schema = object(
            json!({
                "id": { "oneOf": [{ "type": "string" }, { "type": "integer" }] },
                "n": { "allOf": [{ "type": "integer" }], "description": "Count." }
            }),
            json!(["id", "n"]),
        );
        let (out, notes) = ok(gemini_openapi, schema);
        assert_eq!(
            out["properties"]["id"],
            json!({ "anyOf": [{ "type": "STRING" }, { "type": "INTEGER" }] })
        );
        assert_eq!(
            out["properties"]["n"],
            json!({ "type": "INTEGER", "description": "Count." })
        );
        assert_note(&notes, "/properties/id", "oneOf rewritten as anyOf");
        assert_note(&notes, "/properties/n", "allOf merged");

        let schema = object(
            json!({ "n": { "allOf": [{ "type": "integer" }, { "minimum": 1 }] } }),
            json!([]),
        );
        assert!(err(gemini_openapi, schema).contains("allOf with 2 entries"));
    }

    #[test]
    fn gemini_rejects_a_type_array_next_to_any_of() {
        for schema in [
            json!({ "type": ["string", "integer"], "anyOf": [{ "minLength": 1 }] }),
            json!({ "anyOf": [{ "minLength": 1 }], "type": ["string", "integer"] }),
        ] {
            let e = err(gemini_openapi, object(json!({ "x": schema }), json!([])));
            assert!(e.contains("type array next to anyOf"), "{e}");
        }
    }

    #[test]
    fn gemini_keeps_only_supported_formats() {
        let schema = object(
            json!({
                "at": { "type": "string", "format": "date-time" },
                "id": { "type": "string", "format": "uuid" },
                "x": { "type": "number", "format": "double" },
                "n": { "type": "integer", "format": "int64" }
            }),
            json!([]),
        );
        let (out, notes) = ok(gemini_openapi, schema);
        let p = &out["properties"];
        assert_eq!(p["at"]["format"], json!("date-time"));
        assert_eq!(p["id"], json!({ "type": "STRING" }));
        assert_eq!(p["x"]["format"], json!("double"));
        assert_eq!(p["n"]["format"], json!("int64"));
        assert_note(&notes, "/properties/id", "format \"uuid\" removed");
    }

    // ---- recursion and pathological input --------------------------------------------------

    #[test]
    fn recursive_def_is_kept_by_openai_and_rejected_by_the_others() {
        let (out, notes) = ok(openai_strict, recursive_def());
        assert_eq!(
            out["$defs"]["node"]["properties"]["children"]["items"],
            json!({ "$ref": "#/$defs/node" })
        );
        assert_eq!(out["properties"]["tree"], json!({ "$ref": "#/$defs/node" }));
        assert!(notes.is_empty(), "{notes:?}");

        assert_eq!(
            err(anthropic_strict, recursive_def()),
            "recursive schemas are not supported in Anthropic strict mode"
        );
        assert!(err(gemini_openapi, recursive_def()).contains("recursive $ref (#/$defs/node)"));
    }

    #[test]
    fn root_recursion_is_kept_by_openai_and_rejected_by_the_others() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": { "type": "string" },
                "next": { "$ref": "#", "description": "The rest of the list." }
            },
            "required": ["name"]
        });
        let (out, notes) = ok(openai_strict, schema.clone());
        assert_eq!(
            out["properties"]["next"],
            json!({ "anyOf": [{ "$ref": "#" }, { "type": "null" }] })
        );
        assert_note(
            &notes,
            "/properties/next",
            "description dropped next to the recursive $ref #",
        );
        assert!(anthropic_strict(&schema).is_err());
        assert!(err(gemini_openapi, schema).contains("recursive $ref (#)"));
    }

    #[test]
    fn mutual_recursion_is_detected() {
        let schema = json!({
            "type": "object",
            "properties": { "a": { "$ref": "#/$defs/a" } },
            "$defs": {
                "a": { "type": "object", "properties": { "b": { "$ref": "#/$defs/b" } } },
                "b": { "type": "object", "properties": { "a": { "$ref": "#/$defs/a", "title": "A" } } }
            }
        });
        assert!(err(gemini_openapi, schema.clone()).contains("recursive"));
        assert!(anthropic_strict(&schema).is_err());
        let (out, notes) = ok(openai_strict, schema);
        assert_eq!(
            out["$defs"]["b"]["properties"]["a"]["anyOf"][0],
            json!({ "$ref": "#/$defs/a" })
        );
        assert_note(
            &notes,
            "/$defs/b/properties/a",
            "title dropped next to the recursive $ref",
        );
    }

    #[test]
    fn shared_defs_that_are_not_recursive_are_inlined_every_time() {
        let schema = json!({
            "type": "object",
            "properties": { "from": { "$ref": "#/$defs/p" }, "to": { "$ref": "#/$defs/p" } },
            "$defs": { "p": { "type": "string" } }
        });
        let (out, _) = ok(gemini_openapi, schema);
        assert_eq!(
            out["properties"],
            json!({ "from": { "type": "STRING" }, "to": { "type": "STRING" } })
        );
    }

    #[test]
    fn exponential_inlining_is_bounded() {
        // d0 → d1 twice → … : 2^30 copies if fully inlined.
        let mut defs = Map::new();
        for i in 0..30 {
            let next = format!("#/$defs/d{}", i + 1);
            defs.insert(
                format!("d{i}"),
                json!({ "type": "object", "properties": { "l": { "$ref": next }, "r": { "$ref": next } } }),
            );
        }
        defs.insert("d30".to_owned(), json!({ "type": "string" }));
        let schema = json!({ "type": "object", "properties": { "x": { "$ref": "#/$defs/d0" } }, "$defs": defs });
        assert!(err(gemini_openapi, schema).contains("subschemas"));
    }

    #[test]
    fn deeply_nested_input_is_an_error_without_stack_overflow() {
        // serde_json's own clone and drop of a 1000-level value recurse, so the input is built
        // and dropped on a big stack; the transforms run on a default-sized (2 MiB) thread.
        let outer = std::thread::Builder::new().stack_size(256 << 20).spawn(|| {
            let deep = nested(1000);
            let shallow = nested(70); // passes the raw scan, too deep for the walkers
            std::thread::scope(|scope| {
                let run = || {
                    for f in [openai_strict, anthropic_strict, gemini_openapi] {
                        let e = f(&deep).err().unwrap_or_default();
                        assert!(e.contains("nested more than 256 levels"), "{e}");
                    }
                    for f in [anthropic_strict, gemini_openapi] {
                        let e = f(&shallow).err().unwrap_or_default();
                        assert!(e.contains("nested more than 64 levels"), "{e}");
                    }
                };
                std::thread::Builder::new()
                    .stack_size(2 << 20)
                    .spawn_scoped(scope, run)
                    .map(|t| t.join())
            })
        });
        let result = outer.map(|t| t.join());
        assert!(matches!(result, Ok(Ok(Ok(Ok(()))))), "{result:?}");
    }

    #[test]
    fn values_just_under_the_depth_cap_are_safe_on_a_small_stack() {
        // A const/default 250 levels deep is cloned, serialized and dropped by the transforms.
        let outer = std::thread::Builder::new().stack_size(256 << 20).spawn(|| {
            let mut data = json!(1);
            for _ in 0..248 {
                data = Value::Array(vec![data]);
            }
            let mut property = Map::new();
            property.insert("type".to_owned(), json!("array"));
            property.insert("const".to_owned(), data.clone());
            property.insert("default".to_owned(), data);
            let schema = object(
                Value::Object(Map::from_iter([("x".to_owned(), Value::Object(property))])),
                json!(["x"]),
            );
            std::thread::scope(|scope| {
                let run = || {
                    for f in [openai_strict, anthropic_strict, gemini_openapi] {
                        assert!(f(&schema).is_ok());
                    }
                };
                std::thread::Builder::new()
                    .stack_size(2 << 20)
                    .spawn_scoped(scope, run)
                    .map(|t| t.join())
            })
        });
        let result = outer.map(|t| t.join());
        assert!(matches!(result, Ok(Ok(Ok(Ok(()))))), "{result:?}");
    }

    #[test]
    fn dangling_and_remote_refs_are_errors() {
        let dangling = object(json!({ "x": { "$ref": "#/$defs/missing" } }), json!(["x"]));
        let remote = object(json!({ "x": { "$ref": "https://example.com/s.json" } }), json!(["x"]));
        for f in [openai_strict, gemini_openapi] {
            assert!(err(f, dangling.clone()).contains("does not resolve"));
            assert!(err(f, remote.clone()).contains("not local"));
        }
    }

    #[test]
    fn boolean_subschemas_are_errors_not_panics() {
        let schema = object(json!({ "x": true }), json!(["x"]));
        for f in [openai_strict, anthropic_strict, gemini_openapi] {
            assert!(err(f, schema.clone()).contains("boolean schema"));
        }
    }

    // ---- names -----------------------------------------------------------------------------

    #[test]
    fn names_follow_the_common_rule() {
        for p in Provider::ALL {
            assert_eq!(check_name(p, "get_weather-2"), Ok(()));
            assert!(check_name(p, "").is_err());
            assert!(check_name(p, &"a".repeat(64)).is_ok());
            assert!(check_name(p, &"a".repeat(65)).unwrap_err().contains("at most 64"));
            assert!(check_name(p, "get.weather").unwrap_err().contains("'.'"));
            assert!(check_name(p, "wetter_für_stadt").is_err());
        }
    }

    #[test]
    fn gemini_names_start_with_a_letter_or_underscore() {
        assert!(check_name(Provider::Gemini, "_private").is_ok());
        for name in ["2fa_code", "-dash"] {
            assert!(
                check_name(Provider::Gemini, name)
                    .unwrap_err()
                    .contains("start with a letter")
            );
            assert!(check_name(Provider::OpenaiChat, name).is_ok());
        }
    }
}
