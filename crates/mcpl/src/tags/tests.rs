use super::*;

#[test]
fn s16_7_glob_star_semantics() {
    let m = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
    assert!(m("*", ""));
    assert!(m("*", "chat:dm"));
    assert!(m("chat:*", "chat:dm"));
    assert!(!m("chat:*", "chatter:dm"));
    assert!(m("*:dm", "chat:dm"));
    assert!(m("a*b*c", "axxbyyc"));
    assert!(!m("a*b*c", "axxbyy"));
    assert!(m("a**c", "ac"));
    assert!(!m("chat:dm", "chat:dms"));
    assert!(!m("chat:dms", "chat:dm"));
}

#[test]
fn s16_2_core_vocabulary_is_complete_and_unique() {
    let set: BTreeSet<&str> = CORE_TAGS.iter().copied().collect();
    assert_eq!(set.len(), CORE_TAGS.len());
    for t in CORE_TAGS {
        assert!(Tag::parse_producer(t).is_ok(), "{t}");
    }
    for (from, to) in CORE_IMPLICATIONS {
        assert!(set.contains(from));
        assert!(to.iter().all(|t| set.contains(t)));
    }
}

/// §16.5, §16.7: an accepted ontology's per-tag suggestions are one literal `tagsAny` rule
/// per described tag; evaluating them over an event's tags must not try every rule against
/// every tag (4,000 rules by 4,000 tags was 16 million glob runs for one event).
#[test]
fn s16_7_literal_patterns_are_looked_up_not_globbed_against_every_tag() {
    let n = 4000;
    let mut tags = Map::new();
    for i in 0..n {
        tags.insert(
            format!("acme:t{i}"),
            serde_json::json!({ "suggestedTreatment": "now" }),
        );
    }
    let (onto, _) = TagOntology::parse(&serde_json::json!({ "tags": tags })).unwrap();
    let acc = OntologyAcceptance::accept("s", "fs", "d")
        .bind(&onto, "s", "fs", "d")
        .unwrap();
    let mut rules = TreatmentRules::default();
    rules.accept_suggestions(&acc);
    rules.0.push(
        TreatmentRule::from_json(&serde_json::json!({
        "tagsAny": ["acme:x7*"], "behavior": "glob" }))
        .unwrap(),
    );
    let ev = AdmittedEvent {
        source: "s",
        feature_set: Some("fs"),
        channel: None,
    };
    let default = Behavior(serde_json::json!("queue"));
    let wire: Vec<String> = (0..n).map(|i| format!("acme:x{i}")).collect();
    let (set, _) = TagSet::from_wire(&wire);
    let expanded = set.expand(&ev, std::slice::from_ref(&acc));
    rules::GLOB_CALLS.with(|c| c.set(0));
    let t = rules.evaluate(&ev, &expanded, &default);
    let calls = rules::GLOB_CALLS.with(|c| c.get());
    assert_eq!(t.behavior().keyword(), Some("glob"));
    // Only the one glob rule runs, and only over the tags its literal prefix selects.
    assert!(calls <= 1 + n / 4, "{calls} glob runs for one event");
    // The literal rules still match exactly their own tag.
    let (one, _) = TagSet::from_wire(["acme:t3999"]);
    let t = rules.evaluate(&ev, &one.expand(&ev, &[acc]), &default);
    match t {
        Treatment::Rule { rule, .. } => {
            assert_eq!(
                rule.tags_any,
                Some(vec![TagPattern::new("acme:t3999").unwrap()])
            );
        }
        Treatment::Default(_) => panic!("the literal rule of acme:t3999 did not match"),
    }
}
proptest::proptest! {
    /// A pattern matches an expanded set exactly when it globs some tag of it.
    #[test]
    fn s16_7_pattern_lookup_agrees_with_globbing_every_tag(
        pattern in "[ab:*]{1,6}",
        tags in proptest::collection::btree_set("[ab]{0,2}:[ab:]{1,3}", 0..8),
    ) {
        let Ok(p) = TagPattern::new(&pattern) else { return Ok(()) };
        let expanded = ExpandedTags(tags.iter().filter_map(|t| Tag::parse(t).ok()).collect());
        let naive = expanded.iter().any(|t| p.matches(t));
        proptest::prop_assert_eq!(p.matches_any(&expanded), naive);
    }
}
