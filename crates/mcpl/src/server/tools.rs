//! Tools: what `tools/list` and `tools/call` read, and typed tools.
//!
//! A [`ToolSpec`] is one MCP tool with its handler: [`ToolSpec::new`] takes an
//! `inputSchema` and hands the handler the raw [`ToolsCallParams`]; [`ToolSpec::typed`]
//! generates the `inputSchema` from an argument type (`serde::Deserialize +
//! schemars::JsonSchema`, as rmcp does) and hands the handler the parsed arguments.
//! Arguments that do not fit are answered `-32602` naming the field (its path in the
//! arguments) and the handler is not called.

use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};

use super::*;
use crate::jsonrpc::ErrorObject;
use crate::protocol::handshake::{Tool, ToolsCallParams, ToolsCallResult};

/// One MCP tool (its `tools/list` entry) and the handler `tools/call` runs.
#[derive(Clone)]
pub struct ToolSpec {
    pub(super) tool: Tool,
    pub(super) handler: Handler<ToolsCallParams, ToolsCallResult>,
    /// Why the generated `inputSchema` cannot be a tool's (MCP: an object schema).
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
    /// [`ToolsCallParams`] (arguments as JSON, and the §8.4 `state` / `checkpoint`).
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
        ToolSpec {
            tool: Tool {
                name: name.into(),
                description: Some(description.into()),
                input_schema: Some(input_schema),
                extra: Map::new(),
            },
            handler: erase(handler),
            schema_defect: None,
        }
    }

    /// A typed tool: its `inputSchema` is generated from `T` (schemars, JSON Schema 2020-12)
    /// and its `arguments` are parsed into `T` before `handler` runs. Arguments that do not
    /// fit are answered `-32602` with a message naming the field's path, and `data`
    /// `{"tool", "path"}`; absent arguments are read as `{}`. `T` must describe an object
    /// (a struct): MCP's `inputSchema` is an object schema, and any other `T` is refused by
    /// [`ServerBuilder::build`].
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
        let schema_defect = match schema.get("type") {
            Some(Value::String(t)) if t == "object" => None,
            other => Some(format!(
                "its argument type's schema has type {}, not \"object\" (MCP inputSchema); use a struct",
                other.map_or_else(|| "(none)".to_owned(), Value::to_string)
            )),
        };
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
