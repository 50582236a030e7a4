//! The `toolwire` binary: parses the command line and runs the library. The only place that
//! uses `anyhow`.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use toolwire::api::AppState;
use toolwire::check::CheckReport;
use toolwire::cli::{Cli, Command, ConfigArgs};
use toolwire::config::ServerConfig;
use toolwire::registry::Registry;
use toolwire::{server, shutdown, telemetry};

fn main() -> ExitCode {
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
        Command::Check(args) => {
            let config = load_config(&args.config)?;
            let result = Registry::load(&config.tools_dir, &config.defaults);
            let report = CheckReport {
                config: &config,
                result: &result,
            };
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report.json())?);
            } else {
                print!("{}", report.text());
            }
            Ok(if report.ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Serve(args) => {
            let mut config = load_config(&args.config)?;
            if let Some(listen) = args.listen {
                config.listen = listen;
            }
            if let Some(format) = args.log_format {
                config.log_format = format;
            }
            telemetry::init(&config.log, config.log_format);
            let registry = match Registry::load(&config.tools_dir, &config.defaults) {
                Ok(r) => r,
                Err(diagnostics) => {
                    for d in diagnostics.iter().filter(|d| d.is_error()) {
                        eprintln!("{d}");
                    }
                    anyhow::bail!(
                        "the tools in {} are invalid (run `toolwire check`)",
                        config.tools_dir.display()
                    );
                }
            };
            for w in &registry.warnings {
                tracing::warn!(%w, "Tool definition warning.");
            }
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(async move {
                let listener = server::bind(config.listen, config.listen_backlog)
                    .with_context(|| format!("binding {}", config.listen))?;
                let addr = listener.local_addr()?;
                tracing::info!(%addr, tools = registry.len(), version = %registry.version, "Listening.");
                let state = AppState::new(config, registry);
                server::serve(listener, state, shutdown::signal())
                    .await
                    .context("serving")
            })?;
            Ok(ExitCode::SUCCESS)
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
