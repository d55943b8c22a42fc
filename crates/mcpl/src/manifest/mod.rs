//! Server manifests (§17): canonical digest, changed domains, the server-side tracker and host-side review.
//!
//! - [`jcs`]: plain RFC 8785 canonicalisation of any JSON value;
//! - [`digest`]: the §17.2 manifest digest (`revision`), step by step;
//! - [`domains`]: the three change domains (§17.1) and their derivation (§17.3);
//! - [`review`]: host-side validation, diff, change receipt and fetch limiter (§17.5–§17.8);
//! - [`tracker`]: the server-side [`ManifestTracker`] (§17.10);
//! - [`vectors`]: a runner for the shared conformance vector file.

pub mod digest;
pub mod domains;
pub mod jcs;
pub mod review;
pub mod tracker;
pub mod vectors;

pub use digest::{
    canonical_json, ontology_digest, revision, sha256_hex, value_digest, DigestError,
    ManifestDigest,
};
pub use domains::{changed_domains, ChangeDomain, ChangeImpact, Disposition};
pub use tracker::{
    ConnectionId, ManifestChanged, ManifestSink, ManifestSnapshot, ManifestTracker, SetOutcome,
};
