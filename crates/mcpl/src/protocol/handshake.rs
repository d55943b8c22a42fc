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

/// One block of a `tools/call` result. `tools/call` is MCP's, unchanged (§3.1), so its content
/// is MCP's, not App. B.1's closed set: the blocks MCPL shares are typed, and anything else MCP
/// defines (`resource_link`, an embedded `resource` nesting its `uri` in a `resource`
/// object, …) is kept as received and written back verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolContent {
    /// A block of App. B.1's shapes.
    Block(ContentBlock),
    /// Any other MCP content block, verbatim.
    Other(Map<String, Value>),
}

impl ToolContent {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolContent::Block(ContentBlock::text(text))
    }
}

impl From<ContentBlock> for ToolContent {
    fn from(b: ContentBlock) -> Self {
        ToolContent::Block(b)
    }
}

/// `tools/call` result, with MCPL's optional `state` (§8.2–§8.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCallResult {
    /// Result content: MCP's blocks ([`ToolContent`]).
    #[serde(default)]
    pub content: Vec<ToolContent>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §3.1: `tools/call` is MCP's, so MCP's own blocks (an embedded resource, a resource
    /// link) are read and written back unchanged, and the shared ones are typed.
    #[test]
    fn s3_1_tool_results_carry_mcp_content() {
        let wire = json!({
            "content": [
                { "type": "text", "text": "hi" },
                { "type": "resource", "resource": { "uri": "file:///a.txt", "text": "A" } },
                { "type": "resource_link", "uri": "file:///b.txt", "name": "b" },
                { "type": "image", "data": "iVBO", "mimeType": "image/png" }
            ],
            "isError": false
        });
        let r: ToolsCallResult = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(r.content[0], ToolContent::text("hi"));
        assert!(matches!(r.content[1], ToolContent::Other(_)));
        assert!(matches!(r.content[2], ToolContent::Other(_)));
        assert!(matches!(
            r.content[3],
            ToolContent::Block(ContentBlock::Image(_))
        ));
        assert_eq!(serde_json::to_value(&r).unwrap(), wire);
        // Content blocks are objects.
        assert!(serde_json::from_value::<ToolsCallResult>(json!({"content": ["hi"]})).is_err());
    }
}
