//! The cache's clock: milliseconds on a monotonic scale, a trait so
//! that tests can move time by hand.

use std::time::Instant;

/// Milliseconds on a monotonic clock; tests substitute their own.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time in milliseconds since an arbitrary start.
    fn now_ms(&self) -> u64;

    /// The time `t` on the same scale: the hit path passes the query's
    /// arrival, which the server read already, rather than read the clock
    /// again for each query of an autopath walk. A clock of its own
    /// (tests') ignores `t`.
    fn at_ms(&self, t: Instant) -> u64 {
        let _ = t;
        self.now_ms()
    }

    /// The instant of `ms` on this clock, when it is the monotonic one:
    /// a hit tells its entry's store time by it ([`Stored`]). A clock of
    /// its own (tests') has none, and its hits are not marked.
    ///
    /// [`Stored`]: clusterdns_contract::Stored
    fn instant_of(&self, ms: u64) -> Option<Instant> {
        let _ = ms;
        None
    }
}

/// The process's monotonic clock.
#[derive(Debug)]
pub struct MonotonicClock(Instant);

impl Default for MonotonicClock {
    fn default() -> Self {
        Self(Instant::now())
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> u64 {
        self.at_ms(Instant::now())
    }

    fn at_ms(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.0).as_millis()).unwrap_or(u64::MAX)
    }

    // Whole milliseconds from the start: the seconds elapsed from this
    // instant to `t` are exactly those `Entry::ttl` counts at `at_ms(t)`.
    fn instant_of(&self, ms: u64) -> Option<Instant> {
        self.0.checked_add(std::time::Duration::from_millis(ms))
    }
}
