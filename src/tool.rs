//! Runtime tools: what the executor runs. Built only by [`crate::registry`] from checked config,
//! so every `Tool` has a compiled validator, a resolved backend and a complete policy.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::template::Template;

/// A tool ready to run.
#[derive(Debug)]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    /// The model-visible JSON Schema (injected parameters are not in it).
    pub parameters: Value,
    /// Validates model arguments against `parameters`; compiled once at load.
    pub validator: jsonschema::Validator,
    /// Hidden arguments filled from the request state (never from the model).
    pub inject: Vec<Injected>,
    /// What the model's arguments object may carry besides the declared parameters, and which
    /// `null`s mean "absent" (derived from `parameters` once, at load).
    pub arguments: ArgumentRules,
    /// Every request-state path the tool can see (`inject` sources and `{state.…}`
    /// placeholders), sorted and deduplicated. Only these parts of `state` reach the backend
    /// and the replay key.
    pub state_paths: Vec<Vec<String>>,
    pub policy: Policy,
    pub backend: BackendSpec,
    /// The file that declared the tool.
    pub source: PathBuf,
}

/// One hidden argument: `key` is filled from `path` of the request state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub key: String,
    pub path: Vec<String>,
    /// Declared with a trailing `?` (`"state.team?"`): the call runs without it when the state
    /// has no value there. Otherwise a missing value fails the call with `missing_state`.
    pub optional: bool,
}

/// What a model may send beyond the declared parameters (see `executor::validate`).
#[derive(Debug, Clone, Default)]
pub struct ArgumentRules {
    /// `Some(declared)` when the schema lists `properties` and says nothing about
    /// `additionalProperties`/`unevaluatedProperties`: keys outside `declared` (and not matching
    /// `patterns`) are refused. `None`: extras pass as the model sent them.
    pub closed: Option<std::collections::HashSet<String>>,
    /// `patternProperties` keys of a closed schema.
    pub patterns: Vec<regex::Regex>,
    /// Optional declared properties whose own schema refuses `null`: a `null` there means
    /// "absent" (strict-mode declarations make models send it).
    pub null_means_absent: std::collections::HashSet<String>,
}

impl Tool {
    /// The part of `state` this tool can see (see [`project_state`]).
    pub fn visible_state(&self, state: &Value) -> Value {
        project_state(&self.state_paths, state)
    }
}

/// The values at `paths` of `state`, each at its own place in an object (always an object; a
/// path missing from `state` is left out). What a tool may see of the request state: its
/// replay scope and its stdin envelope both use it, so the two can never disagree.
pub fn project_state(paths: &[Vec<String>], state: &Value) -> Value {
    let mut out = Value::Object(serde_json::Map::new());
    for path in paths {
        let mut cur = state;
        let mut found = true;
        for key in path {
            match cur.get(key) {
                Some(v) => cur = v,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if !found {
            continue;
        }
        let mut slot = &mut out;
        for key in path {
            if !slot.is_object() {
                *slot = Value::Object(serde_json::Map::new());
            }
            let Value::Object(map) = slot else { break };
            slot = map.entry(key.clone()).or_insert(Value::Null);
        }
        *slot = cur.clone();
    }
    out
}

/// How a tool's calls are run, with every default applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    /// Per attempt.
    #[serde(serialize_with = "ser_ms")]
    pub timeout: Duration,
    /// Whole call, all attempts.
    #[serde(serialize_with = "ser_ms")]
    pub deadline: Duration,
    /// May a failure after the request was sent be retried?
    pub idempotent: bool,
    /// Are repeats of a call answered from the replay store?
    pub replay: bool,
    pub retry: RetryPolicy,
    /// Most calls of this tool in flight at once (`None`: only the global cap applies).
    pub concurrency: Option<usize>,
    pub max_read_bytes: usize,
    pub max_output_bytes: usize,
    /// TERM → KILL grace for subprocess tools.
    #[serde(serialize_with = "ser_ms")]
    pub kill_grace: Duration,
}

/// Attempts and full-jitter exponential backoff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetryPolicy {
    /// Attempts in total, the first one included.
    pub max_attempts: u32,
    #[serde(serialize_with = "ser_ms")]
    pub backoff: Duration,
    #[serde(serialize_with = "ser_ms")]
    pub max_backoff: Duration,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where a tool's calls go.
#[derive(Debug, Clone)]
pub enum BackendSpec {
    Http(HttpSpec),
    Exec(ExecSpec),
    /// A tool of an MCP server (`[[mcp]]`, `docs/mcp.md`).
    Mcp(McpSpec),
}

impl BackendSpec {
    /// `"http"`, `"exec"` or `"mcp"`.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendSpec::Http(_) => "http",
            BackendSpec::Exec(_) => "exec",
            BackendSpec::Mcp(_) => "mcp",
        }
    }

    /// Which backend this is, for the circuit breaker: the HTTP origin (`http://host:port`, the
    /// literal part of the URL before the path) or `exec:<program>`. Tools sharing a backend
    /// share its breaker.
    pub fn breaker_key(&self) -> String {
        match self {
            BackendSpec::Http(h) => {
                let first = match h.url.segments.first() {
                    Some(crate::template::Segment::Literal(s)) => s.as_str(),
                    _ => "",
                };
                let (scheme, rest) = first.split_once("://").unwrap_or(("", first));
                let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
                // Never show credentials (`user:pass@host`) in breaker names.
                let host = authority.rsplit('@').next().unwrap_or(authority);
                format!("{scheme}://{host}")
            }
            BackendSpec::Exec(e) => format!("exec:{}", e.program),
            BackendSpec::Mcp(m) => format!("mcp:{}", m.server),
        }
    }
}

/// A tool served by an MCP server: which server, and the tool's own name there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSpec {
    /// The `[[mcp]]` server's `name`.
    pub server: String,
    /// The tool's name as the server lists it (before mapping to `<server>__<tool>`).
    pub tool: String,
}

/// One checked `[[mcp]]` server: how to reach it and what bounds its traffic. Equal specs mean
/// an unchanged server, whose live connection a reload keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    pub name: String,
    pub transport: McpTransport,
    /// Most bytes of one message (stdio line, HTTP body, SSE event) read from the server.
    pub max_message_bytes: usize,
    /// TERM → KILL grace when a stdio server is stopped.
    pub kill_grace: Duration,
    /// The file that declared it.
    pub source: PathBuf,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio {
        program: String,
        args: Vec<String>,
        /// The whole environment of the child (besides the minimal `PATH`).
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        url: String,
        /// Sent with every request; values may be secrets.
        headers: Vec<(String, String)>,
    },
}

/// A tool as an MCP server lists it, copied into toolwire's own types.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiscoveredTool {
    pub name: String,
    pub description: Option<String>,
    /// The tool's `inputSchema` as sent.
    pub input_schema: Value,
}

/// What the MCP servers listed, by server name. A server missing here was never listed (it
/// has not answered yet): its tools are absent until it does.
pub type McpDiscovery = std::collections::BTreeMap<String, Vec<DiscoveredTool>>;

/// An HTTP backend.
#[derive(Debug, Clone)]
pub struct HttpSpec {
    pub method: reqwest::Method,
    pub url: Template,
    pub query: Vec<(String, Template)>,
    pub headers: Vec<(String, Template)>,
    /// The request body: the arguments object, a template, or nothing.
    pub body: HttpBody,
    /// The tool's own egress rules, added to the server's (`egress_allow`, `egress_deny`).
    pub egress_allow: Vec<ipnet::IpNet>,
    pub egress_deny: Vec<ipnet::IpNet>,
    /// The tool's own TLS settings (`[tools.http] tls`) and its client; `None`: the shared
    /// client and the server-wide settings.
    pub tls: Option<std::sync::Arc<ToolTls>>,
    /// `allow_path_traversal = true`: URL path placeholder values may contain `..` next to a
    /// separator (they are still percent-encoded). Off by default.
    pub allow_path_traversal: bool,
    /// `url` parsed once at load when it has no placeholder (most tools), so a call does not
    /// parse it again (IDNA and all: ~3 % of a one-call `/v1/execute`, docs/bench.md). `None`:
    /// parsed per call.
    pub static_url: Option<reqwest::Url>,
}

/// What an HTTP backend sends as its body.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpBody {
    /// No body (GET, DELETE, HEAD by default).
    None,
    /// The arguments object as JSON (POST, PUT, PATCH by default).
    Arguments,
    /// A JSON template: strings that are exactly one placeholder keep the value's JSON type,
    /// other strings are interpolated.
    Template(Value),
}

/// A subprocess backend.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    pub program: String,
    /// Every argument after the program; each renders to exactly one argv element.
    pub args: Vec<Template>,
    pub stdin: StdinMode,
    /// The whole environment of the child (besides the minimal `PATH`).
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    pub output: OutputMode,
    /// `exec.allow_option_values`: let a value that starts with `-` fill an argument that starts
    /// with a placeholder. Off by default, because such a value is read as an *option* by most
    /// programs (`grep {pattern} file` with `-r` searches everything).
    pub allow_option_values: bool,
    /// `exec.limits`: resource limits applied to the process before the program starts.
    pub limits: ResourceLimits,
    /// The request-state paths the tool references (`inject` sources and `{state.…}`
    /// placeholders); the stdin envelope's `state` holds these and nothing else.
    pub state_paths: Vec<Vec<String>>,
}

/// Per-tool resource limits of a subprocess (`exec.limits`), set as both the soft and the hard
/// `setrlimit` limit so the program cannot raise them again. `None`: inherited from the server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ResourceLimits {
    /// `RLIMIT_AS`, bytes of virtual memory.
    pub address_space: Option<u64>,
    /// `RLIMIT_CPU`, seconds of CPU time (the process gets SIGXCPU, then SIGKILL).
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_NOFILE`, open file descriptors.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC`, processes of the *user* (counted per uid, not per tool; not enforced for
    /// root).
    pub processes: Option<u64>,
}

impl ResourceLimits {
    /// True when no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == ResourceLimits::default()
    }
}

/// What a subprocess gets on stdin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StdinMode {
    /// `{"arguments", "state", "call": {"id", "attempt"}}`; `state` holds only the paths the
    /// tool references ([`ExecSpec::state_paths`]).
    Json,
    /// Nothing (stdin is `/dev/null`).
    #[default]
    None,
}

/// How a subprocess's stdout is read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    #[default]
    Text,
    Json,
}

/// A tool's own TLS settings and the client built for them (once, on first use; dropped with
/// the tool set on reload).
pub struct ToolTls {
    pub material: crate::config::tls::TlsMaterial,
    pub client: std::sync::OnceLock<reqwest::Client>,
}

impl ToolTls {
    pub fn new(material: crate::config::tls::TlsMaterial) -> Self {
        ToolTls {
            material,
            client: std::sync::OnceLock::new(),
        }
    }
}

impl std::fmt::Debug for ToolTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolTls")
            .field("material", &self.material)
            .field("client_built", &self.client.get().is_some())
            .finish()
    }
}
