//! `toolwire check`: the report printed for a tools directory.

use std::fmt::Write as _;

use serde_json::json;

use crate::config::{Diagnostic, ServerConfig};
use crate::registry::Registry;

/// The outcome of loading a tools directory.
pub struct CheckReport<'a> {
    pub config: &'a ServerConfig,
    pub result: &'a Result<Registry, Vec<Diagnostic>>,
    /// The MCP servers' states after their tools were listed.
    pub mcp: &'a [crate::mcp::ServerStatus],
}

impl CheckReport<'_> {
    /// True when the tool set can be served.
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }

    fn diagnostics(&self) -> &[Diagnostic] {
        match self.result {
            Ok(reg) => &reg.warnings,
            Err(d) => d,
        }
    }

    /// A human report: the tools table (when valid), every diagnostic, a summary line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tools dir: {}  listen: {}",
            self.config.tools_dir.display(),
            self.config.listen
        );
        if let Ok(reg) = self.result {
            let _ = writeln!(out, "version: {}", reg.version);
            let rows: Vec<[String; 6]> = reg
                .tools()
                .iter()
                .map(|t| {
                    let params = t
                        .parameters
                        .get("properties")
                        .and_then(|p| p.as_object())
                        .map(|p| p.keys().cloned().collect::<Vec<_>>().join(","))
                        .unwrap_or_default();
                    [
                        t.name.clone(),
                        t.backend.kind().to_owned(),
                        format!("{}ms/{}ms", t.policy.timeout.as_millis(), t.policy.deadline.as_millis()),
                        t.policy.retry.max_attempts.to_string(),
                        if params.is_empty() { "-".to_owned() } else { params },
                        t.source.display().to_string(),
                    ]
                })
                .collect();
            let header = ["NAME", "BACKEND", "TIMEOUT/DEADLINE", "ATTEMPTS", "PARAMETERS", "FILE"].map(str::to_owned);
            let mut widths = header.clone().map(|h| h.len());
            for row in &rows {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            for row in std::iter::once(&header).chain(&rows) {
                let line: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
                let _ = writeln!(out, "{}", line.join("  ").trim_end());
            }
        }
        for s in self.mcp {
            let mut line = format!("mcp server {} ({}): {}", s.name, s.transport, s.state);
            if let Some(v) = &s.protocol_version {
                line.push_str(&format!(", protocol {v}"));
            }
            line.push_str(&format!(", {} tools listed", s.tools));
            if let Some(e) = &s.last_error {
                line.push_str(&format!("; last error: {e}"));
            }
            let _ = writeln!(out, "{line}");
        }
        for d in self.diagnostics() {
            let _ = writeln!(out, "{d}");
        }
        let errors = self.diagnostics().iter().filter(|d| d.is_error()).count();
        let warnings = self.diagnostics().len() - errors;
        let tools = self.result.as_ref().map_or(0, Registry::len);
        let _ = writeln!(out, "{tools} tools, {errors} errors, {warnings} warnings");
        out
    }

    /// The same report as JSON.
    pub fn json(&self) -> serde_json::Value {
        let tools: Vec<&str> = self
            .result
            .as_ref()
            .map(|r| r.tools().iter().map(|t| t.name.as_str()).collect())
            .unwrap_or_default();
        json!({
            "ok": self.ok(),
            "version": self.result.as_ref().ok().map(|r| r.version.clone()),
            "tools": tools,
            "diagnostics": self.diagnostics(),
            "mcp": self.mcp,
        })
    }
}
