//! What a server answers the host's `initialize` with (§5.1, §17.1). Used by [`ServerState`](super::ServerState) and `server::Server` alike.

use serde_json::{json, Map, Value};

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
