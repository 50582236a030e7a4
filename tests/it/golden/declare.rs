//! The golden table's rows for declarations over every provider, default and strict, for a schema that uses `$ref`,
//! `anyOf`, nullable types, enums and nested objects, plus the warnings each transform raises.

use serde_json::{Value, json};
use toolwire::provider::{DeclareOptions, Provider, ToolDeclaration};

use super::Table;

fn kitchen_sink() -> Value {
    json!({
        "type": "object",
        "$defs": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "description": "Street and number."},
                    "country": {"type": "string", "enum": ["FR", "DE", "US"], "description": "ISO country code."}
                },
                "required": ["street"]
            }
        },
        "properties": {
            "name": {"type": "string", "minLength": 1, "description": "Customer name."},
            "age": {"type": ["integer", "null"], "minimum": 0, "description": "Age in years; null if unknown."},
            "tier": {"type": "integer", "enum": [1, 2, 3], "description": "Support tier. Default: 1.", "default": 1},
            "contact": {
                "anyOf": [
                    {"type": "string", "format": "email"},
                    {"type": "object", "properties": {"phone": {"type": "string", "pattern": "^[0-9+ ]+$"}}, "required": ["phone"]}
                ],
                "description": "Email address or phone object."
            },
            "shipping": {"$ref": "#/$defs/address", "description": "Where to ship."},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5, "description": "Labels. Default: none."}
        },
        "required": ["name", "contact"]
    })
}

fn declare_all(opts: DeclareOptions) -> Value {
    let schema = kitchen_sink();
    let simple = json!({"type": "object", "properties": {"city": {"type": "string", "description": "City."}}, "required": ["city"]});
    let tools = [
        ToolDeclaration {
            name: "create_customer",
            description: "Create a customer record. Returns its id.",
            parameters: &schema,
        },
        ToolDeclaration {
            name: "get_weather",
            description: "",
            parameters: &simple,
        },
        ToolDeclaration {
            name: "9lives",
            description: "A name Gemini refuses.",
            parameters: &simple,
        },
    ];
    let mut out = serde_json::Map::new();
    for p in Provider::ALL {
        let d = p.declare(&tools, &opts);
        out.insert(
            p.as_str().to_owned(),
            json!({
                "tools": d.tools,
                "warnings": d.warnings.iter().map(|w| json!({"tool": w.tool, "dropped": w.dropped, "message": w.message})).collect::<Vec<_>>(),
            }),
        );
    }
    Value::Object(out)
}

/// The rows of the golden table for declarations over every provider (see `super::table`).
pub(super) fn cases(t: &mut Table) {
    t.add("all", "declare_default", || {
        let all = declare_all(DeclareOptions::default());
        // Gemini drops a name that does not start with a letter or underscore, and says so.
        let gem = &all["gemini"];
        assert_eq!(gem["tools"][0]["functionDeclarations"].as_array().unwrap().len(), 2);
        assert!(
            gem["warnings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["tool"] == "9lives" && w["dropped"] == true)
        );
        // Bedrock wraps in toolSpec/inputSchema.json and omits an empty description.
        assert!(all["bedrock"]["tools"][1]["toolSpec"].get("description").is_none());
        Ok(all)
    });
    t.add("all", "declare_strict", || {
        let all = declare_all(DeclareOptions {
            strict: true,
            gemini_openapi: false,
        });
        let openai = &all["openai_chat"]["tools"][0]["function"];
        assert_eq!(openai["strict"], true);
        assert_eq!(openai["parameters"]["additionalProperties"], false);
        let req = openai["parameters"]["required"].as_array().unwrap();
        assert_eq!(req.len(), 6, "every property is required in strict mode");
        assert!(
            !all["openai_chat"]["warnings"].as_array().unwrap().is_empty(),
            "strict changes are reported"
        );
        Ok(all)
    });
    t.add(Provider::Gemini, "declare_openapi", || {
        let all = declare_all(DeclareOptions {
            strict: false,
            gemini_openapi: true,
        });
        let decl = &all["gemini"]["tools"][0]["functionDeclarations"][0];
        assert!(decl.get("parametersJsonSchema").is_none());
        assert_eq!(decl["parameters"]["type"], "OBJECT");
        Ok(all["gemini"].clone())
    });
}
