//! Runner for the shared §17.2 digest conformance file (`manifest-digest-vectors.json`).
//!
//! The file is iterated, never transcribed: every manifest vector is checked for its
//! canonical JSON, SHA-256 hex and digest *separately* (so a failure names the broken step),
//! its `sameDigestAs` / `differentDigestFrom` assertions and, for negative vectors, its
//! error code; every `sortVectors` entry is checked against [`sort_set`]. The CLI's
//! `mcpl vectors` and the conformance test both use [`run`].

use std::collections::HashMap;

use super::digest::{canonical_json, revision, sha256_hex, sort_set};
use serde_json::{json, Value};

/// Whether a result came from the `vectors` or the `sortVectors` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKind {
    /// A manifest digest vector.
    Manifest,
    /// A set-comparator vector.
    Sort,
}

/// The outcome of one vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorResult {
    /// The vector's `name` (or `#index` when it has none).
    pub name: String,
    /// Which list it came from.
    pub kind: VectorKind,
    /// Every check that failed, in the order canonical → hash → digest → cross-references;
    /// empty when the vector passed.
    pub failures: Vec<String>,
}

impl VectorResult {
    /// True when every check of this vector passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// The outcome of a whole vector file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VectorReport {
    /// Per-vector results, manifest vectors first, then sort vectors.
    pub results: Vec<VectorResult>,
    /// Problems with the file itself (missing lists, malformed entries).
    pub file_errors: Vec<String>,
}

impl VectorReport {
    /// True when the file was well formed and every vector passed.
    pub fn passed(&self) -> bool {
        self.file_errors.is_empty() && self.results.iter().all(VectorResult::passed)
    }

    /// Number of results of the given kind that passed.
    pub fn passed_count(&self, kind: VectorKind) -> usize {
        self.results
            .iter()
            .filter(|r| r.kind == kind && r.passed())
            .count()
    }

    /// Number of results of the given kind.
    pub fn count(&self, kind: VectorKind) -> usize {
        self.results.iter().filter(|r| r.kind == kind).count()
    }
}

/// Runs every vector of a parsed conformance file (the format of
/// `shared/conformance/manifest-digest-vectors.json`).
pub fn run(file: &Value) -> VectorReport {
    let mut report = VectorReport::default();
    let vectors = match file.get("vectors").and_then(Value::as_array) {
        Some(v) => v.as_slice(),
        None => {
            report.file_errors.push("no `vectors` array".into());
            &[]
        }
    };
    // Each name is found, and each input digested, once: assertions resolved by scanning
    // the file and digesting the named vector again took n² steps over n vectors.
    let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(vectors.len());
    for (i, v) in vectors.iter().enumerate() {
        if let Some(name) = v.get("name").and_then(Value::as_str) {
            // The first vector of a name, as a scan from the start finds it.
            by_name.entry(name).or_insert(i);
        }
    }
    let revisions: Vec<Option<String>> = vectors
        .iter()
        .map(|v| v.get("input").and_then(|input| revision(input).ok()))
        .collect();
    let revision_of = |i: usize| revisions.get(i).cloned().flatten();
    for (i, v) in vectors.iter().enumerate() {
        let name = v
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("#{i}"), str::to_owned);
        let mut failures = Vec::new();
        let Some(input) = v.get("input") else {
            failures.push("vector has no `input`".into());
            report.results.push(VectorResult {
                name,
                kind: VectorKind::Manifest,
                failures,
            });
            continue;
        };
        if let Some(code) = v.get("expectError").and_then(Value::as_str) {
            match revision(input) {
                Ok(rev) => failures.push(format!("expected error {code}, got digest {rev}")),
                Err(e) if e.code() != code => {
                    failures.push(format!("expected error {code}, got {e}"))
                }
                Err(_) => {}
            }
            if v.get("digest").is_some() {
                failures.push("vector carries both `digest` and `expectError`".into());
            }
        } else {
            check_positive(v, input, &mut failures);
        }
        let rev = revision_of(i);
        for (key, want_equal) in [("sameDigestAs", true), ("differentDigestFrom", false)] {
            let Some(other) = v.get(key).and_then(Value::as_str) else {
                continue;
            };
            let Some(&j) = by_name
                .get(other)
                .filter(|&&j| vectors.get(j).is_some_and(|o| o.get("input").is_some()))
            else {
                failures.push(format!("{key}: no vector named {other:?}"));
                continue;
            };
            let other_rev = revision_of(j);
            match (&rev, &other_rev) {
                (Some(a), Some(b)) if (a == b) != want_equal => {
                    failures.push(format!("{key} {other}: {a} vs {b}"));
                }
                (Some(_), Some(_)) => {}
                _ => failures.push(format!("{key} {other}: one of the two has no digest")),
            }
        }
        report.results.push(VectorResult {
            name,
            kind: VectorKind::Manifest,
            failures,
        });
    }
    match file.get("sortVectors") {
        Some(Value::Array(sorts)) => {
            for (i, s) in sorts.iter().enumerate() {
                let name = s
                    .get("name")
                    .and_then(Value::as_str)
                    .map_or_else(|| format!("#{i}"), str::to_owned);
                let mut failures = Vec::new();
                match (strings(s.get("input")), strings(s.get("sorted"))) {
                    (Some(input), Some(sorted)) => {
                        let got = sort_set(&input);
                        if got != sorted {
                            failures.push(format!("sorted {got:?}, expected {sorted:?}"));
                        }
                    }
                    _ => failures.push("`input` and `sorted` must be arrays of strings".into()),
                }
                report.results.push(VectorResult {
                    name,
                    kind: VectorKind::Sort,
                    failures,
                });
            }
        }
        Some(_) => report
            .file_errors
            .push("`sortVectors` is not an array".into()),
        None => {}
    }
    report
}

fn check_positive(v: &Value, input: &Value, failures: &mut Vec<String>) {
    let field = |k: &str| v.get(k).and_then(Value::as_str);
    let (Some(want_canon), Some(want_hex), Some(want_digest)) =
        (field("canonicalJson"), field("sha256Hex"), field("digest"))
    else {
        failures.push("positive vector lacks canonicalJson, sha256Hex or digest".into());
        return;
    };
    match canonical_json(input) {
        Err(e) => failures.push(format!("canonicalisation refused: {e}")),
        Ok(canon) => {
            if canon != want_canon {
                failures.push(format!("canonicalJson differs: got {canon}"));
            }
        }
    }
    // Hash and encoding are checked over the file's own canonical text, so a JCS bug above
    // does not mask (or cause) a failure here.
    let hex = sha256_hex(want_canon);
    if hex != want_hex {
        failures.push(format!("sha256Hex of canonicalJson differs: got {hex}"));
    }
    match revision(input) {
        Ok(rev) if rev != want_digest => failures.push(format!("digest differs: got {rev}")),
        Ok(_) => {}
        Err(e) => failures.push(format!("digest refused: {e}")),
    }
}

fn strings(v: Option<&Value>) -> Option<Vec<String>> {
    v?.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_owned))
        .collect()
}

/// The project's own vectors, always available even without the shared file: the §17.2
/// worked example and a few pinned cases, in the shared file's format.
pub fn builtin() -> Value {
    let worked = json!({"version":"0.5","pushEvents":true,"contextHooks":{"beforeInference":true},
        "inferenceLifecycle":true,"channels":{"register":true,"publish":true,"incoming":true},
        "featureSets":{"demo.messaging":{"description":"Demo",
          "uses":["channels.publish","channels.incoming","pushEvents","tools"]}}});
    let worked_canon = concat!(
        r#"{"channels":{"incoming":true,"publish":true,"register":true},"#,
        r#""contextHooks":{"beforeInference":true},"#,
        r#""featureSets":{"demo.messaging":{"description":"Demo","#,
        r#""uses":["channels.incoming","channels.publish","pushEvents","tools"]}},"#,
        r#""inferenceLifecycle":true,"pushEvents":true,"version":"0.5"}"#
    );
    json!({
        "vectors": [
            {
                "name": "s17_2-worked-example",
                "input": worked,
                "canonicalJson": worked_canon,
                "sha256Hex": "fd86534b4875b6a4c031923a784942b3349013658dc77c610219a052f348f47e",
                "digest": "sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4"
            },
            {
                "name": "s17_2-empty-object",
                "input": {},
                "canonicalJson": "{}",
                "sha256Hex": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "digest": "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
            },
            {
                "name": "s17_2-solidus-in-feature-set-name",
                "input": {"version": "0.5", "featureSets": {"demo/x": {"description": "d", "uses": []}}},
                "expectError": "identifier_charset"
            },
            {
                "name": "s17_2-manifest-not-object",
                "input": ["version"],
                "expectError": "manifest_not_object"
            }
        ],
        "sortVectors": [
            {
                "name": "s17_2-utf8-not-utf16",
                "input": ["\u{10000}", "\u{fffd}", "z", "z"],
                "sorted": ["z", "\u{fffd}", "\u{10000}"]
            }
        ]
    })
}
