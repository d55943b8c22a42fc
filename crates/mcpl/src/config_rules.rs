//! The one rule every configuration's `defects` applies to its timeouts and counts
//! (`PeerConfig`, `LifecycleConfig`, `HostRules`, `ListenConfig`, `ServeConfig`): a timeout
//! under [`MIN_TIMEOUT`] ends every wait at once, and a count of 0 admits nothing (or was
//! raised to 1 unsaid), so both are a user's mistake, reported naming the field.

use std::fmt::{self, Display};
use std::time::Duration;

/// A field's name made by a configuration's naming function only when a defect is written
/// (a `defects` call with none, as every connect makes, formats nothing).
pub(crate) struct Named<'a>(pub &'a dyn Fn(&'static str) -> String, pub &'static str);

impl Display for Named<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&(self.0)(self.1))
    }
}

/// The shortest timeout a configuration takes (1 ms): under it, every wait ends at once.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// Adds `"{field} is {d:?}: give at least 1 ms ({why})"` to `out` when `d` is under
/// [`MIN_TIMEOUT`].
pub(crate) fn timeout(out: &mut Vec<String>, field: &dyn Display, d: Duration, why: &str) {
    if d < MIN_TIMEOUT {
        out.push(format!("{field} is {d:?}: give at least 1 ms ({why})"));
    }
}

/// [`timeout`] for a timeout `None` turns off: `Some` under [`MIN_TIMEOUT`] is the mistake.
pub(crate) fn optional_timeout(
    out: &mut Vec<String>,
    field: &dyn Display,
    d: Option<Duration>,
    why: &str,
) {
    if let Some(d) = d.filter(|d| *d < MIN_TIMEOUT) {
        out.push(format!(
            "{field} is Some({d:?}): give at least 1 ms, or None for no limit ({why})"
        ));
    }
}

/// Adds `"{field} is 0: give at least 1 ({why})"` to `out` when `value` is 0.
pub(crate) fn count(out: &mut Vec<String>, field: &dyn Display, value: usize, why: &str) {
    if value == 0 {
        out.push(format!("{field} is 0: give at least 1 ({why})"));
    }
}
