//! Rates with bursts, without I/O: the one token bucket of the relay (a connection's message
//! allowance, `wire.md` §6) and of its HTTP (bytes per address and in all, `http.md` §1.1).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// A rate with a burst, as the generic cell rate algorithm keeps it (one instant, the
/// theoretical arrival time): a charge of `cost` units waits until the units charged before
/// it, less `burst`, have drained at `rate` a second. Time is given, never read: an instant
/// is a [`Duration`] since any origin the caller keeps (the relay's clock, or an `Instant`
/// the HTTP site was made at).
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Units a second (at least 1).
    rate: u64,
    /// How far ahead of now charges may run before one waits (`burst` units at `rate`).
    burst: Duration,
    /// When everything charged so far has drained; `None` before the first charge.
    tat: Option<Duration>,
}

impl Pace {
    /// A pace of `rate` units a second that lets `burst` units through at once.
    pub fn new(rate: u64, burst: u64) -> Pace {
        let rate = rate.max(1);
        Pace {
            rate,
            burst: drain_time(burst, rate),
            tat: None,
        }
    }

    /// How long a charge of `cost` units made at `now` would wait (nothing is charged).
    pub fn wait(&self, now: Duration, cost: u64) -> Duration {
        let from = self.tat.map_or(now, |t| t.max(now));
        let done = from.saturating_add(drain_time(cost, self.rate));
        done.saturating_sub(now).saturating_sub(self.burst)
    }

    /// Charges `cost` units at `now`; returns how long the charge must wait.
    pub fn charge(&mut self, now: Duration, cost: u64) -> Duration {
        let wait = self.wait(now, cost);
        let from = self.tat.map_or(now, |t| t.max(now));
        self.tat = Some(from.saturating_add(drain_time(cost, self.rate)));
        wait
    }

    /// Charges `cost` units at `now` only if that needs no wait: false (and nothing
    /// charged) when the burst is spent.
    pub fn spend(&mut self, now: Duration, cost: u64) -> bool {
        if !self.wait(now, cost).is_zero() {
            return false;
        }
        self.charge(now, cost);
        true
    }

    /// Whether everything charged has drained by `now` (the pace can be forgotten: a new
    /// one behaves the same).
    pub fn idle(&self, now: Duration) -> bool {
        self.tat.is_none_or(|t| t <= now)
    }
}

/// Paces kept per address, at most [`ByAddress::MAX`] of them once the idle ones are
/// forgotten: what the relay's HTTP and the replay server charge each client's requests and
/// replies to (`http.md` §1.1, §8.15).
#[derive(Debug, Default)]
pub struct ByAddress {
    paces: HashMap<IpAddr, Pace>,
}

impl ByAddress {
    /// Addresses kept before the idle ones are forgotten.
    pub const MAX: usize = 4096;

    /// The pace of `ip`, if it has one.
    pub fn get(&self, ip: IpAddr) -> Option<Pace> {
        self.paces.get(&ip).copied()
    }

    /// The pace of `ip`, `fresh` if it has none; a new address first makes room by
    /// forgetting the idle paces at `now` once [`MAX`](Self::MAX) are kept.
    pub fn entry(&mut self, ip: IpAddr, now: Duration, fresh: Pace) -> &mut Pace {
        if self.paces.len() >= Self::MAX && !self.paces.contains_key(&ip) {
            self.paces.retain(|_, p| !p.idle(now));
        }
        self.paces.entry(ip).or_insert(fresh)
    }
}

/// How long `units` take at `rate` a second (at most about 584 years).
fn drain_time(units: u64, rate: u64) -> Duration {
    let nanos = u128::from(units) * 1_000_000_000 / u128::from(rate.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_pace_lets_its_burst_through_then_waits_at_its_rate() {
        let t0 = ms(5_000);
        // 1,000 units a second, 500 at once.
        let mut p = Pace::new(1000, 500);
        assert!(p.idle(t0));
        assert_eq!(p.charge(t0, 300), Duration::ZERO);
        assert_eq!(p.charge(t0, 200), Duration::ZERO);
        // Past the burst: the next 100 wait until 100 have drained.
        assert_eq!(p.wait(t0, 100), ms(100));
        assert_eq!(p.charge(t0, 100), ms(100));
        assert!(!p.idle(t0 + ms(599)));
        assert!(p.idle(t0 + ms(600)));
        // Later, time has drained it: 250 ms later 250 are left, so 250 more go at once
        // and one more waits 1 ms.
        let t1 = t0 + ms(350);
        assert_eq!(p.charge(t1, 250), Duration::ZERO);
        assert_eq!(p.wait(t1, 1), ms(1));
        // Long idle: back to a full burst, not more.
        let t2 = t0 + ms(60_000);
        assert_eq!(p.charge(t2, 500), Duration::ZERO);
        assert_eq!(p.wait(t2, 10), ms(10));
    }

    #[test]
    fn a_spent_burst_refuses_until_the_rate_refills_it() {
        // 1 a second, 2 at once: the relay's allowance of messages.
        let mut p = Pace::new(1, 2);
        assert!(p.spend(ms(0), 1) && p.spend(ms(0), 1));
        assert!(!p.spend(ms(0), 1));
        assert!(
            !p.spend(ms(999), 1),
            "refused spends charge nothing, nor does 999 ms refill one"
        );
        assert!(p.spend(ms(1_000), 1));
        assert!(!p.spend(ms(1_000), 1));
        // Idle for long: two again, not more.
        assert!(p.spend(ms(100_000), 1) && p.spend(ms(100_000), 1));
        assert!(!p.spend(ms(100_000), 1));
    }

    #[test]
    fn a_pace_never_overflows() {
        let t0 = ms(1);
        let mut p = Pace::new(0, u64::MAX);
        assert_eq!(p.charge(t0, 1), Duration::ZERO);
        let q = Pace::new(1, 0);
        assert!(q.wait(t0, u64::MAX) >= Duration::from_secs(365 * 86_400));
        let mut r = Pace::new(1, 0);
        r.charge(Duration::MAX, u64::MAX);
        assert!(!r.idle(Duration::MAX - ms(1)));
        assert!(r.wait(Duration::MAX, 1) <= Duration::MAX);
    }

    #[test]
    fn by_address_forgets_idle_paces_only_when_full() {
        let mut paces = ByAddress::default();
        let ip = |n: u32| IpAddr::from(std::net::Ipv4Addr::from(n));
        // One busy address (a charge that drains for 10 s), the rest idle by 1 s.
        paces.entry(ip(0), ms(0), Pace::new(1, 0)).charge(ms(0), 10);
        for n in 1..ByAddress::MAX as u32 {
            paces
                .entry(ip(n), ms(0), Pace::new(1000, 0))
                .charge(ms(0), 1);
        }
        assert!(
            paces.get(ip(1)).is_some(),
            "nothing forgotten below the bound"
        );
        paces.entry(ip(1), ms(1000), Pace::new(1, 0));
        assert!(paces.get(ip(2)).is_some(), "a known address makes no room");
        paces.entry(ip(u32::MAX), ms(1000), Pace::new(1, 0));
        assert!(
            paces.get(ip(2)).is_none(),
            "idle paces forgotten for a new address"
        );
        assert!(paces.get(ip(0)).is_some(), "a busy pace is kept");
    }
}
