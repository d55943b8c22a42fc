//! The envelope of a message read as it streams past, in bounded memory: the top-level `id`,
//! `method`, `result` and `error` members of a JSON object, wherever they are in it. A line
//! reader discarding a message over the size limit (or refusing one the budget cannot
//! cover) feeds it every byte it sees of that message, so the peer can tell which request
//! it is or answers even when its `id` comes after megabytes of `params`
//! (`transport::FrameReader::discarded_head`); before, only the first
//! `transport::DISCARDED_HEAD_BYTES` were read, and such a request was never answered.
//! It also reads a text the JSON parser refused, up to the parser's error, for the id a
//! request showed before it ([`super::unparsed`], JSON-RPC 2.0 §5): in this module, not
//! the runtime's, so the sans-I/O drivers answer such a request by the one rule the peer
//! does.
//!
//! What it keeps is bounded whatever it is fed: a member name up to [`MAX_KEY_BYTES`], the
//! last `id` and the last `method` value up to [`MAX_VALUE_BYTES`] each (a longer one is
//! kept as `null`: no id, no method name), flags, and a few bytes of an unfinished UTF-8
//! character. Nothing else is buffered.
//!
//! [`Envelope::summary`] writes what it found as a JSON object text holding only those
//! members (and `"jsonrpc":"2.0"` when read, and an `"id":null` before the id when more
//! than one `id` member was named, so a summary read again by an envelope tells a
//! request's id as the message did: [`Envelope::sole_request_id`]), in a form the peer reads exactly as it reads the first bytes of a message: a
//! member cut by the end of what was fed is written last, cut the same way; an object that
//! ended is closed. Readings (fail closed): the top level is checked as JSON (a name, a
//! colon, a value, a comma or the end); inside a value only strings and nesting are
//! followed, so a syntax error there is not seen. Past the first error nothing more is
//! read, as a parser stops there. A message with bytes that are no UTF-8 anywhere in it is
//! summarised as such (one byte that is no UTF-8), as a small one is refused. Anything but
//! an object (a batch, junk) is not summarised: the caller keeps its first bytes instead.

/// The longest member name read (in its bytes as written, escapes included); a longer one
/// is no envelope member (`"\u006d\u0065thod"` is 24 bytes).
pub const MAX_KEY_BYTES: usize = 64;

/// The longest `id` or `method` value kept, as written: an id of
/// [`crate::jsonrpc::MAX_ID_BYTES`] written with a `\uXXXX` escape per byte, and its quotes.
pub const MAX_VALUE_BYTES: usize = 6 * crate::jsonrpc::MAX_ID_BYTES + 2;

/// Where the scan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Before the object: what the peer reads past before a message for its id is skipped
    /// (any whitespace `str::trim_start` takes, NUL bytes, byte order marks; the lenient
    /// start of `jsonrpc::message_lead`).
    Start,
    /// Expecting a member name (or the end, right after `{`).
    Name { first: bool },
    /// Inside a member name.
    InName { escaped: bool },
    /// Expecting the colon after a name.
    Colon,
    /// Expecting a value.
    Value,
    /// Inside a value: its nesting, whether inside a string (and after a backslash), and
    /// whether whitespace followed a top-level scalar (only `,` or `}` may come next).
    InValue {
        depth: usize,
        string: bool,
        escaped: bool,
        spaced: bool,
    },
    /// The object ended (only whitespace may follow).
    Closed,
    /// Not an object: not summarised.
    NotObject,
    /// A syntax error: nothing more is read.
    Broken,
}

/// Which envelope member a value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    Id,
    Method,
    Outcome,
    /// `jsonrpc`: kept only to tell whether it is `"2.0"`; never summarised.
    Jsonrpc,
    Other,
}

/// A value kept as written, or `None` once it grew past [`MAX_VALUE_BYTES`].
type Kept = Option<Vec<u8>>;

/// The envelope of one message, fed its bytes in order in any number of pieces.
#[derive(Debug)]
pub struct Envelope {
    at: At,
    name: Vec<u8>,
    name_too_long: bool,
    member: Member,
    /// The value being read, for an `id` or a `method`.
    value: Kept,
    id: Option<Kept>,
    method: Option<Kept>,
    outcome: bool,
    /// Bytes of a UTF-8 character the last piece ended inside.
    carry: Vec<u8>,
    not_text: bool,
    /// A top-level `jsonrpc` member whose value ended as the string `"2.0"` (the last one
    /// read counts).
    jsonrpc_2_0: bool,
    /// A top-level `method` member was named (its value may not have ended).
    method_named: bool,
    /// How many top-level `id` members were named, whether or not their values ended.
    ids: usize,
    /// UTF-8 is not checked ([`Envelope::lenient`]).
    lenient: bool,
    /// Where the first byte that is no UTF-8 is, for a lenient envelope, and the bytes fed
    /// so far.
    bad_at: usize,
    fed: usize,
    /// A lenient envelope's [`Envelope::sole_request_id`] was found before `bad_at`.
    sole_before_bad: bool,
    /// What precedes the object, read past ([`Lead`]).
    lead: Lead,
}

/// What precedes a message, read past a byte at a time: what the peer reads past before a
/// frame's text's message for its id ([`super::message_start`]: any whitespace
/// `str::trim_start` takes, NUL bytes, UTF-8 byte order marks), so a message's envelope (and a
/// batch's, [`batch::BatchSighted`]) is read wherever its text's message is. Only messages
/// refused whole are read so (over the size limit, refused part read, no text), so reading
/// past more than JSON whitespace here takes nothing a strict peer rejects
/// ([`super::message_lead`], RFC 8259 §2): it only finds the id the refusal is answered
/// under. The one reading of the byte readers; at most one character's bytes (4) are held.
#[derive(Debug, Default)]
pub(crate) struct Lead {
    /// The bytes of a character not yet whole.
    held: Vec<u8>,
}

impl Lead {
    /// What [`Lead::step`] gives for a byte read past.
    pub(crate) const SKIP: Option<u8> = None;

    /// Reads `b`: [`Lead::SKIP`] while it is (or may be) part of what precedes a message;
    /// else the byte the message begins with (`Some(b)`; a byte of a character that is
    /// neither is given as its first byte, which begins no message).
    pub(crate) fn step(&mut self, b: u8) -> Option<u8> {
        if self.held.is_empty() && b.is_ascii() {
            // NUL with the whitespace, as `jsonrpc::message_lead` reads past it.
            return (!char::from(b).is_whitespace() && b != 0).then_some(b);
        }
        self.held.push(b);
        let first = self.held.first().copied();
        match std::str::from_utf8(&self.held) {
            Ok(c) => {
                let c = c.chars().next();
                self.held.clear();
                match c {
                    // Any number of them, as `jsonrpc::message_lead` reads past them.
                    Some('\u{feff}') => Lead::SKIP,
                    Some(c) if c.is_whitespace() => Lead::SKIP,
                    _ => first,
                }
            }
            // A character still to be completed by the next bytes.
            Err(e) if e.error_len().is_none() => Lead::SKIP,
            Err(_) => first,
        }
    }
}

impl Default for Envelope {
    fn default() -> Self {
        Envelope::new()
    }
}

impl Envelope {
    /// An envelope with nothing read.
    pub fn new() -> Envelope {
        Envelope {
            at: At::Start,
            name: Vec::new(),
            name_too_long: false,
            member: Member::Other,
            value: None,
            id: None,
            method: None,
            outcome: false,
            carry: Vec::new(),
            not_text: false,
            jsonrpc_2_0: false,
            method_named: false,
            ids: 0,
            lenient: false,
            bad_at: 0,
            fed: 0,
            sole_before_bad: false,
            lead: Lead::default(),
        }
    }

    /// An envelope that reads bytes which may be no UTF-8 for their structure all the same
    /// (a byte of another encoding is never one of JSON's structural characters): for a
    /// message refused for its encoding, whose id still says which response it is. A kept
    /// value holding such bytes reads as none. `bad_at`: where the message's first byte
    /// that is no UTF-8 is (0 for a message refused whole, a binary frame), the error
    /// before which a request's id must be told ([`Envelope::sole_request_id`], as for a
    /// text that does not parse): its summary shows a second `id` otherwise.
    pub fn lenient(bad_at: usize) -> Envelope {
        Envelope {
            lenient: true,
            bad_at,
            ..Envelope::new()
        }
    }

    /// Whether what was fed so far is no object (a batch, junk): nothing is summarised.
    pub fn is_object(&self) -> bool {
        !matches!(self.at, At::NotObject)
    }

    /// Whether nothing but what precedes a message ([`Lead`]: whitespace, NUL bytes, byte
    /// order marks) was fed so far: nothing of the message is known yet, not even whether
    /// it is an object ([`Envelope::summary`] is `None`).
    pub(crate) fn before_message(&self) -> bool {
        matches!(self.at, At::Start) && !self.not_text
    }

    /// Reads the next bytes of the message.
    pub fn feed(&mut self, bytes: &[u8]) {
        if matches!(self.at, At::NotObject) {
            return;
        }
        if !self.lenient {
            self.check_text(bytes);
        } else if (self.fed..=self.fed.saturating_add(bytes.len())).contains(&self.bad_at) {
            // The error falls in these bytes (or at their end): what was told before it.
            let (before, after) = bytes.split_at((self.bad_at - self.fed).min(bytes.len()));
            self.fed = self.fed.saturating_add(before.len());
            self.read_bytes(before);
            if self.fed == self.bad_at && !self.sole_before_bad {
                self.sole_before_bad = self.sole_request_id().is_some();
                // Past it: never again.
                self.bad_at = usize::MAX;
            }
            self.fed = self.fed.saturating_add(after.len());
            self.read_bytes(after);
            return;
        }
        self.fed = self.fed.saturating_add(bytes.len());
        self.read_bytes(bytes);
    }

    /// Steps through `bytes` (see [`Envelope::feed`]).
    fn read_bytes(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if matches!(self.at, At::Broken | At::NotObject) {
                return;
            }
            rest = rest.get(self.string_run(rest)..).unwrap_or_default();
            let Some((&b, after)) = rest.split_first() else {
                return;
            };
            self.step(b);
            rest = after;
        }
    }

    /// Inside a string nothing but `"` and `\` matters: the length of the run of `rest` up
    /// to the next of them, kept ([`Self::keep`]) and to be skipped; 0 outside a string.
    fn string_run(&mut self, rest: &[u8]) -> usize {
        let At::InValue {
            string: true,
            escaped: false,
            ..
        } = self.at
        else {
            return 0;
        };
        let run = crate::bytes::find2(b'"', b'\\', rest).unwrap_or(rest.len());
        self.keep(rest.get(..run).unwrap_or_default());
        run
    }

    /// Reads one object from the start of `bytes` (text the caller knows is UTF-8, so it is
    /// not checked), up to its closing `}`: the bytes it took when the object ended there;
    /// `None` when `bytes` ended first or a syntax error stopped the read.
    fn feed_object(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0;
        while let Some(rest) = bytes.get(at..).filter(|r| !r.is_empty()) {
            at += self.string_run(rest);
            let &b = bytes.get(at)?;
            self.step(b);
            at += 1;
            match self.at {
                At::Closed => return Some(at),
                At::Broken | At::NotObject => return None,
                _ => {}
            }
        }
        None
    }

    /// Follows UTF-8 across pieces: a byte sequence no later byte can complete marks the
    /// message as no text.
    fn check_text(&mut self, bytes: &[u8]) {
        if self.not_text {
            return;
        }
        let mut rest = bytes;
        if !self.carry.is_empty() {
            let mut joined = std::mem::take(&mut self.carry);
            let more = rest.len().min(4);
            joined.extend_from_slice(rest.get(..more).unwrap_or_default());
            let carried = joined.len() - more;
            match std::str::from_utf8(&joined) {
                Ok(_) => rest = rest.get(more..).unwrap_or_default(),
                Err(e) if e.valid_up_to() > 0 && e.valid_up_to() >= carried => {
                    rest = rest.get(e.valid_up_to() - carried..).unwrap_or_default();
                }
                Err(e) if e.error_len().is_some() => {
                    self.not_text = true;
                    return;
                }
                Err(_) => {
                    // Still unfinished (the piece was shorter than the character).
                    self.carry = joined;
                    return;
                }
            }
        }
        if let Err(e) = std::str::from_utf8(rest) {
            if e.error_len().is_some() {
                self.not_text = true;
            } else {
                self.carry = rest.get(e.valid_up_to()..).unwrap_or_default().to_vec();
            }
        }
    }

    /// Keeps `bytes` of the value being read, if it is an `id` or a `method` still within
    /// [`MAX_VALUE_BYTES`].
    fn keep(&mut self, bytes: &[u8]) {
        if let Some(value) = self.value.as_mut() {
            if value.len() + bytes.len() > MAX_VALUE_BYTES {
                self.value = None;
            } else {
                value.extend_from_slice(bytes);
            }
        }
    }

    fn step(&mut self, b: u8) {
        let space = super::lead::is_json_whitespace(b);
        self.at = match self.at {
            At::Start => match self.lead.step(b) {
                Lead::SKIP => At::Start,
                Some(b'{') => At::Name { first: true },
                Some(_) => At::NotObject,
            },
            At::Name { first } if space => At::Name { first },
            At::Name { .. } if b == b'"' => {
                self.name.clear();
                self.name_too_long = false;
                At::InName { escaped: false }
            }
            At::Name { first: true } if b == b'}' => At::Closed,
            At::Name { .. } => At::Broken,
            At::InName { escaped: false } if b == b'"' => At::Colon,
            At::InName { escaped } => {
                if self.name.len() < MAX_KEY_BYTES {
                    self.name.push(b);
                } else {
                    self.name_too_long = true;
                }
                At::InName {
                    escaped: !escaped && b == b'\\',
                }
            }
            At::Colon if space => At::Colon,
            At::Colon if b == b':' => {
                self.member = self.member_named();
                match self.member {
                    Member::Id => self.ids = self.ids.saturating_add(1),
                    Member::Method => self.method_named = true,
                    _ => {}
                }
                self.value = matches!(self.member, Member::Id | Member::Method | Member::Jsonrpc)
                    .then(Vec::new);
                At::Value
            }
            At::Colon => At::Broken,
            At::Value if space => At::Value,
            // A value's first byte: a container, a string, or a scalar.
            At::Value => match b {
                b'}' | b']' | b',' | b':' => At::Broken,
                _ => {
                    self.keep(&[b]);
                    At::InValue {
                        depth: usize::from(matches!(b, b'{' | b'[')),
                        string: b == b'"',
                        escaped: false,
                        spaced: false,
                    }
                }
            },
            At::InValue {
                depth,
                string,
                escaped,
                spaced,
            } => self.value_byte(b, depth, string, escaped, spaced),
            // Only whitespace may follow the object, as a parser reads it.
            At::Closed if space => At::Closed,
            At::Closed => At::Broken,
            done @ (At::NotObject | At::Broken) => done,
        };
    }

    /// One byte of a value after its first.
    fn value_byte(&mut self, b: u8, depth: usize, string: bool, escaped: bool, spaced: bool) -> At {
        let space = super::lead::is_json_whitespace(b);
        if string {
            self.keep(&[b]);
            let end = !escaped && b == b'"';
            return At::InValue {
                depth,
                string: !end,
                escaped: !escaped && b == b'\\',
                spaced: false,
            };
        }
        if depth == 0 && (b == b',' || b == b'}') {
            self.end_member();
            return if b == b',' {
                At::Name { first: false }
            } else {
                At::Closed
            };
        }
        if depth == 0 && space {
            return At::InValue {
                depth,
                string: false,
                escaped: false,
                spaced: true,
            };
        }
        // After a whole top-level value (a scalar with whitespace after it, a string or a
        // container closed) only `,` or `}` may come; nor does a scalar run into a string or
        // a container.
        if depth == 0 && (spaced || matches!(b, b'"' | b'{' | b'[')) {
            return At::Broken;
        }
        self.keep(&[b]);
        let depth = match b {
            b'{' | b'[' => depth.saturating_add(1),
            b'}' | b']' if depth == 0 => return At::Broken,
            b'}' | b']' => depth - 1,
            _ => depth,
        };
        At::InValue {
            depth,
            string: b == b'"',
            escaped: false,
            spaced: false,
        }
    }

    /// The envelope member the name just read is (escapes undone).
    fn member_named(&self) -> Member {
        if self.name_too_long {
            return Member::Other;
        }
        let mut quoted = Vec::with_capacity(self.name.len() + 2);
        quoted.push(b'"');
        quoted.extend_from_slice(&self.name);
        quoted.push(b'"');
        match serde_json::from_slice::<String>(&quoted).as_deref() {
            Ok("id") => Member::Id,
            Ok("method") => Member::Method,
            Ok("result" | "error") => Member::Outcome,
            Ok("jsonrpc") => Member::Jsonrpc,
            _ => Member::Other,
        }
    }

    /// A member's value ended: kept as its member's last.
    fn end_member(&mut self) {
        match self.member {
            Member::Id => self.id = Some(self.value.take()),
            Member::Method => self.method = Some(self.value.take()),
            Member::Outcome => self.outcome = true,
            Member::Jsonrpc => {
                self.jsonrpc_2_0 = self
                    .value
                    .as_deref()
                    .is_some_and(|v| serde_json::from_slice::<String>(v).is_ok_and(|s| s == "2.0"));
            }
            Member::Other => {}
        }
        self.member = Member::Other;
        self.value = None;
    }

    /// The `id` of a request, as written, when what was fed so far names it without doubt:
    /// a `"jsonrpc": "2.0"` member and a `method` member were read at the top level, and
    /// exactly one `id` member, whose value ended (a `,` or the `}` after it) and was kept.
    /// `None` otherwise: no id, two `id` members (which one the sender meant is not known),
    /// an id cut or too long to keep. The caller reads the bytes as an id
    /// ([`crate::jsonrpc::RequestId::from_request_value`]); they may still be no id
    /// (`1e30`, `null`).
    /// A reader that refuses a text which does not parse feeds it only the bytes before the
    /// parser's error, so the id it names was read before anything went wrong
    /// (`jsonrpc::unparsed`, the peer's and a driver's one reading, JSON-RPC 2.0 §5).
    pub fn sole_request_id(&self) -> Option<&[u8]> {
        if !(self.jsonrpc_2_0 && self.method_named && self.ids == 1) || self.not_text {
            return None;
        }
        self.id.as_ref()?.as_deref()
    }

    /// How many top-level `id` members were named in what was fed so far.
    pub fn id_members(&self) -> usize {
        self.ids
    }

    /// What was read, as a JSON object text of the envelope members (see the module docs),
    /// once `ended` says whether the message ended there (a whole line) or was cut (refused
    /// part read). `None` when it is no object: the caller's first bytes tell more.
    pub fn summary(&self, ended: bool) -> Option<Vec<u8>> {
        if self.not_text || (ended && !self.carry.is_empty()) {
            return Some(vec![0xff]);
        }
        if matches!(self.at, At::NotObject | At::Start) {
            return None;
        }
        let mut out = b"{".to_vec();
        let member = |out: &mut Vec<u8>, name: &str, value: &Kept| {
            out.extend_from_slice(format!("\"{name}\":").as_bytes());
            match value {
                Some(v) => out.extend_from_slice(v),
                None => out.extend_from_slice(b"null"),
            }
            out.push(b',');
        };
        // What tells a request's id without doubt (`sole_request_id`), read again from the
        // summary: the version, and a second `id` member where the ones written are fewer
        // than those named (the last one written still counts, as when taken).
        if self.jsonrpc_2_0 {
            out.extend_from_slice(br#""jsonrpc":"2.0","#);
        }
        let cut_id = matches!(self.at, At::Value | At::InValue { .. }) && self.member == Member::Id;
        let written = usize::from(self.id.is_some()) + usize::from(cut_id);
        let after_bad = self.lenient && !self.sole_before_bad && self.ids >= 1;
        if (self.ids >= 2 || after_bad) && written < 2 {
            out.extend_from_slice(br#""id":null,"#);
        }
        if let Some(id) = &self.id {
            member(&mut out, "id", id);
        }
        if let Some(method) = &self.method {
            member(&mut out, "method", method);
        }
        if self.outcome {
            out.extend_from_slice(b"\"result\":0,");
        }
        match self.at {
            At::Closed => {
                if out.last() == Some(&b',') {
                    out.pop();
                }
                out.push(b'}');
            }
            // Cut inside an envelope member's value: written last, as cut (a value too
            // long to keep is cut inside a string, which reads as cut whatever it was).
            At::Value | At::InValue { .. }
                if !matches!(self.member, Member::Other | Member::Jsonrpc) =>
            {
                let name = match self.member {
                    Member::Id => "id",
                    Member::Method => "method",
                    _ => "result",
                };
                out.extend_from_slice(format!("\"{name}\":").as_bytes());
                match &self.value {
                    Some(v) => out.extend_from_slice(v),
                    None if self.member == Member::Outcome => out.push(b'['),
                    None => out.push(b'"'),
                }
            }
            _ => {}
        }
        Some(out)
    }
}

/// Reads the entries of a batch (a JSON array) in `text`, which the caller knows is UTF-8:
/// each object entry's envelope is handed to `each` with whether the entry ended (its `}`
/// read), in order, one at a time; anything else in the array (a number, a string, an
/// array) is skipped. The read stops at the end of `text`, at the array's end, or at the
/// first syntax error between entries or inside an object's top level, after handing
/// over the entry that error cut. Nothing is buffered but one envelope. Used for a batch
/// refused whole (one that does not parse, holds too many entries, or costs too much
/// parsed): the responses in it to requests of the reader's own still end those requests
/// (`peer::text`).
pub(crate) fn batch_entries(text: &[u8], mut each: impl FnMut(&Envelope, bool)) {
    let space = |b: &u8| super::lead::is_json_whitespace(*b);
    let skip_space = |t: &'_ [u8]| -> usize { t.iter().position(|b| !space(b)).unwrap_or(t.len()) };
    let mut at = skip_space(text);
    if text.get(at) != Some(&b'[') {
        return;
    }
    at += 1;
    loop {
        let rest = text.get(at..).unwrap_or_default();
        at += skip_space(rest);
        let rest = text.get(at..).unwrap_or_default();
        match rest.first() {
            None | Some(b']') => return,
            Some(b'{') => {
                let mut entry = Envelope::new();
                let ended = entry.feed_object(rest);
                each(&entry, ended.is_some());
                match ended {
                    Some(n) => at += n,
                    None => return,
                }
            }
            Some(_) => match value_extent(rest, usize::MAX) {
                Some(n) if n > 0 => at += n,
                _ => return,
            },
        }
        let rest = text.get(at..).unwrap_or_default();
        at += skip_space(rest);
        if text.get(at) != Some(&b',') {
            return;
        }
        at += 1;
    }
}

/// Where the JSON value at the start of `bytes` (after JSON whitespace) ends, exclusive, if
/// within `max` bytes: followed only by its strings (escapes included) and its nesting
/// (`[`, `{` against `]`, `}`), a scalar ending at the first byte that cannot be part of it
/// (whitespace, a structural character, a quote). Nothing else is checked (a syntax error
/// inside a container, bytes that are no UTF-8 inside a string, are not seen); the depth
/// is a counter, so any nesting is followed in constant memory. `None` when it runs past
/// `max` or past `bytes` (a scalar that reaches the end of `bytes` may go on past it);
/// the start (nothing of a value) when a byte that begins no value (`,`, `:`, `]`, `}`)
/// comes first. Where serde_json reads one whole value from `bytes`, this ends where it
/// does (pinned by a property test). The one scanner of the envelope's batch reading
/// ([`batch_entries`]) and the WebSocket transport's splitting of a frame into messages.
pub(crate) fn value_extent(bytes: &[u8], max: usize) -> Option<usize> {
    let window = bytes.get(..max.min(bytes.len())).unwrap_or_default();
    let start = window
        .iter()
        .position(|&b| !super::lead::is_json_whitespace(b))?;
    let (mut depth, mut string, mut escaped) = (0_usize, false, false);
    for (i, &b) in window.iter().enumerate().skip(start) {
        if string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                string = false;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            continue;
        }
        let scalar = depth == 0 && i > start;
        match b {
            // A scalar ends where a string or a container would begin.
            b'"' | b'{' | b'[' if scalar => return Some(i),
            b'"' => string = true,
            b'{' | b'[' => depth = depth.saturating_add(1),
            b'}' | b']' if depth == 0 => return Some(i),
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            b',' | b':' if depth == 0 => return Some(i),
            b if depth == 0 && super::lead::is_json_whitespace(b) => return Some(i),
            _ => {}
        }
    }
    None
}

pub mod batch;

#[cfg(test)]
mod tests;
