//! What a server reads from the host's `initialize` and answers it with (§3.2, §5.1, §17.1).
//! Used by [`ServerState`](super::ServerState) and `server::Server` alike.

use serde_json::{json, Map, Value};

use super::ServerDiagnostic;
use crate::jsonrpc::ErrorObject;
use crate::protocol::handshake;

/// The `initialize` result: the MCP `protocolVersion` as the host asked it (§5.1), the MCP
/// capabilities `mcp` with the manifest in force under `experimental.mcpl` (§17.1; a
/// manifest that is no object is sent as `{}`, which declares nothing), `serverInfo`, and
/// `instructions` when there are any.
pub(crate) fn initialize_result(
    protocol_version: String,
    mcp: &Map<String, Value>,
    manifest: &Value,
    server_info: Value,
    instructions: Option<&str>,
) -> Value {
    let manifest = match manifest {
        Value::Object(_) => manifest.clone(),
        _ => Value::Object(Map::new()),
    };
    let mut caps = mcp.clone();
    caps.insert("experimental".into(), json!({ "mcpl": manifest }));
    let mut result = Map::new();
    result.insert("protocolVersion".into(), Value::String(protocol_version));
    result.insert("capabilities".into(), Value::Object(caps));
    result.insert("serverInfo".into(), server_info);
    if let Some(text) = instructions {
        result.insert("instructions".into(), Value::String(text.to_owned()));
    }
    Value::Object(result)
}

/// What a server reads from the host's `initialize` ([`read_initialize`]).
#[derive(Debug)]
pub(crate) struct InitializeRead {
    /// The MCP `protocolVersion` the host asked for, answered as sent.
    pub(crate) protocol_version: String,
    /// Whether the host speaks MCPL 0.5 (§3.2).
    pub(crate) mcpl: bool,
    /// `host_mcpl_version` when it advertises another MCPL version.
    pub(crate) diagnostic: Option<ServerDiagnostic>,
}

/// The one server rule for the host's `initialize`, used by [`ServerState`](super::ServerState) and
/// `server::Server`: a second one is `-32600`; only `protocolVersion` is required (read
/// leniently, §5.1); a host advertising another MCPL version is served as plain MCP and
/// reported (§3.2).
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
        handshake::HostMcpl::Other(version) => Some(ServerDiagnostic::HostMcplVersion { version }),
        _ => None,
    };
    Ok(InitializeRead {
        protocol_version: version.to_owned(),
        mcpl,
        diagnostic,
    })
}
