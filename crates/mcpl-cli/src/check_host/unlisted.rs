//! Members a host sends outside the ones a method's section lists, read for text: finding
//! F7 (§10.5: a lifecycle signal "MUST NOT carry message content"; §10.1: without `observe`
//! the user's text is absent, "not merely discouraged").
//!
//! Reading: a list of member names known to carry content (the library's
//! `CONTENT_LIKE_MEMBERS`) is a denylist, and content under any other name (`output`,
//! `history`, `metadata.userText`) passed. The spec's rule is an allowlist: §10.5 and §10.1
//! each list their fields, and §10.5 says the content fields "do not exist". Yet §8 asks
//! peers to tolerate unknown fields (and never to require them), so an unknown member is no
//! defect by itself. The checker cannot tell text from content, so a member outside the
//! listed ones whose value holds a non-empty string anywhere within it (the only way a
//! message's content travels) is a warning, never a fail; one holding only numbers,
//! booleans or nulls, or written `null`, passes. MCP's reserved `_meta` is tolerated as
//! listed. A member the denylist names stays a fail where it was judged so before.
//!
//! §14.4 lets a host include channel context in the hook's params (`channels`: the
//! `incoming` message's `channelId`, `messageId` and `threadId`, the `defaultOutgoing`
//! `channelId`, the `candidates` channel ids). What it lists there are identifiers, not
//! content, so it is read as listed (finding F2: it warned as text outside §10.1's
//! fields). Text under any other member of it (`channels.incoming.text`) is still named:
//! §14.4 lists no message content there, and without `observe` it may be the user's.

use serde_json::Value;

/// The members §10.5's table lists for `inference/lifecycle` (and MCP's `_meta`).
pub(super) const LIFECYCLE_LISTED: &[&str] = &[
    "inferenceId",
    "conversationId",
    "turnIndex",
    "phase",
    "model",
    "usage",
    "_meta",
];

/// The members §10.1's table lists for `context/beforeInference` (and MCP's `_meta`),
/// with §14.4's `channels`.
pub(super) const HOOK_LISTED: &[&str] = &[
    "inferenceId",
    "conversationId",
    "turnIndex",
    "userMessage",
    "model",
    "channels",
    "_meta",
];

/// Most values looked at within one member (a message is already bounded by
/// [`super::MAX_MESSAGE`]; this bounds the walk's time, not its memory).
const MAX_VALUES: usize = 10_000;

/// Most member names returned.
const MAX_NAMES: usize = 4;

/// Characters of a returned name.
const MAX_NAME_CHARS: usize = 64;

/// A listed member: its name, and the members listed within it when it is an object
/// (none: whatever it holds is listed).
#[derive(Debug)]
struct Listed(&'static str, &'static [Listed]);

/// The members §10.5, §10.1 and §14.4 list as objects, with the members their own sections
/// list (§10.5 `usage`: the token counts; §12.1 `model`; §14.4 `channels`, whose ids are
/// listed and nothing else). Text under one of theirs outside these is read as text
/// outside the listed fields too (finding F4: `usage.assistantText`, `model.lastPrompt`
/// passed, the walk having stopped at the top level).
const NESTED_LISTED: &[Listed] = &[
    Listed(
        "usage",
        &[Listed("inputTokens", &[]), Listed("outputTokens", &[])],
    ),
    Listed(
        "model",
        &[
            Listed("id", &[]),
            Listed("vendor", &[]),
            Listed("contextWindow", &[]),
            Listed("capabilities", &[]),
        ],
    ),
    Listed(
        "channels",
        &[
            Listed(
                "incoming",
                &[
                    Listed("channelId", &[]),
                    Listed("messageId", &[]),
                    Listed("threadId", &[]),
                ],
            ),
            Listed("defaultOutgoing", &[Listed("channelId", &[])]),
            Listed("candidates", &[]),
        ],
    ),
];

/// The members of `params` outside `listed` and outside `skip` whose value holds a
/// non-empty string, and those of a listed object member ([`NESTED_LISTED`]) outside its
/// own listed ones, named `usage.x` (at most [`MAX_NAMES`], each cut to
/// [`MAX_NAME_CHARS`], in the order the parsed object holds them). Every value is read
/// within one budget of [`MAX_VALUES`].
pub(super) fn text_members(params: Option<&Value>, listed: &[&str], skip: &[&str]) -> Vec<String> {
    let Some(members) = params.and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut budget = MAX_VALUES;
    let mut names = Vec::new();
    for (k, v) in members {
        if names.len() >= MAX_NAMES {
            break;
        }
        if skip.contains(&k.as_str()) {
            continue;
        }
        if !listed.contains(&k.as_str()) {
            if holds_text(v, &mut budget) {
                names.push(k.chars().take(MAX_NAME_CHARS).collect());
            }
            continue;
        }
        if let Some(Listed(_, inner)) = NESTED_LISTED.iter().find(|Listed(n, _)| *n == k) {
            unlisted_within(k, v, inner, skip, &mut budget, &mut names);
        }
    }
    names
}

/// Names in `names` (up to [`MAX_NAMES`]) the members of `v`, when it is an object with
/// members listed (`inner` not empty), outside `inner` and `skip` whose value holds text,
/// each as `path.member`, and walks on into the listed ones. The depth is the listing's
/// (at most 3), never the value's.
fn unlisted_within(
    path: &str,
    v: &Value,
    inner: &[Listed],
    skip: &[&str],
    budget: &mut usize,
    names: &mut Vec<String>,
) {
    if inner.is_empty() {
        return;
    }
    let Some(children) = v.as_object() else {
        return;
    };
    for (c, cv) in children {
        if names.len() >= MAX_NAMES {
            return;
        }
        if skip.contains(&c.as_str()) {
            continue;
        }
        let name = format!("{path}.{c}");
        match inner.iter().find(|Listed(n, _)| n == c) {
            Some(Listed(_, deeper)) => unlisted_within(&name, cv, deeper, skip, budget, names),
            None => {
                if holds_text(cv, budget) {
                    names.push(name.chars().take(MAX_NAME_CHARS).collect());
                }
            }
        }
    }
}

/// Whether `v` holds a non-empty string anywhere within it (a member name is no text: an
/// object's keys are read as structure). Walks at most `budget` values (spending them),
/// without recursion, so at any depth; past them, it answers `true` (fail closed: what was
/// not read may hold text).
fn holds_text(v: &Value, budget: &mut usize) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        if *budget == 0 {
            return true;
        }
        *budget -= 1;
        match v {
            Value::String(s) if !s.is_empty() => return true,
            Value::Array(a) => stack.extend(a.iter()),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// §10.5 with §8: a member outside the table carrying text is named; one carrying
    /// numbers, booleans or null, `_meta`, the listed ones and the skipped ones are not.
    #[test]
    fn s10_5_unlisted_members_carrying_text_are_named() {
        let p = json!({ "inferenceId": "i", "phase": "completed", "model": { "id": "m" },
            "output": "the full reply", "metadata": { "userText": "secret" },
            "history": [{ "role": "user", "content": "hi" }],
            "vendorCount": 3, "flags": [true, null], "empty": "", "gone": null,
            "_meta": { "trace": "t" }, "userMessage": "denylisted" });
        let named = text_members(Some(&p), LIFECYCLE_LISTED, &["userMessage"]);
        let mut named = named;
        named.sort();
        assert_eq!(named, ["history", "metadata", "output"]);
        assert!(text_members(Some(&json!("x")), LIFECYCLE_LISTED, &[]).is_empty());
        assert!(text_members(None, HOOK_LISTED, &[]).is_empty());
    }

    /// F4: text under a listed object member, outside its own listed members, is named;
    /// its listed ones (`model.id`, `model.capabilities`) and a skipped name are not.
    #[test]
    fn s10_5_text_nested_under_a_listed_member_is_named() {
        let p = json!({ "inferenceId": "i", "phase": "completed",
            "usage": { "inputTokens": 1, "assistantText": "the reply", "n": 2 },
            "model": { "id": "m", "vendor": "v", "capabilities": ["tools"],
                       "lastPrompt": { "deep": ["secret"] }, "text": "skipped" } });
        assert_eq!(
            text_members(Some(&p), LIFECYCLE_LISTED, &["text"]),
            ["model.lastPrompt", "usage.assistantText"]
        );
        assert_eq!(
            text_members(Some(&p), HOOK_LISTED, &[]),
            ["model.lastPrompt", "model.text", "phase", "usage"],
            "§10.1 lists neither phase nor usage"
        );
    }

    /// §14.4 (finding F2): the hook's channel context, ids only, is listed; text under a
    /// member §14.4 does not list there is named, at whatever depth of it.
    #[test]
    fn s14_4_channel_context_ids_are_listed_and_text_beside_them_is_named() {
        let p = json!({ "inferenceId": "i", "userMessage": null,
            "channels": { "incoming": { "channelId": "discord:#general",
                                        "messageId": "dmsg_123", "threadId": "t_42" },
                          "defaultOutgoing": { "channelId": "ui" },
                          "candidates": ["ui", "discord:#general"] } });
        assert!(text_members(Some(&p), HOOK_LISTED, &[]).is_empty());
        let p = json!({ "channels": { "incoming": { "channelId": "c", "text": "hi there" },
                                      "recent": ["what the user said"], "candidates": [] } });
        assert_eq!(
            text_members(Some(&p), HOOK_LISTED, &[]),
            ["channels.incoming.text", "channels.recent"]
        );
        assert_eq!(
            text_members(Some(&p), LIFECYCLE_LISTED, &[]),
            ["channels"],
            "§10.5 lists no channels"
        );
    }

    /// The walk is bounded: a member past [`MAX_VALUES`] values reads as holding text.
    #[test]
    fn a_walk_past_its_bound_fails_closed() {
        let p = json!({ "big": vec![0; MAX_VALUES + 1] });
        assert_eq!(text_members(Some(&p), HOOK_LISTED, &[]), ["big"]);
        let many: serde_json::Map<String, Value> =
            (0..10).map(|i| (format!("m{i}"), json!("t"))).collect();
        let p = Value::Object(many);
        assert_eq!(text_members(Some(&p), HOOK_LISTED, &[]).len(), MAX_NAMES);
    }
}
