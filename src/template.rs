//! `{placeholder}` templates in URLs, query values, headers, body strings and argv elements.
//!
//! `{name}` names an argument (a declared parameter or an `inject` key); `{state.a.b}` names a
//! path in the request `state`. `{{` and `}}` are literal braces. Templates are parsed once at
//! load, so a placeholder that names nothing is a config error, never a runtime surprise.

use serde_json::{Map, Value};

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Literal(String),
    /// A top-level argument name.
    Arg(String),
    /// A path into the request state (`state.user.id` → `["user", "id"]`).
    State(Vec<String>),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub segments: Vec<Segment>,
}

/// A template that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{` in `{0}` (write `{{{{` for a literal brace)")]
    Unclosed(String),
    #[error("stray `}}` in `{0}` (write `}}}}` for a literal brace)")]
    Stray(String),
    #[error("empty or malformed placeholder `{{{1}}}` in `{0}`")]
    BadName(String, String),
}

impl Template {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::Stray(text.to_owned())),
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for c in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        name.push(c);
                    }
                    if !closed {
                        return Err(TemplateError::Unclosed(text.to_owned()));
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(parse_placeholder(text, name.trim())?);
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Template { segments })
    }

    /// True when the template has no placeholders.
    pub fn is_literal(&self) -> bool {
        self.segments.iter().all(|s| matches!(s, Segment::Literal(_)))
    }

    /// The single placeholder when the template is exactly one (`"{count}"`), so a body template
    /// can keep the argument's JSON type.
    pub fn single_placeholder(&self) -> Option<&Segment> {
        match self.segments.as_slice() {
            [s @ (Segment::Arg(_) | Segment::State(_))] => Some(s),
            _ => None,
        }
    }

    /// Placeholders, in order.
    pub fn placeholders(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| !matches!(s, Segment::Literal(_)))
    }

    /// Renders the template: each placeholder's value goes through `encode` (e.g. percent
    /// encoding for URL paths), literals are copied. A missing value renders as empty.
    pub fn render(&self, args: &Map<String, Value>, state: &Value, encode: impl Fn(&str) -> String) -> String {
        let mut out = String::new();
        for seg in &self.segments {
            match seg {
                Segment::Literal(s) => out.push_str(s),
                placeholder => {
                    if let Some(v) = lookup(placeholder, args, state) {
                        out.push_str(&encode(&scalar_text(v)));
                    }
                }
            }
        }
        out
    }
}

/// The value a placeholder names, if present.
pub fn lookup<'a>(seg: &Segment, args: &'a Map<String, Value>, state: &'a Value) -> Option<&'a Value> {
    match seg {
        Segment::Literal(_) => None,
        Segment::Arg(name) => args.get(name).filter(|v| !v.is_null()),
        Segment::State(path) => {
            let mut cur = state;
            for key in path {
                cur = cur.get(key)?;
            }
            (!cur.is_null()).then_some(cur)
        }
    }
}

/// The text of a value inside a template: strings without quotes, everything else as JSON.
pub fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn parse_placeholder(text: &str, name: &str) -> Result<Segment, TemplateError> {
    let valid_ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if let Some(path) = name.strip_prefix("state.") {
        let parts: Vec<String> = path.split('.').map(str::to_owned).collect();
        if parts.iter().all(|p| valid_ident(p)) {
            return Ok(Segment::State(parts));
        }
    } else if valid_ident(name) {
        return Ok(Segment::Arg(name.to_owned()));
    }
    Err(TemplateError::BadName(text.to_owned(), name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_args_state_and_escapes() {
        let t = Template::parse("a/{city}/{state.user.id}?x={{y}}").unwrap();
        assert_eq!(
            t.segments,
            vec![
                Segment::Literal("a/".into()),
                Segment::Arg("city".into()),
                Segment::Literal("/".into()),
                Segment::State(vec!["user".into(), "id".into()]),
                Segment::Literal("?x={y}".into()),
            ]
        );
    }

    #[test]
    fn rejects_malformed_templates() {
        assert!(matches!(Template::parse("{city"), Err(TemplateError::Unclosed(_))));
        assert!(matches!(Template::parse("a}"), Err(TemplateError::Stray(_))));
        assert!(matches!(Template::parse("{a b}"), Err(TemplateError::BadName(..))));
        assert!(matches!(Template::parse("{}"), Err(TemplateError::BadName(..))));
    }

    #[test]
    fn renders_with_encoder_and_skips_missing() {
        let t = Template::parse("/w/{city}/{n}/{missing}").unwrap();
        let args = json!({"city": "a b", "n": 3});
        let out = t.render(args.as_object().unwrap(), &json!({}), |s| s.replace(' ', "%20"));
        assert_eq!(out, "/w/a%20b/3/");
    }
}
