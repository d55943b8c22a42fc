//! Tools: what `tools/list` and `tools/call` read, typed tools, and changes at runtime.
//!
//! A [`ToolSpec`] is one MCP tool with its handler: [`ToolSpec::new`] takes an
//! `inputSchema` and hands the handler the raw [`ToolsCallParams`]; [`ToolSpec::typed`]
//! generates the `inputSchema` from an argument type (`serde::Deserialize +
//! schemars::JsonSchema`, as rmcp does) and hands the handler the parsed arguments.
//! Arguments that do not fit are answered `-32602` naming the field (its path in the
//! arguments) and the handler is not called.
//!
//! [`Server::add_tool`], [`Server::replace_tool`] and [`Server::remove_tool`] change the
//! tools of a live server: `tools/list` reflects the change at once, a `tools/call` of a
//! removed tool is answered `-32602` (unknown tool), and every connection past `initialize`
//! is sent MCP's `notifications/tools/list_changed` (declared in `initialize` as
//! `capabilities.tools.listChanged: true`). An author who states `listChanged: false`
//! ([`ServerBuilder::mcp_capability`]) keeps it: nothing is announced, and the tools do not
//! change at runtime ([`ToolChangeError::ListChangedFalse`]), since a host reading `false`
//! has no reason to list them again.
//!
//! Readings where the specs are silent:
//! - `notifications/tools/list_changed` is MCP's, unchanged by MCPL (§17.7), and needs no
//!   grant (listing tools needs none, §5.4), so it goes to MCP-only hosts too and to MCPL
//!   hosts before their policy Request. It is sent only once `initialize` has been received
//!   (before that the host has listed nothing). Changes in quick succession may be told with
//!   one notification: it says "list again", not what changed.
//! - The tools are the server author's, not a peer's, so the list holds what the author
//!   registers; each connection's pending announcement is one flag (a `watch`), so a burst
//!   of changes queues nothing.

use std::future::Future;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::conn::Conn;
use super::*;
use crate::jsonrpc::ErrorObject;
use crate::protocol::handshake::{Tool, ToolsCallParams, ToolsCallResult};

/// One MCP tool (its `tools/list` entry) and the handler `tools/call` runs.
#[derive(Clone)]
pub struct ToolSpec {
    pub(super) tool: Tool,
    pub(super) handler: Handler<ToolsCallParams, ToolsCallResult>,
    /// Why MCP cannot carry this tool ([`tool_defect`]): refused by
    /// [`ServerBuilder::build`] and [`Server::add_tool`].
    pub(super) schema_defect: Option<String>,
}

impl std::fmt::Debug for ToolSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSpec")
            .field("tool", &self.tool)
            .finish_non_exhaustive()
    }
}

impl ToolSpec {
    /// A tool with a hand-written `input_schema` whose handler reads the raw
    /// [`ToolsCallParams`] (arguments as JSON, and the §8.4 `state` / `checkpoint`). An empty
    /// name, or a schema that is not an object schema with `"type": "object"` (MCP's `Tool`),
    /// is refused by [`ServerBuilder::build`] and [`Server::add_tool`].
    pub fn new<F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
        handler: F,
    ) -> Self
    where
        F: Fn(Session, ToolsCallParams) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ToolsCallResult>> + Send + 'static,
    {
        let name = name.into();
        let schema_defect = tool_defect(&name, &input_schema, "the inputSchema");
        ToolSpec {
            tool: Tool {
                name,
                description: Some(description.into()),
                input_schema: Some(input_schema),
                extra: Map::new(),
            },
            handler: erase(handler),
            schema_defect,
        }
    }

    /// A typed tool: its `inputSchema` is generated from `T` (schemars, JSON Schema 2020-12)
    /// and its `arguments` are parsed into `T` before `handler` runs. Arguments that do not
    /// fit are answered `-32602` with a message naming the field's path, and `data`
    /// `{"tool", "path"}`; absent arguments are read as `{}`. `T` must describe an object
    /// (a struct): MCP's `inputSchema` is an object schema, and any other `T` is refused by
    /// [`ServerBuilder::build`] and [`Server::add_tool`].
    pub fn typed<T, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: F,
    ) -> Self
    where
        T: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(Session, T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult<ToolsCallResult>> + Send + 'static,
    {
        let name = name.into();
        let schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
        let schema_defect = tool_defect(&name, &schema, "its argument type's schema")
            .map(|d| format!("{d}; use a struct"));
        let tool_name = name.clone();
        let handler: Handler<ToolsCallParams, ToolsCallResult> =
            Arc::new(move |s, p: ToolsCallParams| {
                let fut: BoxFut<HandlerResult<ToolsCallResult>> =
                    match parse_arguments::<T>(&tool_name, p.arguments) {
                        Ok(args) => Box::pin(handler(s, args)),
                        Err(e) => Box::pin(async move { Err(e) }),
                    };
                fut
            });
        ToolSpec {
            tool: Tool {
                name,
                description: Some(description.into()),
                input_schema: Some(schema),
                extra: Map::new(),
            },
            handler,
            schema_defect,
        }
    }

    /// The tool as `tools/list` shows it.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }
}

/// Why MCP cannot carry a tool named `name` with `schema` as its `inputSchema`, if it
/// cannot: MCP's `Tool` has a `name` a `tools/call` names it by (an empty or
/// whitespace-only one names nothing) and an `inputSchema` that is an object schema (`"type": "object"`, MCP
/// schema.ts), which hosts check before listing the tool. `what` names the schema in the
/// message.
fn tool_defect(name: &str, schema: &Value, what: &str) -> Option<String> {
    if name.is_empty() {
        return Some(
            "the tool has an empty name (blank), which no tools/call can name; give it one".into(),
        );
    }
    if name.trim().is_empty() {
        // A host lists it as it is, and no caller types a name it cannot see.
        return Some(format!(
            "the tool's name {name:?} is blank (whitespace only), which no tools/call can \
             name; give it one with a visible character"
        ));
    }
    match schema {
        Value::Object(o) => match o.get("type") {
            Some(Value::String(t)) if t == "object" => None,
            Some(other) => Some(format!(
                "{what} has type {other}, where MCP's inputSchema is an object schema with \"type\": \"object\""
            )),
            None => Some(format!(
                "{what} has no type, where MCP's inputSchema is an object schema with \"type\": \"object\" (write {{\"type\": \"object\"}} for a tool without arguments)"
            )),
        },
        other => Some(format!(
            "{what} is {other}, not a JSON Schema object: MCP's inputSchema is an object schema with \"type\": \"object\""
        )),
    }
}

/// Parses a typed tool's `arguments` into `T`, or the `-32602` naming where they do not fit.
fn parse_arguments<T: DeserializeOwned>(
    tool: &str,
    arguments: Option<Map<String, Value>>,
) -> Result<T, ErrorObject> {
    let args = Value::Object(arguments.unwrap_or_default());
    serde_path_to_error::deserialize(args).map_err(|e| {
        let path = e.path().to_string();
        let why = e.into_inner();
        let message = if path == "." {
            format!("tools/call {tool}: the arguments do not fit its inputSchema: {why}")
        } else {
            format!("tools/call {tool}: argument `{path}` does not fit its inputSchema: {why}")
        };
        ErrorObject::invalid_params(message).with_data(json!({"tool": tool, "path": path}))
    })
}

/// MCP's notification that the tool list changed.
pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";

/// Why a change to a live server's tools was refused; nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolChangeError {
    /// [`Server::add_tool`] with the name of a tool the server already has.
    #[error("the server already has a tool named {0:?}; use Server::replace_tool to change it")]
    Duplicate(String),
    /// [`Server::replace_tool`] or [`Server::remove_tool`] of a tool the server does not have.
    #[error("the server has no tool named {0:?}; add it with Server::add_tool (Server::tools lists the ones it has)")]
    Unknown(String),
    /// The server's tools are its [`McpFallback`]'s, which lists them itself.
    #[error("the server's tools are served by its MCP fallback; change them there")]
    Fallback,
    /// The server did not declare `capabilities.tools` in `initialize`, so no host would
    /// look for tools.
    #[error("the server declares no tools capability: register a tool or advertise Capability::Tools at build time")]
    NoToolsCapability,
    /// The server declared `capabilities.tools.listChanged: false` (through
    /// [`ServerBuilder::mcp_capability`]): it sends no `notifications/tools/list_changed`, so
    /// a host that listed the tools would never learn of the change.
    #[error("the server declares tools.listChanged: false, so no host is told its tools changed and each goes on with the list it has; leave listChanged out of mcp_capability(\"tools\", …) (or make it true) to change tools at runtime")]
    ListChangedFalse,
    /// A tool MCP cannot carry: an empty name, or an `inputSchema` (hand-written or
    /// generated) that is not an object schema with `"type": "object"`.
    #[error("tool {name:?}: {reason}")]
    Schema {
        /// The tool.
        name: String,
        /// Why.
        reason: String,
    },
}

/// The tools of a server, shared by its connections, and the signal that they changed.
pub(super) struct Tools {
    list: RwLock<Vec<ToolSpec>>,
    changed: watch::Sender<()>,
}

impl Tools {
    pub(super) fn new(list: Vec<ToolSpec>) -> Self {
        Tools {
            list: RwLock::new(list),
            changed: watch::Sender::new(()),
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<ToolSpec>> {
        // Every write leaves the list whole, so a poisoned lock is still usable.
        self.list.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Vec<ToolSpec>> {
        self.list.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The `tools/list` entries, in registration order.
    pub(super) fn listed(&self) -> Vec<Tool> {
        self.read().iter().map(|t| t.tool.clone()).collect()
    }

    /// The handler of tool `name`.
    pub(super) fn handler(&self, name: &str) -> Option<Handler<ToolsCallParams, ToolsCallResult>> {
        self.read()
            .iter()
            .find(|t| t.tool.name == name)
            .map(|t| t.handler.clone())
    }

    fn change(
        &self,
        f: impl FnOnce(&mut Vec<ToolSpec>) -> Result<(), ToolChangeError>,
    ) -> Result<(), ToolChangeError> {
        f(&mut self.write())?;
        // After the list changed, so a host that lists on the notification sees the change.
        self.changed.send_replace(());
        Ok(())
    }
}

impl Server {
    fn tools_changeable(&self, spec: Option<&ToolSpec>) -> Result<(), ToolChangeError> {
        if self.inner.handlers.fallback.is_some() {
            return Err(ToolChangeError::Fallback);
        }
        if !self.inner.declares_tools {
            return Err(ToolChangeError::NoToolsCapability);
        }
        if !self.inner.tells_tool_changes {
            return Err(ToolChangeError::ListChangedFalse);
        }
        if let Some(reason) = spec.and_then(|s| s.schema_defect.clone()) {
            let name = spec.map(|s| s.tool.name.clone()).unwrap_or_default();
            return Err(ToolChangeError::Schema { name, reason });
        }
        Ok(())
    }

    /// Adds a tool to the live server: `tools/list` shows it at once and every initialized
    /// connection is sent `notifications/tools/list_changed`. Refused for a name the server
    /// already has ([`Self::replace_tool`] changes a tool).
    pub fn add_tool(&self, spec: ToolSpec) -> Result<(), ToolChangeError> {
        self.tools_changeable(Some(&spec))?;
        self.inner.tools.change(|list| {
            if list.iter().any(|t| t.tool.name == spec.tool.name) {
                return Err(ToolChangeError::Duplicate(spec.tool.name.clone()));
            }
            list.push(spec);
            Ok(())
        })
    }

    /// Replaces the tool of the same name (its description, schema and handler), keeping its
    /// place in `tools/list`, and announces the change like [`Self::add_tool`]. Calls already
    /// running finish with the old handler.
    pub fn replace_tool(&self, spec: ToolSpec) -> Result<(), ToolChangeError> {
        self.tools_changeable(Some(&spec))?;
        self.inner.tools.change(|list| {
            let Some(slot) = list.iter_mut().find(|t| t.tool.name == spec.tool.name) else {
                return Err(ToolChangeError::Unknown(spec.tool.name.clone()));
            };
            *slot = spec;
            Ok(())
        })
    }

    /// Removes tool `name`: it leaves `tools/list`, a later `tools/call` of it is answered
    /// `-32602`, and the change is announced like [`Self::add_tool`]. Calls already running
    /// finish.
    pub fn remove_tool(&self, name: &str) -> Result<(), ToolChangeError> {
        self.tools_changeable(None)?;
        self.inner.tools.change(|list| {
            let before = list.len();
            list.retain(|t| t.tool.name != name);
            if list.len() == before {
                return Err(ToolChangeError::Unknown(name.to_owned()));
            }
            Ok(())
        })
    }

    /// The tools as `tools/list` shows them now.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner.tools.listed()
    }
}

/// Sends `notifications/tools/list_changed` on `conn` after each change to the server's
/// tools, once `initialize` has been answered, until the connection ends.
pub(super) fn spawn_list_changed(conn: &Arc<Conn>) {
    let mut changed = conn.server.tools.changed.subscribe();
    let peer = conn.peer.clone();
    let weak: Weak<Conn> = Arc::downgrade(conn);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = changed.changed() => if r.is_err() { return },
                _ = peer.closed() => return,
            }
            let Some(conn) = weak.upgrade() else { return };
            let initialized = conn.grant_tx.borrow().initialized;
            if initialized {
                // After the frames the driver holds (the `initialize` answer among them).
                let session = Session::of(conn);
                if session.in_order(TOOLS_LIST_CHANGED, None).await.is_err() {
                    return;
                }
                drop(session);
                if let Err(e) = peer.notify_raw(TOOLS_LIST_CHANGED, None).await {
                    tracing::debug!("{TOOLS_LIST_CHANGED} not sent: {e}");
                    return;
                }
            }
        }
    });
}
