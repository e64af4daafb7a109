//! `--max-rate`: parsing rates and the sender's token bucket.

use std::time::{Duration, Instant};

/// Parses a rate into bytes per second: `500mbit`, `1gbit`, `800kbit` (bits, decimal),
/// `50MB/s`, `kB/s`, `GB/s` (bytes, decimal), `20MiB/s`, `KiB/s`, `GiB/s` (bytes, binary),
/// or a bare number of bytes per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a number then a unit, e.g. 500mbit or 50MB/s"))?;
    let unit = unit.trim();
    let bytes_per_sec = match unit {
        "" | "B/s" => v,
        "bit" | "bps" => v / 8.0,
        "kbit" | "Kbit" => v * 1e3 / 8.0,
        "mbit" | "Mbit" => v * 1e6 / 8.0,
        "gbit" | "Gbit" => v * 1e9 / 8.0,
        "kB/s" | "KB/s" => v * 1e3,
        "MB/s" => v * 1e6,
        "GB/s" => v * 1e9,
        "KiB/s" => v * 1024.0,
        "MiB/s" => v * 1024.0 * 1024.0,
        "GiB/s" => v * 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (bit, kbit, mbit, gbit, B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s)"
            ))
        }
    };
    if !bytes_per_sec.is_finite() || bytes_per_sec < 1000.0 {
        return Err(format!("{s:?}: a rate must be at least 1000 B/s"));
    }
    Ok(bytes_per_sec as u64)
}

/// A token bucket of bytes.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    cap: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// `rate` bytes per second, at most `cap` bytes of burst (starts full).
    pub fn new(rate: u64, cap: u64, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: rate as f64,
            cap: cap as f64,
            tokens: cap as f64,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.cap);
        self.last = now;
    }

    /// Takes `n` bytes if available; otherwise says how long until they are.
    pub fn take(&mut self, n: u64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        let n = (n as f64).min(self.cap);
        if self.tokens >= n {
            self.tokens -= n;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((n - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Clock;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("500mbit").unwrap(), 62_500_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 125_000_000);
        assert_eq!(parse_rate("50MB/s").unwrap(), 50_000_000);
        assert_eq!(parse_rate("2MiB/s").unwrap(), 2 * 1024 * 1024);
        assert_eq!(parse_rate("10000").unwrap(), 10_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("5furlongs").is_err());
        assert!(parse_rate("1bit").is_err());
    }

    #[test]
    fn bucket_limits_the_average_rate() {
        // Any instant will do: the bucket reads no clock, every call takes `now`.
        let t0 = crate::driver::WallClock.now();
        let mut b = TokenBucket::new(1_000_000, 10_000, t0);
        assert!(b.take(10_000, t0).is_ok());
        let wait = b.take(10_000, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.01).abs() < 1e-6);
        assert!(b.take(10_000, t0 + Duration::from_millis(10)).is_ok());
    }
}
