//! The MCP pieces MCPL rides on: `initialize` (with `capabilities.experimental.mcpl`,
//! §5.1–§5.2), `notifications/initialized`, `ping`, `tools/list` and `tools/call` (with the
//! optional `state`/`checkpoint` members of §8.4).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::ContentBlock;
use super::manifest::Manifest;
use super::state::StateInfo;
use super::{EmptyObject, Extra};

/// MCP `capabilities` of either side; MCPL lives under `experimental.mcpl` (§5.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Standard MCP `tools` capability; the only place `tools` is advertised (§5.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    /// The `experimental` member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Experimental>,
    /// Other MCP capabilities (`resources`, `prompts` …), kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

impl Capabilities {
    /// The `experimental.mcpl` manifest, if present.
    pub fn mcpl(&self) -> Option<&Manifest> {
        self.experimental.as_ref()?.mcpl.as_ref()
    }
}

/// MCP `capabilities.experimental`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Experimental {
    /// The MCPL manifest / host advertisement (§5.1, §5.2, §17.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcpl: Option<Manifest>,
    /// Other experimental extensions, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// MCP `clientInfo` / `serverInfo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    /// Implementation name.
    pub name: String,
    /// Implementation version.
    pub version: String,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `initialize` params (host = MCP client).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// MCP protocol version (unchanged by MCPL, §5.2).
    pub protocol_version: String,
    /// Host capabilities, MCPL under `experimental.mcpl` (§5.2).
    pub capabilities: Capabilities,
    /// Host identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Implementation>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `initialize` result (server = MCP server).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// MCP protocol version.
    pub protocol_version: String,
    /// Server capabilities; `experimental.mcpl` is the manifest (§5.1, §17.1).
    pub capabilities: Capabilities,
    /// Server identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Implementation>,
    /// Usage instructions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One tool of a `tools/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Tool name.
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments, kept as received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tools/list` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolsListParams {
    /// Pagination cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tools/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsListResult {
    /// The tools.
    pub tools: Vec<Tool>,
    /// Cursor of the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tools/call` params, with MCPL's optional `state` and `checkpoint` (§8.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolsCallParams {
    /// The tool to call.
    pub name: String,
    /// Tool arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    /// State data the host holds for this server (§8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// Checkpoint reference when the server manages state (§8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `tools/call` result, with MCPL's optional `state` (§8.2–§8.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCallResult {
    /// Result content blocks.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Whether the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// Checkpoint state (§8.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateInfo>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// MCP `initialize`: Host → Server Request; unprivileged.
    Initialize, "initialize", Request, HostToServer, InitializeParams, InitializeResult
);

method!(
    /// MCP `notifications/initialized`: Host → Server Notification; unprivileged.
    Initialized, "notifications/initialized", Notification, HostToServer, EmptyObject, ()
);

method!(
    /// MCP `ping`: Request in either direction; unprivileged.
    Ping, "ping", Request, Either, EmptyObject, EmptyObject
);

method!(
    /// MCP `tools/list`: Host → Server Request. Listing only describes, so it needs no grant
    /// (see `policy::method_requirement`); calling a tool needs `tools`.
    ToolsList, "tools/list", Request, HostToServer, ToolsListParams, ToolsListResult
);

method!(
    /// MCP `tools/call` (§8.4): Host → Server Request; requires `tools`.
    ToolsCall, "tools/call", Request, HostToServer, ToolsCallParams, ToolsCallResult
);
