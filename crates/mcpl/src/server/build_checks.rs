//! [`ServerBuilder::build`]'s checks: the author's mistakes refused before anything is
//! served, each of which would otherwise fail silently at run time.

use serde_json::Value;

use super::builder::ServerBuilder;
use super::dispatch::is_reserved;
use super::BuildError;
use crate::capability::Capability;
use crate::manifest::edit::closest_first;

/// The capability paths a `context/beforeInference` hook exercises (§10.1): one of them in
/// its feature set's `uses` is what makes the hook's work acceptable (§6.4 rule 2).
const HOOK_PATHS: [Capability; 4] = [
    Capability::Observe,
    Capability::InjectSystem,
    Capability::InjectBeforeUser,
    Capability::InjectAfterUser,
];

/// The MCP methods a host calls on a server declaring each MCP capability (MCP 2025-06-18
/// `ServerCapabilities`), and the prefix every method of that capability has.
const MCP_CAPABILITY_METHODS: [(&str, &str, &[&str]); 4] = [
    (
        "resources",
        "resources/",
        &["resources/list", "resources/read"],
    ),
    ("prompts", "prompts/", &["prompts/list", "prompts/get"]),
    ("logging", "logging/", &["logging/setLevel"]),
    ("completions", "completion/", &["completion/complete"]),
];

/// MCP requests that go from a server to a client only: a host never sends them here.
const CLIENT_METHODS: [&str; 3] = ["sampling/createMessage", "roots/list", "elicitation/create"];

/// What to call instead of `manifest_member(name, …)` when the builder writes `name` itself
/// (`None` for a vendor member). Reading: a vendor member shadowing one of these was dropped
/// (`version`, `featureSets`, an advertised capability), or advertised a capability the
/// builder does not know it advertises; refusing it is the fail-closed reading.
fn written_by_the_builder(name: &str) -> Option<&'static str> {
    match name {
        "version" => Some("the builder writes the MCPL version it speaks (\"0.5\")"),
        "revision" => Some("the revision is derived from the content (§17.1), never given"),
        "featureSets" => Some("declare feature sets with feature_set or feature_set_declaration"),
        "tools" => Some(
            "advertise tools by registering them or with advertise(&[Capability::Tools]): \
             they are advertised in the outer MCP capabilities (§5.1)",
        ),
        _ if Capability::ALL
            .iter()
            .any(|c| c.segments().next() == Some(name)) =>
        {
            Some("advertise capabilities with advertise or feature_set (§5.1)")
        }
        _ => None,
    }
}

impl ServerBuilder {
    /// Refuses a handler whose method needs a capability the server does not advertise
    /// ([`BuildError::NotAdvertised`]): a host grants only what is advertised (§5.4), so the
    /// session would answer the method `-32002` and never call it. `tools` counts as
    /// advertised when tools are registered or an MCP fallback is set, as for `require`.
    fn handlers_advertised(&self) -> Result<(), BuildError> {
        use crate::capability::{Grant, Requirement};
        use crate::protocol::channels::{
            ChannelsAcknowledge, ChannelsClose, ChannelsList, ChannelsOpen, ChannelsOutgoingChunk,
            ChannelsOutgoingComplete, ChannelsPublish, ChannelsTyping,
        };
        use crate::protocol::lifecycle::InferenceLifecycle;
        use crate::protocol::state::StateRollback;
        use crate::protocol::Method;
        fn slot<M: Method>(filled: bool, registration: &'static str) -> Option<Slot> {
            filled.then_some((registration, M::NAME, M::REQUIREMENT))
        }
        type Slot = (&'static str, &'static str, Requirement);
        let h = &self.handlers;
        let slots = [
            slot::<ChannelsOpen>(h.channels_open.is_some(), "on_channels_open"),
            slot::<ChannelsClose>(h.channels_close.is_some(), "on_channels_close"),
            slot::<ChannelsPublish>(h.channels_publish.is_some(), "on_channels_publish"),
            slot::<ChannelsList>(h.channels_list.is_some(), "on_channels_list"),
            slot::<ChannelsAcknowledge>(
                h.channels_acknowledge.is_some(),
                "on_channels_acknowledge",
            ),
            slot::<ChannelsTyping>(h.channels_typing.is_some(), "on_channels_typing"),
            slot::<StateRollback>(h.rollback.is_some(), "on_rollback"),
            slot::<InferenceLifecycle>(h.turn_start.is_some(), "on_turn_start"),
            slot::<InferenceLifecycle>(h.turn_end.is_some(), "on_turn_end"),
            slot::<ChannelsOutgoingChunk>(h.outgoing_chunk.is_some(), "on_outgoing_chunk"),
            slot::<ChannelsOutgoingComplete>(h.outgoing_complete.is_some(), "on_outgoing_complete"),
        ];
        let mut advertised = self.advertised;
        if !h.tools.is_empty() || h.fallback.is_some() {
            advertised.insert(Capability::Tools);
        }
        let grant = Grant::from_set(advertised);
        for (registration, method, req) in slots.into_iter().flatten() {
            if !grant.satisfies(req) {
                let join = match req {
                    Requirement::AllOf(_) => " and ",
                    _ => " or ",
                };
                return Err(BuildError::NotAdvertised {
                    registration,
                    method,
                    needs: req.capabilities().sorted_paths().join(join),
                });
            }
        }
        Ok(())
    }

    /// Refuses a blank (empty or whitespace-only) server name or version (MCP's
    /// `serverInfo`, §5.1, needs both), `mcp_capability` key or `manifest_member` key
    /// ([`BuildError::BlankName`]): a host shows or matches each as given, so a blank one
    /// names nothing. Feature-set names ([`BuildError::InvalidFeatureSet`]), tool names
    /// ([`BuildError::ToolSchema`]) and custom method names ([`BuildError::ReservedMethod`])
    /// are held to the same rule by their own checks.
    fn names_not_blank(&self) -> Result<(), BuildError> {
        let identity = crate::session::server_initialize::blank_server_identity(
            &self.info.name,
            &self.info.version,
        );
        let mut keys = (self
            .mcp_capabilities
            .keys()
            .map(|k| ("mcp_capability key", k.as_str())))
        .chain(
            self.manifest_extra
                .keys()
                .map(|k| ("manifest_member key", k.as_str())),
        );
        match identity.or_else(|| keys.find(|(_, n)| n.trim().is_empty())) {
            Some((what, given)) => Err(BuildError::BlankName {
                what,
                given: given.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Refuses an MCP capability of a member MCP defines in a shape no MCP host reads
    /// ([`BuildError::Manifest`]): MCP's `ServerCapabilities` members `tools`, `resources`,
    /// `prompts`, `logging` and `completions` are objects, and their `listChanged` and
    /// `subscribe` are booleans. The builder reads `tools.listChanged` itself (it keeps an
    /// author's `false`), so a `tools` that is no object, or a `listChanged` that is no
    /// boolean, would otherwise be replaced or overwritten unseen. Vendor members pass as
    /// given; `experimental` has a rule of its own.
    fn mcp_capabilities_readable(&self) -> Result<(), BuildError> {
        for name in ["tools", "resources", "prompts", "logging", "completions"] {
            let Some(value) = self.mcp_capabilities.get(name) else {
                continue;
            };
            let Value::Object(members) = value else {
                return Err(BuildError::Manifest(format!(
                    "mcp_capability {name:?} is {value}, not an object: MCP's \
                     capabilities.{name} is an object (give {{}} for one without options)"
                )));
            };
            for flag in ["listChanged", "subscribe"] {
                match members.get(flag) {
                    None | Some(Value::Bool(_)) => {}
                    Some(other) => {
                        return Err(BuildError::Manifest(format!(
                            "mcp_capability {name:?} has {flag}: {other}, not a boolean: MCP \
                             reads capabilities.{name}.{flag} as true or false"
                        )))
                    }
                }
            }
        }
        Ok(())
    }

    /// Refuses an MCP capability whose methods nothing serves, and a custom handler that
    /// would never run ([`BuildError::Manifest`]). Reading (MCP 2025-06-18
    /// `ServerCapabilities`): a host calls `resources/list` and `resources/read` on a server
    /// declaring `resources` (and `resources/subscribe`/`unsubscribe` under
    /// `subscribe: true`), `prompts/list` and `prompts/get` under `prompts`,
    /// `logging/setLevel` under `logging`, `completion/complete` under `completions`, and
    /// none of them on a server that does not declare their capability; `sampling/*`,
    /// `roots/list` and `elicitation/create` go from a server to a client only. With an
    /// [`McpFallback`](super::McpFallback) nothing is refused here: it declares and serves
    /// MCP's capabilities itself.
    fn mcp_methods_served(&self) -> Result<(), BuildError> {
        if self.handlers.fallback.is_some() {
            return Ok(());
        }
        for (capability, _, methods) in MCP_CAPABILITY_METHODS {
            let Some(declared) = self.mcp_capabilities.get(capability) else {
                continue;
            };
            let subscribe =
                capability == "resources" && declared.get("subscribe") == Some(&Value::Bool(true));
            let extra: &[&str] = if subscribe {
                &["resources/subscribe", "resources/unsubscribe"]
            } else {
                &[]
            };
            let missing: Vec<&str> = (methods.iter().chain(extra))
                .copied()
                .filter(|m| !self.handlers.custom.contains_key(*m))
                .collect();
            if !missing.is_empty() {
                return Err(BuildError::Manifest(format!(
                    "mcp_capability {capability:?} tells a host to call {}, which nothing \
                     serves (each would be -32601): register them with method(..), serve MCP \
                     with mcp_fallback, or leave the capability out",
                    missing.join(", ")
                )));
            }
        }
        for name in self.handlers.custom.keys() {
            if CLIENT_METHODS.contains(&name.as_str()) {
                return Err(BuildError::Manifest(format!(
                    "method {name:?}: MCP sends it from a server to a client, and a host never \
                     sends it to a server, so the handler would never run; leave it out"
                )));
            }
            let owner = MCP_CAPABILITY_METHODS
                .iter()
                .find(|(_, prefix, _)| name.starts_with(prefix));
            if let Some((capability, _, _)) = owner {
                if !self.mcp_capabilities.contains_key(*capability) {
                    return Err(BuildError::Manifest(format!(
                        "method {name:?} serves MCP's {capability} capability, which the server \
                         does not declare: a host calls it only on a server that does, so the \
                         handler would never run; declare it with \
                         mcp_capability(\"{capability}\", {{}})"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Every check [`Self::build`] makes before it builds (see its docs), in that order.
    pub(super) fn check(&self) -> Result<(), BuildError> {
        let mut defects = self.peer_config.defects();
        defects.extend(self.lifecycle.defects());
        if !defects.is_empty() {
            return Err(BuildError::InvalidConfig(defects));
        }
        self.names_not_blank()?;
        if let Some(slot) = self.duplicates.first() {
            return Err(BuildError::DuplicateRegistration { slot: slot.clone() });
        }
        let mut tool_names = std::collections::BTreeSet::new();
        for t in &self.handlers.tools {
            if !tool_names.insert(t.tool.name.as_str()) {
                return Err(BuildError::DuplicateRegistration {
                    slot: format!("tool {:?}", t.tool.name),
                });
            }
        }
        let bound = self
            .handlers
            .before_inference
            .iter()
            .filter_map(|(set, _)| set.as_deref().map(|s| ("on_before_inference", s)))
            .chain(
                self.tag_ontologies
                    .iter()
                    .map(|(set, _)| ("tag_ontology", set.as_str())),
            );
        for (registration, name) in bound {
            if !self.feature_sets.contains_key(name) {
                return Err(BuildError::UndeclaredFeatureSet {
                    registration,
                    name: name.to_owned(),
                    declared: closest_first(name, self.feature_sets.keys()),
                });
            }
        }
        let declared_ontologies = self
            .feature_sets
            .iter()
            .filter_map(|(name, d)| Some((name, d.extra.get("tagOntology")?)));
        let given = self.tag_ontologies.iter().map(|(name, o)| (name, o));
        for (name, ontology) in given.chain(declared_ontologies) {
            // Hosts read an ontology leniently, dropping what is malformed (§16.4); the
            // builder's author hears of each such part here instead.
            let problem = match crate::tags::TagOntology::parse(ontology) {
                Err(e) => Some(format!("{}: {e}", e.code())),
                Ok((_, issues)) => issues
                    .first()
                    .map(|i| format!("{} at {}: {}", i.code, i.path, i.detail)),
            };
            if let Some(problem) = problem {
                return Err(BuildError::Manifest(format!(
                    "tag_ontology for feature set {name:?}: {problem} (a host would drop it)"
                )));
            }
            if self
                .feature_sets
                .get(name)
                .is_some_and(|d| d.extra.contains_key("tagOntology"))
            {
                // The declaration carries one already: the call would replace it.
                return Err(BuildError::DuplicateRegistration {
                    slot: format!("tag_ontology for feature set {name:?}"),
                });
            }
        }
        match self.mcp_capabilities.get("experimental") {
            None => {}
            Some(Value::Object(e)) if !e.contains_key("mcpl") => {}
            Some(other) => {
                return Err(BuildError::Manifest(format!(
                    "mcp_capability \"experimental\" is {}: the session writes \
                     experimental.mcpl itself, from the builder's manifest (§5.1); give \
                     an object of your other experimental capabilities, without `mcpl`",
                    if other.is_object() {
                        "an object naming `mcpl`"
                    } else {
                        "not an object"
                    }
                )));
            }
        }
        for name in self.manifest_extra.keys() {
            if let Some(instead) = written_by_the_builder(name) {
                return Err(BuildError::Manifest(format!(
                    "manifest_member {name:?} names a member the builder writes itself \
                     (a manifest_member is a vendor extension); {instead}"
                )));
            }
        }
        if let Some((required, _)) = &self.required {
            // `tools` is advertised by registered tools, or by the fallback's own initialize.
            let mut advertised = self.advertised;
            if !self.handlers.tools.is_empty() || self.handlers.fallback.is_some() {
                advertised.insert(Capability::Tools);
            }
            let missing = required.difference(advertised);
            if !missing.is_empty() {
                return Err(BuildError::Manifest(format!(
                    "require names {}, which the server does not advertise: a host grants \
                     only what is advertised (§5.4), so every policy would be refused; \
                     advertise it (advertise, feature_set or a tool) or leave it out of require",
                    missing.sorted_paths().join(", ")
                )));
            }
        }
        for (name, d) in &self.feature_sets {
            // The rule a live manifest edit holds a name to (§6.3, §17.2).
            if !crate::manifest::edit::is_feature_set_name(name) {
                return Err(BuildError::InvalidFeatureSet {
                    name: name.clone(),
                    reason: crate::manifest::edit::ManifestEditError::InvalidName(name.clone())
                        .to_string(),
                });
            }
            if let Err(e) = d.validated_uses() {
                return Err(BuildError::InvalidFeatureSet {
                    name: name.clone(),
                    reason: e.to_string(),
                });
            }
        }
        if let Some((Some(set), _)) = &self.handlers.before_inference {
            // §6.4 rule 2: what the hook injects under a set whose `uses` names no hook
            // path is a use the set does not declare, rejected by the host on every turn;
            // §6.4 asks for the warning at declaration time.
            let uses = self
                .feature_sets
                .get(set)
                .and_then(|d| d.validated_uses().ok());
            if uses.is_some_and(|u| HOOK_PATHS.iter().all(|c| !u.contains(*c))) {
                return Err(BuildError::InvalidFeatureSet {
                    name: set.clone(),
                    reason: format!(
                        "on_before_inference is bound to it, but its uses names no \
                         contextHooks.beforeInference path, so a host rejects what the hook \
                         injects under it (§6.4 rule 2); add the ones the hook uses ({})",
                        HOOK_PATHS.map(Capability::as_str).join(", ")
                    ),
                });
            }
        }
        self.handlers_advertised()?;
        self.mcp_capabilities_readable()?;
        self.mcp_methods_served()?;
        let registered = self.handlers.connection_state.as_ref();
        for (registration, type_id, wanted) in &self.state_users {
            if registered.map(|s| s.type_id) != Some(*type_id) {
                return Err(BuildError::ConnectionStateType {
                    registration,
                    wanted,
                    registered: registered.map(|s| s.type_name),
                });
            }
        }
        for name in self.handlers.custom.keys() {
            // JSON-RPC 2.0 §4 reserves `rpc.` for the protocol's own methods; an empty or
            // whitespace-only name names nothing a host could call.
            if is_reserved(name) || name.trim().is_empty() || name.starts_with("rpc.") {
                return Err(BuildError::ReservedMethod(name.clone()));
            }
        }
        if self.handlers.fallback.is_some() && !self.handlers.tools.is_empty() {
            return Err(BuildError::ToolsWithFallback);
        }
        for t in &self.handlers.tools {
            if let Some(reason) = &t.schema_defect {
                return Err(BuildError::ToolSchema {
                    name: t.tool.name.clone(),
                    reason: reason.clone(),
                });
            }
        }
        Ok(())
    }
}
