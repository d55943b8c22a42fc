//! SPEC §16 (event tags) and RFC-001: syntax, core closure, ambient exclusion, producer
//! ontologies under digest-bound acceptance, and first-match-wins consumer treatment.

use mcpl::tags::*;
use serde_json::{json, Value};

const DISCORD: &str = "discord";
const FS: &str = "discord.messaging";

fn event(feature_set: Option<&'static str>) -> AdmittedEvent<'static> {
    AdmittedEvent {
        source: DISCORD,
        feature_set,
        channel: None,
    }
}

fn tags(raw: &[&str]) -> TagSet {
    let (set, issues) = TagSet::from_wire(raw);
    assert!(issues.is_empty(), "{issues:?}");
    set
}

fn core_expand(raw: &[&str]) -> Vec<String> {
    tags(raw).expand(&event(Some(FS)), &[]).to_strings()
}

fn ontology(v: Value) -> TagOntology {
    let (o, issues) = TagOntology::parse(&v).unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    o
}

fn behavior(s: &str) -> Behavior {
    Behavior(json!(s))
}

// ---- §16.1 syntax ----------------------------------------------------------------------

#[test]
fn s16_1_namespaced_and_faceted_tags_parse() {
    let t = Tag::parse("discord:role-mention").unwrap();
    assert_eq!(t.namespace(), "discord");
    assert_eq!(t.facet(), None);
    let f = Tag::parse("discord:urgency=high").unwrap();
    assert_eq!(f.facet(), Some(("urgency", "high")));
}

#[test]
fn s16_1_unnamespaced_tag_is_reported_not_admitted() {
    let (set, issues) = TagSet::from_wire(["mention", "chat:mention"]);
    assert_eq!(
        set.iter().map(Tag::as_str).collect::<Vec<_>>(),
        ["chat:mention"]
    );
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].index, Some(0));
    assert_eq!(issues[0].error.code(), "not_namespaced");
}

#[test]
fn s16_1_malformed_tags_have_typed_codes() {
    for (raw, code) in [
        (":x", "empty_part"),
        ("ns:", "empty_part"),
        ("ns:k=", "empty_part"),
        ("ns:=v", "empty_part"),
        ("ns:k=v=w", "empty_part"),
        ("ns:ünï", "invalid_character"),
        ("n s:x", "invalid_character"),
        ("ns:a*", "invalid_character"),
        ("", "not_namespaced"),
    ] {
        assert_eq!(Tag::parse(raw).unwrap_err().code(), code, "{raw:?}");
    }
}

#[test]
fn s16_1_reserved_namespaces_only_hold_spec_tags() {
    // A reserved namespace but for case is refused too: `CHAT:mention` reads as core.
    let (set, issues) = TagSet::from_wire([
        "mcpl:anything",
        "chat:urgent",
        "chat:dm",
        "CHAT:mention",
        "Mcpl:x",
    ]);
    assert_eq!(set.len(), 1);
    assert!(set.contains("chat:dm"));
    assert_eq!(
        issues.iter().map(|i| i.error.code()).collect::<Vec<_>>(),
        ["reserved_namespace"; 4]
    );
}

#[test]
fn s16_1_tags_are_a_set_dedupe_and_order_free() {
    let a = tags(&["chat:reply", "discord:pin", "chat:reply"]);
    let b = tags(&["discord:pin", "chat:reply"]);
    assert_eq!(a, b);
    assert_eq!(a.len(), 2);
}

#[test]
fn s16_1_json_field_wrong_types_reported() {
    let v = json!(["chat:dm", 7, "bare"]);
    let (set, issues) = TagSet::from_json(Some(&v));
    assert!(set.contains("chat:dm"));
    let got: Vec<_> = issues.iter().map(|i| (i.index, i.error.code())).collect();
    assert_eq!(
        got,
        [(Some(1), "tag_not_string"), (Some(2), "not_namespaced")]
    );

    let (set, issues) = TagSet::from_json(Some(&json!("chat:dm")));
    assert!(set.is_empty());
    assert_eq!(issues[0].error.code(), "tags_not_array");

    let (set, issues) = TagSet::from_json(None);
    assert!(set.is_empty() && issues.is_empty());
}

// ---- §16.3 core closure ------------------------------------------------------------------

#[test]
fn s16_3_mention_and_reply_imply_addressed() {
    assert_eq!(
        core_expand(&["chat:mention"]),
        ["chat:addressed", "chat:mention"]
    );
    assert_eq!(
        core_expand(&["chat:reply"]),
        ["chat:addressed", "chat:reply"]
    );
}

#[test]
fn s16_3_dm_implies_addressed_and_private() {
    assert_eq!(
        core_expand(&["chat:dm"]),
        ["chat:addressed", "chat:dm", "chat:private"]
    );
}

#[test]
fn s16_3_closure_is_additive_never_removes() {
    assert_eq!(
        core_expand(&["chat:mention", "discord:pin", "chat:has-image"]),
        [
            "chat:addressed",
            "chat:has-image",
            "chat:mention",
            "discord:pin"
        ]
    );
}

#[test]
fn s16_3_ambient_mention_ends_addressed_not_ambient() {
    assert_eq!(
        core_expand(&["chat:ambient", "chat:mention"]),
        ["chat:addressed", "chat:mention"]
    );
    // A producer that emits both directly gets the same resolution.
    assert_eq!(
        core_expand(&["chat:ambient", "chat:addressed"]),
        ["chat:addressed"]
    );
}

#[test]
fn s16_3_ambient_alone_is_kept() {
    assert_eq!(
        core_expand(&["chat:ambient", "chat:from-bot"]),
        ["chat:ambient", "chat:from-bot"]
    );
}

#[test]
fn s16_3_closure_is_transitive_through_accepted_edges() {
    // vendor:a ⇒ vendor:b ⇒ chat:dm ⇒ chat:addressed, chat:private.
    let o = ontology(json!({"tags": {
        "vendor:a": {"implies": ["vendor:b"]},
        "vendor:b": {"implies": ["chat:dm"]}
    }}));
    let acc = OntologyAcceptance::accept(DISCORD, FS, "sha256:one");
    let bound = acc.bind(&o, DISCORD, FS, "sha256:one").unwrap();
    let out = tags(&["vendor:a", "chat:ambient"]).expand(&event(Some(FS)), &[bound]);
    assert_eq!(
        out.to_strings(),
        [
            "chat:addressed",
            "chat:dm",
            "chat:private",
            "vendor:a",
            "vendor:b"
        ]
    );
}

#[test]
fn s16_3_core_closure_ignores_unaccepted_ontology() {
    // The producer declares an edge from its own tag into the core; without acceptance only
    // §16.3 applies.
    let o = ontology(json!({"tags": {"vendor:loud": {"implies": ["chat:mention"]}}}));
    let stale = OntologyAcceptance::accept(DISCORD, FS, "sha256:old");
    assert!(stale.bind(&o, DISCORD, FS, "sha256:new").is_err());
    assert_eq!(
        core_expand(&["chat:mention"]),
        ["chat:addressed", "chat:mention"]
    );
}

/// RFC-001 §5: core tags are described by the spec; a producer lists the ones it emits in
/// `coreTags` and does not redescribe them. A descriptor keyed by a core tag is reported and
/// dropped, so no acceptance can ever make `chat:ambient` imply `chat:addressed`.
#[test]
fn s16_3_a_producer_cannot_redescribe_core_tags() {
    let (o, issues) = TagOntology::parse(&json!({"tags": {
        "chat:ambient": {"implies": ["chat:addressed"]},
        "chat:mention": {"implies": ["vendor:loud"]},
        "vendor:x": {"desc": "ours"}
    }}))
    .unwrap();
    assert_eq!(o.tags.len(), 1);
    let codes: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.code)).collect();
    assert_eq!(
        codes,
        [
            ("tags/chat:ambient", "core_tag_redescribed"),
            ("tags/chat:mention", "core_tag_redescribed")
        ]
    );
}

#[test]
fn s16_3_producer_edge_into_chat_needs_acceptance_and_current_digest() {
    let v1 = ontology(json!({"tags": {"vendor:x": {"implies": ["chat:addressed"]}}}));
    let raw = tags(&["vendor:x", "chat:ambient"]);
    let ev = event(Some(FS));

    // Not accepted: no effect (there is no AcceptedOntology to pass).
    assert_eq!(
        raw.expand(&ev, &[]).to_strings(),
        ["chat:ambient", "vendor:x"]
    );

    // Accepted against digest d1: the edge applies, and ambient is then dropped.
    let acceptance = OntologyAcceptance::accept(DISCORD, FS, "sha256:d1");
    assert!(acceptance.is_current(DISCORD, FS, "sha256:d1"));
    let bound = acceptance.bind(&v1, DISCORD, FS, "sha256:d1").unwrap();
    assert_eq!(
        raw.expand(&ev, std::slice::from_ref(&bound)).to_strings(),
        ["chat:addressed", "vendor:x"]
    );

    // The ontology changes (new digest d2): the old acceptance no longer binds.
    let v2 = ontology(json!({"tags": {"vendor:x": {"implies": ["chat:addressed", "chat:dm"]}}}));
    assert!(!acceptance.is_current(DISCORD, FS, "sha256:d2"));
    let err = acceptance.bind(&v2, DISCORD, FS, "sha256:d2").unwrap_err();
    assert_eq!(err, AcceptanceError::DigestChanged);
    assert_eq!(err.code(), "ontology_acceptance_invalidated");
    assert_eq!(
        raw.expand(&ev, &[]).to_strings(),
        ["chat:ambient", "vendor:x"]
    );
}

#[test]
fn s16_3_accepted_edges_are_scoped_to_their_server_and_feature_set() {
    let o = ontology(json!({"tags": {"vendor:x": {"implies": ["chat:addressed"]}}}));
    let acc = OntologyAcceptance::accept(DISCORD, FS, "sha256:d");
    assert_eq!(
        acc.bind(&o, "slack", FS, "sha256:d").unwrap_err(),
        AcceptanceError::OtherFeatureSet
    );
    let bound = acc.bind(&o, DISCORD, FS, "sha256:d").unwrap();
    let raw = tags(&["vendor:x"]);
    let bound = [bound];
    let other_server = AdmittedEvent {
        source: "slack",
        feature_set: Some(FS),
        channel: None,
    };
    assert_eq!(raw.expand(&other_server, &bound).to_strings(), ["vendor:x"]);
    let other_fs = event(Some("discord.other"));
    assert_eq!(raw.expand(&other_fs, &bound).to_strings(), ["vendor:x"]);
    assert_eq!(raw.expand(&event(None), &bound).to_strings(), ["vendor:x"]);
    assert_eq!(
        raw.expand(&event(Some(FS)), &bound).to_strings(),
        ["chat:addressed", "vendor:x"]
    );
}

// ---- §16.4 producer ontology -------------------------------------------------------------

fn rfc001_example() -> Value {
    json!({
        "description": "…",
        "uses": ["pushEvents", "channels.incoming", "channels.publish", "tools"],
        "tagOntology": {
            "coreTags": ["chat:addressed","chat:mention","chat:reply","chat:dm",
                         "chat:ambient","chat:broadcast","chat:reaction","chat:reaction-remove",
                         "chat:to-self","chat:from-human","chat:from-bot","chat:from-agent",
                         "chat:deleted"],
            "tags": {
                "discord:role-mention": {
                    "desc": "A role the agent holds was pinged — not the agent directly",
                    "facet": "addressing", "implies": ["chat:ambient"],
                    "suggestedTreatment": "throttle"
                },
                "discord:everyone": { "desc": "@everyone/@here", "facet": "addressing",
                                      "implies": ["chat:broadcast"] },
                "discord:slash":     { "desc": "Slash-command invocation", "facet": "content",
                                      "implies": ["chat:command"] },
                "discord:voice":     { "desc": "Voice channel state change", "facet": "lifecycle",
                                      "stability": "experimental" }
            },
            "keyed": {
                "urgency": { "desc": "Producer urgency hint", "values": ["low","normal","high"],
                             "ordered": true }
            },
            "suggestedTreatment": [
                { "tagsAny": ["chat:addressed"], "behavior": "immediate" },
                { "tagsAny": ["chat:deleted"],   "behavior": "mute" },
                { "tagsAny": ["chat:ambient","chat:from-bot"], "behavior": "throttle" }
            ],
            "open": true
        }
    })
}

#[test]
fn s16_4_parses_rfc001_example_ontology() {
    let (o, issues) = TagOntology::from_feature_set(&rfc001_example())
        .unwrap()
        .unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(o.core_tags.len(), 13);
    assert_eq!(o.tags.len(), 4);
    let role = &o.tags["discord:role-mention"];
    assert_eq!(role.facet.as_deref(), Some("addressing"));
    assert_eq!(role.suggested_treatment, Some(behavior("throttle")));
    assert!(role.implies.contains("chat:ambient"));
    assert_eq!(
        o.tags["discord:voice"].stability,
        Some(Stability::Experimental)
    );
    assert_eq!(o.keyed["urgency"].values, ["low", "normal", "high"]);
    assert!(o.keyed["urgency"].ordered);
    assert_eq!(o.suggested_treatment.len(), 3);
    assert_eq!(o.open, Some(true));
    assert!(!o.uses_deprecated_alias);
}

#[test]
fn s16_4_absent_ontology_and_non_objects() {
    assert_eq!(
        TagOntology::from_feature_set(&json!({"uses": []})).unwrap(),
        None
    );
    assert_eq!(
        TagOntology::from_feature_set(&json!([]))
            .unwrap_err()
            .code(),
        "declaration_not_object"
    );
    assert_eq!(
        TagOntology::from_feature_set(&json!({"tagOntology": 3}))
            .unwrap_err()
            .code(),
        "ontology_not_object"
    );
}

#[test]
fn s16_4_default_treatment_is_a_deprecated_alias() {
    let (o, issues) = TagOntology::parse(&json!({
        "defaultTreatment": [{"tagsAny": ["chat:dm"], "behavior": "immediate"}]
    }))
    .unwrap();
    assert!(issues.is_empty());
    assert!(o.uses_deprecated_alias);
    assert_eq!(o.suggested_treatment.len(), 1);

    let (o, issues) = TagOntology::parse(&json!({
        "suggestedTreatment": [],
        "defaultTreatment": [{"tagsAny": ["chat:dm"], "behavior": "immediate"}]
    }))
    .unwrap();
    assert!(o.suggested_treatment.is_empty());
    assert_eq!(issues[0].code, "deprecated_alias_ignored");
}

#[test]
fn s16_4_malformed_parts_reported_unknown_members_tolerated() {
    let (o, issues) = TagOntology::parse(&json!({
        "futureField": {"anything": true},
        "coreTags": ["chat:dm", "discord:x", 5],
        "tags": {
            "bare": {"desc": "no namespace"},
            "vendor:ok": {"implies": ["chat:addressed", "mcpl:grant", "nope"], "extra": 1,
                          "stability": "beta"},
            "vendor:notobj": 3,
            "vendor:badhint": {"suggestedTreatment": null}
        },
        "suggestedTreatment": [
            {"tagsAny": ["chat:dm"], "behavior": "immediate"},
            {"tagsAnyy": ["chat:dm"], "behavior": "immediate"}
        ],
        "open": "yes"
    }))
    .unwrap();
    assert_eq!(o.core_tags.len(), 1);
    assert_eq!(o.tags.len(), 2);
    assert_eq!(o.tags["vendor:badhint"].suggested_treatment, None);
    let implies: Vec<_> = o.tags["vendor:ok"]
        .implies
        .iter()
        .map(Tag::as_str)
        .collect();
    assert_eq!(implies, ["chat:addressed"]);
    assert_eq!(o.suggested_treatment.len(), 1);
    assert_eq!(o.open, None);
    let mut codes: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.code)).collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            ("coreTags/1", "not_core_tag"),
            ("coreTags/2", "not_string"),
            ("open", "not_boolean"),
            ("suggestedTreatment/1", "malformed_rule"),
            ("tags/bare", "not_namespaced"),
            ("tags/vendor:badhint/suggestedTreatment", "malformed_rule"),
            ("tags/vendor:notobj", "not_object"),
            ("tags/vendor:ok/implies/1", "reserved_namespace"),
            ("tags/vendor:ok/implies/2", "not_namespaced"),
            ("tags/vendor:ok/stability", "unknown_stability"),
        ]
    );
}

#[test]
fn s16_4_undescribed_tags_are_tolerated() {
    let o = ontology(json!({"tags": {"discord:pin": {}}, "open": false}));
    let acc = OntologyAcceptance::accept(DISCORD, FS, "d");
    let bound = acc.bind(&o, DISCORD, FS, "d").unwrap();
    let out = tags(&["discord:unknown", "chat:reply"]).expand(&event(Some(FS)), &[bound]);
    assert_eq!(
        out.to_strings(),
        ["chat:addressed", "chat:reply", "discord:unknown"]
    );
}

// ---- §16.5 suggested treatment -----------------------------------------------------------

fn discord_ontology() -> TagOntology {
    TagOntology::from_feature_set(&rfc001_example())
        .unwrap()
        .unwrap()
        .0
}

#[test]
fn s16_5_suggestions_not_applied_without_acceptance() {
    let o = discord_ontology();
    assert!(!o.suggested_treatment.is_empty());
    let rules = TreatmentRules::default();
    let default = behavior("queue");
    let ev = event(Some(FS));
    let t = tags(&["chat:mention"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default),
        Treatment::Default(&default)
    );
}

#[test]
fn s16_5_accepted_suggestions_merge_after_consumer_rules_attributed_and_revocable() {
    let o = discord_ontology();
    let acc = OntologyAcceptance::accept(DISCORD, FS, "sha256:d1");
    let bound = acc.bind(&o, DISCORD, FS, "sha256:d1").unwrap();
    let mut rules = TreatmentRules::from_json(&json!([
        {"tagsAny": ["chat:from-bot"], "behavior": "skip"}
    ]))
    .unwrap();
    rules.accept_suggestions(&bound);
    // 1 consumer + 1 per-tag (discord:role-mention) + 3 top-level.
    assert_eq!(rules.0.len(), 5);
    assert_eq!(rules.0[0].origin, RuleOrigin::Consumer);
    assert_eq!(
        rules.0[1].origin,
        RuleOrigin::Producer {
            source: DISCORD.into(),
            feature_set: FS.into(),
            ontology_digest: "sha256:d1".into()
        }
    );
    let default = behavior("queue");
    let ev = event(Some(FS));
    let t = tags(&["chat:mention"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default).behavior(),
        &behavior("immediate")
    );
    // Consumer rules still win.
    let bot = tags(&["chat:mention", "chat:from-bot"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &bot, &default).behavior(),
        &behavior("skip")
    );
    // Another server's events are untouched by discord's suggestions.
    let slack = AdmittedEvent {
        source: "slack",
        feature_set: Some(FS),
        channel: None,
    };
    assert_eq!(
        rules.evaluate(&slack, &t, &default),
        Treatment::Default(&default)
    );
    // Re-accepting does not duplicate; revoking removes exactly the producer rules.
    rules.accept_suggestions(&bound);
    assert_eq!(rules.0.len(), 5);
    assert_eq!(rules.revoke(DISCORD, FS), 4);
    assert_eq!(rules.0.len(), 1);
}

#[test]
fn s16_5_changed_ontology_invalidates_merged_suggestions() {
    let o = discord_ontology();
    let bound = OntologyAcceptance::accept(DISCORD, FS, "sha256:d1")
        .bind(&o, DISCORD, FS, "sha256:d1")
        .unwrap();
    let mut rules = TreatmentRules::default();
    rules.accept_suggestions(&bound);
    assert_eq!(rules.invalidate_stale(DISCORD, FS, Some("sha256:d1")), 0);
    assert_eq!(rules.invalidate_stale("other", FS, Some("sha256:zz")), 0);
    assert_eq!(rules.invalidate_stale(DISCORD, FS, Some("sha256:d2")), 4);
    assert!(rules.0.is_empty());
}

// ---- §16.7 consumer treatment ------------------------------------------------------------

/// RFC-001 §6's portable consumer policy.
fn consumer_policy() -> TreatmentRules {
    TreatmentRules::from_json(&json!([
        { "tagsAny": ["chat:addressed"], "behavior": "immediate" },
        { "tagsAll": ["chat:ambient"], "tagsNone": ["chat:from-self"],
          "behavior": { "debounce": 180000 } },
        { "tagsAny": ["chat:deleted","chat:from-bot"], "behavior": "skip" }
    ]))
    .unwrap()
}

#[test]
fn s16_7_first_match_wins() {
    let rules = consumer_policy();
    let default = behavior("mute");
    let ev = event(Some(FS));
    // Matches rules 0 and 2; the first wins.
    let t = tags(&["chat:mention", "chat:from-bot"]).expand(&ev, &[]);
    match rules.evaluate(&ev, &t, &default) {
        Treatment::Rule { index, rule } => {
            assert_eq!(index, 0);
            assert_eq!(rule.behavior, behavior("immediate"));
        }
        other => panic!("{other:?}"),
    }
    // Same tags, reversed rule order: the other rule wins.
    let mut reversed = rules.clone();
    reversed.0.reverse();
    assert_eq!(
        reversed.evaluate(&ev, &t, &default).behavior(),
        &behavior("skip")
    );
}

#[test]
fn s16_7_evaluated_over_the_expanded_set() {
    let rules = consumer_policy();
    let default = behavior("mute");
    let ev = event(Some(FS));
    // Only chat:dm was sent; rule 0 on chat:addressed matches via closure.
    let t = tags(&["chat:dm"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default).behavior(),
        &behavior("immediate")
    );
    // Ambient mention: ends addressed, so the ambient debounce rule cannot fire.
    let t = tags(&["chat:ambient", "chat:mention"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default).behavior(),
        &behavior("immediate")
    );
    // Ambient, not from self: debounce; from self: falls through to the default.
    let t = tags(&["chat:ambient"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default).behavior(),
        &Behavior(json!({"debounce": 180000}))
    );
    let t = tags(&["chat:ambient", "chat:from-self"]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default),
        Treatment::Default(&default)
    );
}

#[test]
fn s16_7_glob_matches_namespaces() {
    let rules = TreatmentRules::from_json(&json!([
        { "tagsAny": ["discord:*"], "tagsNone": ["*:from-bot"], "behavior": "a" },
        { "tagsAll": ["chat:*", "robotics:*"], "behavior": "b" },
        { "tagsAny": ["*urgency=high"], "behavior": "c" }
    ]))
    .unwrap();
    let default = behavior("d");
    let ev = event(Some(FS));
    let eval = |raw: &[&str]| {
        let t = tags(raw).expand(&ev, &[]);
        rules.evaluate(&ev, &t, &default).behavior().clone()
    };
    assert_eq!(eval(&["discord:pin"]), behavior("a"));
    assert_eq!(eval(&["discord:urgency=low"]), behavior("a"));
    assert_eq!(eval(&["discord:pin", "chat:from-bot"]), behavior("d"));
    // `discord:*` does not match another namespace that merely starts alike.
    assert_eq!(eval(&["discordia:pin"]), behavior("d"));
    assert_eq!(
        eval(&["chat:has-image", "robotics:collision"]),
        behavior("b")
    );
    assert_eq!(eval(&["robotics:collision"]), behavior("d"));
    assert_eq!(eval(&["slack:urgency=high"]), behavior("c"));
}

#[test]
fn s16_7_source_and_channel_compose() {
    let rules = TreatmentRules::from_json(&json!([
        { "source": "discord", "channel": "discord:#ops*", "tagsAny": ["chat:*"], "behavior": "ops" },
        { "source": "disc*", "behavior": "any-discord" }
    ]))
    .unwrap();
    let default = behavior("d");
    let t = tags(&["chat:from-human"]);
    let ev = |source, channel| AdmittedEvent {
        source,
        feature_set: None,
        channel,
    };
    let eval = |e: AdmittedEvent<'_>| {
        let x = t.expand(&e, &[]);
        rules.evaluate(&e, &x, &default).behavior().clone()
    };
    assert_eq!(
        eval(ev("discord", Some("discord:#ops-alerts"))),
        behavior("ops")
    );
    assert_eq!(
        eval(ev("discord", Some("discord:#general"))),
        behavior("any-discord")
    );
    // A channel matcher never matches an event without a channel.
    assert_eq!(eval(ev("discord", None)), behavior("any-discord"));
    assert_eq!(eval(ev("slack", Some("discord:#ops"))), behavior("d"));
}

#[test]
fn s16_7_empty_matcher_lists() {
    let rules = TreatmentRules::from_json(&json!([
        { "tagsAny": [], "behavior": "never" },
        { "tagsAll": [], "tagsNone": [], "behavior": "always" }
    ]))
    .unwrap();
    let default = behavior("d");
    let ev = event(None);
    let t = tags(&[]).expand(&ev, &[]);
    assert_eq!(
        rules.evaluate(&ev, &t, &default).behavior(),
        &behavior("always")
    );
}

#[test]
fn s16_7_rule_loading_fails_closed() {
    for (rule, code) in [
        (
            json!({"tagsAnyy": ["chat:dm"], "behavior": "x"}),
            "malformed_rule",
        ),
        (
            json!({"tagsNone": ["mention"], "behavior": "x"}),
            "malformed_rule",
        ),
        (json!({"tagsAny": ["chat:dm"]}), "malformed_rule"),
        (
            json!({"tagsAny": "chat:dm", "behavior": "x"}),
            "malformed_rule",
        ),
        (json!({"channel": "", "behavior": "x"}), "malformed_rule"),
        // A null matcher is refused, not read as absent: that would make a catch-all.
        (
            json!({"channel": null, "tagsAny": null, "behavior": "x"}),
            "malformed_rule",
        ),
        (json!({"tagsNone": null, "behavior": "x"}), "malformed_rule"),
        (json!({"source": null, "behavior": "x"}), "malformed_rule"),
        (json!({"behavior": null}), "malformed_rule"),
        (json!({"behavior": 3}), "malformed_rule"),
        (json!({"behavior": ""}), "malformed_rule"),
    ] {
        assert_eq!(
            TreatmentRule::from_json(&rule).unwrap_err().code(),
            code,
            "{rule}"
        );
    }
    assert_eq!(
        TagPattern::new("mention").unwrap_err().code(),
        "unnamespaced_pattern"
    );
    assert_eq!(
        TagPattern::new("chat:dm?").unwrap_err().code(),
        "invalid_pattern"
    );
    assert!(TreatmentRules::from_json(&json!({"rules": []})).is_err());
}

#[test]
fn s16_7_rules_round_trip_through_json() {
    let rules = consumer_policy();
    let v = serde_json::to_value(&rules).unwrap();
    assert_eq!(TreatmentRules::from_json(&v).unwrap(), rules);
    assert_eq!(
        rules.referenced_patterns().into_iter().collect::<Vec<_>>(),
        [
            "chat:addressed",
            "chat:ambient",
            "chat:deleted",
            "chat:from-bot",
            "chat:from-self"
        ]
    );
}

// ---- §16.1/§16.3 properties ----------------------------------------------------------------

mod props {
    use super::*;
    use proptest::prelude::*;

    const POOL: [&str; 10] = [
        "chat:mention",
        "chat:reply",
        "chat:dm",
        "chat:ambient",
        "chat:addressed",
        "chat:private",
        "chat:from-bot",
        "discord:pin",
        "vendor:x",
        "vendor:k=v",
    ];

    proptest! {
        #[test]
        fn s16_3_closure_laws(picks in proptest::collection::vec(0..POOL.len(), 0..12)) {
            let raw: Vec<&str> = picks.iter().map(|&i| POOL[i]).collect();
            let ev = event(Some(FS));
            let out = tags(&raw).expand(&ev, &[]);
            // Additive except for the ambient exclusion.
            for t in &raw {
                prop_assert!(out.contains(t) || *t == "chat:ambient");
            }
            // Core implications hold.
            for (from, to) in CORE_IMPLICATIONS {
                if out.contains(from) {
                    prop_assert!(to.iter().all(|t| out.contains(t)));
                }
            }
            // Mutual exclusion, and ambient only dropped because of addressed.
            prop_assert!(!(out.contains("chat:addressed") && out.contains("chat:ambient")));
            if raw.contains(&"chat:ambient") && !out.contains("chat:ambient") {
                prop_assert!(out.contains("chat:addressed"));
            }
            // Order-free and idempotent.
            let mut rev = raw.clone();
            rev.reverse();
            prop_assert_eq!(&tags(&rev).expand(&ev, &[]), &out);
            let again: Vec<String> = out.to_strings();
            prop_assert_eq!(TagSet::from_wire(&again).0.expand(&ev, &[]), out);
        }
    }
}
