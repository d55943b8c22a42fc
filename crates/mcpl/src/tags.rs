//! Event tags (§16): parsing, the normative core closure, producer ontologies and consumer treatment rules.
