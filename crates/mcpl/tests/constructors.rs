//! The constructors handlers build results and items with (issue #21): each writes exactly
//! the wire JSON the section it cites describes, with no member a handler did not ask for.
#![cfg(feature = "runtime")]

use mcpl::protocol::channels::{
    Author, ChannelDescriptor, ChannelDirection, CloseResult, IncomingMessage, ListResult,
    OpenResult, PublishResult,
};
use mcpl::protocol::content::{Content, ContentBlock};
use mcpl::protocol::handshake::{ToolContent, ToolsCallResult};
use mcpl::protocol::hooks::{BeforeInferenceResult, ContextInjection, Position};
use mcpl::protocol::push::PushPayload;
use mcpl::server::PushEvent;
use serde::Serialize;
use serde_json::{json, Map, Value};

fn wire(v: impl Serialize) -> Value {
    serde_json::to_value(v).expect("serializable")
}

#[test]
fn tools_call_result_text_and_error_are_mcp_results() {
    assert_eq!(
        wire(ToolsCallResult::text("done")),
        json!({"content": [{"type": "text", "text": "done"}]})
    );
    assert_eq!(
        wire(ToolsCallResult::error("no such reminder")),
        json!({"content": [{"type": "text", "text": "no such reminder"}], "isError": true})
    );
    let mixed = ToolsCallResult::new([
        ToolContent::from("a"),
        ContentBlock::text("b").into(),
        ToolContent::from(String::from("c")),
    ]);
    assert_eq!(
        wire(mixed)["content"],
        json!([{"type":"text","text":"a"},{"type":"text","text":"b"},{"type":"text","text":"c"}])
    );
}

#[test]
fn s10_4_context_injection_new_takes_a_string_or_blocks() {
    assert_eq!(
        wire(ContextInjection::new(
            "memory",
            Position::BeforeUser,
            "facts"
        )),
        json!({"namespace": "memory", "position": "beforeUser", "content": "facts"})
    );
    let blocks = ContextInjection::new("m", Position::System, ContentBlock::text("x"))
        .with_metadata(json!({"k": 1}));
    assert_eq!(
        wire(blocks),
        json!({"namespace": "m", "position": "system",
               "content": [{"type": "text", "text": "x"}], "metadata": {"k": 1}})
    );
}

#[test]
fn s10_2_with_injections_leaves_the_feature_set_to_the_session() {
    let r = BeforeInferenceResult::with_injections([ContextInjection::new(
        "n",
        Position::AfterUser,
        "t",
    )]);
    assert_eq!(
        wire(r),
        json!({"contextInjections": [{"namespace": "n", "position": "afterUser", "content": "t"}]})
    );
    let none = BeforeInferenceResult::with_injections(None);
    assert_eq!(wire(none), json!({"contextInjections": []}));
}

#[test]
fn s9_2_push_payload_is_always_blocks() {
    assert_eq!(
        wire(PushPayload::new("fired")),
        json!({"content": [{"type": "text", "text": "fired"}]})
    );
    // The string and the block form are one event, with one derived eventId (§9.4).
    let a = PushEvent::new("reminders", "fired");
    let b = PushEvent::text("reminders", "fired");
    assert_eq!(a, b);
    assert_eq!(a.stable_event_id(), b.stable_event_id());
    assert_eq!(
        a.content,
        Content::Blocks(vec![ContentBlock::text("fired")])
    );
}

#[test]
fn s14_2_channel_constructors() {
    let d = ChannelDescriptor::new("chat:general", "chat")
        .with_label("#general")
        .with_direction(ChannelDirection::Bidirectional);
    let dv = json!({"id": "chat:general", "type": "chat", "label": "#general",
                    "direction": "bidirectional"});
    assert_eq!(wire(&d), dv);
    assert_eq!(
        wire(ListResult::new(vec![d.clone()])),
        json!({"channels": [dv]})
    );
    assert_eq!(wire(OpenResult::new(d)), json!({"channel": dv}));
    assert_eq!(wire(CloseResult::new(true)), json!({"closed": true}));
    assert_eq!(
        wire(PublishResult::delivered(Some("m1".into()))),
        json!({"delivered": true, "messageId": "m1"})
    );
    assert_eq!(
        wire(PublishResult::not_delivered()),
        json!({"delivered": false})
    );
    let m = IncomingMessage::new("chat:general", "m1", "hi")
        .with_author(Author::new("u1", Some("Alice".into())))
        .with_timestamp("2026-01-23T10:30:00Z")
        .with_tags(["chat:mention"]);
    assert_eq!(
        wire(m),
        json!({"channelId": "chat:general", "messageId": "m1", "content": "hi",
               "author": {"id": "u1", "name": "Alice"},
               "timestamp": "2026-01-23T10:30:00Z", "tags": ["chat:mention"]})
    );
}

#[test]
fn s10_3_content_conversions() {
    assert_eq!(Content::from("x"), Content::Text("x".into()));
    assert_eq!(
        Content::from(ContentBlock::text("x")),
        Content::Blocks(vec![ContentBlock::text("x")])
    );
    let tool: Vec<ToolContent> = Content::from("x").into();
    assert_eq!(tool, vec![ToolContent::text("x")]);
    assert_eq!(
        ContentBlock::try_from(ToolContent::text("x")),
        Ok(ContentBlock::text("x"))
    );
    // An MCP-only block has no MCPL form and is handed back.
    let mut link = Map::new();
    link.insert("type".into(), json!("resource_link"));
    let other = ToolContent::Other(link);
    assert_eq!(ContentBlock::try_from(other.clone()), Err(other));
}

/// §8.3, §8.6: a checkpoint and a rollback answer without hand-written `extra`.
#[test]
fn s8_state_and_rollback_constructors() {
    use mcpl::protocol::state::{RollbackResult, StateInfo};
    let mut root = StateInfo::new("chk_1");
    root.parent = Some(None);
    root.data = Some(json!({"notes": ["a"]}));
    assert_eq!(
        wire(ToolsCallResult::text("1 note(s)").with_state(root))["state"],
        json!({"checkpoint": "chk_1", "parent": null, "data": {"notes": ["a"]}})
    );
    assert_eq!(
        wire(StateInfo::new("chk_2")),
        json!({"checkpoint": "chk_2"})
    );
    assert_eq!(
        wire(RollbackResult::rolled_back("chk_1")),
        json!({"checkpoint": "chk_1", "success": true})
    );
    assert_eq!(
        wire(RollbackResult::failed("chk_1", "the store is read-only")),
        json!({"checkpoint": "chk_1", "success": false, "reason": "the store is read-only"})
    );
}

/// §11.2: an `inference/request` under its feature set, one user message.
#[test]
fn s11_2_inference_request_constructors() {
    use mcpl::protocol::inference::{InferenceMessage, InferenceRequestParams};
    let p = InferenceRequestParams::new("ref.ask", [InferenceMessage::user("Hello")]);
    assert!(!p.is_streaming());
    assert_eq!(
        wire(p),
        json!({"featureSet": "ref.ask", "messages": [{"role": "user", "content": "Hello"}]})
    );
    assert_eq!(
        wire(InferenceMessage::new("assistant", ContentBlock::text("Hi")))["content"],
        json!([{"type": "text", "text": "Hi"}])
    );
}
