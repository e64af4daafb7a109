//! `--max-rate`: the sender's token bucket.

use std::time::{Duration, Instant};

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

    #[test]
    fn bucket_limits_the_average_rate() {
        // Any instant will do: the bucket reads no clock, every call takes `now`.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1_000_000, 10_000, t0);
        assert!(b.take(10_000, t0).is_ok());
        let wait = b.take(10_000, t0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.01).abs() < 1e-6);
        assert!(b.take(10_000, t0 + Duration::from_millis(10)).is_ok());
    }
}
