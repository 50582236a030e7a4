//! Server configuration: embedded defaults → `--config FILE` → `TOOLWIRE_*` environment.
//!
//! The defaults are `config/toolwire.toml`, compiled in, so the shipped file and the binary can
//! never disagree. Unknown keys in a file are errors (`deny_unknown_fields`); environment
//! variables are filtered to the keys the defaults define, so an unrelated `TOOLWIRE_FOO` in a
//! container's environment cannot stop the server from starting.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;

/// The shipped, fully commented defaults.
pub const DEFAULTS_TOML: &str = include_str!("../../config/toolwire.toml");

/// Prefix of environment variables that override config keys.
pub const ENV_PREFIX: &str = "TOOLWIRE_";

/// Most serving workers `workers` may ask for: more threads than this only add switching.
pub const MAX_WORKERS: usize = 256;

/// The checked server configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub tools_dir: PathBuf,
    pub log: String,
    pub log_format: LogFormat,
    pub listen_backlog: u32,
    /// Serving worker threads (each its own single-threaded runtime, see `server::workers`);
    /// 0 = one per CPU.
    pub workers: usize,
    pub busy_poll: BusyPollConfig,
    pub limits: Limits,
    pub defaults: ToolDefaults,
    pub http_client: HttpClientConfig,
    pub auth: AuthConfig,
    pub reload: ReloadConfig,
    pub egress: EgressConfig,
    pub breaker: BreakerConfig,
    pub replay: ReplayConfig,
    pub store: StoreConfig,
    pub shutdown: ShutdownConfig,
    pub mcp_server: McpServerConfig,
}

/// `POST /mcp`: the tools served to MCP clients (`docs/mcp.md`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Serve `/mcp` at all (`toolwire mcp` over stdio is unaffected).
    pub enabled: bool,
    /// `Host` values accepted on `/mcp` (hostnames, or `host:port`); `["*"]` accepts any. The
    /// default (loopback names only) defeats DNS rebinding against a server on a developer's
    /// machine; a deployed server lists the names clients use to reach it.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host[:port|:*]`) whose requests are accepted; a request
    /// carrying any other `Origin` is refused with 403. Requests without `Origin` (desktop and
    /// server-side clients) are not affected.
    pub allowed_origins: Vec<String>,
}

/// Replay-safe execution.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    pub enabled: bool,
    pub ttl: HumanDuration,
    pub max_entries: usize,
    pub max_bytes: usize,
}

/// Where replay results and `Idempotency-Key` answers are kept (`docs/scale.md`): in this
/// process (`url = ""`, the default), or in Redis shared by every replica.
#[derive(Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS); empty: in memory.
    /// `${env:}`/`${file:}` are resolved at load, so the password need not sit in the file.
    pub url: String,
    /// Prepended to every key, so several deployments can share one Redis.
    pub prefix: String,
    /// Bound of one connection attempt (TCP + TLS + AUTH).
    pub connect_timeout: HumanDuration,
    /// Bound of every Redis command; past it the store counts as unavailable for that call.
    pub command_timeout: HumanDuration,
    /// Largest encoded value kept; a larger result is returned but not stored.
    pub max_value_bytes: usize,
    /// At most one warning per interval while calls run without deduplication.
    pub warn_interval: HumanDuration,
    /// PEM CA certificates trusted for a `rediss://` URL instead of the bundled public roots
    /// (a Redis with a private CA); empty: the bundled roots.
    pub ca_file: PathBuf,
}

/// The URL may carry a password: never printed, not even by `{:?}`.
impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redacted_url(&self.url))
            .field("prefix", &self.prefix)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("max_value_bytes", &self.max_value_bytes)
            .field("warn_interval", &self.warn_interval)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// A store URL fit for logs and `Debug`: scheme, host, port and database, never the user or
/// password.
pub fn redacted_url(url: &str) -> String {
    if url.is_empty() {
        return String::new();
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(invalid url)".to_owned();
    };
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let host = host.split(['?', '#']).next().unwrap_or_default();
    format!("{scheme}://{host}")
}

/// Bearer-token auth.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Accepted tokens (`${env:}`/`${file:}` resolved at load); empty = auth off.
    pub tokens: Vec<String>,
    /// Require a token for `/metrics` too.
    pub protect_metrics: bool,
    /// Serve without tokens on a non-loopback address. Off by default: such a server would run
    /// tools for anyone who can reach it.
    pub allow_unauthenticated: bool,
}

/// Shortest accepted auth token, in bytes. An empty `${env:X}` (unset variable) must never
/// turn auth off silently, and short tokens are guessable.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Hot reload of the tools directory.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadConfig {
    pub watch: bool,
    pub debounce: HumanDuration,
}

/// Egress policy of HTTP tools (CIDR lists).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    pub deny: Vec<String>,
    pub allow: Vec<String>,
}

/// Circuit breaker per backend.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (0 = never).
    pub failures: u32,
    pub open_for: HumanDuration,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Inbound limits.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub body_bytes: usize,
    pub json_depth: usize,
    pub calls_per_request: usize,
    pub request_parallelism: usize,
    pub global_in_flight: usize,
    pub header_read_timeout: HumanDuration,
    pub request_timeout: HumanDuration,
    pub concurrent_requests: usize,
    /// Time allowed to receive a whole request body, before any work slot is taken.
    pub body_read_timeout: HumanDuration,
    /// Open client connections at once; further ones wait in the listen backlog.
    pub max_connections: usize,
}

/// Policy for tools that do not set their own.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefaults {
    pub timeout: HumanDuration,
    pub exec_timeout: HumanDuration,
    pub deadline: HumanDuration,
    pub kill_grace: HumanDuration,
    pub max_read_bytes: usize,
    pub max_output_bytes: usize,
    pub retry: RetryDefaults,
}

/// Default retry policy.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDefaults {
    pub max_attempts: u32,
    pub backoff: HumanDuration,
    pub max_backoff: HumanDuration,
}

/// The shared outbound HTTP client.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpClientConfig {
    pub connect_timeout: HumanDuration,
    pub pool_max_idle_per_host: usize,
    /// PEM file of extra CAs trusted by every HTTP tool, beside the bundled public roots.
    /// Relative to the working directory. `""` (the default) means none.
    #[serde(default, with = "empty_path")]
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) presented by every HTTP tool that asks for none of its
    /// own (mTLS); needs `client_key`.
    #[serde(default, with = "empty_path")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of `client_cert`.
    #[serde(default, with = "empty_path")]
    pub client_key: Option<PathBuf>,
}

impl HttpClientConfig {
    /// The server-wide TLS file settings.
    pub fn tls_paths(&self) -> super::tls::TlsPaths {
        super::tls::TlsPaths {
            ca_file: self.ca_file.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        }
    }
}

/// An optional path written as a string where `""` means "not set": TOML has no null, and a
/// key must exist in the embedded defaults for its `TOOLWIRE_*` variable to be honoured.
mod empty_path {
    use std::path::PathBuf;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        let s = String::deserialize(d)?;
        Ok((!s.is_empty()).then(|| PathBuf::from(s)))
    }

    pub(super) fn serialize<S: Serializer>(v: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.as_ref().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default())
    }
}

/// Graceful shutdown.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    pub drain: HumanDuration,
}

/// Busy polling of lightly loaded serving workers (`server::busy_poll`,
/// `docs/operations.md#busy-polling`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BusyPollConfig {
    /// Longest spin after a request starts or ends; `0s`: never spin.
    pub window: HumanDuration,
    /// Spin only while the worker serves at most this many client connections.
    pub max_connections: usize,
}

/// Longest `busy_poll.window` accepted: a longer spin only burns CPU.
pub const MAX_BUSY_POLL_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

/// A server configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ServerConfigError {
    #[error("config file {0} does not exist")]
    Missing(PathBuf),
    #[error("invalid server configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    /// How many serving workers to start: `workers`, or one per CPU the process may use (the
    /// cgroup's CPU quota counts) when it is 0.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_WORKERS),
            n => n.min(MAX_WORKERS),
        }
    }

    /// Loads defaults → `file` → `TOOLWIRE_*` environment.
    pub fn load(file: Option<&Path>) -> Result<Self, ServerConfigError> {
        Self::from_figment(Self::figment(file)?)
    }

    /// The layered sources, without the environment (for tests that must not read it).
    pub fn figment_without_env(file: Option<&Path>) -> Result<Figment, ServerConfigError> {
        let mut fig = Figment::from(Toml::string(DEFAULTS_TOML));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(ServerConfigError::Missing(path.to_owned()));
            }
            fig = fig.merge(Toml::file_exact(path));
        }
        Ok(fig)
    }

    /// The layered sources: defaults, the file, and the environment filtered to known keys.
    pub fn figment(file: Option<&Path>) -> Result<Figment, ServerConfigError> {
        let known = known_keys();
        let env = Env::prefixed(ENV_PREFIX)
            .split("__")
            .filter(move |key| known.iter().any(|k| key == k.as_str()));
        Ok(Self::figment_without_env(file)?.merge(env))
    }

    /// Extracts and checks the configuration; resolves `${env:}`/`${file:}` in auth tokens.
    pub fn from_figment(fig: Figment) -> Result<Self, ServerConfigError> {
        let mut cfg: ServerConfig = fig
            .extract()
            .map_err(|e| ServerConfigError::Invalid(flatten_figment_error(e)))?;
        let env = |name: &str| std::env::var(name).ok();
        let resolver = super::interpolate::Resolver {
            env: &env,
            base_dir: Path::new("."),
        };
        let mut secrets = Vec::new();
        for token in &mut cfg.auth.tokens {
            *token = resolver
                .resolve_str(token, &mut secrets)
                .map_err(|e| ServerConfigError::Invalid(format!("auth.tokens: {e}")))?;
        }
        cfg.store.url = resolver
            .resolve_str(&cfg.store.url, &mut secrets)
            .map_err(|e| ServerConfigError::Invalid(format!("store.url: {e}")))?;
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), ServerConfigError> {
        let mut problems = Vec::new();
        let l = &self.limits;
        if l.body_bytes == 0 || l.body_bytes > 16 * 1024 * 1024 {
            problems.push("limits.body_bytes must be between 1 and 16 MiB".to_owned());
        }
        if l.json_depth == 0 || l.json_depth > 120 {
            problems.push("limits.json_depth must be between 1 and 120".to_owned());
        }
        for (name, v) in [
            ("limits.calls_per_request", l.calls_per_request),
            ("limits.request_parallelism", l.request_parallelism),
            ("limits.global_in_flight", l.global_in_flight),
            ("limits.concurrent_requests", l.concurrent_requests),
        ] {
            if v == 0 {
                problems.push(format!("{name} must be at least 1"));
            }
        }
        let r = &self.defaults.retry;
        if !(1..=5).contains(&r.max_attempts) {
            problems.push("defaults.retry.max_attempts must be between 1 and 5".to_owned());
        }
        if self.defaults.timeout > self.defaults.deadline {
            problems.push("defaults.timeout must not exceed defaults.deadline".to_owned());
        }
        for (i, token) in self.auth.tokens.iter().enumerate() {
            if token.len() < MIN_TOKEN_BYTES {
                // Never the value itself: only where it is and how long it resolved.
                problems.push(format!(
                    "auth.tokens[{i}] is {} bytes long; tokens must be at least {MIN_TOKEN_BYTES} bytes (an empty value usually means its ${{env:…}} variable is unset)",
                    token.len()
                ));
            }
        }
        if l.max_connections == 0 {
            problems.push("limits.max_connections must be at least 1".to_owned());
        }
        if self.workers > MAX_WORKERS {
            problems.push(format!("workers must be at most {MAX_WORKERS} (0 = one per CPU)"));
        }
        if self.busy_poll.window.0 > MAX_BUSY_POLL_WINDOW {
            problems.push("busy_poll.window must be at most 10ms (\"0s\" turns busy polling off)".to_owned());
        }
        if let Err(e) = self.check_exposure() {
            problems.push(e.to_string());
        }
        if self.mcp_server.allowed_hosts.is_empty() {
            problems
                .push("mcp_server.allowed_hosts must not be empty; use [\"*\"] to accept any Host header".to_owned());
        }
        for origin in &self.mcp_server.allowed_origins {
            if origin != "null" && !origin.contains("://") {
                problems.push(format!(
                    "mcp_server.allowed_origins: `{origin}` has no scheme (e.g. \"https://app.example.com:443\")"
                ));
            }
        }
        for cidr in self.egress.deny.iter().chain(&self.egress.allow) {
            if cidr.parse::<ipnet::IpNet>().is_err() {
                problems.push(format!("egress: `{cidr}` is not a CIDR (e.g. \"10.0.0.0/8\")"));
            }
        }
        let st = &self.store;
        if !(st.url.is_empty() || st.url.starts_with("redis://") || st.url.starts_with("rediss://")) {
            // Never the value: it may hold a password.
            problems.push("store.url must be empty (in memory) or a redis:// or rediss:// URL".to_owned());
        }
        if st.command_timeout.0.is_zero() || st.connect_timeout.0.is_zero() {
            problems.push("store.command_timeout and store.connect_timeout must be above zero".to_owned());
        }
        if st.max_value_bytes == 0 || st.max_value_bytes > 64 * 1024 * 1024 {
            problems.push("store.max_value_bytes must be between 1 and 64 MiB".to_owned());
        }
        if !st.ca_file.as_os_str().is_empty() && !st.url.starts_with("rediss://") {
            problems.push("store.ca_file is only used with a rediss:// (TLS) store.url".to_owned());
        }
        if st.prefix.len() > 64 {
            problems.push("store.prefix must be at most 64 bytes".to_owned());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ServerConfigError::Invalid(problems.join("; ")))
        }
    }
}

impl ServerConfig {
    /// Refuses to serve without tokens on an address other hosts can reach, unless
    /// `auth.allow_unauthenticated` says so. Call again after `--listen` changes the address.
    pub fn check_exposure(&self) -> Result<(), ServerConfigError> {
        if self.auth.tokens.is_empty() && !self.auth.allow_unauthenticated && !self.listen.ip().is_loopback() {
            return Err(ServerConfigError::Invalid(format!(
                "listen = {} is reachable from other hosts but auth.tokens is empty; set a token (e.g. tokens = [\"${{env:TOOLWIRE_TOKEN}}\"]) or, to serve without auth on purpose, auth.allow_unauthenticated = true",
                self.listen
            )));
        }
        Ok(())
    }
}

/// Every leaf key of the defaults, dotted (`limits.body_bytes`): the environment variables
/// that may override something.
fn known_keys() -> Vec<String> {
    fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
        for (k, v) in table {
            let key = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(t) => walk(&key, t, out),
                _ => out.push(key),
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(table) = DEFAULTS_TOML.parse::<toml::Table>() {
        walk("", &table, &mut out);
    }
    out
}

fn flatten_figment_error(e: figment::Error) -> String {
    e.into_iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_defaults_are_valid_and_documented_values() {
        let cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap()).unwrap();
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(cfg.limits.body_bytes, 2 * 1024 * 1024);
        assert_eq!(cfg.defaults.retry.max_attempts, 3);
        assert_eq!(cfg.listen_backlog, 4096);
        assert_eq!(cfg.workers, 0);
    }

    #[test]
    fn workers_are_one_per_cpu_by_default_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            ServerConfig::from_figment(ServerConfig::figment_without_env(Some(&path)).unwrap())
        };
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(load("workers = 0\n").unwrap().worker_count(), cpus.min(MAX_WORKERS));
        assert_eq!(load("workers = 3\n").unwrap().worker_count(), 3);
        let err = load("workers = 257\n").unwrap_err().to_string();
        assert!(err.contains("workers must be at most 256"), "{err}");
    }

    #[test]
    fn unknown_key_in_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:1\"\nlisten_bakclog = 5\n").unwrap();
        let err = ServerConfig::from_figment(ServerConfig::figment_without_env(Some(&path)).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen_bakclog"), "{err}");
    }

    #[test]
    fn file_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[limits]\nbody_bytes = 1024\n").unwrap();
        let cfg = ServerConfig::from_figment(ServerConfig::figment_without_env(Some(&path)).unwrap()).unwrap();
        assert_eq!(cfg.limits.body_bytes, 1024);
        assert_eq!(cfg.limits.json_depth, 64);
    }

    #[test]
    fn known_keys_cover_nested_tables() {
        let keys = known_keys();
        assert!(keys.contains(&"listen".to_owned()));
        assert!(keys.contains(&"defaults.retry.max_attempts".to_owned()));
    }

    #[test]
    fn redacted_urls_keep_the_host_only() {
        assert_eq!(redacted_url("redis://:s3cret@redis:6379/0"), "redis://redis:6379/0");
        assert_eq!(
            redacted_url("rediss://user:p%40ss@cache.example:6380/2?protocol=resp3"),
            "rediss://cache.example:6380/2"
        );
        assert_eq!(redacted_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redacted_url("nonsense"), "(invalid url)");
    }

    #[test]
    fn missing_file_is_reported() {
        let err = ServerConfig::figment_without_env(Some(Path::new("/nonexistent/x.toml"))).unwrap_err();
        assert!(matches!(err, ServerConfigError::Missing(_)));
    }
}
