//! The registry: the one step from raw config to runtime [`Tool`]s.
//!
//! [`Registry::build`] checks every raw tool (names, schemas, placeholders, backends,
//! durations), compiles each schema once, applies the server's defaults to each policy, and
//! either returns a complete registry or *every* error found. Lookup by name is a hash map.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::backend::tls;
use crate::config::load::{LoadedDir, RawMcp, RawTool, load_dir};
use crate::config::server::ToolDefaults;
use crate::config::tls::TlsPaths;
use crate::config::tool_file::{ExecConfig, HttpConfig, LimitsConfig, RetryConfig, SizeValue, TlsConfig};
use crate::config::{Diagnostic, HumanDuration, lint, params};
use crate::template::{Segment, Template};
use crate::tool::ToolTls;
use crate::tool::{
    ArgumentRules, BackendSpec, DiscoveredTool, ExecSpec, HttpBody, HttpSpec, Injected, McpDiscovery, McpServerSpec,
    McpSpec, McpTransport, OutputMode, Policy, ResourceLimits, RetryPolicy, StdinMode, Tool,
};
use crate::tool_name::ToolName;

/// Deepest schema nesting accepted at load (stack safety for the validator).
const MAX_SCHEMA_DEPTH: usize = 64;

/// Most attempts a tool may ask for.
const MAX_ATTEMPTS: u32 = 5;

/// A loaded, checked tool set.
#[derive(Debug, Default)]
pub struct Registry {
    by_name: HashMap<String, Arc<Tool>>,
    /// Load order: files sorted by name, tools in file order.
    order: Vec<Arc<Tool>>,
    /// Content hash of the tool files.
    pub version: String,
    pub warnings: Vec<Diagnostic>,
    /// Values resolved from `${env:}`/`${file:}`, to redact from logs and errors.
    pub secrets: Vec<String>,
    /// Masks [`Registry::secrets`] and their encoded forms; built once per registry.
    pub redactor: crate::redact::Redactor,
    /// The `${file:}` targets read (watched for rotation by the reloader).
    pub secret_files: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
    /// The `[[mcp]]` servers of this set (their tools are in the set as ordinary tools).
    pub mcp_servers: Vec<McpServerSpec>,
}

impl Registry {
    /// Loads and checks `dir` with the process environment.
    pub fn load(dir: &Path, defaults: &ToolDefaults) -> Result<Registry, Vec<Diagnostic>> {
        Self::build(load_dir(dir, &|name| std::env::var(name).ok()), defaults)
    }

    /// Checks the loaded tools. `Err` holds every diagnostic (errors and warnings). MCP servers
    /// contribute no tools (see [`Registry::build_with`]).
    pub fn build(loaded: LoadedDir, defaults: &ToolDefaults) -> Result<Registry, Vec<Diagnostic>> {
        Self::build_with(loaded, defaults, &McpDiscovery::new())
    }

    /// Checks the loaded tools and adds the tools the MCP servers listed (`discovered`, from
    /// [`crate::mcp`]). A problem of a discovered tool (a name collision, a schema that does
    /// not compile) is a warning that leaves that tool out: a server may change its list at any
    /// time, and that must not make the whole set invalid. `Err` holds every diagnostic.
    pub fn build_with(
        loaded: LoadedDir,
        defaults: &ToolDefaults,
        discovered: &McpDiscovery,
    ) -> Result<Registry, Vec<Diagnostic>> {
        let LoadedDir {
            tools,
            mcp,
            mut diagnostics,
            secrets,
            files,
            version,
        } = loaded;
        let mut by_name: HashMap<String, Arc<Tool>> = HashMap::new();
        let mut first_seen: HashMap<String, PathBuf> = HashMap::new();
        let mut order = Vec::new();
        for raw in tools {
            let name = raw.config.name.clone();
            if let Some(name) = &name {
                if let Some(first) = first_seen.get(name) {
                    diagnostics.push(Diagnostic::error(
                        &raw.file,
                        Some(name),
                        format!("tools[{}].name", raw.index),
                        format!("duplicate tool name `{name}` (first declared in {})", first.display()),
                    ));
                    continue;
                }
                first_seen.insert(name.clone(), raw.file.clone());
            }
            if let Some(tool) = check_tool(raw, defaults, &mut diagnostics) {
                let tool = Arc::new(tool);
                by_name.insert(tool.name.clone(), Arc::clone(&tool));
                order.push(tool);
            }
        }
        let servers = check_mcp_servers(&mcp, defaults, &mut diagnostics);
        for (server, policy, filter) in &servers {
            if let Some(listed) = discovered.get(&server.name) {
                for tool in mcp_tools(server, policy, filter, listed, &by_name, &mut diagnostics) {
                    let tool = Arc::new(tool);
                    by_name.insert(tool.name.clone(), Arc::clone(&tool));
                    order.push(tool);
                }
            }
        }
        let version = if servers.is_empty() {
            version
        } else {
            discovery_version(&version, discovered)
        };
        // A value that failed a check is quoted by its message: show the reference instead.
        redact_diagnostics(&secrets, &mut diagnostics);
        if diagnostics.iter().any(Diagnostic::is_error) {
            diagnostics.sort_by_key(|d| (d.file.clone(), d.severity, tool_index(&d.path)));
            return Err(diagnostics);
        }
        let mut secret_files: Vec<PathBuf> = secrets.iter().filter_map(|s| s.file.clone()).collect();
        secret_files.sort();
        secret_files.dedup();
        let values: Vec<String> = secrets.into_iter().map(|s| s.value).collect();
        let reg = Registry {
            by_name,
            order,
            version,
            warnings: diagnostics,
            redactor: crate::redact::Redactor::new(&values),
            secrets: values,
            secret_files,
            files,
            mcp_servers: servers.into_iter().map(|(s, _, _)| s).collect(),
        };
        Ok(reg)
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<Tool>> {
        self.by_name.get(name)
    }

    /// Every tool, in load order.
    pub fn tools(&self) -> &[Arc<Tool>] {
        &self.order
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when no tool is loaded.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// Collects the problems of one tool; `None` when it has any error.
struct Checker<'a> {
    file: &'a Path,
    prefix: String,
    name: Option<String>,
    errors: usize,
    out: &'a mut Vec<Diagnostic>,
    /// Keys already reported as unresolvable `${…}` references.
    unresolved: Vec<String>,
    /// `{state.…}` paths the tool's templates read: with the inject paths, the state it sees.
    state_paths: Vec<Vec<String>>,
}

/// The policy keys tools and `[[mcp]]` servers share (`timeout`, `deadline`, `kill_grace`,
/// `retry`, `concurrency`, the byte caps, `tags`), as written in either kind of entry.
struct PolicyKeys<'a> {
    timeout: Option<&'a str>,
    deadline: Option<&'a str>,
    kill_grace: Option<&'a str>,
    retry: Option<&'a RetryConfig>,
    concurrency: Option<u32>,
    max_output_bytes: Option<usize>,
    max_read_bytes: Option<usize>,
    tags: &'a [String],
}

/// [`PolicyKeys`] of a `ToolConfig` or an `McpConfig` (the same field names in both).
macro_rules! policy_keys {
    ($config:expr) => {
        PolicyKeys {
            timeout: $config.timeout.as_deref(),
            deadline: $config.deadline.as_deref(),
            kill_grace: $config.kill_grace.as_deref(),
            retry: $config.retry.as_ref(),
            concurrency: $config.concurrency,
            max_output_bytes: $config.max_output_bytes,
            max_read_bytes: $config.max_read_bytes,
            tags: &$config.tags,
        }
    };
}

/// The checked durations and retry settings of [`PolicyKeys`] (defaults filled in).
struct CheckedPolicy {
    timeout: Duration,
    deadline: Duration,
    kill_grace: Duration,
    max_attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
}

impl Checker<'_> {
    fn error(&mut self, key: &str, message: impl Into<String>) {
        let path = if key.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}.{key}", self.prefix)
        };
        self.errors += 1;
        if !self.unresolved.contains(&path) {
            self.out
                .push(Diagnostic::error(self.file, self.name.as_deref(), path, message));
        }
    }

    fn duration(&mut self, key: &str, value: Option<&str>, default: Duration) -> Duration {
        match value.map(HumanDuration::parse) {
            None => default,
            Some(Ok(d)) if d.0.is_zero() => {
                self.error(key, "must be greater than zero");
                default
            }
            Some(Ok(d)) => d.0,
            Some(Err(e)) => {
                self.error(key, e);
                default
            }
        }
    }

    /// Checks the policy keys tools and MCP servers share, reporting every problem; one rule
    /// set for both, so a server's `retry` or `deadline` means what a tool's does.
    fn policy(&mut self, k: PolicyKeys<'_>, default_timeout: Duration, defaults: &ToolDefaults) -> CheckedPolicy {
        let timeout = self.duration("timeout", k.timeout, default_timeout);
        let deadline = self.duration("deadline", k.deadline, defaults.deadline.0.max(timeout));
        if timeout > deadline {
            self.error("timeout", "the per-attempt timeout must not exceed the call `deadline`");
        }
        let kill_grace = self.duration("kill_grace", k.kill_grace, defaults.kill_grace.0);
        let r = k.retry;
        let max_attempts = r.and_then(|r| r.max_attempts).unwrap_or(defaults.retry.max_attempts);
        if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
            self.error(
                "retry.max_attempts",
                format!("must be between 1 and {MAX_ATTEMPTS} (it counts the first try)"),
            );
        }
        let backoff = self.duration(
            "retry.backoff",
            r.and_then(|r| r.backoff.as_deref()),
            defaults.retry.backoff.0,
        );
        let max_backoff = self.duration(
            "retry.max_backoff",
            r.and_then(|r| r.max_backoff.as_deref()),
            defaults.retry.max_backoff.0,
        );
        if backoff > max_backoff {
            self.error("retry.backoff", "must not exceed `retry.max_backoff`");
        }
        if k.concurrency == Some(0) {
            self.error("concurrency", "must be at least 1 (leave it out for no per-tool limit)");
        }
        for (key, v) in [
            ("max_output_bytes", k.max_output_bytes),
            ("max_read_bytes", k.max_read_bytes),
        ] {
            if v == Some(0) {
                self.error(key, "must be at least 1");
            }
        }
        for (i, tag) in k.tags.iter().enumerate() {
            if tag.trim().is_empty() || tag.contains(',') {
                self.error(&format!("tags[{i}]"), "tags must be non-empty and must not contain `,`");
            }
        }
        CheckedPolicy {
            timeout,
            deadline,
            kill_grace,
            max_attempts,
            backoff,
            max_backoff,
        }
    }
}

fn check_tool(raw: RawTool, defaults: &ToolDefaults, out: &mut Vec<Diagnostic>) -> Option<Tool> {
    let RawTool {
        file,
        index,
        config,
        unresolved,
    } = raw;
    let mut c = Checker {
        file: &file,
        prefix: format!("tools[{index}]"),
        name: config.name.clone(),
        errors: 0,
        out,
        unresolved,
        state_paths: Vec::new(),
    };
    let name = match &config.name {
        None => {
            c.error("name", "missing required key `name`");
            String::new()
        }
        // The portable rule every provider accepts ([`ToolName`]), so a loaded tool can be
        // declared to all of them.
        Some(n) if !ToolName::is_valid(n) => {
            c.error(
                "name",
                format!("`{n}` is not a valid tool name: use 1-64 of a-z A-Z 0-9 _ -"),
            );
            n.clone()
        }
        Some(n) => n.clone(),
    };

    // Schema: expand the short form, check the root, compile once.
    let parameters = match params::expand(config.parameters.as_ref()) {
        Ok(schema) => Some(schema),
        Err(errors) => {
            for (key, msg) in errors {
                let key = if key.is_empty() {
                    "parameters".to_owned()
                } else {
                    format!("parameters.{key}")
                };
                c.error(&key, msg);
            }
            None
        }
    };
    let validator = parameters.as_ref().and_then(|schema| compile_schema(schema, &mut c));
    let param_names: HashSet<String> = parameters
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();

    // Injected state: hidden from the model, so it must not shadow a model-visible parameter.
    let mut inject = Vec::new();
    for (key, source) in &config.inject {
        let ikey = format!("inject.{key}");
        if param_names.contains(key) {
            c.error(
                &ikey,
                format!("`{key}` is also a model-visible parameter; rename one of them"),
            );
        }
        // A trailing `?` marks the value optional: the call then runs without it.
        let (source, optional) = match source.strip_suffix('?') {
            Some(s) => (s, true),
            None => (source.as_str(), false),
        };
        match source.strip_prefix("state.") {
            Some(path) if !path.is_empty() && path.split('.').all(|p| !p.is_empty()) => {
                inject.push(Injected {
                    key: key.clone(),
                    path: path.split('.').map(str::to_owned).collect(),
                    optional,
                });
            }
            _ => c.error(
                &ikey,
                format!(
                    "`{source}` must name a state path, e.g. \"state.user_id\" (or \"state.user_id?\" when optional)"
                ),
            ),
        }
    }
    let arguments = parameters
        .as_ref()
        .map(|schema| argument_rules(schema, &mut c))
        .unwrap_or_default();
    let mut known_args = param_names.clone();
    known_args.extend(config.inject.keys().cloned());

    let backend = match (&config.http, &config.exec) {
        (Some(_), Some(_)) => {
            c.error("", "has both `http` and `exec`; a tool has exactly one backend");
            None
        }
        (None, None) => {
            c.error("", "has no backend: add an `http` or an `exec` table");
            None
        }
        (Some(http), None) => check_http(http, &known_args, &mut c).map(|mut spec| {
            spec.egress_allow = cidrs("egress_allow", &config.egress_allow, &mut c);
            spec.egress_deny = cidrs("egress_deny", &config.egress_deny, &mut c);
            BackendSpec::Http(spec)
        }),
        (None, Some(exec)) => {
            if !(config.egress_allow.is_empty() && config.egress_deny.is_empty()) {
                c.error("egress_allow", "egress rules apply to HTTP tools only");
            }
            check_exec(exec, &known_args, &mut c).map(BackendSpec::Exec)
        }
    };

    let default_timeout = if config.exec.is_some() {
        defaults.exec_timeout.0
    } else {
        defaults.timeout.0
    };
    let CheckedPolicy {
        timeout,
        deadline,
        kill_grace,
        max_attempts,
        backoff,
        max_backoff,
    } = c.policy(policy_keys!(config), default_timeout, defaults);
    if config.replay == Some(false) && config.idempotent != Some(true) {
        c.error(
            "replay",
            "only idempotent tools may opt out of replay (set `idempotent = true`, or remove `replay = false`)",
        );
    }

    if let Some(schema) = &parameters
        && !name.is_empty()
    {
        c.out.extend(lint::lint_tool(
            &file,
            &c.prefix,
            &name,
            config.description.as_deref(),
            schema,
        ));
    }
    if let Some(BackendSpec::Exec(e)) = &backend
        && !name.is_empty()
    {
        let first_extra = exec_command_len(config.exec.as_ref());
        let keyed: Vec<(String, &Template)> = e
            .args
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let key = if i + 1 < first_extra {
                    format!("exec.command[{}]", i + 1)
                } else {
                    format!("exec.args[{}]", i + 1 - first_extra)
                };
                (key, t)
            })
            .collect();
        c.out.extend(lint::lint_exec_args(
            &file,
            &c.prefix,
            &name,
            &keyed,
            e.allow_option_values,
        ));
    }
    if let (Some(BackendSpec::Exec(e)), false) = (&backend, param_names.is_empty())
        && e.stdin == StdinMode::None
        && e.args.iter().all(Template::is_literal)
    {
        c.out.push(Diagnostic::warning(
            &file,
            Some(&name),
            format!("{}.exec", c.prefix),
            "the tool has parameters but they never reach the program: set `stdin = \"json\"` or use `{placeholders}` in `args`",
        ));
    }

    if c.errors > 0 {
        return None;
    }
    let state_paths = referenced_state_paths(
        inject
            .iter()
            .map(|i| i.path.clone())
            .chain(std::mem::take(&mut c.state_paths)),
    );
    let state_paths_for_backend = state_paths.clone();
    Some(Tool {
        name,
        description: config.description.unwrap_or_default(),
        tags: config.tags,
        parameters: parameters?,
        validator: validator?,
        state_paths,
        inject,
        arguments,
        policy: Policy {
            timeout,
            deadline,
            idempotent: config.idempotent.unwrap_or(false),
            replay: config.replay.unwrap_or(true),
            retry: RetryPolicy {
                max_attempts,
                backoff,
                max_backoff,
            },
            concurrency: config.concurrency.map(|n| n as usize),
            max_read_bytes: config.max_read_bytes.unwrap_or(defaults.max_read_bytes),
            max_output_bytes: config.max_output_bytes.unwrap_or(defaults.max_output_bytes),
            kill_grace,
        },
        backend: match backend? {
            // The stdin envelope carries exactly the state the tool can see.
            BackendSpec::Exec(mut spec) => {
                spec.state_paths = state_paths_for_backend;
                BackendSpec::Exec(spec)
            }
            other => other,
        },
        source: file.clone(),
    })
}

/// What the model's arguments may carry besides the declared parameters (issue: mass
/// assignment — an undeclared `"admin": true` must not reach a JSON body). A schema with
/// `properties` that says nothing about `additionalProperties` (nor `unevaluatedProperties`) is
/// closed: other keys are refused. A schema that allows extras explicitly, or a free-form object
/// without `properties`, passes them on as sent.
fn argument_rules(schema: &Value, c: &mut Checker<'_>) -> ArgumentRules {
    let mut rules = ArgumentRules::default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return rules;
    };
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, prop) in props {
        if !required.contains(name.as_str()) && !accepts_null(schema, prop) {
            rules.null_means_absent.insert(name.clone());
        }
    }
    let open = schema.get("additionalProperties").is_some() || schema.get("unevaluatedProperties").is_some();
    if !open {
        rules.closed = Some(props.keys().cloned().collect());
        if let Some(patterns) = schema.get("patternProperties").and_then(Value::as_object) {
            for p in patterns.keys() {
                match regex::Regex::new(p) {
                    Ok(re) => rules.patterns.push(re),
                    Err(_) => c.error(
                        "parameters.patternProperties",
                        format!("`{p}` is not a regular expression this server can use"),
                    ),
                }
            }
        }
    }
    rules
}

/// Does a property's schema, on its own (with the root's `$defs`/`definitions` for `$ref`s),
/// accept `null`? A schema that does not compile on its own counts as "no".
fn accepts_null(root: &Value, prop: &Value) -> bool {
    let mut schema = prop.clone();
    if let Value::Object(map) = &mut schema {
        for defs in ["$defs", "definitions"] {
            if let Some(d) = root.get(defs)
                && !map.contains_key(defs)
            {
                map.insert(defs.to_owned(), d.clone());
            }
        }
    }
    jsonschema::options()
        .offline()
        .build(&schema)
        .is_ok_and(|v| v.is_valid(&Value::Null))
}

/// How many elements `exec.command` has (program included), to name argv elements by key.
fn exec_command_len(exec: Option<&ExecConfig>) -> usize {
    exec.and_then(|e| e.command.as_ref()).map_or(0, Vec::len)
}

/// The request-state paths a tool references — every `inject` source and every `{state.…}`
/// placeholder of its backend — in that order, without duplicates and without a path that lies
/// inside another one already listed. This is the only part of `state` the tool can see.
fn referenced_state_paths(paths: impl IntoIterator<Item = Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for p in paths {
        if out.iter().any(|known| p.starts_with(known)) {
            continue;
        }
        out.retain(|known| !known.starts_with(&p));
        out.push(p);
    }
    out
}

/// Compiles a tool schema: object root, bounded depth, no remote `$ref` (offline retriever),
/// Draft 2020-12 unless `$schema` names another draft.
fn compile_schema(schema: &Value, c: &mut Checker<'_>) -> Option<jsonschema::Validator> {
    if depth(schema) > MAX_SCHEMA_DEPTH {
        c.error(
            "parameters",
            format!("the schema is nested deeper than {MAX_SCHEMA_DEPTH} levels"),
        );
        return None;
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        c.error(
            "parameters",
            "the schema root must have `type = \"object\"` (tool arguments are always an object)",
        );
        return None;
    }
    match jsonschema::options().offline().build(&exact_integers(schema)) {
        Ok(v) => Some(v),
        Err(e) => {
            c.error(
                "parameters",
                format!("the schema does not compile: {e} (at {})", e.schema_path()),
            );
            None
        }
    }
}

/// Largest integer every JSON consumer reads exactly (2^53 - 1): past it, JavaScript and any
/// float-based parser silently round, so an id or amount would reach the backend changed.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// The schema the validator checks: `schema` with every `"type": "integer"` subschema bounded
/// to ±(2^53 − 1) (an existing tighter `minimum`/`maximum` is kept). The model-visible schema
/// is unchanged; a larger integer is refused as `invalid_arguments` rather than passed on to be
/// rounded.
fn exact_integers(schema: &Value) -> Value {
    fn says_integer(t: Option<&Value>) -> bool {
        match t {
            Some(Value::String(t)) => t == "integer",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
            _ => false,
        }
    }
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if says_integer(map.get("type")) {
                    let max = MAX_EXACT_INTEGER as f64;
                    let keep_max = map.get("maximum").and_then(Value::as_f64).is_some_and(|m| m <= max);
                    if !keep_max {
                        map.insert("maximum".into(), Value::from(MAX_EXACT_INTEGER));
                    }
                    let keep_min = map.get("minimum").and_then(Value::as_f64).is_some_and(|m| m >= -max);
                    if !keep_min {
                        map.insert("minimum".into(), Value::from(-(MAX_EXACT_INTEGER as i64)));
                    }
                }
                for (k, child) in map.iter_mut() {
                    // Data, not schemas: leave literal values alone.
                    if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                        walk(child);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut out = schema.clone();
    walk(&mut out);
    out
}

/// Rewrites every diagnostic so that no resolved `${}` value appears in it: a value is replaced
/// by the reference that produced it (`${env:TOKEN}`), its encoded forms by the mask. One pass
/// per text, so a reference put in is never rewritten again.
fn redact_diagnostics(secrets: &crate::config::interpolate::Secrets, diagnostics: &mut [Diagnostic]) {
    use crate::redact::{MASK, MIN_LEN, encoded_forms};
    let mut pairs: Vec<(String, String)> = Vec::new();
    for s in secrets.iter().filter(|s| s.value.len() >= MIN_LEN) {
        pairs.push((s.value.clone(), s.reference.clone()));
        pairs.extend(encoded_forms(&s.value).into_iter().map(|f| (f, MASK.to_owned())));
    }
    if pairs.is_empty() {
        return;
    }
    let ac = aho_corasick::AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::LeftmostLongest)
        .build(pairs.iter().map(|(needle, _)| needle));
    let rewrite = |text: &str| -> String {
        match &ac {
            Ok(ac) => {
                let mut out = String::with_capacity(text.len());
                ac.replace_all_with(text, &mut out, |m, _, dst| {
                    dst.push_str(pairs.get(m.pattern().as_usize()).map_or(MASK, |(_, r)| r.as_str()));
                    true
                });
                out
            }
            // Cannot happen at secret sizes; masking everything known is the safe fallback.
            Err(_) => {
                let mut out = text.to_owned();
                for (needle, _) in &pairs {
                    out = out.replace(needle.as_str(), MASK);
                }
                out
            }
        }
    };
    for d in diagnostics {
        d.message = rewrite(&d.message);
        if let Some(t) = &d.tool {
            d.tool = Some(rewrite(t));
        }
    }
}

/// The tool index of a key path (`tools[3].http` → 3), for sorting diagnostics.
fn tool_index(path: &str) -> usize {
    path.strip_prefix("tools[")
        .and_then(|rest| rest.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Parses a template and checks that its placeholders name arguments.
fn template(key: &str, text: &str, known: &HashSet<String>, c: &mut Checker<'_>) -> Option<Template> {
    match Template::parse(text) {
        Ok(t) => {
            let mut ok = true;
            for seg in t.placeholders() {
                if let Segment::State(path) = seg {
                    c.state_paths.push(path.clone());
                }
                if let Segment::Arg(name) = seg
                    && !known.contains(name)
                {
                    c.error(key, format!("placeholder `{{{name}}}` names no declared parameter or `inject` key (use `{{state.…}}` for request state)"));
                    ok = false;
                }
            }
            ok.then_some(t)
        }
        Err(e) => {
            c.error(key, e.to_string());
            None
        }
    }
}

fn check_http(http: &HttpConfig, known: &HashSet<String>, c: &mut Checker<'_>) -> Option<HttpSpec> {
    let method = match http.method.as_deref().unwrap_or("POST").to_ascii_uppercase().as_str() {
        "GET" => reqwest::Method::GET,
        "POST" => reqwest::Method::POST,
        "PUT" => reqwest::Method::PUT,
        "PATCH" => reqwest::Method::PATCH,
        "DELETE" => reqwest::Method::DELETE,
        "HEAD" => reqwest::Method::HEAD,
        _ => {
            // Quoted as written: an upper-cased `${}` value would escape the diagnostics redaction.
            let written = http.method.as_deref().unwrap_or_default();
            c.error(
                "http.method",
                format!("`{written}` is not supported; use GET, POST, PUT, PATCH, DELETE or HEAD"),
            );
            reqwest::Method::POST
        }
    };
    let url = match &http.url {
        None => {
            c.error("http.url", "missing required key `url`");
            None
        }
        Some(u) => template("http.url", u, known, c).filter(|t| check_url_shape(t, c)),
    };
    let mut query = Vec::new();
    for (k, v) in &http.query {
        if let Some(t) = template(&format!("http.query.{k}"), v, known, c) {
            query.push((k.clone(), t));
        }
    }
    let mut headers = Vec::new();
    for (k, v) in &http.headers {
        let key = format!("http.headers.{k}");
        if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
            c.error(&key, format!("`{k}` is not a valid header name"));
        }
        if let Some(t) = template(&key, v, known, c) {
            headers.push((k.clone(), t));
        }
    }
    let has_body = !matches!(
        method,
        reqwest::Method::GET | reqwest::Method::HEAD | reqwest::Method::DELETE
    );
    let body = match (&http.body, has_body) {
        (Some(_), false) => {
            c.error(
                "http.body",
                format!("{method} requests carry no body here; use query or url placeholders"),
            );
            HttpBody::None
        }
        (Some(tpl), true) => {
            check_body_template(tpl, "http.body", known, c);
            HttpBody::Template(tpl.clone())
        }
        (None, true) => HttpBody::Arguments,
        (None, false) => HttpBody::None,
    };
    let https = http.url.as_deref().is_some_and(|u| u.starts_with("https://"));
    let tls = http.tls.as_ref().and_then(|t| check_tls(t, https, c));
    let url = url?;
    // Only a URL `build_url` would accept as it is; anything else keeps failing per call.
    let static_url = url
        .is_literal()
        .then(|| {
            crate::backend::http::parse_url(&url.render(
                &serde_json::Map::new(),
                &serde_json::Value::Null,
                str::to_owned,
            ))
            .ok()
        })
        .flatten();
    Some(HttpSpec {
        method,
        url,
        static_url,
        query,
        headers,
        body,
        egress_allow: Vec::new(),
        egress_deny: Vec::new(),
        tls,
        allow_path_traversal: http.allow_path_traversal.unwrap_or(false),
    })
}

/// Reads and checks a tool's own TLS files (relative to the tools file's folder), so a missing
/// file, a file without PEM certificates or key, or a key that does not match its certificate
/// is a load error. `None` when nothing is set or something is wrong.
fn check_tls(tls: &TlsConfig, https: bool, c: &mut Checker<'_>) -> Option<Arc<ToolTls>> {
    let base = c.file.parent().unwrap_or(Path::new(".")).to_owned();
    let mut path = |key: &str, v: &Option<String>| -> Option<PathBuf> {
        match v.as_deref() {
            None => None,
            Some("") => {
                c.error(
                    &format!("http.tls.{key}"),
                    "must name a PEM file (or leave the key out)",
                );
                None
            }
            Some(p) => Some(base.join(p)),
        }
    };
    let paths = TlsPaths {
        ca_file: path("ca_file", &tls.ca_file),
        client_cert: path("client_cert", &tls.client_cert),
        client_key: path("client_key", &tls.client_key),
    };
    if paths.is_empty() {
        return None;
    }
    if !https {
        c.error(
            "http.tls",
            "TLS settings apply to https:// URLs only; use an https:// `url` or remove `tls`",
        );
        return None;
    }
    let material = match paths.load() {
        Ok(m) => m,
        Err(errors) => {
            for e in errors {
                c.error(&format!("http.tls.{}", e.key), e.message);
            }
            return None;
        }
    };
    if let Err(e) = tls::client_config(&[&material]) {
        c.error("http.tls", e);
        return None;
    }
    Some(Arc::new(ToolTls::new(material)))
}

/// Placeholders may fill the path and query of a URL, never its scheme or host: the part up to
/// the first `/` after `://` must be literal.
fn check_url_shape(t: &Template, c: &mut Checker<'_>) -> bool {
    let Some(Segment::Literal(first)) = t.segments.first() else {
        c.error("http.url", "must start with a literal `http://host` or `https://host`");
        return false;
    };
    let Some((scheme, rest)) = first.split_once("://") else {
        c.error("http.url", "must be an absolute http:// or https:// URL");
        return false;
    };
    if scheme != "http" && scheme != "https" {
        c.error(
            "http.url",
            format!("scheme `{scheme}` is not supported; use http or https"),
        );
        return false;
    }
    let host_end = rest.find(['/', '?', '#']);
    if host_end.is_none() && !t.is_literal() {
        c.error(
            "http.url",
            "placeholders may not be part of the host: put a `/` after the host",
        );
        return false;
    }
    let host = &rest[..host_end.unwrap_or(rest.len())];
    if host.is_empty() {
        c.error("http.url", "has no host");
        return false;
    }
    true
}

fn check_body_template(v: &Value, path: &str, known: &HashSet<String>, c: &mut Checker<'_>) {
    match v {
        Value::String(s) => {
            template(path, s, known, c);
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| check_body_template(v, &format!("{path}[{i}]"), known, c)),
        Value::Object(o) => o
            .iter()
            .for_each(|(k, v)| check_body_template(v, &format!("{path}.{k}"), known, c)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn cidrs(key: &str, values: &[String], c: &mut Checker<'_>) -> Vec<ipnet::IpNet> {
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| match v.parse() {
            Ok(net) => Some(net),
            Err(_) => {
                c.error(
                    &format!("{key}[{i}]"),
                    format!("`{v}` is not a CIDR, e.g. \"10.0.0.0/8\" or \"127.0.0.1/32\""),
                );
                None
            }
        })
        .collect()
}

fn check_exec(exec: &ExecConfig, known: &HashSet<String>, c: &mut Checker<'_>) -> Option<ExecSpec> {
    let command = exec.command.as_deref().unwrap_or_default();
    let program = match command.first() {
        None => {
            c.error(
                "exec.command",
                "must name a program: `command = [\"python3\", \"script.py\"]` (never a shell string)",
            );
            None
        }
        Some(p) if p.trim().is_empty() => {
            c.error("exec.command[0]", "the program is empty");
            None
        }
        Some(p) if p.contains('{') => {
            c.error(
                "exec.command[0]",
                "the program must be literal; put `{placeholders}` in later arguments",
            );
            None
        }
        Some(p) => Some(p.clone()),
    };
    let mut args = Vec::new();
    let fixed = command
        .iter()
        .skip(1)
        .enumerate()
        .map(|(i, a)| (format!("exec.command[{}]", i + 1), a));
    let extra = exec
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("exec.args[{i}]"), a));
    for (key, a) in fixed.chain(extra) {
        if a.contains('\0') {
            c.error(&key, "contains a NUL byte");
        } else if let Some(t) = template(&key, a, known, c) {
            args.push(t);
        }
    }
    let stdin = match exec.stdin.as_deref().unwrap_or("none") {
        "json" => StdinMode::Json,
        "none" => StdinMode::None,
        other => {
            c.error(
                "exec.stdin",
                format!("`{other}` is not a stdin mode; use \"json\" or \"none\""),
            );
            StdinMode::None
        }
    };
    let output = match exec.output.as_deref().unwrap_or("text") {
        "text" => OutputMode::Text,
        "json" => OutputMode::Json,
        other => {
            c.error(
                "exec.output",
                format!("`{other}` is not an output mode; use \"text\" or \"json\""),
            );
            OutputMode::Text
        }
    };
    let mut env = Vec::new();
    for (k, v) in &exec.env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            c.error(
                &format!("exec.env.{k}"),
                "environment names must be non-empty without `=` or NUL; values without NUL",
            );
        } else {
            env.push((k.clone(), v.clone()));
        }
    }
    let cwd = exec.cwd.as_ref().map(PathBuf::from);
    let limits = exec.limits.as_ref().map(|l| check_limits(l, c)).unwrap_or_default();
    Some(ExecSpec {
        program: program?,
        args,
        stdin,
        env,
        cwd,
        output,
        allow_option_values: exec.allow_option_values.unwrap_or(false),
        limits,
        state_paths: Vec::new(),
    })
}

/// Most of any one limit: far above anything useful, low enough to never overflow `rlim_t`.
const MAX_LIMIT: u64 = 1 << 62;

/// Checks `exec.limits`; every value must be a positive number within range.
fn check_limits(l: &LimitsConfig, c: &mut Checker<'_>) -> ResourceLimits {
    let address_space = l.address_space.as_ref().and_then(|v| match parse_size(v) {
        Ok(n) if n < 1024 * 1024 => {
            c.error(
                "exec.limits.address_space",
                "must be at least 1MiB (no program starts with less)",
            );
            None
        }
        Ok(n) if n > MAX_LIMIT => {
            c.error("exec.limits.address_space", "is too large");
            None
        }
        Ok(n) => Some(n),
        Err(e) => {
            c.error("exec.limits.address_space", e);
            None
        }
    });
    let cpu_seconds = l.cpu.as_deref().and_then(|text| match HumanDuration::parse(text) {
        Ok(d) if d.0.is_zero() => {
            c.error("exec.limits.cpu", "must be greater than zero");
            None
        }
        // RLIMIT_CPU counts whole seconds: round up so "500ms" still allows the process to run.
        Ok(d) => Some(d.0.as_secs() + u64::from(d.0.subsec_nanos() > 0)),
        Err(e) => {
            c.error("exec.limits.cpu", e);
            None
        }
    });
    let mut count = |key: &str, v: Option<u64>| match v {
        Some(0) => {
            c.error(key, "must be at least 1 (leave it out for no limit)");
            None
        }
        Some(n) if n > MAX_LIMIT => {
            c.error(key, "is too large");
            None
        }
        other => other,
    };
    ResourceLimits {
        address_space,
        cpu_seconds,
        open_files: count("exec.limits.open_files", l.open_files),
        processes: count("exec.limits.processes", l.processes),
    }
}

/// Parses a size: a number of bytes, or a string with a unit — B, KiB, MiB, GiB, TiB (powers of
/// 1024) or KB, MB, GB, TB (powers of 1000).
fn parse_size(v: &SizeValue) -> Result<u64, String> {
    let text = match v {
        SizeValue::Bytes(n) => return Ok(*n),
        SizeValue::Text(t) => t.trim(),
    };
    let split = text.find(|ch: char| !ch.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("`{text}` is not a size; write e.g. \"512MiB\", \"2GiB\" or a number of bytes");
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let factor: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(factor).ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServerConfig;

    fn defaults() -> ToolDefaults {
        ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap())
            .unwrap()
            .defaults
    }

    fn build(toml: &str) -> Result<Registry, Vec<Diagnostic>> {
        let mut loaded = LoadedDir::default();
        crate::config::load::load_file(Path::new("t.toml"), toml, &|_| None, &mut loaded);
        Registry::build(loaded, &defaults())
    }

    #[test]
    fn builds_an_http_tool_with_defaults_applied() {
        let reg = build(
            r#"[[tools]]
name = "get_weather"
description = "Current weather for a city. Use when the user asks about the weather."
parameters = { city = { type = "string", description = "City name" } }
[tools.http]
method = "GET"
url = "http://127.0.0.1:1/w/{city}"
"#,
        )
        .unwrap();
        let t = reg.get("get_weather").unwrap();
        assert_eq!(t.policy.timeout, Duration::from_secs(10));
        assert_eq!(t.policy.retry.max_attempts, 3);
        assert!(!t.policy.idempotent);
        assert!(reg.warnings.is_empty(), "{:?}", reg.warnings);
        assert!(matches!(&t.backend, BackendSpec::Http(h) if h.body == HttpBody::None));
    }

    #[test]
    fn sizes_parse_with_binary_and_decimal_units() {
        let t = |s: &str| parse_size(&SizeValue::Text(s.to_owned()));
        assert_eq!(t("512MiB"), Ok(512 << 20));
        assert_eq!(t("2 GiB"), Ok(2 << 30));
        assert_eq!(t("100MB"), Ok(100_000_000));
        assert_eq!(t("4096"), Ok(4096));
        assert_eq!(parse_size(&SizeValue::Bytes(7)), Ok(7));
        assert!(t("lots").is_err());
        assert!(t("1.5GiB").is_err());
        assert!(t("99999999999TiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn referenced_state_paths_are_inject_sources_and_state_placeholders() {
        let p = |s: &str| s.split('.').map(str::to_owned).collect::<Vec<_>>();
        let paths = referenced_state_paths([p("user.id"), p("org.id"), p("user.id"), p("org")]);
        // `org` covers `org.id`; `user.id` appears once.
        assert_eq!(
            paths,
            vec![vec!["user".to_owned(), "id".to_owned()], vec!["org".to_owned()]]
        );
    }

    #[test]
    fn exec_options_and_limits_are_read_and_checked() {
        let reg = build(
            r#"[[tools]]
name = "search_files"
description = "Search the files for a pattern and return the matching lines."
parameters = { pattern = { type = "string", description = "The pattern." } }
[tools.exec]
command = ["grep", "--", "{pattern}", "file"]
allow_option_values = true
limits = { address_space = "64MiB", cpu = "1500ms", open_files = 32, processes = 8 }
"#,
        )
        .unwrap();
        let BackendSpec::Exec(e) = &reg.get("search_files").unwrap().backend else {
            panic!("an exec tool");
        };
        assert!(e.allow_option_values);
        assert_eq!(
            e.limits,
            ResourceLimits {
                address_space: Some(64 << 20),
                cpu_seconds: Some(2),
                open_files: Some(32),
                processes: Some(8)
            }
        );
        let errs = build(
            "[[tools]]\nname = \"run_x\"\n[tools.exec]\ncommand = [\"x\"]\nlimits = { address_space = 1000, processes = 0 }\n",
        )
        .unwrap_err();
        let paths: Vec<&str> = errs.iter().filter(|d| d.is_error()).map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            vec!["tools[0].exec.limits.address_space", "tools[0].exec.limits.processes"]
        );
    }

    #[test]
    fn placeholder_in_host_is_rejected() {
        let errs =
            build("[[tools]]\nname = \"get_x\"\nparameters = { h = \"string\" }\n[tools.http]\nurl = \"http://{h}\"\n")
                .unwrap_err();
        assert!(
            errs.iter()
                .any(|d| d.path == "tools[0].http.url" && d.message.contains("host")),
            "{errs:?}"
        );
    }
}

/// The checked `[[mcp]]` servers of `loaded` (the valid ones; problems are not reported here —
/// [`Registry::build_with`] reports them). What [`crate::mcp`] connects to before the build.
pub fn mcp_servers(loaded: &LoadedDir, defaults: &ToolDefaults) -> Vec<McpServerSpec> {
    let mut ignored = Vec::new();
    check_mcp_servers(&loaded.mcp, defaults, &mut ignored)
        .into_iter()
        .map(|(s, _, _)| s)
        .collect()
}

/// Most bytes of one message read from an MCP server: room for a result of `max_read_bytes`
/// with its files base64-encoded inside JSON, and at least 16 MiB, so that a large result
/// reaches the mapping (which cuts it to `max_read_bytes`) instead of being dropped whole.
pub fn max_mcp_message(max_read_bytes: usize) -> usize {
    max_read_bytes
        .saturating_mul(2)
        .saturating_add(64 * 1024)
        .max(16 * 1024 * 1024)
}

/// Longest `[[mcp]]` name: leaves room for the tool's own name in the 64-character rule.
const MAX_MCP_NAME: usize = 32;

/// Which of a server's tools are taken (`include`, `exclude`).
#[derive(Debug, Clone, Default)]
struct ToolFilter {
    include: Vec<String>,
    exclude: Vec<String>,
    tags: Vec<String>,
}

impl ToolFilter {
    fn admits(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| glob_match(p, name)))
            && !self.exclude.iter().any(|p| glob_match(p, name))
    }
}

/// `*` (any run) and `?` (one character) glob; anything else matches itself.
fn glob_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matcher with one backtrack point (linear-ish, no recursion).
    let (mut pi, mut ni, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

/// Checks every `[[mcp]]` entry (every problem reported) and returns the valid servers with
/// the policy their tools get.
fn check_mcp_servers(
    raw: &[RawMcp],
    defaults: &ToolDefaults,
    out: &mut Vec<Diagnostic>,
) -> Vec<(McpServerSpec, Policy, ToolFilter)> {
    let mut seen: HashMap<String, PathBuf> = HashMap::new();
    let mut servers = Vec::new();
    for server in raw {
        let config = &server.config;
        let mut c = Checker {
            file: &server.file,
            prefix: format!("mcp[{}]", server.index),
            name: config.name.clone(),
            errors: 0,
            out,
            unresolved: server.unresolved.clone(),
            state_paths: Vec::new(),
        };
        let name = match &config.name {
            None => {
                c.error("name", "missing required key `name`");
                String::new()
            }
            Some(n) if n.is_empty() || n.len() > MAX_MCP_NAME || !ToolName::is_valid(n) => {
                c.error(
                    "name",
                    format!("`{n}` is not a valid MCP server name: use 1-{MAX_MCP_NAME} of a-z A-Z 0-9 _ -"),
                );
                n.clone()
            }
            Some(n) => {
                if let Some(first) = seen.get(n) {
                    c.error(
                        "name",
                        format!(
                            "duplicate MCP server name `{n}` (first declared in {})",
                            first.display()
                        ),
                    );
                }
                seen.insert(n.clone(), server.file.clone());
                n.clone()
            }
        };
        let transport = match (&config.command, &config.url) {
            (Some(_), Some(_)) => {
                c.error("", "has both `command` and `url`; an MCP server has exactly one");
                None
            }
            (None, None) => {
                c.error("", "has neither `command` (stdio) nor `url` (Streamable HTTP)");
                None
            }
            (Some(command), None) => {
                if !config.headers.is_empty() {
                    c.error("headers", "headers apply to `url` servers only");
                }
                match command.split_first() {
                    Some((program, args)) if !program.is_empty() => Some(McpTransport::Stdio {
                        program: program.clone(),
                        args: args.to_vec(),
                        env: config.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                        cwd: config.cwd.as_ref().map(|d| {
                            let d = PathBuf::from(d);
                            if d.is_relative() {
                                server.file.parent().unwrap_or(Path::new(".")).join(d)
                            } else {
                                d
                            }
                        }),
                    }),
                    _ => {
                        c.error("command", "must name a program: [\"program\", \"arg\", …]");
                        None
                    }
                }
            }
            (None, Some(url)) => {
                if !config.env.is_empty() || config.cwd.is_some() {
                    c.error("env", "`env` and `cwd` apply to `command` servers only");
                }
                for k in config.headers.keys() {
                    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                        c.error(&format!("headers.{k}"), format!("`{k}` is not a valid header name"));
                    }
                }
                match reqwest::Url::parse(url) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(McpTransport::Http {
                        url: url.clone(),
                        headers: config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    }),
                    // The URL is not quoted: it may carry a `${}` secret.
                    _ => {
                        c.error("url", "must be an absolute http:// or https:// URL");
                        None
                    }
                }
            }
        };
        let CheckedPolicy {
            timeout,
            deadline,
            kill_grace,
            max_attempts,
            backoff,
            max_backoff,
        } = c.policy(policy_keys!(config), defaults.timeout.0, defaults);
        for (key, list) in [("include", &config.include), ("exclude", &config.exclude)] {
            for (i, p) in list.iter().enumerate() {
                if p.is_empty() {
                    c.error(&format!("{key}[{i}]"), "must not be empty");
                }
            }
        }
        if c.errors > 0 {
            continue;
        }
        let Some(transport) = transport else { continue };
        let max_read_bytes = config.max_read_bytes.unwrap_or(defaults.max_read_bytes);
        let policy = Policy {
            timeout,
            deadline,
            idempotent: config.idempotent.unwrap_or(false),
            replay: true,
            retry: RetryPolicy {
                max_attempts,
                backoff,
                max_backoff,
            },
            concurrency: config.concurrency.map(|n| n as usize),
            max_read_bytes,
            max_output_bytes: config.max_output_bytes.unwrap_or(defaults.max_output_bytes),
            kill_grace,
        };
        servers.push((
            McpServerSpec {
                name,
                transport,
                max_message_bytes: max_mcp_message(max_read_bytes),
                kill_grace,
                source: server.file.clone(),
            },
            policy,
            ToolFilter {
                include: config.include.clone(),
                exclude: config.exclude.clone(),
                tags: config.tags.clone(),
            },
        ));
    }
    servers
}

/// The tools of one server, as registry tools; a tool that cannot join (collision, bad schema)
/// is left out with a warning.
fn mcp_tools(
    server: &McpServerSpec,
    policy: &Policy,
    filter: &ToolFilter,
    listed: &[DiscoveredTool],
    taken: &HashMap<String, Arc<Tool>>,
    out: &mut Vec<Diagnostic>,
) -> Vec<Tool> {
    let mut tools: Vec<Tool> = Vec::new();
    let mut seen: HashMap<String, String> = HashMap::new();
    for listed in listed.iter().filter(|t| filter.admits(&t.name)) {
        let name = crate::tool_name::mcp_tool_name(&server.name, &listed.name);
        let warn = |out: &mut Vec<Diagnostic>, message: String| {
            out.push(Diagnostic::warning(
                &server.source,
                Some(&name),
                format!("mcp.{}", server.name),
                message,
            ));
        };
        if let Some(first) = seen.get(&name) {
            warn(
                out,
                format!(
                    "MCP tool `{}` of server `{}` maps to `{name}`, like `{first}`: left out",
                    listed.name, server.name
                ),
            );
            continue;
        }
        if taken.contains_key(&name) {
            warn(
                out,
                format!(
                    "MCP tool `{}` of server `{}` maps to `{name}`, which another tool already has: left out",
                    listed.name, server.name
                ),
            );
            continue;
        }
        seen.insert(name.clone(), listed.name.clone());
        let mut schema_errors = Vec::new();
        let mut c = Checker {
            file: &server.source,
            prefix: format!("mcp.{}", server.name),
            name: Some(name.clone()),
            errors: 0,
            out: &mut schema_errors,
            unresolved: Vec::new(),
            state_paths: Vec::new(),
        };
        // Some servers leave out the root `type`; an object is what tool arguments always are.
        let mut parameters = listed.input_schema.clone();
        if let Value::Object(map) = &mut parameters
            && !map.contains_key("type")
        {
            map.insert("type".into(), Value::from("object"));
        }
        let validator = compile_schema(&parameters, &mut c);
        let arguments = argument_rules(&parameters, &mut c);
        let Some(validator) = validator.filter(|_| c.errors == 0) else {
            for d in schema_errors {
                warn(
                    out,
                    format!("MCP tool `{}` left out: its inputSchema: {}", listed.name, d.message),
                );
            }
            continue;
        };
        tools.push(Tool {
            name,
            description: listed.description.clone().unwrap_or_default(),
            tags: filter.tags.clone(),
            parameters,
            validator,
            inject: Vec::new(),
            arguments,
            state_paths: Vec::new(),
            policy: policy.clone(),
            backend: BackendSpec::Mcp(McpSpec {
                server: server.name.clone(),
                tool: listed.name.clone(),
            }),
            source: server.source.clone(),
        });
    }
    tools
}

/// The version of a set with MCP servers: the files' version and what the servers listed, so
/// that a changed tool list swaps the set like a changed file.
fn discovery_version(files_version: &str, discovered: &McpDiscovery) -> String {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    hasher.update(files_version.as_bytes());
    hasher.update(serde_json::to_vec(discovered).unwrap_or_default());
    hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod mcp_tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("get_*", "get_time"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("a?c", "ac"));
        assert!(glob_match("*time*", "get_current_time_now"));
        assert!(!glob_match("exact", "exact2"));
        assert!(glob_match("exact", "exact"));
    }
}
