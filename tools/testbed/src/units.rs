//! Sizes, rates and durations as every command line of the project takes them (`ethbcast`,
//! `ethbcast-bench`, `ethbcast-testbed`). Units are case-insensitive and may follow the number
//! after a space.
//!
//! * Sizes ([`parse_size`]): a number of bytes with an optional unit, `B`; `K`, `KiB`, `M`,
//!   `MiB`, `G`, `GiB`, `T`, `TiB` (binary: `1M` is 1048576 bytes); `KB`, `MB`, `GB`, `TB`
//!   (decimal: `1MB` is 1000000 bytes). A fraction is allowed if the result is a whole
//!   number of bytes (`1.5K`).
//! * Rates ([`parse_rate`]): bits per second as `tc` writes them, `bit`, `kbit`, `mbit`,
//!   `gbit`, `tbit` (decimal, optionally followed by `/s`), or a size per second (`50MB/s`,
//!   `20MiB/s`, `B/s`). A rate always has a unit; `bps`, `kbps`, ... are refused (bits in
//!   some tools, bytes in `tc`).
//! * Durations ([`parse_duration`]): a number of seconds (`2.5`, `1e3`), a duration with units as
//!   `humantime` reads them (`500ms`, `2s`, `1m 30s`, `1h`), or `inf` for no limit
//!   ([`NO_LIMIT`]).

use std::time::Duration;

/// The duration that stands for "no limit" (`inf`): a century, which any clock arithmetic
/// (an `Instant` plus it) still handles, where `f64::INFINITY` seconds has no `Duration`.
pub const NO_LIMIT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A size, rate or duration that does not parse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnitError {
    /// No number where one was expected.
    #[error("expected a number then a unit, e.g. {example}")]
    NotANumber {
        input: String,
        example: &'static str,
    },
    /// A unit this kind of value does not know.
    #[error("unknown unit {unit:?} (one of {known})")]
    UnknownUnit {
        input: String,
        unit: String,
        known: &'static str,
    },
    /// A rate without a unit.
    #[error("a rate needs a unit, e.g. 100mbit or 50MB/s")]
    MissingUnit { input: String },
    /// `bps`, `kbps`, ...: bits per second to some, bytes per second to `tc`.
    #[error("`bps` is bits per second in some tools and bytes in tc; write kbit, mbit, gbit or kB/s, MB/s")]
    Ambiguous { input: String },
    /// A size that is no whole number of bytes (or bits).
    #[error("not a whole number of {what}")]
    NotWhole { input: String, what: &'static str },
    /// Beyond what 64 bits hold.
    #[error("too large")]
    TooLarge { input: String },
    /// A negative number of seconds, or NaN.
    #[error("seconds must be a number >= 0 (or inf for no limit)")]
    NegativeSeconds { input: String },
    /// A duration with units that `humantime` does not read.
    #[error("{source} (write seconds, e.g. 2.5, or a duration such as 500ms, 2s, 1m, or inf)")]
    Duration {
        input: String,
        source: humantime::DurationError,
    },
}

const SIZE_UNITS: &str = "B, K/KiB, M/MiB, G/GiB, T/TiB (binary), KB, MB, GB, TB (decimal)";
const RATE_UNITS: &str = "bit, kbit, mbit, gbit, tbit, or a size per second such as MB/s, MiB/s";

/// Splits `s` (trimmed) into its leading decimal number and the rest (trimmed).
fn split_number(s: &str) -> (&str, &str) {
    let t = s.trim();
    let at = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (n, u) = t.split_at(at);
    (n, u.trim())
}

/// Bytes per size unit (lower case), or `None`.
fn size_unit(unit: &str) -> Option<u64> {
    Some(match unit {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

/// `number * scale` as a whole number: exact for whole numbers, else through `f64`.
fn scaled(
    input: &str,
    number: &str,
    scale: u64,
    what: &'static str,
    example: &'static str,
) -> Result<u64, UnitError> {
    let not_a_number = || UnitError::NotANumber {
        input: input.to_owned(),
        example,
    };
    if number.is_empty() {
        return Err(not_a_number());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n.checked_mul(scale).ok_or_else(|| UnitError::TooLarge {
            input: input.to_owned(),
        });
    }
    let v: f64 = number.parse().map_err(|_| not_a_number())?;
    let x = v * scale as f64;
    if !x.is_finite() || x >= u64::MAX as f64 {
        return Err(UnitError::TooLarge {
            input: input.to_owned(),
        });
    }
    if x.fract() != 0.0 {
        return Err(UnitError::NotWhole {
            input: input.to_owned(),
            what,
        });
    }
    Ok(x as u64)
}

/// Parses a size into bytes: `4096`, `1M`, `1MiB`, `500MB`, `1.5K` (see the module docs).
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(s);
    let scale = size_unit(&unit.to_ascii_lowercase()).ok_or_else(|| UnitError::UnknownUnit {
        input: s.to_owned(),
        unit: unit.to_owned(),
        known: SIZE_UNITS,
    })?;
    scaled(s, number, scale, "bytes", "1M or 500MB")
}

/// Parses a rate into bits per second: `100mbit`, `1gbit`, `2.5gbit`, `50MB/s`, `20MiB/s`
/// (see the module docs).
pub fn parse_rate(s: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(s);
    let lower = unit.to_ascii_lowercase();
    if lower.is_empty() {
        return Err(UnitError::MissingUnit {
            input: s.to_owned(),
        });
    }
    let bits = lower.strip_suffix("/s").unwrap_or(&lower);
    let bit_scale = match bits {
        "bit" => Some(1),
        "kbit" => Some(1_000),
        "mbit" => Some(1_000_000),
        "gbit" => Some(1_000_000_000),
        "tbit" => Some(1_000_000_000_000),
        _ => None,
    };
    if let Some(scale) = bit_scale {
        return scaled(s, number, scale, "bits per second", "100mbit");
    }
    if matches!(lower.as_str(), "bps" | "kbps" | "mbps" | "gbps" | "tbps") {
        return Err(UnitError::Ambiguous {
            input: s.to_owned(),
        });
    }
    let per_second = lower
        .strip_suffix("/s")
        .filter(|u| !u.is_empty())
        .and_then(size_unit);
    let Some(bytes) = per_second else {
        return Err(UnitError::UnknownUnit {
            input: s.to_owned(),
            unit: unit.to_owned(),
            known: RATE_UNITS,
        });
    };
    let bytes_per_sec = scaled(s, number, bytes, "bytes per second", "50MB/s")?;
    bytes_per_sec
        .checked_mul(8)
        .ok_or_else(|| UnitError::TooLarge {
            input: s.to_owned(),
        })
}

/// Parses a duration: seconds (`2.5`, `60`), a duration with units (`500ms`, `2s`, `1m 30s`)
/// or `inf` ([`NO_LIMIT`]; so is anything at or above it).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim();
    if matches!(
        t.to_ascii_lowercase().as_str(),
        "inf" | "infinity" | "+inf" | "+infinity"
    ) {
        return Ok(NO_LIMIT);
    }
    let d = match t.parse::<f64>() {
        Ok(v) if v.is_nan() || v < 0.0 => {
            return Err(UnitError::NegativeSeconds {
                input: s.to_owned(),
            })
        }
        Ok(v) if v >= NO_LIMIT.as_secs_f64() => return Ok(NO_LIMIT),
        Ok(v) => Duration::from_secs_f64(v),
        Err(_) => humantime::parse_duration(t).map_err(|source| UnitError::Duration {
            input: s.to_owned(),
            source,
        })?,
    };
    Ok(d.min(NO_LIMIT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_in_every_documented_form() {
        for (s, bytes) in [
            ("4096", 4096),
            ("0", 0),
            ("1000B", 1000),
            ("1K", 1 << 10),
            ("256K", 256 << 10),
            ("512KiB", 512 << 10),
            ("1k", 1 << 10),
            ("1M", 1 << 20),
            ("1MiB", 1 << 20),
            ("64MiB", 64 << 20),
            ("1MB", 1_000_000),
            ("2MB", 2_000_000),
            ("500MB", 500_000_000),
            ("500M", 500 << 20),
            ("1G", 1 << 30),
            (" 64 GiB ", 64 << 30),
            ("1GB", 1_000_000_000),
            ("2T", 2 << 40),
            ("1TB", 1_000_000_000_000),
            ("1.5K", 1536),
            ("0.5MiB", 512 << 10),
            ("2mb", 2_000_000),
        ] {
            assert_eq!(parse_size(s), Ok(bytes), "{s}");
        }
    }

    #[test]
    fn sizes_refused() {
        for bad in [
            "",
            "M",
            "-1",
            "1e3",
            "1.2.3M",
            "3 parsecs",
            "1Mbit",
            "0.5B",
            "1.0000001K",
            "20000000T",
            "18446744073709551616",
            "inf",
            "1 M B",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} accepted");
        }
        assert!(matches!(
            parse_size("5furlongs"),
            Err(UnitError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_size("0.5B"),
            Err(UnitError::NotWhole { .. })
        ));
    }

    #[test]
    fn rates_in_every_documented_form() {
        for (s, bits) in [
            ("100mbit", 100_000_000),
            ("500mbit", 500_000_000),
            ("1gbit", 1_000_000_000),
            (" 1GBit ", 1_000_000_000),
            ("2.5gbit", 2_500_000_000),
            ("800kbit", 800_000),
            ("1tbit", 1_000_000_000_000),
            ("10bit", 10),
            ("100Mbit/s", 100_000_000),
            ("50MB/s", 400_000_000),
            ("1kB/s", 8_000),
            ("2GB/s", 16_000_000_000),
            ("20MiB/s", (20 * 8) << 20),
            ("1KiB/s", 8 << 10),
            ("1000B/s", 8_000),
        ] {
            assert_eq!(parse_rate(s), Ok(bits), "{s}");
        }
    }

    #[test]
    fn rates_refused() {
        for bad in [
            "",
            "mbit",
            "fast",
            "5furlongs",
            "-1mbit",
            "1e3mbit",
            "1.2.3mbit",
            "100mb",
            "50MB",
            "/s",
            "0.5bit",
            "30000000tbit",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            parse_rate("100"),
            Err(UnitError::MissingUnit {
                input: "100".into()
            })
        );
        for ambiguous in ["100mbps", "1Gbps", "8bps"] {
            assert!(
                matches!(parse_rate(ambiguous), Err(UnitError::Ambiguous { .. })),
                "{ambiguous}"
            );
        }
    }

    #[test]
    fn durations_in_every_documented_form() {
        for (s, d) in [
            ("2.5", Duration::from_millis(2500)),
            ("60", Duration::from_secs(60)),
            ("0", Duration::ZERO),
            ("2s", Duration::from_secs(2)),
            ("500ms", Duration::from_millis(500)),
            ("1m", Duration::from_secs(60)),
            ("1m 30s", Duration::from_secs(90)),
            ("1h", Duration::from_secs(3600)),
            (" 3s ", Duration::from_secs(3)),
            ("1e3", Duration::from_secs(1000)),
        ] {
            assert_eq!(parse_duration(s), Ok(d), "{s}");
        }
        for s in ["inf", "INF", "infinity", "+inf", "1e300", "100000000000"] {
            assert_eq!(parse_duration(s), Ok(NO_LIMIT), "{s}");
        }
        // No limit stays within what an Instant can be added to.
        let _ = std::time::Instant::now() + parse_duration("inf").unwrap();
    }

    #[test]
    fn durations_refused() {
        for bad in [
            "",
            "-1",
            "nan",
            "NaN",
            "abc",
            "1.2.3",
            "2 parsecs",
            "-5s",
            "-inf",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad} accepted");
        }
    }
}
