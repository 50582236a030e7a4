//! Unit tests of the three dialect transforms and the name check. The kitchen-sink snapshots
//! live in `snapshots/` beside this file (module path `provider::schema::tests`, as before the
//! split, so their names did not change).

use serde_json::{Map, Value, json};

use super::{anthropic_strict, check_name, gemini_openapi, openai_strict};
use crate::provider::Provider;

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

/// Builds the input on a big stack and runs `check` on it on a default-sized (2 MiB) thread:
/// serde_json's own clone and drop of a deeply nested value recurse, so only the transforms'
/// stack use is measured. The input is dropped on the big stack too.
fn on_small_stack<T: Sync>(build: impl FnOnce() -> T + Send + 'static, check: impl Fn(&T) + Send + Sync + 'static) {
    let outer = std::thread::Builder::new().stack_size(256 << 20).spawn(move || {
        let input = build();
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(2 << 20)
                .spawn_scoped(scope, || check(&input))
                .map(|t| t.join())
        })
    });
    let result = outer.map(|t| t.join());
    assert!(matches!(result, Ok(Ok(Ok(Ok(()))))), "{result:?}");
}

#[test]
fn deeply_nested_input_is_an_error_without_stack_overflow() {
    on_small_stack(
        || (nested(1000), nested(70)), // the second passes the raw scan, too deep for the walkers
        |(deep, shallow)| {
            for f in [openai_strict, anthropic_strict, gemini_openapi] {
                let e = f(deep).err().unwrap_or_default();
                assert!(e.contains("nested more than 256 levels"), "{e}");
            }
            for f in [anthropic_strict, gemini_openapi] {
                let e = f(shallow).err().unwrap_or_default();
                assert!(e.contains("nested more than 64 levels"), "{e}");
            }
        },
    );
}

#[test]
fn values_just_under_the_depth_cap_are_safe_on_a_small_stack() {
    // A const/default 250 levels deep is cloned, serialized and dropped by the transforms.
    on_small_stack(
        || {
            let mut data = json!(1);
            for _ in 0..248 {
                data = Value::Array(vec![data]);
            }
            let mut property = Map::new();
            property.insert("type".to_owned(), json!("array"));
            property.insert("const".to_owned(), data.clone());
            property.insert("default".to_owned(), data);
            object(
                Value::Object(Map::from_iter([("x".to_owned(), Value::Object(property))])),
                json!(["x"]),
            )
        },
        |schema| {
            for f in [openai_strict, anthropic_strict, gemini_openapi] {
                assert!(f(schema).is_ok());
            }
        },
    );
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
