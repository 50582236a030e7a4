//! Raw serde types of one `tools.d/` file: they mirror the file, nothing more.
//!
//! Everything that can be wrong in more than one way is kept loose here (durations and modes
//! as strings, required fields as `Option`) so that `registry` can report *every* problem of a
//! tool in one pass instead of stopping at serde's first error. Unknown keys are found with
//! `serde_ignored` (not `deny_unknown_fields`, which also stops at the first one); each struct
//! lists its keys for "did you mean" suggestions.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// The top level of a tools file.
#[derive(Debug, Deserialize)]
pub struct ToolFile {
    /// Each tool is deserialised separately so that one broken tool does not hide the others.
    pub tools: Option<Vec<Value>>,
    /// MCP servers whose tools join the registry (`docs/mcp.md`); each deserialised separately.
    pub mcp: Option<Vec<Value>>,
}

/// Keys of [`ToolFile`].
pub const FILE_KEYS: &[&str] = &["tools", "mcp"];

/// One `[[mcp]]` server as written in a file (`docs/mcp.md`). Exactly one of `command` (a stdio
/// server toolwire spawns) and `url` (a Streamable HTTP server). The policy keys apply to every
/// tool of the server, as they would to one tool.
#[derive(Debug, Default, Deserialize)]
pub struct McpConfig {
    /// Prefix of its tools' names: `<name>__<tool>`.
    pub name: Option<String>,
    /// Program and arguments of a stdio server; never run through a shell.
    pub command: Option<Vec<String>>,
    /// Streamable HTTP endpoint.
    pub url: Option<String>,
    /// HTTP headers sent with every request (`${env:…}`/`${file:…}` allowed; treated as secrets).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The only environment the stdio server gets (plus a minimal `PATH`), as for exec tools.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory of a stdio server.
    pub cwd: Option<String>,
    /// Only the server's tools matching one of these (exact names or `*`/`?` globs).
    #[serde(default)]
    pub include: Vec<String>,
    /// None of the server's tools matching one of these.
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub timeout: Option<String>,
    pub deadline: Option<String>,
    pub idempotent: Option<bool>,
    pub retry: Option<RetryConfig>,
    pub concurrency: Option<u32>,
    pub max_output_bytes: Option<usize>,
    pub max_read_bytes: Option<usize>,
    /// TERM → KILL grace when a stdio server is stopped.
    pub kill_grace: Option<String>,
}

/// Keys of [`McpConfig`].
pub const MCP_KEYS: &[&str] = &[
    "name",
    "command",
    "url",
    "headers",
    "env",
    "cwd",
    "include",
    "exclude",
    "tags",
    "timeout",
    "deadline",
    "idempotent",
    "retry",
    "concurrency",
    "max_output_bytes",
    "max_read_bytes",
    "kill_grace",
];

/// One tool as written in a file (`docs/tool-files.md`).
#[derive(Debug, Default, Deserialize)]
pub struct ToolConfig {
    pub name: Option<String>,
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Full JSON Schema (object root), or the short form `{ city = "string", … }`.
    pub parameters: Option<Value>,
    /// Per attempt.
    pub timeout: Option<String>,
    /// Whole call, all attempts.
    pub deadline: Option<String>,
    /// Allows retrying after the request was sent.
    pub idempotent: Option<bool>,
    pub retry: Option<RetryConfig>,
    /// Most calls of this tool in flight at once, across requests.
    pub concurrency: Option<u32>,
    /// Hidden arguments filled from the request `state`: `{ user_id = "state.user_id" }`.
    #[serde(default)]
    pub inject: BTreeMap<String, String>,
    /// Most bytes of output returned to the model.
    pub max_output_bytes: Option<usize>,
    /// Most bytes read from the backend.
    pub max_read_bytes: Option<usize>,
    /// TERM → KILL grace for subprocess tools.
    pub kill_grace: Option<String>,
    pub http: Option<HttpConfig>,
    pub exec: Option<ExecConfig>,
    /// HTTP tools: CIDRs this tool may reach even if the server denies them.
    #[serde(default)]
    pub egress_allow: Vec<String>,
    /// HTTP tools: CIDRs this tool may not reach, on top of the server's denials.
    #[serde(default)]
    pub egress_deny: Vec<String>,
    /// `false` opts an idempotent (read-only) tool out of replay: every repeat runs again.
    pub replay: Option<bool>,
}

/// Keys of [`ToolConfig`].
pub const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "tags",
    "parameters",
    "timeout",
    "deadline",
    "idempotent",
    "retry",
    "concurrency",
    "inject",
    "max_output_bytes",
    "max_read_bytes",
    "kill_grace",
    "http",
    "exec",
    "egress_allow",
    "egress_deny",
    "replay",
];

/// `retry = { max_attempts, backoff, max_backoff }`.
#[derive(Debug, Default, Deserialize)]
pub struct RetryConfig {
    pub max_attempts: Option<u32>,
    pub backoff: Option<String>,
    pub max_backoff: Option<String>,
}

/// Keys of [`RetryConfig`].
pub const RETRY_KEYS: &[&str] = &["max_attempts", "backoff", "max_backoff"];

/// `[tools.http]`.
#[derive(Debug, Default, Deserialize)]
pub struct HttpConfig {
    pub method: Option<String>,
    pub url: Option<String>,
    #[serde(default)]
    pub query: BTreeMap<String, String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A JSON body template; by default POST/PUT/PATCH send the arguments object.
    pub body: Option<Value>,
    /// The tool's own TLS settings (https:// URLs only).
    pub tls: Option<TlsConfig>,
    /// `true` lets URL path placeholder values contain `..` path segments (refused by default).
    pub allow_path_traversal: Option<bool>,
}

/// Keys of [`HttpConfig`].
pub const HTTP_KEYS: &[&str] = &[
    "method",
    "url",
    "query",
    "headers",
    "body",
    "tls",
    "allow_path_traversal",
];

/// `[tools.http] tls = { ca_file, client_cert, client_key }`: PEM files, relative to the tools
/// file's folder.
#[derive(Debug, Default, Deserialize)]
pub struct TlsConfig {
    /// Extra CAs trusted for this tool (added to the bundled roots and the server's `ca_file`).
    pub ca_file: Option<String>,
    /// Client certificate (chain) for mTLS; replaces the server-wide one for this tool.
    pub client_cert: Option<String>,
    /// Private key of `client_cert`.
    pub client_key: Option<String>,
}

/// Keys of [`TlsConfig`].
pub const TLS_KEYS: &[&str] = &["ca_file", "client_cert", "client_key"];

/// `[tools.exec]`.
#[derive(Debug, Default, Deserialize)]
pub struct ExecConfig {
    /// Program and fixed leading arguments; never run through a shell.
    pub command: Option<Vec<String>>,
    /// Further arguments; each element may hold `{placeholders}` and stays one argv element.
    #[serde(default)]
    pub args: Vec<String>,
    /// `"json"` (the envelope on stdin) or `"none"`.
    pub stdin: Option<String>,
    /// The only environment the process gets (plus a minimal `PATH`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// `"text"` or `"json"`.
    pub output: Option<String>,
    /// `true` lets a value starting with `-` fill an argument that starts with a placeholder
    /// (refused by default: the program would read it as an option).
    pub allow_option_values: Option<bool>,
    /// Resource limits of the process.
    pub limits: Option<LimitsConfig>,
}

/// Keys of [`ExecConfig`].
pub const EXEC_KEYS: &[&str] = &[
    "command",
    "args",
    "stdin",
    "env",
    "cwd",
    "output",
    "allow_option_values",
    "limits",
];

/// `exec.limits = { address_space = "512MiB", cpu = "10s", open_files = 256, processes = 64 }`.
#[derive(Debug, Default, Deserialize)]
pub struct LimitsConfig {
    /// Bytes: a number, or a string with a unit (`"512MiB"`, `"2GiB"`, `"100MB"`).
    pub address_space: Option<SizeValue>,
    /// CPU time, a duration (`"10s"`, `"2m"`); whole seconds, rounded up.
    pub cpu: Option<String>,
    pub open_files: Option<u64>,
    pub processes: Option<u64>,
}

/// Keys of [`LimitsConfig`].
pub const LIMITS_KEYS: &[&str] = &["address_space", "cpu", "open_files", "processes"];

/// A size written as a number of bytes or as a string with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// The known keys at a key path (`tools[0].http` → [`HTTP_KEYS`]), for suggestions.
pub fn known_keys_at(parent: &str) -> &'static [&'static str] {
    if parent.starts_with("mcp[") && !parent.contains('.') {
        return MCP_KEYS;
    }
    match parent.rsplit('.').next().unwrap_or("") {
        "" => FILE_KEYS,
        "http" => HTTP_KEYS,
        "exec" => EXEC_KEYS,
        "limits" => LIMITS_KEYS,
        "retry" => RETRY_KEYS,
        "tls" => TLS_KEYS,
        _ => TOOL_KEYS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Keeps the key lists in step with the structs: a tool with every listed key set must
    /// leave nothing ignored.
    #[test]
    fn key_lists_match_the_structs() {
        let v = json!({
            "name": "n", "description": "d", "tags": [], "parameters": {}, "timeout": "1s",
            "deadline": "2s", "idempotent": true, "concurrency": 1, "inject": {},
            "max_output_bytes": 1, "max_read_bytes": 1, "kill_grace": "1s",
            "retry": {"max_attempts": 1, "backoff": "1s", "max_backoff": "1s"},
            "http": {"method": "GET", "url": "u", "query": {}, "headers": {}, "body": {},
                     "tls": {"ca_file": "c", "client_cert": "c", "client_key": "k"},
                     "allow_path_traversal": false},
            "exec": {"command": ["x"], "args": [], "stdin": "json", "env": {}, "cwd": ".", "output": "json",
                "allow_option_values": true,
                "limits": {"address_space": "1MiB", "cpu": "1s", "open_files": 8, "processes": 8}},
            "egress_allow": [], "egress_deny": [], "replay": true
        });
        let obj = v.as_object().unwrap();
        assert_eq!(obj.len(), TOOL_KEYS.len());
        let mut ignored = Vec::new();
        let _: ToolConfig = serde_ignored::deserialize(v.clone(), |p| ignored.push(p.to_string())).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(obj["http"].as_object().unwrap().len(), HTTP_KEYS.len());
        assert_eq!(obj["http"]["tls"].as_object().unwrap().len(), TLS_KEYS.len());
        assert_eq!(obj["exec"].as_object().unwrap().len(), EXEC_KEYS.len());
        assert_eq!(obj["retry"].as_object().unwrap().len(), RETRY_KEYS.len());
        assert_eq!(obj["exec"]["limits"].as_object().unwrap().len(), LIMITS_KEYS.len());
    }

    #[test]
    fn mcp_key_list_matches_the_struct() {
        let v = json!({
            "name": "n", "command": ["x"], "url": "u", "headers": {}, "env": {}, "cwd": ".",
            "include": [], "exclude": [], "tags": [], "timeout": "1s", "deadline": "2s",
            "idempotent": true, "retry": {}, "concurrency": 1, "max_output_bytes": 1,
            "max_read_bytes": 1, "kill_grace": "1s"
        });
        assert_eq!(v.as_object().unwrap().len(), MCP_KEYS.len());
        let mut ignored = Vec::new();
        let _: McpConfig = serde_ignored::deserialize(v, |p| ignored.push(p.to_string())).unwrap();
        assert!(ignored.is_empty(), "{ignored:?}");
        assert_eq!(known_keys_at("mcp[0]"), MCP_KEYS);
        assert_eq!(known_keys_at("mcp[0].retry"), RETRY_KEYS);
    }
}
