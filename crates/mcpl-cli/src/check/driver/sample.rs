//! Bounded lists the strict host keeps of what it saw: bad frames of one kind
//! ([`Sample`]) and findings named once each ([`Listed`]).

/// Bad frames of one kind, bounded whatever the server sends (issue #20): the first
/// [`Sample::SHOWN`] kept (each cut to [`Sample::CHARS`] characters), the last one too (for
/// `Session::meanwhile`), the rest only counted.
#[derive(Debug, Default)]
pub(super) struct Sample {
    pub(super) shown: Vec<String>,
    pub(super) count: u64,
    pub(super) last: String,
}

impl Sample {
    /// How many are kept to be shown.
    pub(super) const SHOWN: usize = 3;

    /// Characters of each kept one.
    pub(super) const CHARS: usize = 160;

    pub(super) fn push(&mut self, s: impl AsRef<str>) {
        self.count += 1;
        let s = s.as_ref();
        let mut kept: String = s.chars().take(Self::CHARS).collect();
        if kept.len() < s.len() {
            kept.push('…');
        }
        if self.shown.len() < Self::SHOWN {
            self.shown.push(kept.clone());
        }
        self.last = kept;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `N frame(s) WHAT, first 3 shown: A; B; C`: the kept ones as they are, unquoted.
    pub(super) fn listed(&self, what: &str) -> String {
        let first = if self.count > self.shown.len() as u64 {
            format!(", first {} shown", self.shown.len())
        } else {
            String::new()
        };
        format!(
            "{} frame(s) {what}{first}: {}",
            self.count,
            self.shown.join("; ")
        )
    }

    /// `N frames of junk, first 3 shown: …` (`what` names the kind).
    pub(super) fn summary(&self, what: &str) -> String {
        let quoted: Vec<String> = self.shown.iter().map(|s| format!("{s:?}")).collect();
        let first = if self.count > self.shown.len() as u64 {
            format!(", first {} shown", self.shown.len())
        } else {
            String::new()
        };
        format!(
            "{} frames of {what}{first}: {}",
            self.count,
            quoted.join("; ")
        )
    }
}

/// Findings of one kind, in the order seen, bounded whatever the server sends: the first
/// [`Listed::KEPT`] kept, the rest only counted, so a server repeating a defect a million
/// times costs a counter, not a list (a flood of `push/event` before the policy had grown
/// such a list by about 100 bytes a message for the whole session).
#[derive(Debug, Default, Clone)]
pub(super) struct Listed {
    pub(super) kept: Vec<String>,
    /// How many were not kept.
    pub(super) more: u64,
}

impl Listed {
    /// How many are kept to be quoted.
    pub(super) const KEPT: usize = 32;

    pub(super) fn push(&mut self, s: String) {
        if self.kept.len() < Self::KEPT {
            self.kept.push(s);
        } else {
            self.more += 1;
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The kept ones joined by `sep`, then how many more there were (`…; and 7 more`).
    pub(super) fn join(&self, sep: &str) -> String {
        let mut s = self.kept.join(sep);
        if self.more > 0 {
            s.push_str(&format!("{sep}and {} more", self.more));
        }
        s
    }

    /// Like [`Listed::push`], but a repeat of the one just kept is dropped, not counted.
    pub(super) fn push_unrepeated(&mut self, s: String) {
        if self.more == 0 && self.kept.last() == Some(&s) {
            return;
        }
        self.push(s);
    }
}
