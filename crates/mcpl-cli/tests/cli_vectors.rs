//! `mcpl vectors` end to end against the frozen shared §17.2 corpus, its default location,
//! `$MCPL_DIGEST_VECTORS`, a corrupted copy, and unreadable files.

use serde_json::Value;

mod common;
use common::{mcpl, output, temp_file, Out};

const SHARED_VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/conformance/manifest-digest-vectors.json"
);
/// The repository root: `../shared` relative to it is the default vector location.
const REPO_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn run(args: &[&str], env: Option<&str>, cwd: Option<&str>, stdin: Option<&str>) -> Out {
    let mut c = mcpl();
    c.env_remove("MCPL_DIGEST_VECTORS").args(args);
    if let Some(e) = env {
        c.env("MCPL_DIGEST_VECTORS", e);
    }
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    if let Some(s) = stdin {
        c.write_stdin(s.to_owned());
    }
    output(&mut c)
}

fn shared() -> Value {
    serde_json::from_str(&std::fs::read_to_string(SHARED_VECTORS).unwrap()).unwrap()
}

/// Every vector and sort vector the file holds.
fn expected_count() -> usize {
    let v = shared();
    v["vectors"].as_array().unwrap().len() + v["sortVectors"].as_array().map_or(0, Vec::len)
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or("")
}

#[test]
fn s17_2_shared_corpus_passes_from_file_argument() {
    let o = run(&["vectors", SHARED_VECTORS], None, None, None);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(
        last_line(&o.stdout),
        format!("{} passed, 0 failed", expected_count())
    );
}

#[test]
fn s17_2_shared_corpus_from_env_var_and_default_path() {
    let want = format!("{} passed, 0 failed", expected_count());
    let o = run(&["vectors"], Some(SHARED_VECTORS), Some("/"), None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(last_line(&o.stdout), want);

    let o = run(&["vectors"], None, Some(REPO_ROOT), None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(last_line(&o.stdout), want);
}

#[test]
fn stdin_by_dash() {
    let text = std::fs::read_to_string(SHARED_VECTORS).unwrap();
    let o = run(&["vectors", "-"], None, None, Some(&text));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(last_line(&o.stdout).ends_with(" passed, 0 failed"));
}

#[test]
fn s17_2_a_corrupted_digest_fails_by_name_and_exits_1() {
    let mut v = shared();
    let victim = v["vectors"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|x| x.get("digest").is_some())
        .unwrap();
    victim["digest"] = Value::String("sha256:AAAA".into());
    let name = victim["name"].as_str().unwrap().to_owned();
    let path = temp_file("corrupt.json", &v.to_string());
    let o = run(&["vectors", &path], None, None, None);
    assert_eq!(o.code, 1);
    assert!(
        o.stdout.contains(&format!("FAIL manifest {name}")),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("digest differs"), "{}", o.stdout);
    assert_eq!(
        last_line(&o.stdout),
        format!("{} passed, 1 failed", expected_count() - 1)
    );
}

#[test]
fn json_report_fields() {
    let o = run(&["vectors", "--json", SHARED_VECTORS], None, None, None);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let v: Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(v["passed"], expected_count());
    assert_eq!(v["failed"], 0);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), expected_count());
    let first = &results[0];
    assert!(first["name"].is_string());
    assert_eq!(first["kind"], "manifest");
    assert_eq!(first["passed"], true);
    assert_eq!(first["failures"], serde_json::json!([]));
    assert!(results.iter().any(|r| r["kind"] == "sort"));
}

#[test]
fn builtin_vectors_pass_without_any_file() {
    let o = run(
        &["vectors", "--builtin"],
        Some("/nowhere.json"),
        Some("/"),
        None,
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(last_line(&o.stdout).ends_with(" passed, 0 failed"));
}

#[test]
fn missing_file_exits_2_saying_where_it_looked() {
    let o = run(&["vectors"], None, Some("/"), None);
    assert_eq!(o.code, 2);
    assert!(
        o.stderr
            .contains("../shared/conformance/manifest-digest-vectors.json"),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains("MCPL_DIGEST_VECTORS"), "{}", o.stderr);

    let o = run(&["vectors"], Some("/no/such/vectors.json"), None, None);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("/no/such/vectors.json"), "{}", o.stderr);
    assert!(o.stderr.contains("$MCPL_DIGEST_VECTORS"), "{}", o.stderr);
}

#[test]
fn not_json_or_not_a_vector_file_exits_2() {
    let o = run(&["vectors", "-"], None, None, Some("vectors: []"));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("<stdin>: not JSON"), "{}", o.stderr);

    let o = run(&["vectors", "-"], None, None, Some("{\"vectors\": 3}"));
    assert_eq!(o.code, 2);
    assert!(
        o.stderr.contains("not a digest vector file"),
        "{}",
        o.stderr
    );
}

/// A file with no vectors runs nothing: a file error (exit 2), not "0 passed, 0 failed".
#[test]
fn a_file_without_vectors_exits_2() {
    let o = run(&["vectors", "-"], None, None, Some("{\"vectors\": []}"));
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, "");
    assert!(o.stderr.contains("<stdin>"), "{}", o.stderr);
    assert!(o.stderr.contains("empty"), "{}", o.stderr);
    let o = run(
        &["vectors", "--json", "-"],
        None,
        None,
        Some("{\"vectors\": []}"),
    );
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert_eq!(o.stdout, "");
}

/// A vector's `sameDigestAs` / `differentDigestFrom` was resolved by scanning the file and
/// digesting the named vector again, for each assertion: a file of n vectors each naming the
/// last took n² steps (20,000 of them, 4.5 MB: two minutes; a 64 MiB file: hours), and one
/// large vector named by many was digested once per name. Each name is found and each input
/// digested once now. The timeout is a guard against that, not a timing assertion.
#[test]
fn digest_assertions_take_time_in_proportion_to_the_file() {
    let n = 20_000;
    let last = format!("v{}", n - 1);
    let vectors: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({"name": format!("v{i}"), "input": {}, "canonicalJson": "{}",
            "sha256Hex": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
            "digest": "sha256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o",
            "sameDigestAs": last})
        })
        .collect();
    let f = temp_file(
        "many.json",
        &serde_json::json!({ "vectors": vectors }).to_string(),
    );
    let o = output(
        mcpl()
            .args(["vectors", &f])
            .timeout(std::time::Duration::from_secs(60)),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(last_line(&o.stdout), format!("{n} passed, 0 failed"));
}
