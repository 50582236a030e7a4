//! MCP (Model Context Protocol), kept behind toolwire's own types so the `rmcp` SDK's frequent
//! major versions stay cheap to take: nothing outside this module names an `rmcp` type.

pub mod server;
