//! Configuration: the server config (figment) and the raw tool files of `tools.d/`.
//!
//! Loading never stops at the first problem: every problem is collected as a [`Diagnostic`]
//! naming its file, tool and key path, so `toolwire check` can list them all at once.

pub mod duration;
pub mod interpolate;
pub mod lint;
pub mod load;
pub mod params;
pub mod server;
pub mod tls;
pub mod tool_file;

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

pub use duration::HumanDuration;
pub use server::ServerConfig;

/// How bad a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The tool set cannot be used.
    Error,
    /// Valid, but likely to make a model call the tool badly.
    Warning,
}

/// One problem found while loading tools, with its location.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    pub file: PathBuf,
    /// The tool's name, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Key path inside the file (`tools[0].http.url`); empty for the whole file.
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    pub message: String,
}

impl Diagnostic {
    /// An error at a key path.
    pub fn error(
        file: impl Into<PathBuf>,
        tool: Option<&str>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Error,
            file: file.into(),
            tool: tool.map(str::to_owned),
            path: path.into(),
            line: None,
            column: None,
            message: message.into(),
        }
    }

    /// A warning at a key path.
    pub fn warning(
        file: impl Into<PathBuf>,
        tool: Option<&str>,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(file, tool, path, message)
        }
    }

    /// Adds a 1-based line and column.
    pub fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    /// True for errors.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    /// `tools.d/a.toml:3:7: error: tool `x`: tools[0].timeout: message`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, ": {sev}:")?;
        if let Some(tool) = &self.tool {
            write!(f, " tool `{tool}`:")?;
        }
        if !self.path.is_empty() {
            write!(f, " {}:", self.path)?;
        }
        write!(f, " {}", self.message)
    }
}
