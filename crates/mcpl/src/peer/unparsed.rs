//! The answers to requests on a line the parser refused (JSON-RPC 2.0 §5.1: `-32700`),
//! under the ids read without doubt before its error: a single object's request
//! ([`super::text::Read::UnparsedRequest`]), or each request of a batch refused only for
//! what followed it on its line ([`super::text::Read::UnparsedBatch`]), in one array (§6).
//! The policy Request (§6.7) among them is refused unread: its answer says it was not
//! applied, and an owner that answers it itself is told in wire order, as for one refused
//! for a bound (`refused::policy_not_applied`).

use super::reader::{refusing_policy, Parsed};
use super::*;

/// The policy Request's method (§6.7), as every refusal reads it.
use crate::jsonrpc::head::POLICY;

/// Answers a single request the parser refused (`error` the parser's) under `id`;
/// `policy`: it is the policy Request. What to deliver: the owner told of an unread policy.
pub(super) fn answer_request(
    shared: &Shared,
    id: RequestId,
    error: &str,
    policy: bool,
    replies: &mut Outbox,
) -> Option<Parsed> {
    shared.diagnose(Diagnostic::ParseError {
        error: error.to_owned(),
    });
    let owner = refusing_policy(shared, Some(POLICY));
    let reply = Message::Response(Response {
        id: Some(id),
        outcome: Err(refused(error, policy, owner)),
    });
    let _ = replies.send(reply.to_json());
    (policy && owner).then_some(Parsed::PolicyUnread(crate::policy::Form::Request))
}

/// Answers each request of a batch the parser refused for what followed it (`ids`, each
/// with whether it is the policy Request) under its id, in one array. `policy`: an entry
/// is the policy message not among them (a Notification, never answered; a Request whose
/// id is in doubt or none, answered only by what the batch's line is owed), told to the
/// owner all the same, in that form.
pub(super) fn answer_batch(
    shared: &Shared,
    ids: Vec<(RequestId, bool)>,
    error: &str,
    policy: Option<crate::policy::Form>,
    replies: &mut Outbox,
) -> Option<Parsed> {
    shared.diagnose(Diagnostic::ParseError {
        error: error.to_owned(),
    });
    let owner = refusing_policy(shared, Some(POLICY));
    let mut unread = false;
    let answers = ids
        .into_iter()
        .map(|(id, policy)| {
            unread |= policy;
            Message::Response(Response {
                id: Some(id),
                outcome: Err(refused(error, policy, owner)),
            })
            .to_value()
        })
        .collect();
    let _ = replies.send(Value::Array(answers).to_string());
    let form = match (unread, policy) {
        (true, _) => crate::policy::Form::Request,
        (false, Some(form)) => form,
        (false, None) => return None,
    };
    owner.then_some(Parsed::PolicyUnread(form))
}

/// The `-32700` a request the parser refused is answered with: for the policy Request
/// (`policy`), saying it was not applied (`owner`: the connection's owner answers it).
fn refused(error: &str, policy: bool, owner: bool) -> ErrorObject {
    let refused = crate::jsonrpc::unparsed::parse_refused(error);
    match policy {
        true => super::refused::policy_not_applied(refused, owner),
        false => refused,
    }
}
