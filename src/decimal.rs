//! Microsecond timestamps of JSON traces, which arrive as numbers or as decimal strings
//! (`"1795985719635057.125"`): parsed to nanoseconds for arithmetic, and kept as exact decimals for
//! ordering, since two events a fraction of a nanosecond apart must sort as the reference tool sorts
//! them. Used by `convert` and `merge` alike.

use std::cmp::Ordering;

use serde_json::Value;

/// Nanoseconds from a JSON number or decimal string of microseconds, exactly for decimal strings.
pub fn parse_micros(value: &Value) -> std::result::Result<i128, String> {
    let out_of_range = || "out of range".to_string();
    match value {
        Value::Number(n) => {
            // Numbers keep their text (serde_json's arbitrary_precision): epoch µs with nanosecond
            // decimals do not survive a trip through f64.
            let text = n.to_string();
            if let Ok(ns) = parse_micros(&Value::String(text)) {
                return Ok(ns);
            }
            let us = n.as_f64().ok_or_else(out_of_range)?;
            if !us.is_finite() || us.abs() > 1e17 {
                return Err(out_of_range());
            }
            Ok((us * 1000.0).round() as i128)
        }
        Value::String(text) => {
            let parts = DecimalParts::parse(text)?;
            let mut ns: i128 = parts.whole.parse::<i128>().map_err(|_| out_of_range())? * 1000;
            let frac3: String = parts.frac.chars().chain("000".chars()).take(3).collect();
            ns += frac3.parse::<i128>().unwrap_or(0);
            // Below a nanosecond: to the nearest one (half away from zero), as numbers are.
            if parts.frac.as_bytes().get(3).is_some_and(|&d| d >= b'5') {
                ns += 1;
            }
            Ok(if parts.negative { -ns } else { ns })
        }
        _ => Err("expected a number or a decimal string".into()),
    }
}

/// Nanoseconds as exact decimal microseconds, as short as the value allows: `1732900000004342.53`,
/// `100`, `2.1`, `-0.005`. What `convert` writes, so that no fraction of the input is lost.
pub fn decimal_micros(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let magnitude = ns.unsigned_abs();
    let whole = magnitude / 1000;
    let frac = format!("{:03}", magnitude % 1000);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{frac}")
    }
}

/// The digits of a plain decimal: an optional `-`, at most 17 integer digits, any fraction digits.
struct DecimalParts<'a> {
    negative: bool,
    whole: &'a str,
    frac: &'a str,
}

impl<'a> DecimalParts<'a> {
    fn parse(text: &'a str) -> std::result::Result<DecimalParts<'a>, String> {
        let text = text.trim();
        let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
        let (negative, digits) = match whole.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, whole),
        };
        let ok = |s: &str| s.chars().all(|c| c.is_ascii_digit());
        if digits.is_empty() || !ok(digits) || !ok(frac) || digits.len() > 17 {
            return Err(format!("{text:?} is not a decimal number of microseconds"));
        }
        Ok(DecimalParts {
            negative,
            whole: digits,
            frac,
        })
    }
}

/// A timestamp as an exact decimal, ordered by value whatever its spelling: `5`, `5.0` and `"5.000"`
/// are equal, `"5.0000001"` is after them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactMicros {
    negative: bool,
    whole: u128,
    /// Fraction digits without trailing zeros, so that equal values have equal digits.
    frac: String,
}

impl ExactMicros {
    /// From the same inputs as `parse_micros`. Numbers in exponent notation, which have no plain
    /// decimal text, are taken at the nanosecond `parse_micros` gives them.
    pub fn parse(value: &Value) -> std::result::Result<ExactMicros, String> {
        let text = match value {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => return Err("expected a number or a decimal string".into()),
        };
        match DecimalParts::parse(&text) {
            Ok(parts) => {
                let whole: u128 = parts
                    .whole
                    .parse()
                    .map_err(|_| "out of range".to_string())?;
                let frac = parts.frac.trim_end_matches('0').to_string();
                // -0 and 0 are one value.
                let negative = parts.negative && (whole != 0 || !frac.is_empty());
                Ok(ExactMicros {
                    negative,
                    whole,
                    frac,
                })
            }
            Err(_) => Ok(ExactMicros::from_ns(parse_micros(value)?)),
        }
    }

    /// The exact decimal of `ns` nanoseconds, in microseconds.
    pub fn from_ns(ns: i128) -> ExactMicros {
        let magnitude = ns.unsigned_abs();
        let frac = format!("{:03}", magnitude % 1000)
            .trim_end_matches('0')
            .to_string();
        ExactMicros {
            negative: ns < 0,
            whole: magnitude / 1000,
            frac,
        }
    }

    fn cmp_magnitude(&self, other: &ExactMicros) -> Ordering {
        // Without trailing zeros, fraction digits compare as strings do: "45" < "5" as 0.45 < 0.5.
        self.whole
            .cmp(&other.whole)
            .then_with(|| self.frac.cmp(&other.frac))
    }
}

impl Ord for ExactMicros {
    fn cmp(&self, other: &ExactMicros) -> Ordering {
        match (self.negative, other.negative) {
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        }
    }
}

impl PartialOrd for ExactMicros {
    fn partial_cmp(&self, other: &ExactMicros) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_numbers_and_decimal_strings_exactly() {
        assert_eq!(parse_micros(&json!(12.5)), Ok(12_500));
        assert_eq!(
            parse_micros(&json!("1795985719635057.125")),
            Ok(1_795_985_719_635_057_125)
        );
        assert_eq!(parse_micros(&json!("7")), Ok(7_000));
        // Digits below a nanosecond round to the nearest one, on either side of zero.
        assert_eq!(parse_micros(&json!("7.0015")), Ok(7_002));
        assert_eq!(parse_micros(&json!("7.0014999")), Ok(7_001));
        assert_eq!(parse_micros(&json!("-7.0015")), Ok(-7_002));
        assert!(parse_micros(&json!("1e5")).is_err());
        assert!(parse_micros(&json!("99999999999999999999")).is_err());
        assert!(parse_micros(&json!(true)).is_err());
    }

    #[test]
    fn nanoseconds_print_as_the_shortest_exact_decimal() {
        assert_eq!(
            decimal_micros(1_732_900_000_004_342_530),
            "1732900000004342.53"
        );
        assert_eq!(decimal_micros(100_000), "100");
        assert_eq!(decimal_micros(2_100), "2.1");
        assert_eq!(decimal_micros(7), "0.007");
        assert_eq!(decimal_micros(-5), "-0.005");
        assert_eq!(decimal_micros(0), "0");
        for ns in [1_795_985_719_635_000_250i128, 120_500, 3, -1_234_567] {
            let back = parse_micros(&Value::String(decimal_micros(ns)));
            assert_eq!(back, Ok(ns), "{ns}");
        }
    }

    fn exact(value: Value) -> ExactMicros {
        ExactMicros::parse(&value).unwrap()
    }

    #[test]
    fn equal_values_in_any_spelling_are_equal() {
        assert_eq!(exact(json!(5)), exact(json!("5.000")));
        assert_eq!(exact(json!("5.0")), exact(json!(5.0)));
        assert_eq!(exact(json!("-0.0")), exact(json!(0)));
        assert_eq!(exact(json!(1.5e3)), exact(json!("1500")));
    }

    #[test]
    fn orders_below_a_nanosecond_and_across_signs() {
        let ordered = [
            exact(json!("-2.5")),
            exact(json!(-2)),
            exact(json!("-1.9999")),
            exact(json!(0)),
            exact(json!("0.45")),
            exact(json!(0.5)),
            exact(json!("1795985719635057.125")),
            exact(json!("1795985719635057.1250001")),
            exact(json!("1795985719635057.126")),
            exact(json!(1795985719635058u64)),
        ];
        for pair in ordered.windows(2) {
            assert!(pair[0] < pair[1], "{:?} !< {:?}", pair[0], pair[1]);
        }
    }
}
