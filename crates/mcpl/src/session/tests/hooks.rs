//! `context/beforeInference` (§10): fan-out, answers judged at receipt (§5.4), injections (§10.8), feature-set claims (§6.5, §6.6).

use super::*;

#[test]
fn s5_4_a_hook_answer_read_before_a_widening_receipt_is_judged_without_it() {
    // RELIABILITY.md's hook race as a plain test: the hook answer is on the wire ahead of the
    // receipt that grants `inject.system`, so its system injection is rejected.
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    let params =
        json!({"inferenceId": "i", "conversationId": "c", "turnIndex": 0, "userMessage": "hi"});
    let id = p
        .host
        .before_inference(p.now, params)
        .expect("an inject leaf is granted");
    p.host
        .set_policy(
            p.now,
            vec![
                "contextHooks.beforeInference.inject.afterUser".into(),
                "contextHooks.beforeInference.inject.system".into(),
            ],
        )
        .unwrap();
    p.step_server(); // the hook reaches the server application
                     // A server that answers with what it was not granted yet (`ServerState` would drop it,
                     // `s10_8_the_server_sends_only_injections_the_host_would_accept`): written raw.
    p.server_out.clear();
    p.server_writes(
        json!({"jsonrpc": "2.0", "id": id, "result": {"featureSet": "ctx",
        "contextInjections": [{"namespace": "n", "position": "system", "content": "too soon"}]}}),
    );
    p.drive(); // the server then reads the policy Request: its receipt follows the answer
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert!(v[0].accepted.is_empty(), "{:?}", v[0]);
    assert!(matches!(
        v[0].rejected.as_slice(),
        [(_, crate::policy::InjectionDenied::Denied(d))] if d.capability == Capability::InjectSystem
    ));
    assert!(
        p.host.grant().allows(Capability::InjectSystem),
        "widened after"
    );
    // The same answer read after the receipt is accepted.
    let again =
        json!({"inferenceId": "j", "conversationId": "c", "turnIndex": 1, "userMessage": null});
    p.host.before_inference(p.now, again).unwrap();
    p.step_server();
    answer_hook(
        &mut p,
        json!([{"namespace": "n", "position": "system", "content": "now"}]),
    );
    p.drive();
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 2);
    assert_eq!(v[1].accepted.len(), 1, "{:?}", v[1]);
    assert_eq!(v[1].accepted[0].0, Capability::InjectSystem);
    // §10.1: userMessage is redacted without observe.
    let sent = p
        .host_wrote
        .iter()
        .find(|t| t.contains("context/beforeInference"))
        .unwrap();
    assert!(sent.contains("\"userMessage\":null"), "{sent}");
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Hook { id: got, .. } if *got == id)));
}

/// §10.8 at the server: its hook answer carries only what the host would accept now, judged
/// by the host's own rule (`rules::hook_answer_to_send`); what it drops is reported. The
/// same whether the application answers with a `Value` or encoded
/// (`ServerState::answer_encoded`, which reads it back for the rule).
#[test]
fn s10_8_the_server_sends_only_injections_the_host_would_accept() {
    for encoded in [false, true] {
        let mut rules = hook_rules();
        rules.manifest["featureSets"] = json!({
            "ctx": {"uses": ["contextHooks.beforeInference.inject.afterUser"]},
            "sys": {"uses": ["contextHooks.beforeInference.inject.system"]}});
        let mut p = Pair::connect(&["contextHooks.beforeInference.inject.afterUser"], rules);
        p.host.before_inference(p.now, hook_params()).unwrap();
        p.step_server();
        let answer = json!({"featureSet": "ctx", "contextInjections": [
            {"namespace": "n", "position": "system", "content": "not granted"},
            {"namespace": "n", "position": "afterUser", "content": "granted"}]});
        let id = handed_hook(&mut p);
        let answered = if encoded {
            let e = crate::jsonrpc::Encoded::encode(&answer).unwrap();
            p.server.answer_encoded(id, e)
        } else {
            p.server.answer(id, Ok(answer))
        };
        answered.expect("handed out");
        p.drive();
        let v = hook_verdicts(&p);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].accepted.len(), 1, "{:?}", v[0]);
        assert!(v[0].rejected.is_empty(), "{:?}", v[0]);
        let dropped = p.server_details("injection_dropped");
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert!(dropped[0].contains("position system"), "{}", dropped[0]);
        // An answer to a request never handed out sends nothing.
        assert!(matches!(
            p.server.answer(RequestId::from(999i64), Ok(json!({}))),
            Err(SendRefusal::UnknownRequest(_))
        ));
    }
}

/// §6.5, §6.6 at the server: an answer claiming an undeclared feature set loses every
/// injection, and the `injection_dropped` detail names the set it claimed (the reason,
/// `Unknown feature set`, does not). `ServerState` does not know the hook's own set, so the
/// detail must not call it "(none)" either.
#[test]
fn s6_6_a_dropped_answer_names_the_feature_set_it_claimed() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    p.host.before_inference(p.now, hook_params()).unwrap();
    p.step_server();
    answer_hook_with(
        &mut p,
        json!({"featureSet": "ghost", "contextInjections": [
            {"namespace": "n", "position": "afterUser", "content": "x"}]}),
    );
    p.drive();
    let dropped = p.server_details("injection_dropped");
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert!(dropped[0].contains("\"ghost\""), "{}", dropped[0]);
    assert!(!dropped[0].contains("(none)"), "{}", dropped[0]);
}

/// Issue #24 item 3, §10.2: a hook answer that is not an object is refused by the host's
/// rule (`rules::judge_hook_answer`, a `HookFailed`), as the shape rule `mcpl check`
/// reports (`protocol::hooks::result_defects`) fails it; an object is judged entry-wise.
#[test]
fn s10_2_a_hook_result_that_is_not_an_object_is_refused_by_host_and_checker() {
    use crate::capability::Grant;
    use crate::protocol::hooks::result_defects;
    let grant = Grant::from_patterns(["contextHooks.beforeInference.inject.afterUser"]).unwrap();
    for v in [json!([]), json!(null), json!("x"), json!(7)] {
        let verdict = rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16);
        assert!(verdict.failure.is_some(), "{v}: {verdict:?}");
        assert!(!result_defects(&v).is_empty(), "{v}");
    }
    for v in [json!({}), json!({"contextInjections": []})] {
        let verdict = rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16);
        assert_eq!(verdict, rules::HookVerdict::default(), "{v}");
        assert_eq!(result_defects(&v), Vec::<String>::new(), "{v}");
    }
    let v = json!({"contextInjections": 3});
    assert!(rules::judge_hook_answer(Ok(v.clone()), &grant, None, 16)
        .failure
        .is_some());
    assert_eq!(result_defects(&v), ["contextInjections is not an array"]);
}

#[test]
fn s10_1_an_unanswered_hook_fails_open_at_its_deadline() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        hook_rules(),
    );
    p.host.before_inference(p.now, hook_params()).unwrap();
    p.collect();
    p.to_server.clear();
    let at = p.host.poll_timeout().unwrap();
    assert_eq!(at, p.now + Duration::from_secs(5));
    p.host.handle_timeout(at);
    p.collect();
    let v = hook_verdicts(&p);
    assert!(v[0].failure.is_some() && v[0].accepted.is_empty());
    assert!(p
        .host_out
        .iter()
        .any(|o| matches!(o, HostOutput::Diagnostic(HostDiagnostic::HookFailed { .. }))));
    // Nothing granted, no hook at all.
    let mut q = Pair::connect(&["pushEvents"], hook_rules());
    assert_eq!(q.host.before_inference(q.now, json!({})), None);
}

#[test]
fn s6_5_a_hook_answer_naming_no_set_claims_the_hooks_own() {
    let mut p = Pair::connect(
        &["contextHooks.beforeInference.inject.afterUser"],
        split_hook_rules("ctx"),
    );
    p.host
        .before_inference(p.now, hook_params())
        .expect("an inject leaf is granted");
    p.drive();
    answer_hook_with(
        &mut p,
        json!({"contextInjections":
            [{"namespace": "n", "position": "afterUser", "content": "fact"}]}),
    );
    p.drive();
    let v = hook_verdicts(&p);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].accepted.len(), 1, "{:?}", v[0]);
    assert!(!p
        .server_out
        .iter()
        .any(|o| matches!(o, ServerOutput::Diagnostic(_))));
}
