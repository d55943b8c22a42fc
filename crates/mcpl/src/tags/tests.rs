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
