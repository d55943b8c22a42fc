//! Server manifests (§17): canonical digest, changed domains, the server-side tracker and host-side review.
