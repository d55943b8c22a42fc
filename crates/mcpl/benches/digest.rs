//! Issue "Performance" item 1: the §17.2 manifest digest against its lower bound, measured
//! back to back: `serde_json::to_vec` of the same value plus SHA-256 of those bytes.
//!
//! Run: `cargo bench -p mcpl --bench digest`.

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::{record, report, Ratio};
use criterion::{BenchmarkId, Criterion, Throughput};
use mcpl::manifest::digest::revision;
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

/// The §17.2 worked example (own copy; benches never read `shared/`).
fn worked_example() -> Value {
    json!({"version":"0.5","pushEvents":true,"contextHooks":{"beforeInference":true},
     "inferenceLifecycle":true,"channels":{"register":true,"publish":true,"incoming":true},
     "featureSets":{"demo.messaging":{"description":"Demo",
       "uses":["channels.publish","channels.incoming","pushEvents","tools"]}}})
}

/// ≈50 feature sets, each with a full §16.4 `tagOntology` (coreTags, described tags with
/// facet/implies/stability, keyed families, a suggestedTreatment rule list), ≈50 KB canonical.
fn large_manifest() -> Value {
    let mut sets = serde_json::Map::new();
    for i in 0..50 {
        let ns = format!("svc{i:02}");
        let mut tags = serde_json::Map::new();
        for t in 0..3 {
            tags.insert(
                format!("{ns}:tag-{t}"),
                json!({
                    "desc": format!("Tag {t} of {ns}"),
                    "facet": format!("{ns}:facet-{}", t % 3),
                    "implies": [format!("{ns}:tag-{}", (t + 2) % 3), "chat:addressed", format!("{ns}:tag-{}", (t + 1) % 3)],
                    "stability": if t % 2 == 0 { "stable" } else { "experimental" },
                }),
            );
        }
        sets.insert(
            format!("{ns}.messaging"),
            json!({
                "description": format!("Messaging surface number {i} with a realistic description"),
                "uses": ["tools", "pushEvents", "channels.publish", "channels.incoming",
                         "contextHooks.beforeInference.observe", "channels.register"],
                "tagOntology": {
                    "coreTags": ["chat:mention", "chat:dm", "chat:reply", "chat:from-human", "chat:group", "chat:addressed"],
                    "tags": tags,
                    "keyed": {
                        format!("{ns}:priority"): {"desc": "Priority", "values": ["low", "normal", "high", "urgent"]},
                        format!("{ns}:room"): {"desc": "Room kind", "values": ["lobby", "ops", "support"]},
                    },
                    "suggestedTreatment": [
                        {"tagsAny": ["chat:mention", "chat:dm"], "treatment": "immediate"},
                        {"tagsAll": [format!("{ns}:tag-1"), "chat:group"], "tagsNone": ["chat:from-self"], "treatment": "batched"},
                        {"tagsAny": [format!("{ns}:tag-3")], "treatment": "ignore"},
                    ],
                    "open": true,
                },
            }),
        );
    }
    json!({
        "version": "0.5",
        "revision": "sha256:stale",
        "tools": true,
        "pushEvents": true,
        "inferenceLifecycle": true,
        "contextHooks": {"beforeInference": {"observe": true, "inject": {"system": true, "beforeUser": true, "afterUser": true}}},
        "channels": {"register": true, "publish": true, "incoming": true, "lifecycle": true, "streaming": true, "acknowledge": true, "typing": true},
        "featureSets": sets,
    })
}

/// The lower bound: plain serialisation plus SHA-256.
fn bound(v: &Value) -> [u8; 32] {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    Sha256::digest(&bytes).into()
}

fn bench_value(c: &mut Criterion, name: &'static str, v: &Value) {
    let canonical = mcpl::manifest::digest::canonical_json(v).unwrap().len();
    let mut g = c.benchmark_group(format!("digest/{name}"));
    g.throughput(Throughput::Bytes(canonical as u64));
    let key_sub: &'static str = Box::leak(format!("digest/{name}/revision").into_boxed_str());
    let key_base: &'static str = Box::leak(format!("digest/{name}/bound").into_boxed_str());
    // Interleaved: bound, subject, bound, subject ... so drift hits both alike.
    g.bench_function(BenchmarkId::new("bound_to_vec_sha256", canonical), |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(bound(black_box(v)));
            }
            record(key_base, iters, t.elapsed())
        })
    });
    g.bench_function(BenchmarkId::new("revision", canonical), |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                black_box(revision(black_box(v)).unwrap());
            }
            record(key_sub, iters, t.elapsed())
        })
    });
    g.finish();
}

fn bench_bytes(c: &mut Criterion, name: &'static str, v: &Value) {
    let text = serde_json::to_vec(v).unwrap();
    let mut g = c.benchmark_group(format!("digest_bytes/{name}"));
    g.throughput(Throughput::Bytes(text.len() as u64));
    let key_sub: &'static str = Box::leak(format!("digest_bytes/{name}/revision").into_boxed_str());
    let key_base: &'static str = Box::leak(format!("digest_bytes/{name}/bound").into_boxed_str());
    g.bench_function("bound_from_slice_to_vec_sha256", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let v: Value = serde_json::from_slice(black_box(&text)).unwrap();
                black_box(bound(&v));
            }
            record(key_base, iters, t.elapsed())
        })
    });
    g.bench_function("from_slice_revision", |b| {
        b.iter_custom(|iters| {
            let t = Instant::now();
            for _ in 0..iters {
                let v: Value = serde_json::from_slice(black_box(&text)).unwrap();
                black_box(revision(&v).unwrap());
            }
            record(key_sub, iters, t.elapsed())
        })
    });
    g.finish();
}

fn main() {
    let mut c = common::criterion();
    let small = worked_example();
    let large = large_manifest();
    println!(
        "manifests: small {} B canonical, large {} B canonical",
        mcpl::manifest::digest::canonical_json(&small)
            .unwrap()
            .len(),
        mcpl::manifest::digest::canonical_json(&large)
            .unwrap()
            .len()
    );
    // Paired A/B rounds first (baseline and subject alternate every few milliseconds, so a
    // change of machine load hits both alike); criterion's separate runs follow.
    let (rounds, scale) = if common::bench_mode() {
        (200, 1)
    } else {
        (2, 0)
    };
    let paired: Vec<(&str, f64, f64)> =
        [("small", &small, 200usize, 2.0), ("large", &large, 2, 1.5)]
            .into_iter()
            .flat_map(|(name, v, k, target)| {
                let k = (k * scale).max(1);
                let text = serde_json::to_vec(v).unwrap();
                let value = common::paired(
                    || {
                        black_box(bound(black_box(v)));
                    },
                    || {
                        black_box(revision(black_box(v)).unwrap());
                    },
                    rounds,
                    k,
                );
                let bytes = common::paired(
                    || {
                        let v: Value = serde_json::from_slice(black_box(&text)).unwrap();
                        black_box(bound(&v));
                    },
                    || {
                        let v: Value = serde_json::from_slice(black_box(&text)).unwrap();
                        black_box(revision(&v).unwrap());
                    },
                    rounds,
                    k,
                );
                let value_name = if name == "small" {
                    "paired: revision / bound, §17.2 example"
                } else {
                    "paired: revision / bound, large"
                };
                let bytes_name = if name == "small" {
                    "paired: bytes→revision / bound, small"
                } else {
                    "paired: bytes→revision / bound, large"
                };
                [(value_name, value, target), (bytes_name, bytes, target)]
            })
            .collect();
    bench_value(&mut c, "small", &small);
    bench_value(&mut c, "large", &large);
    bench_bytes(&mut c, "small", &small);
    bench_bytes(&mut c, "large", &large);
    c.final_summary();
    report(
        "digest",
        &[
            Ratio {
                name: "revision(&Value) / (to_vec+sha256), §17.2 example",
                subject: "digest/small/revision",
                baseline: "digest/small/bound",
                target: Some(2.0),
            },
            Ratio {
                name: "revision(&Value) / (to_vec+sha256), large ≈50 KB",
                subject: "digest/large/revision",
                baseline: "digest/large/bound",
                target: Some(1.5),
            },
            Ratio {
                name: "bytes→revision / (from_slice+to_vec+sha256), small",
                subject: "digest_bytes/small/revision",
                baseline: "digest_bytes/small/bound",
                target: Some(2.0),
            },
            Ratio {
                name: "bytes→revision / (from_slice+to_vec+sha256), large",
                subject: "digest_bytes/large/revision",
                baseline: "digest_bytes/large/bound",
                target: Some(1.5),
            },
        ],
    );
    for (name, ratio, target) in paired {
        common::report_paired(name, ratio, target);
    }
}
