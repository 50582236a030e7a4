//! Fuzz target `validate_args`: arbitrary bytes as a call's arguments string, checked with
//! `check_arguments` against every tool of a fixed schema corpus (pattern, nested objects,
//! enums, `$ref` incl. recursion, anyOf/oneOf/allOf/not, if/then/else).
//!
//! Invariants: no panic; at most `MAX_ERRORS` details; only `args_not_json` for unusable
//! arguments and `invalid_arguments` otherwise; success only for an object.

use std::path::Path;
use std::sync::LazyLock;

use toolwire::call::{Arguments, ErrorKind};
use toolwire::config::ServerConfig;
use toolwire::config::load::{LoadedDir, load_file};
use toolwire::executor::validate::{MAX_ERRORS, check_arguments};
use toolwire::registry::Registry;

/// The schema corpus, as an in-memory tools file.
const TOOLS: &str = r##"{"tools": [
  {"name": "pattern", "description": "String patterns and lengths.",
   "parameters": {"type": "object", "required": ["code"], "additionalProperties": false,
     "properties": {
       "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
       "slug": {"type": "string", "pattern": "^[a-z0-9]+(?:-[a-z0-9]+)*$", "minLength": 2, "maxLength": 40},
       "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 5, "uniqueItems": true},
       "extra": {"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
                 "propertyNames": {"pattern": "^x-"}}}},
   "exec": {"command": ["true"]}},
  {"name": "nested", "description": "Nested objects and arrays.",
   "parameters": {"type": "object", "required": ["order"],
     "properties": {
       "order": {"type": "object", "required": ["id", "lines"], "additionalProperties": false,
         "properties": {
           "id": {"type": "integer", "minimum": 1},
           "lines": {"type": "array", "minItems": 1, "maxItems": 20,
             "items": {"type": "object", "required": ["sku", "qty"],
               "properties": {"sku": {"type": "string"}, "qty": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
                 "meta": {"type": "object", "additionalProperties": {"type": ["string", "null"]}}}}},
           "ship_to": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^\\d{5}$"}},
                       "dependentRequired": {"zip": ["country"]}}}},
       "note": {"type": ["string", "null"]}}},
   "exec": {"command": ["true"]}},
  {"name": "enums", "description": "Enums, consts and numeric bounds.",
   "parameters": {"type": "object",
     "properties": {
       "unit": {"type": "string", "enum": ["m", "km", "mi"]},
       "mode": {"enum": ["fast", 1, null, {"k": "v"}]},
       "version": {"const": 2},
       "pct": {"type": "integer", "minimum": 0, "maximum": 100},
       "flag": {"type": "boolean"},
       "status": {"type": ["string", "null"], "enum": ["open", "shipped", null]}}},
   "exec": {"command": ["true"]}},
  {"name": "refs", "description": "$ref, $defs and a recursive tree.",
   "parameters": {"type": "object", "required": ["tree"],
     "$defs": {
       "node": {"type": "object", "required": ["value"],
                "properties": {"value": {"type": "integer"},
                               "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}},
       "person": {"type": "object", "properties": {"name": {"type": "string"}, "boss": {"$ref": "#/$defs/person"}}}},
     "properties": {
       "tree": {"$ref": "#/$defs/node"},
       "owner": {"$ref": "#/$defs/person"}}},
   "exec": {"command": ["true"]}},
  {"name": "combinators", "description": "anyOf, oneOf, allOf, not, if/then/else.",
   "parameters": {"type": "object",
     "properties": {
       "target": {"anyOf": [{"type": "string", "format": "email"}, {"type": "integer", "minimum": 0}]},
       "shape": {"oneOf": [
         {"type": "object", "required": ["r"], "properties": {"r": {"type": "number"}}},
         {"type": "object", "required": ["w", "h"], "properties": {"w": {"type": "number"}, "h": {"type": "number"}}}]},
       "both": {"allOf": [{"type": "string"}, {"minLength": 3}, {"not": {"const": "nope"}}]},
       "kind": {"type": "string"}},
     "if": {"properties": {"kind": {"const": "circle"}}, "required": ["kind"]},
     "then": {"required": ["shape"]},
     "else": {"not": {"required": ["shape"]}}},
   "exec": {"command": ["true"]}}
]}"##;

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    let defaults = ServerConfig::from_figment(ServerConfig::figment_without_env(None).expect("figment"))
        .expect("default server config")
        .defaults;
    let mut loaded = LoadedDir::default();
    load_file(Path::new("fuzz-schemas.json"), TOOLS, &|_| None, &mut loaded);
    match Registry::build(loaded, &defaults) {
        Ok(reg) => reg,
        Err(diagnostics) => panic!("the fuzz schema corpus does not load: {diagnostics:?}"),
    }
});

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let arguments = Arguments::from_json_str(text);
    for tool in REGISTRY.tools() {
        // 64 is the server default `limits.json_depth`; 3 exercises the depth check.
        for max_depth in [64, 3] {
            match check_arguments(tool, &arguments, max_depth) {
                Ok(_) => assert!(matches!(arguments, Arguments::Object(_)), "non-object accepted"),
                Err(e) => {
                    assert!(e.details.len() <= MAX_ERRORS, "{} details", e.details.len());
                    match &arguments {
                        Arguments::Invalid { .. } => assert_eq!(e.kind, ErrorKind::ArgsNotJson),
                        Arguments::Object(_) => assert_eq!(e.kind, ErrorKind::InvalidArguments),
                    }
                    assert!(!e.retryable);
                    let _ = e.model_text();
                }
            }
        }
    }
}
