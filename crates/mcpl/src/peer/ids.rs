//! Response ids read beyond the exact reading ([`RequestId::from_value`]).

use super::*;

/// JSON-RPC 2.0 §5: a response's id is "the same as the value of" its request's. A response
/// (`value`, no `method`) whose id echoes an outstanding integer id of ours written with a
/// fraction or an exponent (`1.0`, `1e0`: whole, and under 2^53, where a double names one
/// integer) gets that id, so it answers its request, which otherwise waited for its timeout
/// (for ever without one): ids are read exactly ([`RequestId::from_value`]) and such a
/// number is none. The reading `mcpl check` and `check-host` apply (`integral_id_read`);
/// a true fraction, or a value no outstanding request has, is left to the exact reading.
/// The number is read as a double, as a JavaScript peer reads it: a fraction too small for
/// a double to hold (`1.0000000000000001`) reads as the integer it rounds to.
/// `None` when it was left.
pub(super) fn integral_id(shared: &Shared, value: &mut Value) -> Option<()> {
    let slot = value.as_object_mut()?.get_mut("id")?;
    let Value::Number(n) = slot else {
        return None;
    };
    *slot = outstanding_integral(shared, n)?.to_value();
    Some(())
}

/// The one reading of [`integral_id`], for a response's id `n` read anywhere (a message
/// built, or one refused unbuilt for its size or parsed cost, whose request then fails at
/// once): the outstanding integer id of ours that `n` writes as a whole float, reported
/// (`Diagnostic::IntegralId`); `None` for an integer (read exactly elsewhere), a true
/// fraction, or a value no outstanding request written has (`Shared::was_written`).
pub(super) fn outstanding_integral(shared: &Shared, n: &serde_json::Number) -> Option<RequestId> {
    let id = crate::jsonrpc::head::whole_float_id(n)?;
    let pending = lock(&shared.pending).contains_key(&id);
    let outstanding = pending || lock(&shared.in_order).contains(&id);
    if !outstanding || !shared.was_written(&id) {
        return None;
    }
    shared.diagnose(Diagnostic::IntegralId {
        id: id.clone(),
        written: n.to_string(),
    });
    Some(id)
}
