//! Placeholder: replaced by the real module.

use serde_json::Value;

use super::{DeclareOptions, DeclareWarning, ParseError, Parsed, ToolDeclaration};
use crate::call::ToolResult;

pub fn parse(completion: &Value) -> Result<Parsed, ParseError> {
    let _ = completion;
    Err(ParseError::Shape {
        expected: super::Provider::OpenaiChat,
        reason: "not built yet".into(),
    })
}

pub fn format(parsed: &Parsed, results: &[ToolResult]) -> Vec<Value> {
    let _ = (parsed, results);
    Vec::new()
}

pub fn declare(tools: &[ToolDeclaration<'_>], opts: &DeclareOptions, warnings: &mut Vec<DeclareWarning>) -> Vec<Value> {
    let _ = (tools, opts, warnings);
    Vec::new()
}
