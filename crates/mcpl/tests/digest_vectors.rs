//! §17.2 conformance: iterates the shared digest vector file (never transcribed) and the
//! project's own built-in vectors through the library runner `mcpl::manifest::vectors::run`.

use mcpl::manifest::vectors::{self, VectorKind, VectorReport};
use serde_json::Value;
use std::path::PathBuf;

const DEFAULT_PATH: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/conformance/manifest-digest-vectors.json"
);

fn describe(report: &VectorReport) -> String {
    let mut s = String::new();
    for e in &report.file_errors {
        s.push_str(&format!("file: {e}\n"));
    }
    for r in report.results.iter().filter(|r| !r.passed()) {
        s.push_str(&format!(
            "{:?} {}: {}\n",
            r.kind,
            r.name,
            r.failures.join("; ")
        ));
    }
    s
}

#[test]
fn s17_2_shared_conformance_vectors() {
    let path = std::env::var_os("MCPL_DIGEST_VECTORS")
        .map_or_else(|| PathBuf::from(DEFAULT_PATH), PathBuf::from);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "\n\nMISSING CONFORMANCE VECTORS: cannot read {} ({e}).\n\
             Check out the shared/ directory beside the repository root, or set \
             MCPL_DIGEST_VECTORS=/path/to/manifest-digest-vectors.json.\n\
             This test refuses to pass without the vectors.\n",
            path.display()
        )
    });
    let file: Value = serde_json::from_str(&text).expect("vector file is valid JSON");
    let report = vectors::run(&file);
    assert!(
        report.passed(),
        "conformance vectors failed:\n{}",
        describe(&report)
    );
    // The frozen file at the time of writing: 25 manifest vectors, 4 comparator vectors.
    assert!(report.count(VectorKind::Manifest) >= 25);
    assert!(report.count(VectorKind::Sort) >= 4);
    assert_eq!(
        report.passed_count(VectorKind::Manifest),
        report.count(VectorKind::Manifest)
    );
    assert_eq!(
        report.passed_count(VectorKind::Sort),
        report.count(VectorKind::Sort)
    );
}

#[test]
fn s17_2_builtin_vectors_always_run() {
    let report = vectors::run(&vectors::builtin());
    assert!(
        report.passed(),
        "built-in vectors failed:\n{}",
        describe(&report)
    );
    assert_eq!(report.count(VectorKind::Manifest), 4);
    assert_eq!(report.count(VectorKind::Sort), 1);
}

#[test]
fn s17_2_runner_reports_each_step_separately() {
    // A tampered vector must fail, and name the step that broke.
    let mut file = vectors::builtin();
    file["vectors"][0]["digest"] =
        Value::from("sha256:_YZTS0h1tqTAMZI6eElCszSQE2WNx3xhAhmgUvNI9H4=");
    file["vectors"][1]["canonicalJson"] = Value::from("{ }");
    file["vectors"][2]["expectError"] = Value::from("manifest_not_object");
    file["sortVectors"][0]["sorted"] = serde_json::json!(["z", "\u{10000}", "\u{fffd}"]);
    let report = vectors::run(&file);
    assert!(!report.passed());
    let failures: Vec<_> = report
        .results
        .iter()
        .map(|r| r.failures.join("; "))
        .collect();
    assert!(failures[0].starts_with("digest differs"), "{failures:?}");
    assert!(
        failures[1].starts_with("canonicalJson differs"),
        "{failures:?}"
    );
    // The hash is checked over the file's canonical text, so it fails too for `{ }`.
    assert!(failures[1].contains("sha256Hex"), "{failures:?}");
    assert!(
        failures[2].contains("expected error manifest_not_object"),
        "{failures:?}"
    );
    assert!(report.results[3].passed());
    assert!(failures[4].starts_with("sorted"), "{failures:?}");
}
