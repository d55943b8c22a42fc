use super::*;

#[test]
fn s16_7_glob_star_semantics() {
    let m = |p: &str, t: &str| glob_match(p, t);
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

/// §16.7 patterns come from the host's rules and from accepted producer ontologies, tags
/// from every event: a glob that backtracks over the whole tag for every place a literal
/// run could start did `pattern × tag` work (a 20 KB pattern `x:*aa…ab` against a 40 KB
/// tag of `a`s, 800 million steps for one event). Work stays linear in both.
#[test]
fn s16_7_glob_work_is_linear_in_pattern_and_tag() {
    // (pattern, tag, whether it reaches the searches between stars: its head and tail fit,
    // so the step counter is live for it).
    let cases = [
        (
            format!("x:*{}*b", "a".repeat(2_000)),
            format!("x:{}b", "a".repeat(4_000)),
            true,
        ),
        (
            format!("x:*{}*b", "a*".repeat(500)),
            format!("x:{}b", "a".repeat(4_000)),
            true,
        ),
        (
            format!("x:*{}*", "ab".repeat(1_000)),
            format!("x:{}", "ab".repeat(2_000)),
            true,
        ),
        (
            format!("*{}", "ab".repeat(1_000)),
            "ab".repeat(2_000) + "a",
            false,
        ),
        ("x:*".repeat(1_000), "x:".repeat(2_000), true),
    ];
    for (pattern, text, searches) in &cases {
        rules::GLOB_STEPS.with(|c| c.set(0));
        let naive = naive_glob(pattern.as_bytes(), text.as_bytes());
        assert_eq!(glob_match(pattern, text), naive, "{}", &pattern[..16]);
        let steps = rules::GLOB_STEPS.with(|c| c.get());
        assert_eq!(steps > 0, *searches, "{steps} steps for {}", &pattern[..16]);
        let bound = 2 * (pattern.len() + text.len());
        assert!(
            steps <= bound,
            "{steps} steps for {} + {} bytes",
            pattern.len(),
            text.len()
        );
    }
}

/// The glob by definition (dynamic programming over both), to check the fast one against.
fn naive_glob(p: &[u8], t: &[u8]) -> bool {
    let mut row = vec![false; t.len() + 1];
    row[0] = true;
    for &pc in p {
        let mut next = vec![false; t.len() + 1];
        if pc == b'*' {
            let mut any = false;
            for j in 0..=t.len() {
                any |= row[j];
                next[j] = any;
            }
        } else {
            for j in 1..=t.len() {
                next[j] = row[j - 1] && t[j - 1] == pc;
            }
        }
        row = next;
    }
    row[t.len()]
}

proptest::proptest! {
    /// The glob agrees with its definition on every small pattern and text.
    #[test]
    fn s16_7_glob_agrees_with_its_definition(p in "[ab*]{0,8}", t in "[ab]{0,10}") {
        proptest::prop_assert_eq!(glob_match(&p, &t), naive_glob(p.as_bytes(), t.as_bytes()));
    }
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
