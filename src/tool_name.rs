//! The one tool-name rule: `^[a-zA-Z0-9_-]{1,64}$`.
//!
//! Every provider toolwire speaks accepts a name of this form (`docs/providers.md#declarations`):
//! OpenAI, Anthropic, Bedrock, Mistral, Cohere and Ollama agree on it, and Gemini's wider rule
//! (`.`, `:`, 128 characters) contains it. The registry refuses any other name at load, so a
//! tool that loads can be declared to every provider; the schema layer checks the same rule
//! again per provider (plus Gemini's extra "letter or `_` first") because `declare` takes
//! names from callers too.
//!
//! The check is a plain character scan rather than a regex: it runs for every declaration and
//! every loaded tool, and the rule is simple enough to read without one.

use std::fmt;

/// Longest name every provider accepts.
pub const MAX_LEN: usize = 64;

/// A tool name that follows the portable rule `^[a-zA-Z0-9_-]{1,64}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolName(String);

/// Why a string is not a [`ToolName`]. Checked in this order, so a name that is both too long
/// and has a bad character reports the character.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolNameError {
    #[error("the tool name is empty")]
    Empty,
    /// `found` is the first character outside `a-z A-Z 0-9 _ -`.
    #[error("tool name {name:?} contains {found:?}; only letters, digits, '_' and '-' are allowed")]
    BadChar { name: String, found: char },
    /// `len` is in bytes, which equals characters here (every character passed the ASCII check).
    #[error("tool name {name:?} is {len} characters long; at most {MAX_LEN} are allowed")]
    TooLong { name: String, len: usize },
}

impl ToolName {
    /// Checks `name` against the portable rule.
    pub fn parse(name: &str) -> Result<ToolName, ToolNameError> {
        if name.is_empty() {
            return Err(ToolNameError::Empty);
        }
        if let Some(found) = name.chars().find(|c| !is_name_char(*c)) {
            return Err(ToolNameError::BadChar {
                name: name.to_owned(),
                found,
            });
        }
        if name.len() > MAX_LEN {
            return Err(ToolNameError::TooLong {
                name: name.to_owned(),
                len: name.len(),
            });
        }
        Ok(ToolName(name.to_owned()))
    }

    /// Whether `name` follows the portable rule (no allocation).
    pub fn is_valid(name: &str) -> bool {
        (1..=MAX_LEN).contains(&name.len()) && name.chars().all(is_name_char)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The portable name of tool `tool` of MCP server `server`: `<server>__<tool>`, every character
/// outside the rule replaced by `_`, and a name longer than [`MAX_LEN`] cut with `_` and the
/// first 8 hex digits of the SHA-256 of the unmapped `server__tool`, so that two long names
/// that share a prefix stay apart and the same tool always gets the same name. `server` is
/// already valid (checked at load).
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let mut name: String = format!("{server}__{tool}")
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    if name.len() > MAX_LEN {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(format!("{server}__{tool}").as_bytes());
        let hash: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        name.truncate(MAX_LEN - hash.len() - 1);
        name.push('_');
        name.push_str(&hash);
    }
    name
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ToolName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_portable_alphabet_up_to_64() {
        for name in ["a", "get_weather-2", "A_b-C_9", "_", "-", "9", &"a".repeat(64)] {
            assert!(ToolName::is_valid(name), "{name}");
            assert_eq!(ToolName::parse(name).map(|n| n.to_string()), Ok(name.to_owned()));
        }
    }

    #[test]
    fn rejects_with_the_first_reason_in_order() {
        assert_eq!(ToolName::parse(""), Err(ToolNameError::Empty));
        assert_eq!(
            ToolName::parse("get.weather"),
            Err(ToolNameError::BadChar {
                name: "get.weather".to_owned(),
                found: '.'
            })
        );
        // A bad character wins over the length.
        let long_and_bad = format!("{}ü", "a".repeat(70));
        assert!(matches!(
            ToolName::parse(&long_and_bad),
            Err(ToolNameError::BadChar { found: 'ü', .. })
        ));
        assert!(matches!(
            ToolName::parse(&"a".repeat(65)),
            Err(ToolNameError::TooLong { len: 65, .. })
        ));
    }

    #[test]
    fn mcp_names_follow_the_rule() {
        assert_eq!(mcp_tool_name("time", "get_current_time"), "time__get_current_time");
        assert_eq!(mcp_tool_name("fs", "read.file/v2"), "fs__read_file_v2");
        let long = mcp_tool_name("srv", &"x".repeat(100));
        assert!(ToolName::is_valid(&long), "{long}");
        assert_eq!(long.len(), MAX_LEN);
        let other = mcp_tool_name("srv", &format!("{}y", "x".repeat(99)));
        assert_ne!(long, other, "a shared prefix must not collide");
        assert_eq!(long, mcp_tool_name("srv", &"x".repeat(100)), "stable");
        assert!(ToolName::is_valid(&mcp_tool_name("s", "é")));
    }

    #[test]
    fn is_valid_agrees_with_parse() {
        // `$` in the old regex matched only at the very end (Rust regex), so a trailing newline
        // was refused; the character scan refuses it too.
        for name in [
            "",
            " ",
            "a b",
            "a\n",
            "\na",
            "wetter_für_stadt",
            "a/b",
            "a.b",
            "a:b",
            "ok",
            &"b".repeat(64),
            &"b".repeat(65),
            "ａ", // full-width letter: not ASCII
        ] {
            assert_eq!(ToolName::is_valid(name), ToolName::parse(name).is_ok(), "{name:?}");
        }
        assert!(!ToolName::is_valid("a\n"));
        assert!(!ToolName::is_valid(&"b".repeat(65)));
    }
}
