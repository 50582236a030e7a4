//! Command-line interface (clap derive). `main.rs` runs what is parsed here.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::server::LogFormat;

/// toolwire: executes LLM tool calls for agents in any language.
///
/// Tools are declared in files under a tools directory (tools.d/), each mapped to an HTTP or a
/// subprocess backend. `serve` runs the HTTP API; `check` validates the configuration.
#[derive(Debug, Parser)]
#[command(name = "toolwire", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server on the configured tools.
    ///
    /// Example: toolwire serve --config config/toolwire.toml --tools-dir tools.d
    Serve(ServeArgs),
    /// Serve the tools to an MCP client over stdin/stdout (the MCP stdio transport), for
    /// desktop hosts that launch their servers. Logs go to stderr only.
    ///
    /// Example: toolwire mcp --tools-dir tools.d
    Mcp(McpArgs),
    /// Validate the server config and every tool file; print the tools, or every problem.
    ///
    /// Exits 1 when any error is found. Warnings (vague descriptions, undocumented parameters)
    /// never fail the check.
    Check(CheckArgs),
    /// Print the tool declarations in a provider's format: exactly the JSON array that
    /// `GET /v1/schemas` returns, ready for the request's `tools` field.
    ///
    /// Example: toolwire schemas --provider gemini --tags weather
    Schemas(SchemasArgs),
    /// Run one tool directly, without a model, and print its result object.
    ///
    /// Example: toolwire call convert_units --args '{"value": 5, "from": "km", "to": "mi"}'
    Call(CallArgs),
    /// Execute every tool call of a raw completion read from stdin, and print the same JSON
    /// that `POST /v1/execute` answers.
    ///
    /// Example: toolwire execute --provider anthropic < completion.json
    ///
    /// Streamed completions work too: input that is a JSON array (the stream's events) or not
    /// JSON at all (the raw SSE/NDJSON text) is assembled first, as `completion_stream`.
    Execute(ExecuteArgs),
    /// Assemble a streamed completion (raw SSE/NDJSON text, a JSON array of its events, or for
    /// Bedrock the base64 event stream) into the non-streamed body and print it; nothing runs.
    /// Warnings go to stderr.
    ///
    /// Example: toolwire assemble --provider anthropic stream.sse
    Assemble(AssembleArgs),
    /// Probe a running server's /readyz; exit 0 when ready. Needs nothing but this binary, so
    /// container HEALTHCHECKs can use it.
    Health(HealthArgs),
    /// Internal: starts a tool's program with its resource limits and without capabilities
    /// (see `backend::shim`). Run by toolwire itself, never by hand.
    #[command(name = "__exec-shim", hide = true)]
    ExecShim(ExecShimArgs),
}

/// `toolwire __exec-shim [LIMITS] -- PROGRAM ARGS…` (internal).
#[derive(Debug, Args)]
pub struct ExecShimArgs {
    /// RLIMIT_AS in bytes.
    #[arg(long)]
    pub address_space: Option<u64>,
    /// RLIMIT_CPU in seconds.
    #[arg(long)]
    pub cpu: Option<u64>,
    /// RLIMIT_NOFILE.
    #[arg(long)]
    pub open_files: Option<u64>,
    /// RLIMIT_NPROC.
    #[arg(long)]
    pub processes: Option<u64>,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

/// `toolwire health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:8080", env = "TOOLWIRE_HEALTH_ADDR")]
    pub addr: SocketAddr,
    /// Give up after this many milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
}

/// `toolwire call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Tool name.
    pub name: String,
    /// Arguments as a JSON object.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// Request state as a JSON object (for `inject` and `{state.…}` placeholders).
    #[arg(long)]
    pub state: Option<String>,
}

/// `toolwire execute`.
#[derive(Debug, Args)]
pub struct ExecuteArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Provider of the completion; detected from its shape when left out.
    #[arg(long, short = 'p')]
    pub provider: Option<String>,
    /// Request state as a JSON object.
    #[arg(long)]
    pub state: Option<String>,
    /// Read a streamed completion from this file instead of stdin (raw SSE/NDJSON text or a
    /// JSON array of events).
    #[arg(long, value_name = "FILE")]
    pub stream: Option<std::path::PathBuf>,
}

/// `toolwire assemble`.
#[derive(Debug, Args)]
pub struct AssembleArgs {
    /// Provider of the stream; detected from the events' shape when left out.
    #[arg(long, short = 'p')]
    pub provider: Option<String>,
    /// The stream file; `-` or nothing reads stdin.
    pub file: Option<std::path::PathBuf>,
}

/// `toolwire schemas`.
#[derive(Debug, Args)]
pub struct SchemasArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// openai_chat, openai_responses, anthropic, gemini, bedrock, mistral, cohere, ollama
    /// (aliases: openai, claude, google).
    #[arg(long, short = 'p')]
    pub provider: String,
    /// Strict mode (OpenAI, Anthropic, Bedrock): closed objects, all properties required.
    #[arg(long)]
    pub strict: bool,
    /// Only tools with one of these tags (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Only these tools (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Gemini: emit the OpenAPI-subset `parameters` instead of `parametersJsonSchema`.
    #[arg(long)]
    pub gemini_openapi: bool,
}

/// Where the configuration comes from.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// Server config file (TOML). Without it the built-in defaults apply; TOOLWIRE_* variables
    /// override either.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of tool files (*.toml, *.yaml, *.yml, *.json). Overrides `tools_dir`.
    #[arg(long, value_name = "DIR")]
    pub tools_dir: Option<PathBuf>,
}

/// `toolwire serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Address to listen on, e.g. 127.0.0.1:8080. Overrides `listen`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Log format. Overrides `log_format`.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

/// `toolwire mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Log format (on stderr). Overrides `log_format`.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Request state (a JSON object) for calls whose `_meta` carries no `toolwire/state`: fills
    /// injected parameters for hosts that cannot send `_meta`.
    #[arg(long)]
    pub state: Option<String>,
}

/// `toolwire check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
