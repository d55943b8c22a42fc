//! What a server reads from the host's `initialize` and answers it with (§3.2, §5.1, §17.1).
//! Part of [`ServerState`](super::ServerState), which `server::Server` drives.

use serde_json::{Map, Value};

use super::ServerDiagnostic;
use crate::jsonrpc::ErrorObject;
use crate::protocol::handshake;

/// The manifest as `capabilities.experimental.mcpl` carries it: a manifest that is no object
/// is sent as `{}`, which declares nothing.
fn manifest_object(manifest: &Value) -> Value {
    match manifest {
        Value::Object(_) => manifest.clone(),
        _ => Value::Object(Map::new()),
    }
}

/// The `initialize` result: the MCP `protocolVersion` negotiated ([`read_initialize`]), the MCP
/// capabilities `mcp` with the manifest in force under `experimental.mcpl` (§17.1; a
/// manifest that is no object is sent as `{}`, which declares nothing), `serverInfo`, and
/// `instructions` when there are any.
pub(crate) fn initialize_result(
    protocol_version: &str,
    mcp: &Map<String, Value>,
    manifest: &Value,
    server_info: Value,
    instructions: Option<&str>,
) -> Value {
    let mut caps = mcp.clone();
    // The application's other experimental capabilities stay beside `mcpl` (the builder
    // refuses an `experimental` that is no object or names `mcpl` itself).
    let mut experimental = match caps.remove("experimental") {
        Some(Value::Object(e)) => e,
        _ => Map::new(),
    };
    experimental.insert("mcpl".into(), manifest_object(manifest));
    caps.insert("experimental".into(), Value::Object(experimental));
    let mut result = Map::new();
    result.insert("protocolVersion".into(), protocol_version.into());
    result.insert("capabilities".into(), Value::Object(caps));
    result.insert("serverInfo".into(), server_info);
    if let Some(text) = instructions {
        result.insert("instructions".into(), Value::String(text.to_owned()));
    }
    Value::Object(result)
}

/// Why [`ServerRules::new`](super::ServerRules::new) refused its `server_info` (MCP's
/// `serverInfo`, §5.1, needs a name and a version): nothing was built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerRulesError {
    /// `server_info` is no object, or its `name` or `version` is missing or no string.
    #[error("the server_info has no {what} string: MCP's initialize result carries it in serverInfo (§5.1), which needs a name and a version; pass {{\"name\": …, \"version\": …}}")]
    ServerInfo {
        /// `name` or `version`.
        what: &'static str,
    },
    /// Its `name` or `version` is empty or whitespace only.
    #[error("{}", blank_message(what, given))]
    BlankName {
        /// `server name` or `server version`.
        what: &'static str,
        /// The name as given.
        given: String,
    },
}

/// The one rule for a server's identity (the builder's `BuildError::BlankName` and
/// [`ServerRules::new`](super::ServerRules::new)): the first of `name` and `version` that is
/// empty or whitespace only, as `("server name" | "server version", given)`. A host shows
/// or matches each as given, so a blank one names nothing.
pub(crate) fn blank_server_identity<'a>(
    name: &'a str,
    version: &'a str,
) -> Option<(&'static str, &'a str)> {
    [("server name", name), ("server version", version)]
        .into_iter()
        .find(|(_, n)| n.trim().is_empty())
}

/// Checks `server_info` by [`blank_server_identity`] ([`ServerRules::new`](super::ServerRules::new)).
pub(crate) fn check_server_info(server_info: &Value) -> Result<(), ServerRulesError> {
    let member = |what: &'static str| {
        server_info
            .get(what)
            .and_then(Value::as_str)
            .ok_or(ServerRulesError::ServerInfo { what })
    };
    let (name, version) = (member("name")?, member("version")?);
    match blank_server_identity(name, version) {
        Some((what, given)) => Err(ServerRulesError::BlankName {
            what,
            given: given.to_owned(),
        }),
        None => Ok(()),
    }
}

/// The message of a blank name (`BuildError::BlankName`, [`ServerRulesError::BlankName`]):
/// which name, how it is blank, what it is for.
pub(crate) fn blank_message(what: &str, given: &str) -> String {
    let blank = if given.is_empty() {
        "empty".to_owned()
    } else {
        format!("whitespace only ({given:?})")
    };
    let purpose = match what {
        "server name" | "server version" => {
            "MCP's initialize result carries it in serverInfo (§5.1), which needs a name and a version"
        }
        _ => "a host matches it as given, so it names nothing",
    };
    format!("the {what} is {blank}: {purpose}; give one with a visible character")
}

/// Whether MCP capabilities `caps` advertise `tools` (an object or `true`), as a host reads
/// them ([`crate::capability::advertised_from_capabilities`]).
pub(crate) fn declares_tools(caps: &Map<String, Value>) -> bool {
    crate::capability::declares_tools(caps.get("tools"))
}

/// What a server reads from the host's `initialize` ([`read_initialize`]).
#[derive(Debug)]
pub(crate) struct InitializeRead {
    /// The MCP `protocolVersion` to answer with: the host's when this library speaks it,
    /// else the newest it does ([`handshake::negotiate_protocol_version`], MCP's lifecycle
    /// rule, which MCPL keeps, §3.1).
    pub(crate) protocol_version: &'static str,
    /// Whether the host speaks MCPL 0.5 (§3.2).
    pub(crate) mcpl: bool,
    /// `host_mcpl_version` when it advertises another MCPL version, `host_mcpl_malformed`
    /// when its advertisement is no object or names no version.
    pub(crate) diagnostic: Option<ServerDiagnostic>,
}

/// The one server rule for the host's `initialize`, applied by
/// [`ServerState`](super::ServerState) (which `server::Server` drives): a second one is
/// `-32600`; only `protocolVersion` is required (read leniently, §5.1), and answered as MCP
/// negotiates it (one this library speaks, §3.1); a host writing MCPL 0.5's version
/// another way ([`handshake::MCPL_VERSION_ALIASES`]) is served as MCPL 0.5 and told; a
/// host advertising another MCPL version, or an `experimental.mcpl` that is no object
/// ([`handshake::malformed_advertisement`]), is served as plain MCP and reported (§3.2,
/// §3.3); one without `version` is served as MCPL 0.5 and reported.
pub(crate) fn read_initialize(
    initialized: bool,
    params: Option<&Value>,
) -> Result<InitializeRead, ErrorObject> {
    if initialized {
        return Err(ErrorObject::invalid_request("already initialized"));
    }
    let Some(version) = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
    else {
        return Err(ErrorObject::invalid_params(
            "initialize: protocolVersion must be a string",
        ));
    };
    let null = Value::Null;
    let read = handshake::host_mcpl(params.unwrap_or(&null));
    let mcpl = read.is_v05();
    let diagnostic = match read {
        handshake::HostMcpl::Other(_) if read.alias().is_some() => read
            .alias()
            .map(|version| ServerDiagnostic::HostMcplVersionAlias { version }),
        handshake::HostMcpl::Other(version) => Some(ServerDiagnostic::HostMcplVersion { version }),
        handshake::HostMcpl::Absent => handshake::malformed_advertisement(params.unwrap_or(&null))
            .map(|m| ServerDiagnostic::HostMcplMalformed {
                found: crate::jsonrpc::json_type_name(m),
                mcpl: false,
            }),
        handshake::HostMcpl::Unversioned => Some(ServerDiagnostic::HostMcplMalformed {
            found: "object without a version",
            mcpl: true,
        }),
        _ => None,
    };
    Ok(InitializeRead {
        protocol_version: handshake::negotiate_protocol_version(version),
        mcpl,
        diagnostic,
    })
}

/// The `initialize` result an MCP implementation of the application's own answered
/// (`server::McpFallback::initialize`), made the session's: the server's MCP capabilities
/// `mcp` set over the result's (see below), and the manifest in force set under
/// `capabilities.experimental.mcpl` (§5.1, §17.1), replacing an `experimental` that is no
/// object ([`ServerDiagnostic::FallbackExperimentalReplaced`]) or an `mcpl` it carried
/// ([`ServerDiagnostic::FallbackMcplReplaced`]), each pushed on `diags`. Reading: a result
/// that is not an object, or whose `capabilities` is not one, is the application's defect
/// and is answered `-32603` (the connection stays uninitialized).
///
/// Reading (the spec is silent): `mcp` is what the author declared explicitly
/// ([`ServerRules::mcp_capabilities`](super::ServerRules), `server::ServerBuilder::mcp_capability`),
/// so under the same name it wins over the implementation's, and is added where that names
/// none; `experimental` is a namespace of separate capabilities, so there the author's
/// members win one by one and the implementation's others stay. `instructions`, when the
/// author set them, win likewise; `serverInfo` (which a `ServerBuilder` always has) stays
/// the implementation's.
pub(crate) fn application_initialize_result(
    result: Value,
    mcp: &Map<String, Value>,
    instructions: Option<&str>,
    manifest: &Value,
    diags: &mut Vec<ServerDiagnostic>,
) -> Result<Value, ErrorObject> {
    let Value::Object(mut result) = result else {
        return Err(ErrorObject::internal(
            "the MCP fallback's initialize result is not an object",
        ));
    };
    if let Some(text) = instructions {
        result.insert("instructions".into(), Value::String(text.to_owned()));
    }
    let caps = result
        .entry("capabilities")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(caps) = caps else {
        return Err(ErrorObject::internal(
            "the MCP fallback's initialize result has a non-object `capabilities`",
        ));
    };
    for (k, v) in mcp {
        if k != "experimental" {
            caps.insert(k.clone(), v.clone());
        }
    }
    let experimental = caps
        .entry("experimental")
        .or_insert_with(|| Value::Object(Map::new()));
    if !experimental.is_object() {
        diags.push(ServerDiagnostic::FallbackExperimentalReplaced);
        *experimental = Value::Object(Map::new());
    }
    if let Value::Object(experimental) = experimental {
        if experimental.contains_key("mcpl") {
            diags.push(ServerDiagnostic::FallbackMcplReplaced);
        }
        // The builder refuses an author's `experimental` that is no object or names `mcpl`;
        // a sans-I/O author's `mcpl` is replaced below like the implementation's.
        if let Some(Value::Object(authors)) = mcp.get("experimental") {
            for (k, v) in authors {
                experimental.insert(k.clone(), v.clone());
            }
        }
        experimental.insert("mcpl".into(), manifest_object(manifest));
    }
    Ok(Value::Object(result))
}
