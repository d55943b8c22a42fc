//! Scenario steps of `mcpl check`: what the checker does, as a host would, after the policy
//! exchange of a session, so that behaviour a server only starts on a trigger (a tool call, a
//! message published to its channel) is exercised and judged like everything else.
//!
//! Steps come from `--scenario FILE` (a JSON array, read first) and `--call TOOL JSON`
//! (repeatable, in order, after the file's steps). They run after the policy exchange of
//! every session, or only of the first with `--call-once`. `--enable SET` (repeatable) is
//! sent as the `enabled` list of every policy Request (§5.3: an allowlist; a declared set it
//! does not name is unavailable, `not_selected`).
//!
//! A step the session's grant does not allow is not sent (the host would not send it,
//! §5.4): a `call` needs `tools`, `publish` needs `channels.publish`, `open`/`close` need
//! `channels.lifecycle`; after a refused or malformed receipt nothing is sent (§6.7). Each
//! step's outcome is kept for `--json` (`scenario`).
//!
//! Usage errors are found before anything is judged and end the run with exit 2: a file that
//! does not parse, a step that is not one of the six forms, a `--call` whose JSON is not an
//! object, a tool the server's `tools/list` does not name, an `--enable` entry that selects
//! no declared feature set.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mcpl::capability::Capability;
use mcpl::policy::{FeatureSets, UpdateParams};
use mcpl::protocol::channels::{ChannelsClose, ChannelsOpen, ChannelsPublish};
use mcpl::protocol::content::json_kind as kind;
use mcpl::protocol::handshake::{ToolsCall, ToolsList};
use mcpl::protocol::Method;
use serde_json::{json, Map, Value};

/// The largest scenario file read (bytes).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most steps a run takes (file and `--call` together).
pub const MAX_STEPS: usize = 256;
/// The longest single `sleep` or `waitFor` (seconds).
pub const MAX_STEP_SECS: f64 = 600.0;
/// The most `tools/list` pages followed when checking `--call` tool names; a list that has
/// not ended by then is not known, and the call is sent.
const MAX_TOOL_PAGES: usize = 20;
/// The most bytes of tool names kept from `tools/list`; past it the list is not known.
const MAX_TOOL_NAME_BYTES: usize = 1 << 20;
/// Characters of a tool's answer kept in a step outcome.
const OUTCOME_CHARS: usize = 120;

/// The text a `publish` step sends when the step gives none.
const DEFAULT_PUBLISH_TEXT: &str = "mcpl check scenario message";

/// One scenario step.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `tools/call` of `tool` with `arguments` (§8.4 for MCPL's extra members; none sent).
    Call {
        /// The tool's name.
        tool: String,
        /// The `arguments` object.
        arguments: Map<String, Value>,
    },
    /// Listen (judging everything as usual) until the server sends `method`, for at most
    /// `timeout` (default: `--timeout`). Each `waitFor` consumes one message: one the server
    /// sent earlier in the session and no earlier `waitFor` consumed satisfies it at once.
    WaitFor {
        /// The method awaited (request or notification).
        method: String,
        /// How long to wait at most.
        timeout: Option<Duration>,
    },
    /// `channels/publish` (§14.5) of `text` to a registered channel: `channel`, or the first
    /// one the server registered when `None`.
    Publish {
        /// The channel id, or `None` for the first registered channel.
        channel: Option<String>,
        /// The text block sent.
        text: String,
    },
    /// `channels/open` (§14.3) with these params.
    Open(Map<String, Value>),
    /// `channels/close` (§14.3) of this channel id.
    Close(String),
    /// Listen (judging everything as usual) for this long.
    Sleep(Duration),
}

impl Step {
    /// A short description for outcomes and errors.
    pub fn describe(&self) -> String {
        match self {
            Step::Call { tool, arguments } => {
                format!(
                    "call {tool} {}",
                    cut(&Value::Object(arguments.clone()).to_string())
                )
            }
            Step::WaitFor { method, .. } => format!("waitFor {method}"),
            Step::Publish { channel, .. } => match channel {
                Some(c) => format!("publish to {c}"),
                None => "publish to the first registered channel".into(),
            },
            Step::Open(p) => format!("open {}", cut(&Value::Object(p.clone()).to_string())),
            Step::Close(c) => format!("close {c}"),
            Step::Sleep(d) => format!("sleep {}s", d.as_secs_f64()),
        }
    }
}

/// The steps of a run and how they apply.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scenario {
    /// In order: the file's steps, then the `--call` steps.
    pub steps: Vec<Step>,
    /// Run the steps after the first session's policy exchange only (`--call-once`).
    pub once: bool,
    /// `--enable` entries, sent as `enabled` in every policy Request; empty: absent.
    pub enable: Vec<String>,
    /// Whether this is the checker's own scenario for the bundled reference server (not the
    /// user's): skip hints then do not suggest `--call`.
    pub default_for_reference: bool,
}

impl Scenario {
    /// The longest the steps can take in one session when each wait is bounded by `step`:
    /// every `sleep` and `waitFor` for its duration, every other step for `step`.
    pub fn time(&self, step: Duration) -> Duration {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Sleep(d) => *d,
                Step::WaitFor { timeout, .. } => timeout.unwrap_or(step),
                _ => step,
            })
            .sum()
    }

    /// Reads the command line: `calls` is the flat `--call` list (TOOL, JSON, TOOL, JSON…),
    /// `file` the `--scenario` path. Every error is a usage error (exit 2).
    pub fn from_args(
        calls: &[String],
        file: Option<&Path>,
        once: bool,
        enable: &[String],
    ) -> Result<Scenario, String> {
        let mut steps = match file {
            Some(path) => read_file(path)?,
            None => Vec::new(),
        };
        for pair in calls.chunks(2) {
            let [tool, args] = pair else {
                return Err("--call takes two values: TOOL JSON".into());
            };
            steps.push(call_step(tool, args)?);
        }
        if steps.len() > MAX_STEPS {
            return Err(format!(
                "{} scenario steps: at most {MAX_STEPS} are taken",
                steps.len()
            ));
        }
        for e in enable {
            if e.is_empty() {
                return Err("--enable needs a feature set name".into());
            }
        }
        Ok(Scenario {
            steps,
            once,
            enable: enable.to_vec(),
            default_for_reference: false,
        })
    }

    /// The checker's scenario for the bundled reference server, used when the user gives no
    /// steps: the tools that make it announce a manifest change (`add_topic`), deliver a
    /// channel message (`say`) and ask the host's model (`ask`), once.
    pub fn reference_default() -> Scenario {
        let call = |tool: &str, args: Value| Step::Call {
            tool: tool.into(),
            arguments: args.as_object().cloned().unwrap_or_default(),
        };
        Scenario {
            steps: vec![
                call("add_topic", json!({ "name": "mcpl-check" })),
                call("say", json!({ "text": "hello from mcpl check" })),
                call("ask", json!({ "text": "What is MCPL?" })),
            ],
            once: true,
            enable: Vec::new(),
            default_for_reference: true,
        }
    }

    /// The `enabled` list for policy Requests, `None` when `--enable` was not given.
    pub fn enabled(&self) -> Option<&[String]> {
        (!self.enable.is_empty()).then_some(self.enable.as_slice())
    }

    /// Checks `--enable` against the declared feature sets: every entry must select at least
    /// one (a user mistake otherwise, reported rather than sent).
    pub fn check_enable(&self, decls: &FeatureSets) -> Result<(), String> {
        let Some(enabled) = self.enabled() else {
            return Ok(());
        };
        let parsed = UpdateParams::parse(&json!({ "enabled": enabled }))
            .map_err(|e| format!("--enable: {e}"))?;
        for (entry, pattern) in enabled.iter().zip(parsed.enabled.unwrap_or_default()) {
            if !decls.sets.keys().any(|name| pattern.selects(name)) {
                let names: Vec<&str> = decls.sets.keys().map(String::as_str).collect();
                return Err(format!(
                    "--enable {entry}: the server declares no such feature set (it declares: {})",
                    if names.is_empty() {
                        "none".to_owned()
                    } else {
                        cut(&names.join(", "))
                    }
                ));
            }
        }
        Ok(())
    }

    /// The end of a skip reason whose cause could be a missing trigger ("server sent no
    /// push/event" + this): how to give one.
    pub fn hint(&self) -> &'static str {
        if self.default_for_reference {
            ""
        } else if self.steps.is_empty() {
            "; if a tool triggers it, pass `--call NAME ARGS`"
        } else {
            " (after the scenario steps)"
        }
    }
}

/// One `--call TOOL JSON`.
fn call_step(tool: &str, args: &str) -> Result<Step, String> {
    if tool.is_empty() {
        return Err("--call: the tool name is empty".into());
    }
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(arguments)) => Ok(Step::Call {
            tool: tool.to_owned(),
            arguments,
        }),
        Ok(other) => Err(format!(
            "--call {tool} {}: the arguments must be a JSON object, not {}",
            cut(args),
            kind(&other)
        )),
        Err(e) => Err(format!("--call {tool} {}: not JSON: {e}", cut(args))),
    }
}

/// Reads and parses a `--scenario` file (bounded to [`MAX_FILE_BYTES`]).
fn read_file(path: &Path) -> Result<Vec<Step>, String> {
    use std::io::Read;
    let name = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("--scenario {name}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("--scenario {name}: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "--scenario {name}: larger than {MAX_FILE_BYTES} bytes"
        ));
    }
    parse(&text).map_err(|e| format!("--scenario {name}: {e}"))
}

/// Parses scenario text: a JSON array of step objects, each with exactly one of `call`,
/// `waitFor`, `publish`, `open`, `close`, `sleep` and that step's options.
pub fn parse(text: &str) -> Result<Vec<Step>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Array(items) = doc else {
        return Err(format!(
            "a scenario is a JSON array of steps, not {}",
            kind(&doc)
        ));
    };
    if items.len() > MAX_STEPS {
        return Err(format!(
            "{} steps: at most {MAX_STEPS} are taken",
            items.len()
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| step(item).map_err(|e| format!("step {}: {e}", i + 1)))
        .collect()
}

const FORMS: &str = "call, waitFor, publish, open, close, sleep";

fn step(item: &Value) -> Result<Step, String> {
    let Value::Object(o) = item else {
        return Err(format!("a step is an object, not {}", kind(item)));
    };
    let forms: Vec<&str> = o
        .keys()
        .map(String::as_str)
        .filter(|k| FORMS.split(", ").any(|f| f == *k))
        .collect();
    let form = match forms.as_slice() {
        [one] => *one,
        [] => {
            let keys: Vec<&str> = o.keys().map(String::as_str).collect();
            return Err(format!(
                "no step form among {:?} (expected one of {FORMS})",
                keys
            ));
        }
        many => return Err(format!("more than one step form: {}", many.join(", "))),
    };
    let allowed: &[&str] = match form {
        "call" => &["call", "arguments"],
        "waitFor" => &["waitFor", "timeout"],
        "publish" => &["publish", "text"],
        _ => &[form],
    };
    if let Some(extra) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "{form}: unknown member {extra:?} (a {form} step takes {})",
            allowed.join(", ")
        ));
    }
    // `form` is one of `o`'s own keys (found above), so this never falls back.
    let value = o.get(form).unwrap_or(&Value::Null);
    let string = |what: &str| {
        value
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("{form}: {what} must be a non-empty string"))
    };
    match form {
        "call" => {
            let tool = string("the tool name")?;
            let arguments = match o.get("arguments") {
                None => Map::new(),
                Some(Value::Object(a)) => a.clone(),
                Some(other) => {
                    return Err(format!(
                        "call {tool}: arguments must be an object, not {}",
                        kind(other)
                    ))
                }
            };
            Ok(Step::Call { tool, arguments })
        }
        "waitFor" => Ok(Step::WaitFor {
            method: string("the method")?,
            timeout: o
                .get("timeout")
                .map(|t| secs("waitFor timeout", t))
                .transpose()?,
        }),
        "publish" => {
            let channel = match value {
                Value::Null => None,
                _ => Some(string("the channel id (or null)")?),
            };
            let text = match o.get("text") {
                None => DEFAULT_PUBLISH_TEXT.to_owned(),
                Some(Value::String(t)) => t.clone(),
                Some(other) => {
                    return Err(format!(
                        "publish: text must be a string, not {}",
                        kind(other)
                    ))
                }
            };
            Ok(Step::Publish { channel, text })
        }
        "open" => match value {
            Value::Object(p) => Ok(Step::Open(p.clone())),
            other => Err(format!(
                "open: the channels/open params must be an object, not {}",
                kind(other)
            )),
        },
        "close" => Ok(Step::Close(string("the channel id")?)),
        _ => Ok(Step::Sleep(secs("sleep", value)?)),
    }
}

fn secs(what: &str, v: &Value) -> Result<Duration, String> {
    match v.as_f64() {
        Some(s) if (0.0..=MAX_STEP_SECS).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "{what} must be a number of seconds between 0 and {MAX_STEP_SECS}"
        )),
    }
}

/// How a request of a step ended, as the runner sees it.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A result.
    Result(Value),
    /// A JSON-RPC error.
    Error {
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
    },
    /// No answer (a timeout or the end of the connection), with why.
    Nothing(String),
}

/// What the runner needs of a session: the driver implements it, so every message the
/// server sends while a step runs is judged exactly as at any other time.
pub trait Host {
    /// Sends a request and waits for its answer (bounded by `--timeout`).
    fn ask(&mut self, method: &str, params: Value) -> Answer;
    /// Listens (judging everything) until the server has sent `method` more than `n` times
    /// in this session, or `deadline` passes; `None` listens until the deadline. Whether the
    /// count was exceeded.
    fn listen(&mut self, until: Option<(&str, u64)>, deadline: Instant) -> bool;
    /// How many times the server has sent `method` (request or notification) in this
    /// session.
    fn seen(&self, method: &str) -> u64;
    /// Whether the session's accepted grant allows `c` (false before an accepted receipt).
    fn allows(&self, c: Capability) -> bool;
    /// The channel ids the server has registered (and the host accepted), sorted.
    fn channels(&self) -> Vec<String>;
    /// `--timeout`.
    fn step_timeout(&self) -> Duration;
}

/// The outcome of one step in one session, for `--json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The session (1-based).
    pub session: usize,
    /// The step as described by [`Step::describe`].
    pub step: String,
    /// Whether it was sent to the server.
    pub sent: bool,
    /// What came of it.
    pub outcome: String,
}

impl Outcome {
    /// The `--json` form.
    pub fn to_json(&self) -> Value {
        json!({ "session": self.session, "step": self.step, "sent": self.sent,
                "outcome": self.outcome })
    }
}

/// Runs a scenario's steps in one session and keeps their outcomes. Each session has its
/// own (sessions may run at once); the first checks `--call` tool names against
/// `tools/list`, the later ones rely on that.
#[derive(Debug, Default)]
pub struct Runner {
    scenario: Arc<Scenario>,
    /// The session (1-based).
    session: usize,
    /// The tool names `tools/list` gave, `None` until asked; `Some(None)` when the server
    /// did not list its tools.
    tools: Option<Option<BTreeSet<String>>>,
    outcomes: Vec<Outcome>,
    /// Per method, how many messages `waitFor` steps consumed.
    consumed: BTreeMap<String, u64>,
}

impl Runner {
    /// The runner of session `session` (1-based).
    pub fn new(scenario: Arc<Scenario>, session: usize) -> Runner {
        Runner {
            scenario,
            session,
            ..Runner::default()
        }
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Every step's outcome, once the steps ran.
    pub fn into_outcomes(self) -> Vec<Outcome> {
        self.outcomes
    }

    /// Runs the steps (after the policy exchange; nothing in a later session under
    /// `--call-once`). An `Err` is a usage error (exit 2): a tool the server does not list.
    pub fn run(&mut self, host: &mut dyn Host) -> Result<(), String> {
        if self.scenario.once && self.session > 1 {
            return Ok(());
        }
        let scenario = self.scenario.clone();
        for step in &scenario.steps {
            let (sent, outcome) = self.run_step(host, step)?;
            self.outcomes.push(Outcome {
                session: self.session,
                step: step.describe(),
                sent,
                outcome,
            });
        }
        Ok(())
    }

    fn run_step(&mut self, host: &mut dyn Host, step: &Step) -> Result<(bool, String), String> {
        let not_sent = |why: String| Ok((false, format!("not sent: {why}")));
        match step {
            Step::Call { tool, arguments } => {
                if !host.allows(Capability::Tools) {
                    return not_sent("tools is not granted in this session".into());
                }
                if self.session == 1 {
                    self.check_tool(host, tool)?;
                }
                let params = json!({ "name": tool, "arguments": arguments });
                Ok((true, describe_call(host.ask(ToolsCall::NAME, params))))
            }
            Step::WaitFor { method, timeout } => {
                let wait = timeout.unwrap_or_else(|| host.step_timeout());
                let consumed = self.consumed.get(method.as_str()).copied().unwrap_or(0);
                let seen = host.seen(method) > consumed
                    || host.listen(Some((method, consumed)), Instant::now() + wait);
                if seen {
                    self.consumed.insert(method.clone(), consumed + 1);
                }
                let outcome = if seen {
                    format!("{method} arrived")
                } else {
                    format!("no {method} within {}s", wait.as_secs_f64())
                };
                Ok((false, outcome))
            }
            Step::Sleep(d) => {
                host.listen(None, Instant::now() + *d);
                Ok((false, "slept".into()))
            }
            Step::Publish { channel, text } => {
                if !host.allows(Capability::ChannelsPublish) {
                    return not_sent("channels.publish is not granted in this session".into());
                }
                let registered = host.channels();
                let target = match channel {
                    Some(c) if registered.contains(c) => c.clone(),
                    Some(c) => {
                        return not_sent(format!(
                            "{c} is not registered (a waitFor channels/register step before it waits for it)"
                        ))
                    }
                    None => match registered.first() {
                        Some(c) => c.clone(),
                        None => return not_sent("the server registered no channel".into()),
                    },
                };
                let params = json!({
                    "conversationId": "conv_mcpl_check",
                    "channelId": target,
                    "content": [ { "type": "text", "text": text } ]
                });
                Ok((true, describe(host.ask(ChannelsPublish::NAME, params))))
            }
            Step::Open(params) => {
                if !host.allows(Capability::ChannelsLifecycle) {
                    return not_sent("channels.lifecycle is not granted in this session".into());
                }
                let a = host.ask(ChannelsOpen::NAME, Value::Object(params.clone()));
                Ok((true, describe(a)))
            }
            Step::Close(channel) => {
                if !host.allows(Capability::ChannelsLifecycle) {
                    return not_sent("channels.lifecycle is not granted in this session".into());
                }
                let a = host.ask(ChannelsClose::NAME, json!({ "channelId": channel }));
                Ok((true, describe(a)))
            }
        }
    }

    /// A tool the server's `tools/list` does not name is a usage error. Asked once; a
    /// server that does not answer `tools/list`, or whose list does not end, gets the call
    /// anyway ([`list_tools`]).
    fn check_tool(&mut self, host: &mut dyn Host, tool: &str) -> Result<(), String> {
        if self.tools.is_none() {
            self.tools = Some(list_tools(host));
        }
        match &self.tools {
            Some(Some(names)) if !names.contains(tool) => {
                let listed: Vec<&str> = names.iter().map(String::as_str).collect();
                Err(format!(
                    "--call {tool}: the server has no tool {tool:?} (tools/list names: {})",
                    if listed.is_empty() {
                        "none".to_owned()
                    } else {
                        cut(&listed.join(", "))
                    }
                ))
            }
            _ => Ok(()),
        }
    }
}

/// Every tool name `tools/list` gives (following `nextCursor`), or `None` when the server
/// does not answer it with a tool list, or with one that does not end within
/// [`MAX_TOOL_PAGES`] pages (a `nextCursor` given twice never will) and
/// [`MAX_TOOL_NAME_BYTES`]: only a whole list shows that a tool is missing.
fn list_tools(host: &mut dyn Host) -> Option<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    let mut bytes = 0usize;
    let mut cursors = BTreeSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let Answer::Result(r) = host.ask(ToolsList::NAME, params) else {
            return None;
        };
        let tools = r.get("tools").and_then(Value::as_array)?;
        for name in tools
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
        {
            bytes = bytes.saturating_add(name.len());
            if bytes > MAX_TOOL_NAME_BYTES {
                return None;
            }
            names.insert(name.to_owned());
        }
        match r.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => {
                bytes = bytes.saturating_add(c.len());
                if bytes > MAX_TOOL_NAME_BYTES || !cursors.insert(c.to_owned()) {
                    return None;
                }
                cursor = Some(c.to_owned());
            }
            _ => return Some(names),
        }
    }
    None
}

fn describe(a: Answer) -> String {
    match a {
        Answer::Result(r) => format!("answered {}", cut(&r.to_string())),
        Answer::Error { code, message } => format!("error {code} {}", cut(&message)),
        Answer::Nothing(why) => why,
    }
}

/// A `tools/call` answer: the text of its first content block, and whether it is an error
/// result (`isError`).
fn describe_call(a: Answer) -> String {
    let Answer::Result(r) = a else {
        return describe(a);
    };
    let text = r
        .get("content")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .and_then(|b| b.get("text"))
        .and_then(Value::as_str)
        .map(cut)
        .unwrap_or_default();
    if r.get("isError") == Some(&Value::Bool(true)) {
        format!("tool error: {text}")
    } else {
        format!("answered: {text}")
    }
}

/// `s` cut to [`OUTCOME_CHARS`] characters.
fn cut(s: &str) -> String {
    let mut out: String = s.chars().take(OUTCOME_CHARS).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn call_arguments_must_be_a_json_object() {
        let s = Scenario::from_args(&calls(&["remind", r#"{"in": 1}"#]), None, false, &[]);
        assert_eq!(
            s.map(|s| s.steps),
            Ok(vec![Step::Call {
                tool: "remind".into(),
                arguments: json!({"in": 1}).as_object().cloned().unwrap_or_default()
            }])
        );
        let e = Scenario::from_args(&calls(&["remind", "[1]"]), None, false, &[]).unwrap_err();
        assert!(e.contains("must be a JSON object, not an array"), "{e}");
        let e = Scenario::from_args(&calls(&["remind", "{"]), None, false, &[]).unwrap_err();
        assert!(e.contains("not JSON"), "{e}");
    }

    #[test]
    fn scenario_files_read_every_form_and_refuse_the_rest() {
        let steps = parse(
            r#"[{"call": "t", "arguments": {"a": 1}}, {"waitFor": "push/event", "timeout": 2},
                {"publish": null}, {"publish": "c:1", "text": "hi"},
                {"open": {"type": "x"}}, {"close": "c:1"}, {"sleep": 0.5}]"#,
        )
        .unwrap();
        assert_eq!(steps.len(), 7);
        assert_eq!(
            steps[1],
            Step::WaitFor {
                method: "push/event".into(),
                timeout: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(steps[6], Step::Sleep(Duration::from_millis(500)));
        for (text, says) in [
            ("{", "not JSON"),
            (r#"{"call": "t"}"#, "JSON array"),
            (r#"[{"cal": "t"}]"#, "step 1: no step form"),
            (r#"[{"call": "t", "sleep": 1}]"#, "more than one step form"),
            (r#"[{"call": "t", "args": {}}]"#, "unknown member \"args\""),
            (
                r#"[{"call": "t", "arguments": [1]}]"#,
                "arguments must be an object",
            ),
            (r#"[{"sleep": -1}]"#, "between 0 and"),
            (r#"[{"sleep": 1e9}]"#, "between 0 and"),
            (r#"[{"close": ""}]"#, "non-empty string"),
            (r#"[{"open": "x"}]"#, "must be an object"),
            (r#"[7]"#, "a step is an object"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn enable_must_select_a_declared_set() {
        let decls = FeatureSets::from_mcpl(&json!({ "featureSets": {
            "ref.events": { "description": "d", "uses": ["pushEvents"] } } }))
        .0;
        let s = |e: &str| Scenario {
            enable: vec![e.into()],
            ..Scenario::default()
        };
        assert_eq!(s("ref.events").check_enable(&decls), Ok(()));
        assert_eq!(s("ref.*").check_enable(&decls), Ok(()));
        let e = s("ref.nope").check_enable(&decls).unwrap_err();
        assert!(
            e.contains("declares no such feature set (it declares: ref.events)"),
            "{e}"
        );
    }
}
