//! Server manifests (§17): canonical digest, changed domains, the server-side tracker and host-side review.
//!
//! - [`jcs`]: plain RFC 8785 canonicalisation of any JSON value;
//! - [`digest`]: the §17.2 manifest digest (`revision`), step by step;
//! - [`domains`]: the three change domains (§17.1) and their derivation (§17.3);
//! - [`review`]: host-side validation, diff, change receipt and fetch limiter (§17.5–§17.8);
//! - [`tracker`]: the server-side [`ManifestTracker`] (§17.10);
//! - [`edit`]: the tracker's typed edits ([`ManifestEdit`]), where a mistake is an error;
//! - [`vectors`]: a runner for the shared conformance vector file.

pub mod digest;
pub mod domains;
pub mod edit;
pub mod jcs;
pub mod review;
pub mod tracker;
pub mod vectors;

pub use digest::{
    canonical_json, ontology_digest, revision, sha256_hex, value_digest, DigestError,
    ManifestDigest,
};
pub use domains::{changed_domains, ChangeDomain, ChangeImpact, Disposition};
pub use edit::{ManifestEdit, ManifestEditError};

/// The default bound on the feature sets one peer-supplied manifest may carry (1,024):
/// [`crate::host::HostConfig::max_feature_sets`], and the checkers' bound. §6.1 sets no
/// number; this bounds what reviewing one manifest makes a reader build.
pub const DEFAULT_MAX_FEATURE_SETS: usize = 1024;

/// How many feature sets a manifest (`experimental.mcpl`) carries: the members of its
/// `featureSets` object, or the entries of a 0.4-style array; 0 when absent or another
/// type. Counted without building anything, so a reader can refuse a manifest past its
/// bound before reviewing it.
pub fn feature_set_count(manifest: &serde_json::Value) -> usize {
    match manifest.get("featureSets") {
        Some(serde_json::Value::Object(m)) => m.len(),
        Some(serde_json::Value::Array(a)) => a.len(),
        _ => 0,
    }
}

pub use tracker::{
    ConnectionId, ManifestChanged, ManifestSink, ManifestSnapshot, ManifestTracker, SetOutcome,
};
