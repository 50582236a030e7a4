//! The declarations of a registry's tools, per provider: `GET /v1/schemas`, `toolwire schemas`,
//! and what each provider's schema transform had to change (`GET /v1/tools`).
//!
//! This sits beside [`Provider::declare`] (not in the registry) so that the tool set knows
//! nothing of providers: arrows point from `provider` to `registry`, never back.

use std::collections::HashMap;

use super::{DeclareOptions, DeclareWarning, Declared, Provider, ToolDeclaration};
use crate::registry::Registry;

/// A change (or a refusal) of a provider's schema transform, in one declaration mode.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SchemaWarning {
    pub provider: Provider,
    /// `default`, `strict` or `gemini_openapi`: the `GET /v1/schemas` options it applies to.
    pub mode: &'static str,
    /// The tool is left out of that provider's declarations in that mode.
    pub dropped: bool,
    pub message: String,
}

/// Which tools `GET /v1/schemas` declares.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    /// Keep tools that have at least one of these tags (empty: no tag filter).
    pub tags: Vec<String>,
    /// Keep only these tools (empty: all).
    pub tools: Vec<String>,
}

/// Declares the tools that pass `filter` for `provider`. `Err` names requested tools that
/// do not exist.
pub fn declarations(
    registry: &Registry,
    provider: Provider,
    opts: &DeclareOptions,
    filter: &ToolFilter,
) -> Result<Declared, Vec<String>> {
    let unknown: Vec<String> = filter
        .tools
        .iter()
        .filter(|n| registry.get(n).is_none())
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(unknown);
    }
    let decls: Vec<ToolDeclaration<'_>> = registry
        .tools()
        .iter()
        .filter(|t| filter.tools.is_empty() || filter.tools.contains(&t.name))
        .filter(|t| filter.tags.is_empty() || t.tags.iter().any(|tag| filter.tags.contains(tag)))
        .map(|t| ToolDeclaration {
            name: &t.name,
            description: &t.description,
            parameters: &t.parameters,
        })
        .collect();
    Ok(provider.declare(&decls, opts))
}

/// Runs every provider's declaration in every mode once, so `GET /v1/tools` and
/// `toolwire check` can show what each transform changed for each tool.
pub fn schema_warnings(registry: &Registry) -> HashMap<String, Vec<SchemaWarning>> {
    let modes = [
        ("default", DeclareOptions::default()),
        (
            "strict",
            DeclareOptions {
                strict: true,
                gemini_openapi: false,
            },
        ),
        (
            "gemini_openapi",
            DeclareOptions {
                strict: false,
                gemini_openapi: true,
            },
        ),
    ];
    let mut out: HashMap<String, Vec<SchemaWarning>> = HashMap::new();
    for provider in Provider::ALL {
        for (mode, opts) in &modes {
            if *mode == "gemini_openapi" && provider != Provider::Gemini {
                continue;
            }
            let Ok(declared) = declarations(registry, provider, opts, &ToolFilter::default()) else {
                continue;
            };
            for DeclareWarning {
                tool, dropped, message, ..
            } in declared.warnings
            {
                out.entry(tool).or_default().push(SchemaWarning {
                    provider,
                    mode,
                    dropped,
                    message,
                });
            }
        }
    }
    out
}
