//! MCP (Model Context Protocol), behind toolwire's own types (`docs/mcp.md`).
//!
//! - [`client`]: MCP servers as backends. An [`McpHub`] keeps one live connection per
//!   `[[mcp]]` server (stdio children spawned with toolwire's own subprocess code, Streamable
//!   HTTP over toolwire's own egress-guarded client), lists their tools before every registry
//!   build, and runs the calls of MCP-backed tools.
//! - [`server`]: toolwire's tools served over MCP (`POST /mcp` and `toolwire mcp` on stdio).
//!
//! The SDK (`rmcp`) is used only inside this module: the rest of toolwire sees
//! [`crate::tool::DiscoveredTool`], [`crate::tool::McpServerSpec`], [`crate::backend::Output`]
//! and [`crate::backend::BackendError`], so an SDK major stays a change of this module alone.

pub mod client;
pub mod server;

pub use client::{HubSettings, McpHub, ServerStatus};

use std::path::Path;

use crate::config::Diagnostic;
use crate::config::load::load_dir;
use crate::config::server::ToolDefaults;
use crate::registry::Registry;

/// Loads `dir` like [`Registry::load`], with the tools of its MCP servers: the hub connects
/// (or keeps) each declared server and lists its tools first (bounded by the hub's settings;
/// a server that does not answer contributes no tools and shows as failing).
pub async fn load_registry(dir: &Path, defaults: &ToolDefaults, hub: &McpHub) -> Result<Registry, Vec<Diagnostic>> {
    let dir = dir.to_owned();
    let loaded = match tokio::task::spawn_blocking(move || load_dir(&dir, &|name| std::env::var(name).ok())).await {
        Ok(loaded) => loaded,
        Err(e) => {
            return Err(vec![Diagnostic::error(
                "",
                None,
                "",
                format!("loading the tools failed: {e}"),
            )]);
        }
    };
    let servers = crate::registry::mcp_servers(&loaded, defaults);
    let discovered = hub.sync(&servers).await;
    Registry::build_with(loaded, defaults, &discovered)
}
