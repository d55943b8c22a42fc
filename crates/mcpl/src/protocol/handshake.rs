//! The MCP pieces MCPL rides on: `initialize` (with `capabilities.experimental.mcpl`,
//! §5.1–§5.2), `notifications/initialized`, `ping`, `tools/list` and `tools/call` (with the
//! optional `state`/`checkpoint` members of §8.4).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::{Content, ContentBlock};
use super::manifest::Manifest;
use super::state::StateInfo;
use super::{EmptyObject, Extra};

/// The MCP `protocolVersion` this library offers: the newest of
/// [`SUPPORTED_MCP_PROTOCOL_VERSIONS`]. [`HostConfig::default`](crate::host::HostConfig)
/// sends it in `initialize`, and both `mcpl check` and `mcpl check-host` offer it.
///
/// MCPL does not change MCP's version (§5.2); the library uses only the MCP pieces common
/// to every listed version (`initialize`, `ping`, `tools/list`, `tools/call`,
/// `notifications/*`), so each of them is served alike.
pub const MCP_PROTOCOL_VERSION: &str = "2025-06-18";

/// The MCPL version this crate speaks, written into manifests and host advertisements (§5.1).
pub const MCPL_VERSION: &str = "0.5";

/// The other spellings of MCPL 0.5 a host's `experimental.mcpl.version` may carry: the full
/// names of the same document (its header calls it 0.5.0-draft), which a server serves as
/// [`MCPL_VERSION`] ([`HostMcpl::alias`]). Any other spelling names another version.
pub const MCPL_VERSION_ALIASES: &[&str] = &["0.5.0", "0.5.0-draft"];

/// Every MCP `protocolVersion` this library speaks, newest first (the first is
/// [`MCP_PROTOCOL_VERSION`]). A peer asking for one of these is answered with the same
/// version; see [`negotiate_protocol_version`].
pub const SUPPORTED_MCP_PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

/// Whether `version` is one of [`SUPPORTED_MCP_PROTOCOL_VERSIONS`] (compared exactly:
/// MCP versions are opaque date strings).
pub fn is_supported_protocol_version(version: &str) -> bool {
    SUPPORTED_MCP_PROTOCOL_VERSIONS.contains(&version)
}

/// The version a server answers `initialize` with, following MCP's lifecycle rule: the
/// requested version when supported, otherwise the newest supported one
/// ([`MCP_PROTOCOL_VERSION`]), which the client may then refuse.
pub fn negotiate_protocol_version(requested: &str) -> &'static str {
    SUPPORTED_MCP_PROTOCOL_VERSIONS
        .iter()
        .copied()
        .find(|v| *v == requested)
        .unwrap_or(MCP_PROTOCOL_VERSION)
}

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

impl ToolsCallParams {
    /// A call of tool `name` with no arguments, state or checkpoint.
    pub fn new(name: impl Into<String>) -> Self {
        ToolsCallParams {
            name: name.into(),
            arguments: None,
            state: None,
            checkpoint: None,
            extra: Extra::new(),
        }
    }

    /// Sets the tool's arguments.
    pub fn with_arguments(mut self, arguments: Map<String, Value>) -> Self {
        self.arguments = Some(arguments);
        self
    }
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

impl From<&str> for ToolContent {
    fn from(text: &str) -> Self {
        ToolContent::text(text)
    }
}

impl From<String> for ToolContent {
    fn from(text: String) -> Self {
        ToolContent::text(text)
    }
}

impl TryFrom<ToolContent> for ContentBlock {
    /// The MCP block that is not one of App. B.1's, given back.
    type Error = ToolContent;

    /// The App. B.1 block, for reuse in MCPL content (a push payload, an injection); an MCP
    /// block outside App. B.1 (`resource_link` …) has no MCPL form and is given back.
    fn try_from(c: ToolContent) -> Result<Self, ToolContent> {
        match c {
            ToolContent::Block(b) => Ok(b),
            other => Err(other),
        }
    }
}

impl From<Content> for Vec<ToolContent> {
    /// MCPL content as a tool result's blocks: the string form becomes one text block (§10.3).
    fn from(c: Content) -> Self {
        c.to_blocks().into_iter().map(ToolContent::Block).collect()
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

impl ToolsCallResult {
    /// A successful result with these blocks (each a [`ToolContent`], a [`ContentBlock`] or
    /// a string; MCPL [`Content`] converts with `Vec::<ToolContent>::from`).
    pub fn new<I>(content: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<ToolContent>,
    {
        ToolsCallResult {
            content: content.into_iter().map(Into::into).collect(),
            is_error: None,
            state: None,
            extra: Extra::new(),
        }
    }

    /// A successful result of one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self::new([ToolContent::text(text)])
    }

    /// A tool-level failure (`isError: true`, MCP) whose one text block says what went
    /// wrong: the model sees it and may retry. Arguments that do not fit the schema are a
    /// protocol error instead (`-32602`), which typed tools answer on their own.
    pub fn error(text: impl Into<String>) -> Self {
        ToolsCallResult {
            is_error: Some(true),
            ..Self::text(text)
        }
    }

    /// Sets the checkpoint `state` (§8.2).
    pub fn with_state(mut self, state: StateInfo) -> Self {
        self.state = Some(state);
        self
    }
}

method!(
    /// MCP `initialize`: Host → Server Request; unprivileged.
    Initialize, "initialize", Mcp, Request, HostToServer, InitializeParams, InitializeResult,
    requires: None
);

method!(
    /// MCP `notifications/initialized`: Host → Server Notification; unprivileged.
    Initialized, "notifications/initialized", Mcp, Notification, HostToServer, EmptyObject, (),
    requires: None
);

method!(
    /// MCP `ping`: Request in either direction; unprivileged.
    Ping, "ping", Mcp, Request, Either, EmptyObject, EmptyObject,
    requires: None
);

method!(
    /// MCP `tools/list`: Host → Server Request. Listing only describes, so it needs no grant
    /// (its `REQUIREMENT` is none); calling a tool needs `tools`.
    ToolsList, "tools/list", Mcp, Request, HostToServer, ToolsListParams, ToolsListResult,
    requires: None
);

method!(
    /// MCP `tools/call` (§8.4): Host → Server Request; requires `tools`.
    ToolsCall, "tools/call", Mcp, Request, HostToServer, ToolsCallParams, ToolsCallResult,
    requires: One(Tools)
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

    /// One MCP version everywhere: the offered one is the newest supported, and the host's
    /// default `initialize` offers it (issue #21: the host said 2024-11-05, the checkers
    /// 2025-06-18).
    #[test]
    fn offered_mcp_version_is_the_newest_supported() {
        assert_eq!(
            SUPPORTED_MCP_PROTOCOL_VERSIONS.first(),
            Some(&MCP_PROTOCOL_VERSION)
        );
        let mut sorted = SUPPORTED_MCP_PROTOCOL_VERSIONS.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(sorted, SUPPORTED_MCP_PROTOCOL_VERSIONS, "newest first");
        #[cfg(feature = "runtime")]
        assert_eq!(
            crate::host::HostConfig::default().protocol_version,
            MCP_PROTOCOL_VERSION
        );
    }

    /// MCP lifecycle: a supported request is echoed, anything else gets the newest.
    #[test]
    fn negotiation_echoes_a_supported_version() {
        for v in SUPPORTED_MCP_PROTOCOL_VERSIONS {
            assert!(is_supported_protocol_version(v));
            assert_eq!(negotiate_protocol_version(v), *v);
        }
        assert!(!is_supported_protocol_version("2099-01-01"));
        assert_eq!(
            negotiate_protocol_version("2099-01-01"),
            MCP_PROTOCOL_VERSION
        );
        assert_eq!(negotiate_protocol_version(""), MCP_PROTOCOL_VERSION);
    }
}

/// What the host's `initialize` says about MCPL (read by [`host_mcpl`]), or the version a
/// server's manifest names ([`mcpl_version`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostMcpl {
    /// `capabilities.experimental.mcpl` is an object whose `version` is `"0.5"`.
    V05,
    /// An `experimental.mcpl` object with no `version`: a host's is served as
    /// [`HostMcpl::V05`] (see [`host_mcpl`]), but a defect of its advertisement; a server's
    /// manifest is served as plain MCP by the host ([`mcpl_version`]).
    Unversioned,
    /// No `experimental.mcpl` object.
    Absent,
    /// An `experimental.mcpl` object with another `version`, as JSON text (e.g. `"0.4"`),
    /// one of [`MCPL_VERSION_ALIASES`] included ([`HostMcpl::alias`]).
    Other(String),
}

impl HostMcpl {
    /// Whether a server speaks MCPL 0.5 with this host ([`host_mcpl`]'s reading):
    /// [`HostMcpl::V05`], [`HostMcpl::Unversioned`], and an [`HostMcpl::Other`] that is one
    /// of [`MCPL_VERSION_ALIASES`].
    pub fn is_v05(&self) -> bool {
        matches!(self, HostMcpl::V05 | HostMcpl::Unversioned) || self.alias().is_some()
    }

    /// The spelling of [`MCPL_VERSION_ALIASES`] an [`HostMcpl::Other`] version is, if it is
    /// one (a JSON string of exactly that text).
    pub fn alias(&self) -> Option<&'static str> {
        let HostMcpl::Other(text) = self else {
            return None;
        };
        let inner = text.strip_prefix('"')?.strip_suffix('"')?;
        MCPL_VERSION_ALIASES.iter().copied().find(|a| *a == inner)
    }
}

/// The host's MCPL advertisement (§5.2): `capabilities.experimental.mcpl` of its
/// `initialize` params, when that is an object (anything else advertises nothing, §3.3).
pub fn host_advertisement(params: &Value) -> Option<&Value> {
    params
        .get("capabilities")
        .and_then(|c| c.get("experimental"))
        .and_then(|e| e.get("mcpl"))
        .filter(|m| m.is_object())
}

/// The host's `capabilities.experimental.mcpl` when it is present but neither an object nor
/// `null` (absent, as any optional member): a malformed advertisement, which
/// [`host_advertisement`] reads as none (§3.3). Only an object names a version (§5.2).
pub fn malformed_advertisement(params: &Value) -> Option<&Value> {
    params
        .get("capabilities")
        .and_then(|c| c.get("experimental"))
        .and_then(|e| e.get("mcpl"))
        .filter(|m| !m.is_object() && !m.is_null())
}

/// Reads the host's MCPL advertisement (§5.2, [`host_advertisement`]).
///
/// Reading (the spec defines no version negotiation): the host speaks MCPL 0.5 when
/// `capabilities.experimental.mcpl` is an object whose `version` is `"0.5"`, the spelling
/// §5.1, §5.2 and §14.1 write (and the TypeScript library sends). `"0.5.0"` and
/// `"0.5.0-draft"` ([`MCPL_VERSION_ALIASES`]) are the full names of the same document, and
/// are served as MCPL 0.5 too (kept as [`HostMcpl::Other`], whose [`HostMcpl::alias`] names
/// them, so `mcpl check-host` still judges the spelling). Every other version is another
/// protocol: a patch (`"0.5.1"`: the spec's history has a patch removing a member, 0.4.1's
/// `hostState`, as AUDIT-001 records), another pre-release, a higher minor (`"0.6"`: each 0.x minor
/// so far removed methods, as 0.5.0's changelog lists), a number. One that names
/// no version ([`HostMcpl::Unversioned`]) lacks a member the shape requires (§5.2 mirrors
/// the server's shape, whose App. B.3 schema requires `version`), so `mcpl check-host`
/// fails it; a server still speaks MCPL 0.5 with it (it claims MCPL, and nothing runs
/// before its policy Request anyway, §5.3). A `version` that is anything else (`"0.4"`, a
/// number …) is another protocol, whose methods and policy exchange this server does not
/// speak: such a host is served exactly as one that advertises no MCPL (§3.2, MCP
/// behaviour only: tools available without a grant, no MCPL method sent, every MCPL method
/// it sends answered `-32601`, every MCPL sender refused with `server::SendError::McpOnly`),
/// with a `host_mcpl_version` diagnostic naming the version.
pub fn host_mcpl(params: &Value) -> HostMcpl {
    match host_advertisement(params) {
        Some(m) => mcpl_version(m),
        None => HostMcpl::Absent,
    }
}

/// The MCPL version an `experimental.mcpl` object names, the host's (§5.2) or the
/// server's manifest (§5.1): the one version rule of this crate, which the server applies
/// to the host ([`host_mcpl`]) and `host::HostSession` to the server. The reading is
/// [`host_mcpl`]'s: [`HostMcpl::is_v05`] for `"0.5"` and [`MCPL_VERSION_ALIASES`] (and a
/// missing `version`, a defect reported apart); any other version is another protocol,
/// served as plain MCP (§3.2, §3.3). Never [`HostMcpl::Absent`]. One difference: a server's
/// manifest without `version` ([`HostMcpl::Unversioned`]) is served as plain MCP by the
/// host (App. B.3's manifest schema requires `version`; `McpOnlyReason::Unversioned`),
/// where the server serves a host's unversioned advertisement as 0.5 (§5.2 gives the
/// host's shape no schema of its own).
pub fn mcpl_version(advertisement: &Value) -> HostMcpl {
    match advertisement.get("version") {
        None => HostMcpl::Unversioned,
        Some(Value::String(v)) if v == MCPL_VERSION => HostMcpl::V05,
        Some(other) => HostMcpl::Other(other.to_string()),
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;
    use serde_json::json;

    /// §5.2, §3.3: the version read, and what is no advertisement at all.
    #[test]
    fn s5_2_host_mcpl_reads_the_version() {
        let init = |mcpl: Value| json!({"capabilities": {"experimental": {"mcpl": mcpl}}});
        assert_eq!(host_mcpl(&init(json!({"version": "0.5"}))), HostMcpl::V05);
        assert_eq!(host_mcpl(&init(json!({}))), HostMcpl::Unversioned);
        assert!(HostMcpl::Unversioned.is_v05());
        assert_eq!(
            host_mcpl(&init(json!({"version": "0.4"}))),
            HostMcpl::Other("\"0.4\"".into())
        );
        assert!(!host_mcpl(&init(json!({"version": 5}))).is_v05());
        // §5.2's spelling and the document's full names of the same version (the reading).
        for (v, alias) in [
            ("0.5.0", Some("0.5.0")),
            ("0.5.0-draft", Some("0.5.0-draft")),
        ] {
            let read = host_mcpl(&init(json!({ "version": v })));
            assert_eq!((read.is_v05(), read.alias()), (true, alias), "{v}");
        }
        for v in [
            "0.5.1",
            "0.5.0-rc.1",
            "0.6",
            "1.0",
            "0.50",
            " 0.5",
            "0.5.0-DRAFT",
        ] {
            let read = host_mcpl(&init(json!({ "version": v })));
            assert_eq!((read.is_v05(), read.alias()), (false, None), "{v}");
        }
        assert_eq!(HostMcpl::V05.alias(), None);
        assert_eq!(host_mcpl(&init(json!(true))), HostMcpl::Absent);
        assert_eq!(host_mcpl(&json!({"capabilities": {}})), HostMcpl::Absent);
        assert_eq!(host_advertisement(&init(json!(true))), None);
    }
}
