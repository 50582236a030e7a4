//! The `toolwire` binary: parses the command line and runs the library. The only place that
//! uses `anyhow`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use tokio_util::sync::CancellationToken;
use toolwire::api::AppState;
use toolwire::backend::reaper::Reaper;
use toolwire::backend::shim::{self, ExecShim};
use toolwire::check::CheckReport;
use toolwire::cli::{Cli, Command, ConfigArgs};
use toolwire::config::ServerConfig;
use toolwire::executor::Executor;
use toolwire::mcp::McpHub;
use toolwire::provider::catalog::{self, ToolFilter};
use toolwire::provider::{DeclareOptions, Provider};
use toolwire::registry::Registry;
use toolwire::tool::ResourceLimits;
use toolwire::turn::{self, ExecOptions, ExecuteRequest};
use toolwire::{server, shutdown, telemetry};

/// mimalloc instead of glibc's malloc for the server (see its entry in Cargo.toml): a fifth of
/// the allocator's instructions on the request path, for some more resident memory.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Longest wait for the last spans to reach the collector at shutdown (after the drain).
const TRACE_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

fn main() -> ExitCode {
    // The exec shim runs once per subprocess tool call: its own command line is read without
    // clap (see `shim::parse_args`); anything unusual falls through to clap below.
    if let Some((limits, command)) = shim::parse_args(std::env::args_os().skip(1)) {
        return run_shim(&limits, &command);
    }
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::ExecShim(args) => {
            let limits = ResourceLimits {
                address_space: args.address_space,
                cpu_seconds: args.cpu,
                open_files: args.open_files,
                processes: args.processes,
            };
            Ok(run_shim(&limits, &args.command))
        }
        Command::Check(args) => {
            let config = load_config(&args.config)?;
            // MCP servers are started (bounded by the hub's first wait) so their tools are listed.
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let (result, mcp) = runtime.block_on(async {
                match McpHub::from_config(&config, Default::default()) {
                    Ok(hub) => {
                        let result = toolwire::mcp::load_registry(&config.tools_dir, &config.defaults, &hub).await;
                        let status = hub.status();
                        hub.shut_down().await;
                        (result, status)
                    }
                    // The server config's HTTP client cannot be built (e.g. a bad `ca_file`):
                    // still report the tools; MCP servers then contribute none.
                    Err(e) => {
                        eprintln!("warning: MCP servers not started: {e}");
                        (Registry::load(&config.tools_dir, &config.defaults), Vec::new())
                    }
                }
            });
            let report = CheckReport {
                config: &config,
                result: &result,
                mcp: &mcp,
            };
            if args.json {
                write_stdout(&format!("{}\n", serde_json::to_string_pretty(&report.json())?))?;
            } else {
                write_stdout(&report.text())?;
            }
            Ok(if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Schemas(args) => {
            let config = load_config(&args.config)?;
            let provider = Provider::from_name(&args.provider).with_context(|| {
                let names: Vec<&str> = Provider::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown provider `{}`; use one of {}", args.provider, names.join(", "))
            })?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let registry = runtime.block_on(async {
                let hub = McpHub::from_config(&config, Default::default())?;
                let registry = load_registry_mcp(&config, &hub).await;
                hub.shut_down().await;
                registry
            })?;
            let opts = DeclareOptions {
                strict: args.strict,
                gemini_openapi: args.gemini_openapi,
            };
            let filter = ToolFilter {
                tags: args.tags,
                tools: args.tools,
            };
            let declared = catalog::declarations(&registry, provider, &opts, &filter)
                .map_err(|unknown| anyhow::anyhow!("unknown tools: {}", unknown.join(", ")))?;
            for w in &declared.warnings {
                eprintln!("warning: {} ({}): {}", w.tool, w.provider, w.message);
            }
            write_stdout(&format!("{}\n", serde_json::to_string_pretty(&declared.tools)?))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Call(args) => {
            non_dumpable()?;
            let config = load_config(&args.config)?;
            let arguments: serde_json::Value = serde_json::from_str(&args.args).context("--args is not valid JSON")?;
            let state = parse_state(args.state.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let result = runtime.block_on(async {
                let executor = Executor::new(&config)?.with_exec_shim(exec_shim());
                let hub = McpHub::from_config(&config, executor.exec_context())?;
                let registry = load_registry_mcp(&config, &hub).await?;
                let executor = executor.with_mcp(Some(hub.caller()));
                let cancel = CancellationToken::new();
                let ctx = turn::Context {
                    executor: &executor,
                    registry: &registry,
                    principal: turn::ANONYMOUS,
                    cancel: &cancel,
                };
                let result = turn::call_tool(ctx, &args.name, Some(&arguments), &state).await;
                hub.shut_down().await;
                anyhow::Ok(result)
            })?;
            write_stdout(&format!("{}\n", serde_json::to_string_pretty(&result)?))?;
            Ok(if result.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Execute(args) => {
            non_dumpable()?;
            let config = load_config(&args.config)?;
            let (completion, completion_stream) = match &args.stream {
                Some(path) => (None, Some(stream_input(read_input(Some(path))?))),
                None => {
                    let input = read_input(None)?;
                    match serde_json::from_str::<serde_json::Value>(&input) {
                        Ok(v @ serde_json::Value::Object(_)) => (Some(v), None),
                        _ => (None, Some(stream_input(input))),
                    }
                }
            };
            let req = ExecuteRequest {
                provider: args.provider,
                completion,
                completion_stream,
                state: parse_state(args.state.as_deref())?,
                options: ExecOptions::default(),
            };
            let prepared = turn::prepare(&req, config.limits.calls_per_request)?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let resp = runtime.block_on(async {
                let executor = Executor::new(&config)?.with_exec_shim(exec_shim());
                let hub = McpHub::from_config(&config, executor.exec_context())?;
                let registry = load_registry_mcp(&config, &hub).await?;
                let executor = executor.with_mcp(Some(hub.caller()));
                let cancel = CancellationToken::new();
                let ctx = turn::Context {
                    executor: &executor,
                    registry: &registry,
                    principal: turn::ANONYMOUS,
                    cancel: &cancel,
                };
                let resp = turn::run(ctx, prepared, &req).await;
                hub.shut_down().await;
                anyhow::Ok(resp)
            })?;
            write_stdout(&format!("{}\n", serde_json::to_string_pretty(&resp)?))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Assemble(args) => {
            let named = match &args.provider {
                Some(name) => Some(
                    toolwire::provider::Provider::from_name(name)
                        .ok_or_else(|| anyhow::anyhow!(turn::ExecuteError::UnknownProvider(name.clone())))?,
                ),
                None => None,
            };
            let path = args.file.as_deref().filter(|p| *p != std::path::Path::new("-"));
            let input = stream_input(read_input(path)?);
            let (_provider, assembled) = turn::assemble_stream(named, &input)?;
            for w in &assembled.warnings {
                eprintln!("warning: {w}");
            }
            write_stdout(&format!("{}\n", serde_json::to_string_pretty(&assembled.completion)?))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health(args) => {
            let timeout = std::time::Duration::from_millis(args.timeout_ms);
            match toolwire::health::probe(args.addr, timeout) {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(e) => {
                    eprintln!("not ready: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Serve(args) => {
            non_dumpable()?;
            let mut config = load_config(&args.config)?;
            if let Some(listen) = args.listen {
                config.listen = listen;
                config.check_exposure()?;
            }
            if let Some(format) = args.log_format {
                config.log_format = format;
            }
            // Client connections are served by the serving workers (`server::workers`, one
            // runtime each); this runtime accepts, reloads, runs the MCP hub, the reaper and the
            // trace export, so one thread (plus tokio's blocking pool) is enough.
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            // Inside the runtime: the trace exporter's batch task runs on it.
            let traces = {
                let _runtime = runtime.enter();
                telemetry::init_with_traces(&config.log, config.log_format)?
            };
            let served = runtime.block_on(async move {
                let (state, hub) = start_state(config).await?;
                let listener = server::bind(state.config.listen, state.config.listen_backlog)
                    .with_context(|| format!("binding {}", state.config.listen))?;
                let addr = listener.local_addr()?;
                {
                    let registry = state.registry.load();
                    let workers = state.config.worker_count();
                    tracing::info!(%addr, tools = registry.len(), version = %registry.version, workers, "Listening.");
                }
                // Stops with the runtime when `serve` returns.
                let _reloader = toolwire::reload::spawn(state.reloader.clone());
                let served = server::serve(listener, state, shutdown::signal())
                    .await
                    .context("serving");
                hub.shut_down().await;
                served
            });
            // After the drain, from this thread, while the runtime (which runs the export) lives.
            if let Some(traces) = traces {
                traces.shutdown(TRACE_FLUSH_LIMIT);
            }
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Mcp(args) => {
            non_dumpable()?;
            let mut config = load_config(&args.config)?;
            if let Some(format) = args.log_format {
                config.log_format = format;
            }
            // stdout carries the protocol: logs (and load errors) go to stderr only.
            telemetry::init(&config.log, config.log_format);
            let default_state = parse_state(args.state.as_deref())?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async move {
                let max_line = config.limits.body_bytes;
                let (state, hub) = start_state(config).await?;
                let (tools, version) = {
                    let registry = state.registry.load();
                    (registry.len(), registry.version.clone())
                };
                let _reloader = toolwire::reload::spawn(state.reloader.clone());
                let engine = std::sync::Arc::new(toolwire::mcp::server::Engine {
                    registry: std::sync::Arc::clone(&state.registry),
                    executor: std::sync::Arc::clone(&state.executor),
                    cancel: state.cancel.clone(),
                    slots: Some(std::sync::Arc::clone(&state.work_slots)),
                    default_state,
                });
                tracing::info!(tools, %version, "Serving MCP over stdio.");
                let served = toolwire::mcp::server::serve_stdio(engine, max_line, shutdown::signal())
                    .await
                    .context("serving MCP over stdio");
                hub.shut_down().await;
                served?;
                tracing::info!("MCP session over stdio ended.");
                anyhow::Ok(())
            })?;
            // A read of stdin may still be pending on a blocking thread; do not wait for it.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// What `serve` and `mcp` share: the subprocess reaper, the exec shim, the executor, the MCP
/// hub (its stdio servers are spawned like exec tools, through the shim and the reaper), the
/// tools with those of the MCP servers, and the API state around them. Called inside the
/// runtime.
async fn start_state(config: ServerConfig) -> anyhow::Result<(AppState, McpHub)> {
    // Owned here and by the executor; its sweeping task stops with the runtime.
    let reaper = Reaper::start();
    tracing::debug!(subreaper = reaper.is_some(), "Subprocess reaper started.");
    let shim = exec_shim();
    let executor = Executor::new(&config)?.with_exec_shim(shim).with_reaper(reaper);
    let hub = McpHub::from_config(&config, executor.exec_context())?;
    let registry = load_registry_mcp(&config, &hub).await?;
    for w in &registry.warnings {
        tracing::warn!(%w, "Tool definition warning.");
    }
    let executor = executor.with_mcp(Some(hub.caller()));
    let state = AppState::with_mcp(config, registry, executor, Some(hub.clone()));
    Ok((state, hub))
}

/// `toolwire __exec-shim`: returns only when the program could not be started.
fn run_shim(limits: &ResourceLimits, command: &[std::ffi::OsString]) -> ExitCode {
    let Err(e) = shim::exec(limits, command);
    eprintln!("{} {e}", shim::FAILURE_PREFIX);
    ExitCode::from(u8::try_from(shim::FAILURE_CODE).unwrap_or(127))
}

/// Called before any secret is read by the commands that run tools: a non-dumpable process's
/// `/proc/<pid>/environ`, `mem` and `maps` are closed to other processes of the same user (its
/// tools), and it leaves no core dump. Only `CAP_SYS_PTRACE` opens them, and tools run without
/// capabilities (the exec shim).
fn non_dumpable() -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    nix::sys::prctl::set_dumpable(false).context("making the process non-dumpable")?;
    Ok(())
}

/// The exec shim is this binary. Without one (its path cannot be found), tools run directly,
/// with this process's capabilities; that is logged, not fatal.
fn exec_shim() -> Option<ExecShim> {
    match ExecShim::this_binary() {
        Ok(shim) => Some(shim),
        Err(e) => {
            tracing::warn!(error = %e, "Cannot find the toolwire binary for the exec shim; subprocess tools run without it.");
            None
        }
    }
}

/// Loads the tools (with the tools of their MCP servers) or fails with every error printed.
async fn load_registry_mcp(config: &ServerConfig, hub: &McpHub) -> anyhow::Result<Registry> {
    match toolwire::mcp::load_registry(&config.tools_dir, &config.defaults, hub).await {
        Ok(r) => Ok(r),
        Err(diagnostics) => {
            for d in diagnostics.iter().filter(|d| d.is_error()) {
                eprintln!("{d}");
            }
            anyhow::bail!(
                "the tools in {} are invalid (run `toolwire check`)",
                config.tools_dir.display()
            );
        }
    }
}

/// Writes to stdout, turning a closed pipe into an error instead of a panic.
fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn parse_state(state: Option<&str>) -> anyhow::Result<serde_json::Value> {
    match state {
        None => Ok(serde_json::Value::Null),
        Some(s) => {
            let v: serde_json::Value = serde_json::from_str(s).context("--state is not valid JSON")?;
            anyhow::ensure!(v.is_object(), "--state must be a JSON object");
            Ok(v)
        }
    }
}

fn load_config(args: &ConfigArgs) -> anyhow::Result<ServerConfig> {
    let mut config = ServerConfig::load(args.config.as_deref())?;
    if let Some(dir) = &args.tools_dir {
        config.tools_dir = dir.clone();
    }
    Ok(config)
}

/// Reads a file, or stdin when there is none.
fn read_input(path: Option<&std::path::Path>) -> anyhow::Result<String> {
    match path {
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())),
        None => {
            let mut input = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut input).context("reading stdin")?;
            Ok(input)
        }
    }
}

/// A streamed completion as `completion_stream`: a JSON array is the list of events; anything
/// else is the raw wire text.
fn stream_input(text: String) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v @ serde_json::Value::Array(_)) => v,
        _ => serde_json::Value::String(text),
    }
}
