//! Reading the spec's `integer` members (`turnIndex` §10.1/§10.5, `contextWindow` §10.1,
//! `index` §11.4/§14.3, token counts §10.5/§11.3, `maxTokens` §11.2).
//!
//! JSON has one number type, so `7.0` is the integer 7 (JSON Schema's `integer` reads it so
//! too), and a peer whose JSON stack writes every number as a float must not have its
//! messages refused. A number with a fractional part, a negative one, or one past `u64` is
//! still refused: it is not a non-negative integer.

use serde::{Deserialize, Deserializer};
use serde_json::Number;

/// `2^64`, the first float past `u64::MAX`.
const PAST_U64: f64 = 18_446_744_073_709_551_616.0;

fn integral(n: &Number) -> Option<u64> {
    if let Some(u) = n.as_u64() {
        return Some(u);
    }
    let f = n.as_f64()?;
    (f.fract() == 0.0 && (0.0..PAST_U64).contains(&f)).then_some(f as u64)
}

fn refuse<E: serde::de::Error>(n: &Number) -> E {
    E::custom(format!("expected a non-negative integer, got {n}"))
}

/// Whether `v` is a non-negative integer as [`u64`] reads one: the JSON-level checks
/// (`inference::result_defects`, `inference::request_defects`) judge with it, so they agree
/// with the typed reading.
pub(crate) fn is_count(v: &serde_json::Value) -> bool {
    matches!(v, serde_json::Value::Number(n) if integral(n).is_some())
}

/// A required non-negative integer; an integral float such as `7.0` is accepted.
pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = Number::deserialize(d)?;
    integral(&n).ok_or_else(|| refuse(&n))
}

/// An optional non-negative integer (`null` or absent is `None`); as [`u64`] otherwise.
pub(crate) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => integral(&n).map(Some).ok_or_else(|| refuse(&n)),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize, Debug)]
    struct T {
        #[serde(deserialize_with = "super::u64")]
        n: u64,
        #[serde(default, deserialize_with = "super::opt_u64")]
        o: Option<u64>,
    }

    #[test]
    fn integral_floats_are_integers_and_nothing_else_is() {
        let read = |v| serde_json::from_value::<T>(v).map(|t| (t.n, t.o));
        assert_eq!(read(json!({"n": 7})).unwrap(), (7, None));
        assert_eq!(
            read(json!({"n": 7.0, "o": 200000.0})).unwrap(),
            (7, Some(200000))
        );
        assert_eq!(read(json!({"n": 0, "o": null})).unwrap(), (0, None));
        assert_eq!(read(json!({"n": u64::MAX})).unwrap().0, u64::MAX);
        for bad in [
            json!(7.5),
            json!(-1),
            json!(-1.0),
            json!(1e20),
            json!("7"),
            json!(null),
        ] {
            let e = read(json!({"n": bad})).unwrap_err().to_string();
            assert!(!e.is_empty(), "{bad}");
            assert!(
                read(json!({"n": 1, "o": bad})).is_err() || bad.is_null(),
                "{bad}"
            );
        }
    }
}
