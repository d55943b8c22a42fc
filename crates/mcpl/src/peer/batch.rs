//! A frame's top-level value read the slow way, a batch bounded as it is read: the one
//! reading of `jsonrpc` ([`crate::jsonrpc::batch`]), which a sans-I/O driver is owed its
//! answers by too.

pub(super) use crate::jsonrpc::batch::{parse_batch, BoundedBatch, Top};
