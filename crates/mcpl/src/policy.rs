//! Negotiated policy (§5.3, §6, §6.7): `featureSets/update` to grant state, feature-set derivation, degradation receipts, host-side grant computation and the method → capability table.
