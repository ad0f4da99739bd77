//! Flood metering and liveness: when a connection was last heard from and pinged, and how
//! many messages it may still send at once.

use std::time::Duration;

use crate::net::pace::Pace;

/// A connection's flood allowance (messages at a rate, with a burst) and the times its idle
/// and ping deadlines are counted from.
#[derive(Clone, Copy, Debug)]
pub(super) struct Meter {
    /// When the connection last sent anything.
    heard: u64,
    /// When the relay last asked it for a sign of life.
    pinged: u64,
    /// The allowance.
    allowance: Pace,
}

impl Meter {
    /// A full allowance of `burst` messages at `now`, refilled at `rate` a second.
    pub(super) fn new(now: u64, rate: u32, burst: u32) -> Self {
        Meter {
            heard: now,
            pinged: now,
            allowance: Pace::new(u64::from(rate), u64::from(burst)),
        }
    }

    /// The connection sent something at `now`.
    pub(super) fn heard(&mut self, now: u64) {
        self.heard = now;
    }

    /// Spends one message of the allowance at `now`; false when none is left (a flood).
    pub(super) fn spend(&mut self, now: u64) -> bool {
        self.allowance.spend(Duration::from_millis(now), 1)
    }

    /// Silent for more than `idle` at `now`.
    pub(super) fn silent(&self, now: u64, idle: u64) -> bool {
        now.saturating_sub(self.heard) > idle
    }

    /// Silent, and not pinged, for `every` at `now`.
    pub(super) fn ping_due(&self, now: u64, every: u64) -> bool {
        now.saturating_sub(self.heard) >= every && now.saturating_sub(self.pinged) >= every
    }

    /// A ping was asked for at `now`.
    pub(super) fn pinged(&mut self, now: u64) {
        self.pinged = now;
    }

    /// The first time at which [`silent`](Self::silent) or [`ping_due`](Self::ping_due)
    /// holds. An interval of 0 counts as 1, so that a deadline is never met again at the
    /// time it was handled.
    pub(super) fn deadline(&self, idle: u64, every: u64) -> u64 {
        let silent = self.heard.saturating_add(idle).saturating_add(1);
        let ping = self.heard.max(self.pinged).saturating_add(every.max(1));
        silent.min(ping)
    }
}

#[cfg(test)]
mod tests {
    use super::Meter;

    #[test]
    fn the_deadline_is_the_first_time_a_check_holds() {
        let mut m = Meter::new(100, 1, 10);
        let d = m.deadline(3_000, 1_000);
        assert_eq!(d, 1_100);
        assert!(m.ping_due(d, 1_000) && !m.ping_due(d - 1, 1_000));
        m.pinged(d);
        let d = m.deadline(3_000, 1_000);
        assert_eq!(d, 2_100);
        m.pinged(d);
        assert_eq!(m.deadline(3_000, 1_000), 3_100);
        m.pinged(3_100);
        let d = m.deadline(3_000, 1_000);
        assert_eq!(d, 3_101);
        assert!(m.silent(d, 3_000) && !m.silent(d - 1, 3_000));
    }

    #[test]
    fn a_burst_is_spent_then_refilled_at_the_rate() {
        let mut m = Meter::new(0, 1, 2);
        assert!(m.spend(0) && m.spend(0));
        assert!(!m.spend(0));
        assert!(m.spend(1_000));
    }
}
