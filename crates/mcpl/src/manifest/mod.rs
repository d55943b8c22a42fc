//! Server manifests (§17): canonical digest, changed domains, the server-side tracker and host-side review.
//!
//! - [`jcs`]: plain RFC 8785 canonicalisation of any JSON value;
//! - [`digest`]: the §17.2 manifest digest (`revision`), step by step;
//! - [`vectors`]: a runner for the shared conformance vector file.

pub mod digest;
pub mod jcs;
pub mod vectors;

pub use digest::{
    canonical_json, ontology_digest, revision, sha256_hex, value_digest, DigestError,
    ManifestDigest,
};
