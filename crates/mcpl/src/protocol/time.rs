//! Timestamps on the wire: the one ISO 8601 rule every `timestamp` member of the spec is
//! judged by (§9.2 `push/event`, §14.3 `channels/incoming` messages), and the UTC form this
//! crate writes.

use std::time::{SystemTime, UNIX_EPOCH};

/// `t` as an ISO 8601 / RFC 3339 UTC timestamp with whole seconds (`YYYY-MM-DDTHH:MM:SSZ`),
/// the form §9.2 and §14.3 `timestamp`s take. A time before the Unix epoch is clamped to the epoch.
pub fn timestamp(t: SystemTime) -> String {
    let (date, secs, _) = civil_utc(t);
    format!("{date}T{secs}Z")
}

/// [`timestamp`] with milliseconds (`YYYY-MM-DDTHH:MM:SS.mmmZ`), for logs and transcripts.
pub fn timestamp_millis(t: SystemTime) -> String {
    let (date, secs, millis) = civil_utc(t);
    format!("{date}T{secs}.{millis:03}Z")
}

/// What is wrong with a `timestamp` (§9.2, §14.3) as ISO 8601, or `None` when it is an ISO 8601
/// date or date-time.
///
/// Accepted: a calendar (`2026-01-23`), ordinal (`2026-023`) or week (`2026-W04-5`) date, in
/// the extended or the basic (`20260123`) format, optionally followed by `T` and a time
/// (`hh`, `hh:mm` or `hh:mm:ss`, a fraction after `.` or `,` on the last unit, `24:00:00`
/// for the end of a day, second 60 for a leap second) and a zone (`Z`, `±hh`, `±hh:mm`).
/// Date and time use one format, both extended or both basic. A date standing alone may
/// also have reduced precision (`2026-12`, `2026`, `20`, `2026-W04`).
/// Reading: §9.2 says only "ISO 8601", so every representation the standard gives a date
/// or date-time without prior agreement is accepted, and no zone (local time) with it.
/// Refused, fail-closed, as ISO 8601 admits them only "by agreement" (none exists in MCPL)
/// or as no point in time: expanded (`+002026-01-23`) and truncated (`--01-23`) dates,
/// a time of day without a date, durations and intervals. A space instead of `T` is
/// RFC 3339's relaxation, not ISO 8601, and is refused; so are epoch numbers.
/// Years: every four-digit year `0000`–`9999` of the proleptic Gregorian calendar, alike in
/// every date form (`0000` is 1 BC, a leap year). ISO 8601:2004 §3.2.1 asks the parties'
/// agreement to use years before 1583, but that is a condition on what the values mean to
/// them, not another representation (unlike the expanded one, which needs extra digits the
/// reader must expect), so such a year is not refused here.
pub fn timestamp_defect(ts: &str) -> Option<&'static str> {
    iso8601(ts.as_bytes()).err()
}

fn iso8601(b: &[u8]) -> Result<(), &'static str> {
    let (date, time) = match b.iter().position(|&c| c == b'T') {
        Some(i) => (&b[..i], Some(&b[i + 1..])),
        None => (b, None),
    };
    if time.is_none() {
        if let Some(reduced) = reduced_date(date) {
            return reduced;
        }
    }
    let extended = date_part(date)?;
    if let Some(time) = time {
        time_part(time, extended)?;
    }
    Ok(())
}

/// `n` ASCII digits (at most 4, as every caller passes) as a number, or `None`.
fn digits(b: &[u8]) -> Option<u32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
}

fn leap(year: u32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Checks the date; `Ok(true)` for the extended format.
fn date_part(d: &[u8]) -> Result<bool, &'static str> {
    const BAD: &str = "not an ISO 8601 date (YYYY-MM-DD, YYYY-DDD or YYYY-Www-D)";
    let year = d.get(..4).and_then(digits).ok_or(BAD)?;
    let rest = &d[4..];
    let (extended, rest) = match rest.first() {
        Some(b'-') => (true, &rest[1..]),
        _ => (false, rest),
    };
    if let Some(week) = rest.strip_prefix(b"W") {
        // Week date: Www-D (extended) or WwwD (basic).
        let (ww, day) = match (extended, week.len()) {
            (true, 4) if week[2] == b'-' => (&week[..2], &week[3..]),
            (false, 3) => (&week[..2], &week[2..]),
            _ => return Err(BAD),
        };
        let (ww, day) = (digits(ww).ok_or(BAD)?, digits(day).ok_or(BAD)?);
        if !(1..=weeks_in(year)).contains(&ww) || !(1..=7).contains(&day) {
            return Err("week or weekday out of range");
        }
        return Ok(extended);
    }
    match (extended, rest.len()) {
        // Ordinal date.
        (_, 3) => {
            let day = digits(rest).ok_or(BAD)?;
            if day == 0 || day > 365 + u32::from(leap(year)) {
                return Err("day of year out of range");
            }
            Ok(extended)
        }
        (true, 5) if rest[2] == b'-' => month_day(year, &rest[..2], &rest[3..]).map(|()| true),
        (false, 4) => month_day(year, &rest[..2], &rest[2..]).map(|()| false),
        _ => Err(BAD),
    }
}

/// How many ISO weeks `year` has: 53 when it starts on a Thursday, or on a Wednesday in a
/// leap year; 52 otherwise.
fn weeks_in(year: u32) -> u32 {
    let p = |y: i64| (y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400)).rem_euclid(7);
    let y = i64::from(year);
    if p(y) == 4 || p(y - 1) == 3 {
        53
    } else {
        52
    }
}

/// A date of reduced precision, the one ISO 8601 rule for a date that names less than a day
/// (ISO 8601:2004 §4.1.2.3 and §4.1.4.3, ISO 8601-1:2019 §5.2.2.2): a month `YYYY-MM` (with
/// the hyphen: the basic `YYYYMM` is not allowed, it would read as `YYMMDD`), a year `YYYY`,
/// a century `YY`, or a week `YYYY-Www` / `YYYYWww`. `None` when `d` has none of these
/// shapes (it may still be a complete date); `Some(Err)` when it has one but a value out of
/// range. Only a date standing alone may be reduced: a date-time needs a complete date
/// (2004 §4.3.3), which the caller enforces by asking only when there is no time.
fn reduced_date(d: &[u8]) -> Option<Result<(), &'static str>> {
    match d {
        [_, _] | [_, _, _, _] => digits(d).map(|_| Ok(())),
        [y0, y1, y2, y3, b'-', m0, m1] => {
            digits(&[*y0, *y1, *y2, *y3])?;
            let month = digits(&[*m0, *m1])?;
            Some(if (1..=12).contains(&month) {
                Ok(())
            } else {
                Err("month out of range")
            })
        }
        [y0, y1, y2, y3, b'-', b'W', w0, w1] | [y0, y1, y2, y3, b'W', w0, w1] => {
            let year = digits(&[*y0, *y1, *y2, *y3])?;
            let week = digits(&[*w0, *w1])?;
            Some(if (1..=weeks_in(year)).contains(&week) {
                Ok(())
            } else {
                Err("week out of range")
            })
        }
        _ => None,
    }
}

fn month_day(year: u32, m: &[u8], d: &[u8]) -> Result<(), &'static str> {
    const BAD: &str = "not an ISO 8601 date (YYYY-MM-DD, YYYY-DDD or YYYY-Www-D)";
    let (m, d) = (digits(m).ok_or(BAD)?, digits(d).ok_or(BAD)?);
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 => 28 + u32::from(leap(year)),
        _ => return Err("month out of range"),
    };
    if d == 0 || d > days {
        return Err("day out of range for its month");
    }
    Ok(())
}

/// Checks `hh[:mm[:ss]][fraction][zone]` in the date's format.
fn time_part(t: &[u8], extended: bool) -> Result<(), &'static str> {
    const BAD: &str = "not an ISO 8601 time (hh:mm:ss with an optional fraction and zone)";
    let zone_at = t
        .iter()
        .position(|&c| matches!(c, b'Z' | b'+' | b'-'))
        .unwrap_or(t.len());
    let (clock, zone) = t.split_at(zone_at);
    let (clock, fraction) = match clock.iter().position(|&c| c == b'.' || c == b',') {
        Some(i) => (&clock[..i], Some(&clock[i + 1..])),
        None => (clock, None),
    };
    // Any number of digits: checked, never summed (a long fraction must not overflow).
    if fraction.is_some_and(|f| f.is_empty() || !f.iter().all(u8::is_ascii_digit)) {
        return Err("fraction without digits");
    }
    let units: Vec<&[u8]> = if extended {
        clock.split(|&c| c == b':').collect()
    } else {
        clock.chunks(2).collect()
    };
    if units.is_empty() || units.len() > 3 || units.iter().any(|u| u.len() != 2) {
        return Err(BAD);
    }
    let mut v = [0u32; 3];
    for (slot, u) in v.iter_mut().zip(&units) {
        *slot = digits(u).ok_or(BAD)?;
    }
    let [h, m, s] = v;
    let end_of_day =
        h == 24 && m == 0 && s == 0 && fraction.map_or(true, |f| f.iter().all(|&c| c == b'0'));
    if (h > 23 && !end_of_day) || m > 59 || s > 60 {
        return Err("time out of range");
    }
    match zone {
        [] | [b'Z'] => Ok(()),
        [b'+' | b'-', offset @ ..] => {
            let (hh, mm) = match (extended, offset.len()) {
                (_, 2) => (offset, &b"00"[..]),
                (true, 5) if offset[2] == b':' => (&offset[..2], &offset[3..]),
                (false, 4) => (&offset[..2], &offset[2..]),
                _ => return Err("zone offset is not ±hh or ±hh:mm"),
            };
            match (digits(hh), digits(mm)) {
                (Some(h), Some(m)) if h <= 23 && m <= 59 => Ok(()),
                _ => Err("zone offset out of range"),
            }
        }
        _ => Err("zone is not Z or ±hh:mm"),
    }
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
    fn s9_2_timestamp_must_be_iso8601() {
        for ok in [
            "2026-01-23T10:30:00Z",
            "2026-01-23T10:30:00.123Z",
            "2026-01-23T10:30:00.123456789012345678901234567890Z",
            "2026-01-23T10:30:00,5+01:00",
            "2026-01-23T10:30-05:00",
            "2026-01-23T10+05:30",
            "2026-01-23T10:30:00",
            "2026-01-23",
            "20260123T103000Z",
            "20260123T103000.25-0800",
            "2026-023T10:30:00Z",
            "2026-W04-5T10:30:00Z",
            "2026-W53-1",
            "2020-W53-7",
            "0000-W01-1",
            "0000-001",
            "2026W045",
            "2024-02-29T00:00:00Z",
            "2026-01-23T24:00:00Z",
            "2016-12-31T23:59:60Z",
        ] {
            assert_eq!(timestamp_defect(ok), None, "{ok}");
        }
        for bad in [
            "",
            "yesterday",
            "1706005800",
            "1706005800000",
            "2026-01-23 10:30:00Z",
            "2026-1-23T10:30:00Z",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31",
            "2026-01-23T25:00:00Z",
            "2026-01-23T24:00:01Z",
            "2026-01-23T10:61:00Z",
            "2026-01-23T10:30:00.Z",
            "2026-01-23T10:30:00+2:00",
            "2026-01-23T10:30+0530",
            "2026-01-23T10:30:00+24:00",
            "2026-01-23T10:30:00UTC",
            "2026-01-23T103000Z",
            "20260123T10:30:00Z",
            "2026-366",
            "2026-W54-1",
            "2027-W53-1",
            "2021-W53-1",
            "2026-01-23T",
            "Fri, 23 Jan 2026 10:30:00 GMT",
        ] {
            assert!(timestamp_defect(bad).is_some(), "{bad:?} accepted");
        }
        // What this library writes passes its own rule.
        assert_eq!(timestamp_defect(&timestamp_millis(SystemTime::now())), None);
    }

    /// Year 0000 (1 BC of the proleptic Gregorian calendar, a leap year: divisible by 400)
    /// is read alike in every form a date takes: calendar, ordinal and week dates, extended
    /// and basic, with a time and alone, reduced. Its last day is 0000-366 = 0000-12-31, its
    /// 29 February exists, and it has 52 ISO weeks (it began on a Saturday).
    #[test]
    fn s9_2_year_0000_is_read_alike_in_every_date_form() {
        for ok in [
            "0000-01-01",
            "00000101",
            "0000-01-01T00:00:00Z",
            "00000101T000000Z",
            "0000-02-29",
            "0000-366",
            "0000366",
            "0000-366T23:59:59Z",
            "0000-W52-7",
            "0000W527",
            "0000-W52",
            "0000-12",
            "0000",
            "00",
        ] {
            assert_eq!(timestamp_defect(ok), None, "{ok}");
        }
        for bad in [
            "0000-367",
            "0000-W53-1",
            "0000-W53",
            "0000-00-01",
            "0000-12-32",
        ] {
            assert!(timestamp_defect(bad).is_some(), "{bad:?} accepted");
        }
    }

    /// §9.2 says only "ISO 8601", and ISO 8601 (2004 §4.1.2.3, §4.1.4.3; 2019-1 §5.2.2.2)
    /// lets a date alone be written with reduced precision, needing no agreement between
    /// the parties: a month, a year, a century, a week. A host refused such a push
    /// (`-32602`) and `mcpl check` failed the server that sent it. A date-time still needs a
    /// complete date (2004 §4.3.3), and the basic `YYYYMM` is not ISO 8601 (it reads as
    /// `YYMMDD`).
    #[test]
    fn s9_2_reduced_precision_dates_are_iso8601() {
        for ok in [
            "2026-12", "2026-01", "2026", "0000", "20", "2026-W04", "2026W04", "2026-W53",
        ] {
            assert_eq!(timestamp_defect(ok), None, "{ok}");
        }
        for bad in [
            "202612",
            "2026-13",
            "2026-00",
            "2026-1",
            "2026-",
            "2026-W54",
            "2026-W00",
            "2026-W4",
            "2026W4",
            "2",
            "202",
            "20261",
            "2026-12T10:00:00Z",
            "2026T10:00Z",
            "20T10",
            "2026-W04T10:00Z",
            "-2026",
            "+2026",
            "2026-12Z",
        ] {
            assert!(timestamp_defect(bad).is_some(), "{bad:?} accepted");
        }
    }

    proptest::proptest! {
        /// Every instant this library stamps passes its own §9.2 rule, and no string makes
        /// the rule panic.
        #[test]
        fn s9_2_stamped_times_pass_and_any_text_is_judged(
            secs in 0u64..253_402_300_799,
            millis in 0u64..1000,
            text in "\\PC{0,40}",
            near in "[0-9W]{0,9}[-T:.,+Z0-9]{0,40}",
        ) {
            let t = at(secs) + Duration::from_millis(millis);
            proptest::prop_assert_eq!(timestamp_defect(&timestamp(t)), None);
            proptest::prop_assert_eq!(timestamp_defect(&timestamp_millis(t)), None);
            let _ = (timestamp_defect(&text), timestamp_defect(&near));
        }
    }

    #[test]
    fn timestamp_millis_formats_known_instants() {
        assert_eq!(timestamp_millis(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_200_123); // 2024-03-01
        assert_eq!(timestamp_millis(t), "2024-03-01T00:00:00.123Z");
    }
}
