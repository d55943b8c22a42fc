//! Property tests for §17.2: the digest is total, plain canonicalisation agrees with an
//! independent RFC 8785 implementation, and neither member order nor set order in the input
//! changes the digest.

use mcpl::manifest::{canonical_json, changed_domains, jcs, revision, ChangeDomain};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        (-1e6f64..1e6).prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
}

/// Any JSON value, any strings (including controls, astral characters and U+2028).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const IDENT: &str = "[A-Za-z0-9._:*-]{1,12}";

/// Values whose object member names are identifiers (legal beneath capability members).
fn ident_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(IDENT, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn feature_set() -> impl Strategy<Value = Value> {
    (
        any::<String>(),
        prop::collection::vec(IDENT, 0..6),
        prop::option::of((
            prop::collection::vec(IDENT, 0..5),
            prop::collection::btree_map(IDENT, prop::collection::vec(IDENT, 0..4), 0..4),
        )),
    )
        .prop_map(|(description, uses, onto)| {
            let mut fs = Map::new();
            fs.insert("description".into(), Value::String(description));
            fs.insert("uses".into(), uses.into());
            if let Some((core, tags)) = onto {
                let tags: Map<String, Value> = tags
                    .into_iter()
                    .map(|(k, implies)| (k, serde_json::json!({ "implies": implies })))
                    .collect();
                fs.insert(
                    "tagOntology".into(),
                    serde_json::json!({"coreTags": core, "tags": tags}),
                );
            }
            Value::Object(fs)
        })
}

/// Conforming-looking manifests: identifier capability members and object-keyed feature sets.
fn manifest() -> impl Strategy<Value = Value> {
    (
        prop::collection::btree_map(IDENT, ident_json(), 0..6),
        prop::option::of(prop::collection::btree_map(IDENT, feature_set(), 0..4)),
    )
        .prop_map(|(caps, sets)| {
            let mut m: Map<String, Value> = caps
                .into_iter()
                .filter(|(k, _)| k != "version" && k != "revision" && k != "featureSets")
                .collect();
            m.insert("version".into(), "0.5".into());
            if let Some(sets) = sets {
                m.insert(
                    "featureSets".into(),
                    Value::Object(sets.into_iter().collect()),
                );
            }
            Value::Object(m)
        })
}

/// Rewrites every set-valued array (uses, coreTags, implies) as reversed-with-duplicates.
fn shuffle_sets(m: &mut Value) {
    fn scramble(v: &mut Value) {
        if let Value::Array(items) = v {
            items.reverse();
            if let Some(first) = items.first().cloned() {
                items.push(first);
                items.rotate_right(1);
            }
        }
    }
    let Some(Value::Object(sets)) = m.get_mut("featureSets") else {
        return;
    };
    for fs in sets.values_mut() {
        if let Some(uses) = fs.get_mut("uses") {
            scramble(uses);
        }
        if let Some(onto) = fs.get_mut("tagOntology") {
            if let Some(core) = onto.get_mut("coreTags") {
                scramble(core);
            }
            if let Some(Value::Object(tags)) = onto.get_mut("tags") {
                for t in tags.values_mut() {
                    if let Some(implies) = t.get_mut("implies") {
                        scramble(implies);
                    }
                }
            }
        }
    }
}

/// JSON text with every object's members written in reverse order, to feed a parser
/// shuffled input (the result must not depend on how the parser stores members).
fn reversed_text(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), reversed_text(v)))
                .collect();
            format!("{{{}}}", members.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(reversed_text).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn s17_2_digest_is_total_on_arbitrary_json(v in any_json(), fs in any_json()) {
        let _ = jcs::to_string(&v);
        for input in [v.clone(), serde_json::json!({"version": "0.5", "featureSets": fs})] {
            match revision(&input) {
                Ok(rev) => {
                    prop_assert!(rev.starts_with("sha256:"));
                    prop_assert_eq!(rev.len(), 7 + 43);
                }
                Err(e) => prop_assert!(["identifier_charset", "manifest_not_object"].contains(&e.code())),
            }
        }
        let _ = changed_domains(&v, &fs);
    }

    #[test]
    fn rfc8785_jcs_matches_oracle(v in any_json()) {
        prop_assert_eq!(jcs::to_string(&v), serde_json_canonicalizer::to_string(&v).unwrap());
    }

    #[test]
    fn s17_2_canonical_matches_oracle_without_set_arrays(
        caps in prop::collection::btree_map(IDENT, ident_json(), 0..8)
    ) {
        let mut m: Map<String, Value> = caps
            .into_iter()
            .filter(|(k, _)| k != "revision" && k != "featureSets")
            .collect();
        m.insert("version".into(), "0.5".into());
        let m = Value::Object(m);
        prop_assert_eq!(canonical_json(&m).unwrap(), serde_json_canonicalizer::to_string(&m).unwrap());
    }

    #[test]
    fn s17_2_member_and_set_order_never_change_the_digest(m in manifest()) {
        let want = revision(&m).unwrap();
        let mut scrambled = m.clone();
        shuffle_sets(&mut scrambled);
        let reparsed: Value = serde_json::from_str(&reversed_text(&scrambled)).unwrap();
        prop_assert_eq!(revision(&scrambled).unwrap(), want.clone());
        prop_assert_eq!(revision(&reparsed).unwrap(), want);
        prop_assert!(changed_domains(&m, &reparsed).is_empty());
    }

    #[test]
    fn s17_3_any_digest_change_outside_version_names_a_domain(a in manifest(), b in manifest()) {
        let domains = changed_domains(&a, &b);
        let same = revision(&a).unwrap() == revision(&b).unwrap();
        prop_assert_eq!(same, domains.is_empty());
        prop_assert!(domains.windows(2).all(|w| w[0] < w[1]));
        prop_assert!(domains.iter().all(|d| ChangeDomain::ALL.contains(d)));
    }
}
