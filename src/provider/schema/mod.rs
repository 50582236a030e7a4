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
//! One file per dialect, each documenting what its transform keeps, rewrites and refuses, and why:
//! - [`openai_strict()`] (`openai_strict.rs`): OpenAI strict mode, Chat and Responses
//!   (`docs/providers.md#openai-strict`);
//! - [`anthropic_strict()`] (`anthropic.rs`): Anthropic strict mode, also used for Bedrock
//!   (`docs/providers.md#anthropic-strict`);
//! - [`gemini_openapi()`] (`gemini_openapi.rs`): Gemini's OpenAPI-subset `parameters`
//!   (`docs/providers.md#gemini-openapi-subset`).
//!
//! This module holds what the three walkers share: the one-pass analysis of the input (`Doc`:
//! raw depth, `$ref` targets and cycles), the walker state (`Walk`: notes and bounds), the
//! small accessors that turn a wrong JSON type into an error naming its pointer, and the
//! tool-name check [`check_name`]. The unit tests are in `tests.rs`.
//!
//! # Robustness
//!
//! Before any walk, the input is scanned once without recursion: raw JSON nesting deeper than
//! 256 levels is an `Err` (so no later clone, walk or drop can overflow the stack), and the
//! `$ref` graph is analysed for cycles. Walkers stop at 64 schema levels and 20 000 produced
//! subschemas (bounding the blow-up of inlining shared definitions). Only local references
//! (`#`, `#/$defs/…`, any `#/…` JSON pointer) are resolved; percent-encoded pointers are not.

mod anthropic;
mod gemini_openapi;
mod openai_strict;
#[cfg(test)]
mod tests;

pub use anthropic::anthropic_strict;
pub use gemini_openapi::gemini_openapi;
pub use openai_strict::openai_strict;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Display;

use serde_json::{Map, Value};

use super::Provider;
use crate::tool_name::{MAX_LEN, ToolName, ToolNameError};

/// Schema levels a walker descends (each `properties/x`, `items`, `anyOf/i`, inlined `$ref`, …).
const MAX_DEPTH: usize = 64;
/// Raw JSON nesting accepted on input, checked without recursion before anything else.
const MAX_VALUE_DEPTH: usize = 256;
/// Subschemas one transform may produce; bounds the blow-up of inlining shared `$ref`s.
const MAX_NODES: usize = 20_000;
/// `$ref`s in one schema; bounds the cycle analysis, which is quadratic in their number.
const MAX_REFS: usize = 1_000;

const JSON_TYPES: [&str; 7] = ["object", "array", "string", "integer", "number", "boolean", "null"];

/// Checks a tool name against a provider's name rule; `Err(reason)` if it does not fit.
///
/// Every provider accepts the portable rule of [`ToolName`] (`^[a-zA-Z0-9_-]{1,64}$`,
/// `docs/providers.md#declarations`); Gemini also requires a letter or an underscore first (it
/// would allow `.`, `:` and 128 characters, which the common rule already excludes).
pub fn check_name(provider: Provider, name: &str) -> Result<(), String> {
    match ToolName::parse(name) {
        Ok(_) => {}
        Err(ToolNameError::Empty) => return Err(format!("{provider} requires a non-empty tool name")),
        Err(ToolNameError::BadChar { name, found }) => {
            return Err(format!(
                "tool name {name:?} contains {found:?}; {provider} allows only letters, digits, '_' and '-'"
            ));
        }
        Err(ToolNameError::TooLong { name, len }) => {
            return Err(format!(
                "tool name {name:?} is {len} characters long; {provider} allows at most {MAX_LEN}"
            ));
        }
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
