//! `push/event` (§9).

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::Content;
use super::Extra;

/// `push/event` params (§9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEventParams {
    /// The declaring feature set (testimony, never authority: §5.4).
    pub feature_set: String,
    /// Unique event id, for idempotency (§9.4).
    pub event_id: String,
    /// When the event occurred (ISO 8601, kept as received).
    pub timestamp: String,
    /// Server-defined provenance metadata (untrusted claims, §16.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Map<String, Value>>,
    /// The event payload.
    pub payload: PushPayload,
    /// Namespaced semantic labels (§16); descriptive claims, never authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `push/event` `payload` (§9.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushPayload {
    /// Content for the model to interpret (a plain string is tolerated, §10.3).
    pub content: Content,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `push/event` result (§9.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEventResult {
    /// Whether the host accepted the event.
    pub accepted: bool,
    /// Present if inference was triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_id: Option<String>,
    /// Present if `accepted` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unknown members, kept verbatim.
    #[serde(flatten)]
    pub extra: Extra,
}

method!(
    /// `push/event` (§9.1): Server → Host Request; requires `pushEvents`.
    PushEvent, "push/event", Request, ServerToHost, PushEventParams, PushEventResult
);

/// `t` as an ISO 8601 / RFC 3339 UTC timestamp with whole seconds (`YYYY-MM-DDTHH:MM:SSZ`),
/// the form §9.2 `timestamp` takes. A time before the Unix epoch is clamped to the epoch.
pub fn timestamp(t: SystemTime) -> String {
    let (date, secs, _) = civil_utc(t);
    format!("{date}T{secs}Z")
}

/// [`timestamp`] with milliseconds (`YYYY-MM-DDTHH:MM:SS.mmmZ`), for logs and transcripts.
pub fn timestamp_millis(t: SystemTime) -> String {
    let (date, secs, millis) = civil_utc(t);
    format!("{date}T{secs}.{millis:03}Z")
}

/// `(YYYY-MM-DD, HH:MM:SS, milliseconds)` of `t` in UTC, proleptic Gregorian.
fn civil_utc(t: SystemTime) -> (String, String, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (H. Hinnant).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}-{month:02}-{day:02}"),
        format!("{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60),
        d.subsec_millis(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn s9_2_timestamps_are_iso8601_utc() {
        assert_eq!(timestamp(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp(at(1_700_000_000)), "2023-11-14T22:13:20Z");
        assert_eq!(timestamp(at(4_107_542_399)), "2100-02-28T23:59:59Z");
    }

    #[test]
    fn timestamp_millis_formats_known_instants() {
        assert_eq!(timestamp_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_200_123); // 2024-03-01
        assert_eq!(timestamp_millis(t), "2024-03-01T00:00:00.123Z");
    }
}
