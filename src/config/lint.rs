//! Warnings about what makes a model call a tool badly (`toolwire check`).
//!
//! A model chooses and fills a tool from its name, description and parameter descriptions
//! only. These checks are heuristics; they never block loading.

use std::path::Path;

use serde_json::Value;

use super::Diagnostic;
use crate::template::{Segment, Template};

/// Names that say nothing about what a tool does.
const GENERIC_NAMES: &[&str] = &[
    "tool", "run", "do", "exec", "execute", "call", "helper", "util", "utils", "misc", "func", "function", "action",
    "test", "api", "process", "handle", "main",
];

/// Fewest words a description needs to say what, when and what it returns.
const MIN_DESCRIPTION_WORDS: usize = 8;

/// Lints one tool; `prefix` is its key path (`tools[0]`).
pub fn lint_tool(file: &Path, prefix: &str, name: &str, description: Option<&str>, schema: &Value) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let warn = |path: String, msg: String| Diagnostic::warning(file, Some(name), path, msg);
    match description.map(str::trim) {
        None | Some("") => out.push(warn(
            format!("{prefix}.description"),
            "no description: the model sees only the name; say what the tool does, when to use it and what it returns"
                .into(),
        )),
        Some(d) => {
            let words = d.split_whitespace().count();
            if words < MIN_DESCRIPTION_WORDS {
                out.push(warn(
                    format!("{prefix}.description"),
                    format!("description is vague ({words} words): say what the tool does, when to use it and what it returns"),
                ));
            }
        }
    }
    if !name_is_descriptive(name) {
        out.push(warn(
            format!("{prefix}.name"),
            format!(
                "name `{name}` does not say what the tool does; use verb_object, e.g. `get_weather` or `search_orders`"
            ),
        ));
    }
    lint_properties(
        schema,
        &format!("{prefix}.parameters"),
        &mut |p, m| out.push(warn(p, m)),
        0,
    );
    out
}

/// Warns about argv elements that start with a placeholder and are not preceded by a literal
/// `--`: a value starting with `-` there is read as an *option* by most programs (`grep
/// {pattern} file` with `-r` searches every file). Such values are refused at run time unless
/// the tool sets `exec.allow_option_values = true`; a literal `--` before the element is the
/// fix for programs that accept it, because every value after it is an operand.
/// `args` are the argv elements after the program, each with its key path.
pub fn lint_exec_args(
    file: &Path,
    prefix: &str,
    name: &str,
    args: &[(String, &Template)],
    allow_option_values: bool,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (key, t) in args {
        if t.segments == [Segment::Literal("--".to_owned())] {
            break;
        }
        if !matches!(t.segments.first(), Some(Segment::Arg(_) | Segment::State(_))) {
            continue;
        }
        let message = if allow_option_values {
            "starts with a placeholder and `allow_option_values = true`: the model can pass options to the program here (e.g. `-r`); put a literal \"--\" before it if the program accepts one"
        } else {
            "starts with a placeholder but no literal \"--\" comes before it: a value starting with `-` would be an option, so it is refused at run time; put \"--\" before it if the program accepts one"
        };
        out.push(Diagnostic::warning(
            file,
            Some(name),
            format!("{prefix}.{key}"),
            message.to_owned(),
        ));
    }
    out
}

fn lint_properties(schema: &Value, path: &str, push: &mut dyn FnMut(String, String), depth: usize) {
    if depth > 16 {
        return;
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (key, prop) in props {
        let p = format!("{path}.properties.{key}");
        let desc = prop.get("description").and_then(Value::as_str).unwrap_or("").trim();
        if desc.is_empty() {
            push(
                p.clone(),
                format!("parameter `{key}` has no description: say what it means and its format"),
            );
        } else if !required.contains(&key.as_str())
            && prop.get("default").is_none()
            && !desc.to_ascii_lowercase().contains("default")
        {
            push(
                p.clone(),
                format!(
                    "optional parameter `{key}`: its description does not say what happens when it is left out (the default)"
                ),
            );
        }
        lint_properties(prop, &p, push, depth + 1);
        if let Some(items) = prop.get("items") {
            lint_properties(items, &format!("{p}.items"), push, depth + 1);
        }
    }
}

/// A name says what the tool does when it has at least two words (`get_weather`,
/// `searchOrders`) and is not a generic word.
fn name_is_descriptive(name: &str) -> bool {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '_' || c == '-' {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    let meaningful: Vec<&String> = words
        .iter()
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .collect();
    meaningful.len() >= 2 && !meaningful.iter().all(|w| GENERIC_NAMES.contains(&w.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn warns_on_placeholder_led_argv_elements_before_a_double_dash() {
        let t = |s: &str| Template::parse(s).unwrap();
        let (a, b, c, dd, d) = (t("-n"), t("{pattern}"), t("x{y}"), t("--"), t("{file}"));
        let args = [
            ("exec.command[1]".to_owned(), &a),
            ("exec.command[2]".to_owned(), &b),
            ("exec.args[0]".to_owned(), &c),
            ("exec.args[1]".to_owned(), &dd),
            ("exec.args[2]".to_owned(), &d),
        ];
        let ds = lint_exec_args(Path::new("f.toml"), "tools[0]", "find_x", &args, false);
        let paths: Vec<&str> = ds.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, vec!["tools[0].exec.command[2]"]);
        assert!(ds[0].message.contains("refused"));
        let ds = lint_exec_args(Path::new("f.toml"), "tools[0]", "find_x", &args, true);
        assert!(ds[0].message.contains("allow_option_values"));
    }

    #[test]
    fn names() {
        assert!(name_is_descriptive("get_weather"));
        assert!(name_is_descriptive("searchOrders"));
        assert!(!name_is_descriptive("weather"));
        assert!(!name_is_descriptive("tool1"));
        assert!(!name_is_descriptive("run_tool"));
    }

    #[test]
    fn flags_vague_description_and_undocumented_parameters() {
        let schema = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": "string"},
            "b": {"type": "string", "description": "The unit."},
            "c": {"type": "string", "description": "The unit. Default: metric."}
        }});
        let ds = lint_tool(Path::new("f.toml"), "tools[0]", "get_x", Some("Gets x."), &schema);
        let paths: Vec<&str> = ds.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "tools[0].description",
                "tools[0].parameters.properties.a",
                "tools[0].parameters.properties.b"
            ]
        );
        assert!(ds.iter().all(|d| !d.is_error()));
    }
}
