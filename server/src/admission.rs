//! What the replay server lets one client, and all of them, hold at once (`http.md` §8.15):
//! expensive work (rebuilds, exports) in slots, spooled request bodies in bytes of disk,
//! each capped per address and in all. A share is taken whole or not at all, so that no
//! request holds part of one while it waits for the rest: what deadlocked a budget shared a
//! KiB at a time cannot happen. A reply's share may be waited for, a bounded time
//! ([`PATIENCE`]) and holding nothing meanwhile; any other is refused at once (the client
//! is told to come back). Shares are given back when dropped, however the request ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a reply must have waited for its peer (or its address's pace) before its share
/// may be given to a request that finds the server's cap full (`http.md` §8.15).
pub const RECLAIM_AFTER: Duration = Duration::from_millis(500);

/// How long a request may wait for a reply's share when the server's cap is full
/// ([`Shares::wait_reply`]): longer than a reply must wait for its peer before its share
/// may be taken back, so that a request that comes while every share is held by replies
/// that have just started waiting (a burst of downloads nobody reads) still gets one.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How often a waiting request looks for a reply that started waiting for its peer.
const RECHECK: Duration = Duration::from_millis(50);

/// The part of one wait for the peer that a reader's own waits stay under: a piece waiting
/// for the one before it to go (on a fast link, milliseconds; a slow one, tens) is not
/// counted in its address's use ([`Use`]), only what a wait lasts beyond this.
const READER_WAIT_MS: u64 = 100;

/// Milliseconds of one wait for the peer counted in its address's use.
fn unread(waited_ms: u64) -> u64 {
    waited_ms.saturating_sub(READER_WAIT_MS)
}

/// How fast an address's use of shares is forgotten ([`Use`]): halved every this long.
const USE_HALF_LIFE: Duration = Duration::from_secs(10);

/// Uses that differ by less than this (share-milliseconds) count as the same: a reply read
/// at once waits a moment for its peer too.
const USE_STEP: f64 = 250.0;

/// The most addresses whose past use is remembered; beyond it the least is forgotten first
/// (bounded memory whatever the number of addresses).
const USE_REMEMBERED: usize = 4096;

/// A capped amount (slots, bytes), per address and in all.
#[derive(Debug)]
pub struct Shares {
    what: &'static str,
    total: u64,
    per_address: u64,
    held: Mutex<Held>,
    /// When the shares were made: the clock of [`Stall`].
    epoch: Instant,
    /// Told when a share is given back (not when taken back for another request).
    freed: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct Held {
    total: u64,
    by_address: HashMap<IpAddr, u64>,
    /// The shares whose holders say when they wait for their peer, by share number.
    replies: HashMap<u64, Reply>,
    /// The requests waiting for a reply's share ([`Shares::wait_reply`]), by number: their
    /// addresses.
    waiters: std::collections::BTreeMap<u64, Option<IpAddr>>,
    /// How many requests of each address wait.
    waiting: HashMap<IpAddr, u64>,
    /// How long each address's replies waited for it lately ([`Use`]): orders the waiters
    /// whose addresses hold as many shares now.
    used: HashMap<IpAddr, Use>,
    next: u64,
}

/// An address's past use of shares: share-milliseconds its replies held while they waited
/// for it to read (amount times time), decaying with [`USE_HALF_LIFE`]. A client that does
/// not read its replies (each kept until taken back) has a large use; one that reads them
/// as they come, none to speak of, however many requests it makes.
#[derive(Clone, Copy, Debug)]
struct Use {
    amount: f64,
    at: Instant,
}

impl Use {
    fn now(&self, now: Instant) -> f64 {
        let age = now.saturating_duration_since(self.at).as_secs_f64();
        self.amount * 0.5f64.powf(age / USE_HALF_LIFE.as_secs_f64())
    }
}

/// A request's place among the waiters; left when dropped (a share taken, the wait over,
/// or the request gone), telling the others.
struct Waiting {
    shares: Arc<Shares>,
    seq: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut h = self.shares.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(Some(ip)) = h.waiters.remove(&self.seq) {
            if let Some(w) = h.waiting.get_mut(&ip) {
                *w = w.saturating_sub(1);
                if *w == 0 {
                    h.waiting.remove(&ip);
                }
            }
        }
        drop(h);
        self.shares.freed.notify_waiters();
    }
}

#[derive(Debug)]
struct Reply {
    stall: Arc<Stall>,
    ip: Option<IpAddr>,
    n: u64,
}

/// What a reply holding a share says of itself: whether it waits for its peer to take its
/// bytes (not for the server's work), and since when; and whether its share was given to
/// another request, in which case the reply ends.
#[derive(Debug)]
pub struct Stall {
    /// Milliseconds after the shares' epoch, plus one, since the reply waits; 0 when it
    /// works.
    since: AtomicU64,
    /// Milliseconds the reply waited for its peer before `since`.
    stalled: AtomicU64,
    revoked: AtomicBool,
    notify: tokio::sync::Notify,
    epoch: Instant,
}

impl Stall {
    /// The reply starts (`true`) or stops (`false`) waiting for its peer.
    pub fn waiting(&self, yes: bool) {
        let now = self.now();
        let was = if yes {
            self.since.swap(now, Ordering::Relaxed)
        } else {
            self.since.swap(0, Ordering::Relaxed)
        };
        if was != 0 {
            self.stalled
                .fetch_add(unread(now.saturating_sub(was)), Ordering::Relaxed);
        }
    }

    /// Milliseconds after the epoch, plus one (never 0).
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1
    }

    /// Milliseconds the reply has waited for its peer in all, until now.
    fn stalled_ms(&self) -> u64 {
        let since = self.since.load(Ordering::Relaxed);
        let now = if since == 0 {
            0
        } else {
            unread(self.now().saturating_sub(since))
        };
        self.stalled.load(Ordering::Relaxed).saturating_add(now)
    }

    /// Whether the share was given to another request.
    pub fn is_revoked(&self) -> bool {
        self.revoked.load(Ordering::Acquire)
    }

    /// Resolves once the share was given to another request.
    pub async fn revoked(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_revoked() {
                return;
            }
            notified.await;
        }
    }
}

/// Why a share was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Full {
    /// The server's cap is reached.
    #[error("the server's {what} are all taken ({cap} in all): try again shortly")]
    Server {
        /// What is counted.
        what: &'static str,
        /// The cap.
        cap: u64,
    },
    /// The address's cap is reached.
    #[error("this address holds its {cap} {what} already: try again when one ends")]
    Address {
        /// What is counted.
        what: &'static str,
        /// The cap.
        cap: u64,
    },
}

impl Shares {
    /// At most `total` in all and `per_address` for one address (0: no cap).
    pub fn new(what: &'static str, total: u64, per_address: u64) -> Arc<Shares> {
        Arc::new(Shares {
            what,
            total,
            per_address,
            held: Mutex::default(),
            epoch: Instant::now(),
            freed: tokio::sync::Notify::new(),
        })
    }

    /// Takes `n` for `ip` (no address: only the server's cap counts), or says which cap is
    /// full. Nothing waits.
    pub fn take(self: &Arc<Self>, ip: Option<IpAddr>, n: u64) -> Result<Share, Full> {
        let mut share = Share {
            shares: self.clone(),
            ip,
            n: 0,
            reply: None,
        };
        share.grow(n)?;
        Ok(share)
    }

    /// Takes `n` for a reply, as [`Shares::take`]; the reply tells its [`Stall`] when it
    /// waits for its peer. When the server's cap is full, the share of the reply that has
    /// waited longest, [`RECLAIM_AFTER`] or more, is given to this request, and that reply
    /// ends: a client that does not read its replies cannot keep the server's shares from
    /// those that do, from however many addresses it comes.
    pub fn take_reply(self: &Arc<Self>, ip: Option<IpAddr>, n: u64) -> Result<Share, Full> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        self.take_reply_held(&mut h, ip, n)
    }

    fn take_reply_held(
        self: &Arc<Self>,
        h: &mut Held,
        ip: Option<IpAddr>,
        n: u64,
    ) -> Result<Share, Full> {
        if let Err(e) = self.add_held(h, ip, n) {
            if !matches!(e, Full::Server { .. }) || !self.reclaim(h, n) {
                return Err(e);
            }
            self.add_held(h, ip, n)?;
        }
        let stall = Arc::new(Stall {
            since: AtomicU64::new(0),
            stalled: AtomicU64::new(0),
            revoked: AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
            epoch: self.epoch,
        });
        let id = h.next;
        h.next += 1;
        h.replies.insert(
            id,
            Reply {
                stall: stall.clone(),
                ip,
                n,
            },
        );
        Ok(Share {
            shares: self.clone(),
            ip,
            n,
            reply: Some((id, stall)),
        })
    }

    /// [`Shares::take_reply`], waiting up to `patience` while the server's cap is full: for
    /// a share given back, or for a reply to have waited [`RECLAIM_AFTER`] for its peer.
    /// Among the requests waiting, the one whose address's replies waited least for it to
    /// read lately goes first, then the one whose address holds fewest shares, then the one
    /// whose address has fewest requests waiting, then the one that came first (`http.md`
    /// §8.15): addresses whose replies sit unread until taken back go after those whose
    /// replies are read, and a share that comes free goes to the address that has least, so
    /// that many addresses' requests cannot crowd out one that holds none.
    /// The address's own cap refuses at once (its own replies are what it waits for). The
    /// wait holds nothing; it is bounded by `patience` and, in number, by the connections
    /// the server accepts.
    pub async fn wait_reply(
        self: &Arc<Self>,
        ip: Option<IpAddr>,
        n: u64,
        patience: Duration,
    ) -> Result<Share, Full> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut waiter: Option<Waiting> = None;
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let full = {
                let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
                let first = match &waiter {
                    None => h.waiters.is_empty(),
                    Some(w) => Self::first_waiter(&h) == Some(w.seq),
                };
                let got = if first {
                    self.take_reply_held(&mut h, ip, n)
                } else {
                    Err(Full::Server {
                        what: self.what,
                        cap: self.total,
                    })
                };
                match got {
                    Ok(share) => {
                        drop(h);
                        // The next waiter may find a share too.
                        drop(waiter);
                        return Ok(share);
                    }
                    Err(e @ Full::Address { .. }) => return Err(e),
                    Err(e) => {
                        if waiter.is_none() {
                            let seq = h.next;
                            h.next += 1;
                            h.waiters.insert(seq, ip);
                            if let Some(ip) = ip {
                                *h.waiting.entry(ip).or_default() += 1;
                            }
                            waiter = Some(Waiting {
                                shares: self.clone(),
                                seq,
                            });
                        }
                        e
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(full);
            }
            // The next moment a reply waiting now may be taken back (if it still waits);
            // with none waiting, a look again shortly (a reply that starts waiting tells
            // nobody).
            let next = self
                .next_reclaim(n)
                .map_or(now + RECHECK, tokio::time::Instant::from_std)
                .min(deadline);
            tokio::select! {
                () = &mut freed => {}
                () = tokio::time::sleep_until(next.max(now + Duration::from_millis(5))) => {}
            }
        }
    }

    /// The waiter that goes first: its address's replies waited least for it lately (in
    /// steps of [`USE_STEP`]), then it holds fewest shares, then it has fewest requests
    /// waiting, then it came first.
    fn first_waiter(h: &Held) -> Option<u64> {
        let now = Instant::now();
        h.waiters
            .iter()
            .map(|(&seq, ip)| match ip {
                Some(ip) => {
                    let holds = h.by_address.get(ip).copied().unwrap_or(0);
                    let used = h.used.get(ip).map_or(0.0, |u| u.now(now));
                    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                    let step = (used / USE_STEP) as u64; // saturates; never negative
                    let waiting = h.waiting.get(ip).copied().unwrap_or(0);
                    (step, holds, waiting, seq)
                }
                None => (0, 0, 0, seq),
            })
            .min()
            .map(|(.., seq)| seq)
    }

    /// When the reply that has waited longest for its peer (holding at least `n`) will
    /// have waited [`RECLAIM_AFTER`].
    fn next_reclaim(&self, n: u64) -> Option<Instant> {
        let h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let since = h
            .replies
            .values()
            .filter(|r| r.n >= n)
            .map(|r| r.stall.since.load(Ordering::Relaxed))
            .filter(|&since| since != 0)
            .min()?;
        Some(self.epoch + Duration::from_millis(since - 1) + RECLAIM_AFTER)
    }

    /// Gives back the share of the reply that has waited for its peer longest, if one has
    /// waited [`RECLAIM_AFTER`] and holds at least `n`; that reply is told to end.
    fn reclaim(&self, h: &mut Held, n: u64) -> bool {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let after = u64::try_from(RECLAIM_AFTER.as_millis()).unwrap_or(u64::MAX);
        let victim = h
            .replies
            .iter()
            .filter(|(_, r)| r.n >= n)
            .filter_map(|(&id, r)| {
                let since = r.stall.since.load(Ordering::Relaxed);
                (since != 0 && now.saturating_sub(since) >= after).then_some((since, id))
            })
            .min();
        let Some((_, id)) = victim else {
            return false;
        };
        let Some(r) = h.replies.remove(&id) else {
            return false;
        };
        // Given back now, under the lock: the reply's own drop gives back nothing.
        r.stall.revoked.store(true, Ordering::Release);
        r.stall.notify.notify_waiters();
        Self::remove_held(h, r.ip, r.n);
        Self::record_use(h, r.ip, r.n, r.stall.stalled_ms());
        true
    }

    /// What is held now, in all and by `ip`.
    pub fn held(&self, ip: Option<IpAddr>) -> (u64, u64) {
        let h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let own = ip.and_then(|ip| h.by_address.get(&ip).copied());
        (h.total, own.unwrap_or(0))
    }

    fn add(&self, ip: Option<IpAddr>, n: u64) -> Result<(), Full> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        self.add_held(&mut h, ip, n)
    }

    fn add_held(&self, h: &mut Held, ip: Option<IpAddr>, n: u64) -> Result<(), Full> {
        let over = |cap: u64, now: u64| cap != 0 && now.saturating_add(n) > cap;
        if over(self.total, h.total) {
            return Err(Full::Server {
                what: self.what,
                cap: self.total,
            });
        }
        if let Some(ip) = ip {
            let own = h.by_address.get(&ip).copied().unwrap_or(0);
            if over(self.per_address, own) {
                return Err(Full::Address {
                    what: self.what,
                    cap: self.per_address,
                });
            }
            h.by_address.insert(ip, own + n);
        }
        h.total += n;
        Ok(())
    }

    fn remove(&self, ip: Option<IpAddr>, n: u64, reply: Option<&(u64, Arc<Stall>)>) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((id, stall)) = reply {
            if h.replies.remove(id).is_none() {
                return; // reclaimed: given back already
            }
            Self::record_use(&mut h, ip, n, stall.stalled_ms());
        }
        Self::remove_held(&mut h, ip, n);
        drop(h);
        self.freed.notify_waiters();
    }

    /// Adds `n` held `stalled_ms` while waiting for the peer to the address's use. Past
    /// [`USE_REMEMBERED`] addresses, the least used are forgotten (forgotten, an address
    /// counts as having used nothing: the most it can gain is a place among those that
    /// truly did not).
    fn record_use(h: &mut Held, ip: Option<IpAddr>, n: u64, stalled_ms: u64) {
        let Some(ip) = ip else { return };
        if n == 0 || stalled_ms == 0 {
            return;
        }
        let now = Instant::now();
        #[allow(clippy::cast_precision_loss)] // exact far beyond any cap or lifetime
        let add = stalled_ms as f64 * n as f64;
        if !h.used.contains_key(&ip) && h.used.len() >= USE_REMEMBERED {
            let mut all: Vec<f64> = h.used.values().map(|u| u.now(now)).collect();
            let mid = all.len() / 2;
            let (_, median, _) = all.select_nth_unstable_by(mid, f64::total_cmp);
            let median = *median;
            h.used.retain(|_, u| u.now(now) > median);
        }
        let u = h.used.entry(ip).or_insert(Use {
            amount: 0.0,
            at: now,
        });
        u.amount = u.now(now) + add;
        u.at = now;
    }

    fn remove_held(h: &mut Held, ip: Option<IpAddr>, n: u64) {
        h.total = h.total.saturating_sub(n);
        if let Some(ip) = ip {
            if let Some(own) = h.by_address.get_mut(&ip) {
                *own = own.saturating_sub(n);
                if *own == 0 {
                    h.by_address.remove(&ip);
                }
            }
        }
    }
}

/// A share held; given back when dropped.
#[derive(Debug)]
pub struct Share {
    shares: Arc<Shares>,
    ip: Option<IpAddr>,
    n: u64,
    /// A reply's share ([`Shares::take_reply`]): its number and what it says of itself.
    reply: Option<(u64, Arc<Stall>)>,
}

impl Share {
    /// Takes `more` on top of what is held, or says which cap is full (what is held stays).
    /// A reply's share does not grow.
    pub fn grow(&mut self, more: u64) -> Result<(), Full> {
        if self.reply.is_some() {
            return Err(Full::Server {
                what: self.shares.what,
                cap: self.n,
            });
        }
        self.shares.add(self.ip, more)?;
        self.n += more;
        Ok(())
    }

    /// What a reply's share is told and tells (`None` for other shares).
    pub fn stall(&self) -> Option<Arc<Stall>> {
        self.reply.as_ref().map(|(_, s)| s.clone())
    }

    /// What is held.
    pub fn amount(&self) -> u64 {
        self.n
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.shares.remove(self.ip, self.n, self.reply.as_ref());
    }
}

/// The caps of a replay server (`http.md` §8.15); 0 is no cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// BSOR downloads, parts and event reads being rebuilt at once, in all.
    pub rebuilds: u64,
    /// The same, for one address.
    pub rebuilds_per_address: u64,
    /// JSON exports being written at once, in all.
    pub exports: u64,
    /// The same, for one address.
    pub exports_per_address: u64,
    /// Uploads read, parsed, checked and searched for the same play at once, in all: an
    /// upload's body is spooled first, then waits for one of these (work that ends on its
    /// own, whatever the network does), so that memory holds at most this many bodies.
    pub checks: u64,
    /// Uploads past their checks being stored and indexed at once, in all: each holds its
    /// stream (at most the body's size) while its blob is written and synced and its row
    /// committed, waits that take no core, so more of them overlap than checks do.
    pub stores: u64,
    /// Bytes of request bodies spooled to disk at once, in all.
    pub spool_bytes: u64,
    /// The same, for one address.
    pub spool_bytes_per_address: u64,
}

impl Default for Caps {
    fn default() -> Self {
        Caps {
            rebuilds: 64,
            rebuilds_per_address: 6,
            exports: 4,
            exports_per_address: 1,
            checks: 2,
            stores: 16,
            spool_bytes: 1 << 30,
            spool_bytes_per_address: 96 << 20,
        }
    }
}

impl Caps {
    /// The caps without the per-address ones (a load tool standing in for many clients from
    /// one address).
    pub fn without_address_caps(self) -> Caps {
        Caps {
            rebuilds_per_address: 0,
            exports_per_address: 0,
            spool_bytes_per_address: 0,
            ..self
        }
    }
}

/// The shares of one server.
#[derive(Debug)]
pub struct Admission {
    /// Rebuilds ([`Caps::rebuilds`]).
    pub rebuilds: Arc<Shares>,
    /// Exports ([`Caps::exports`]).
    pub exports: Arc<Shares>,
    /// Checks ([`Caps::checks`]): waited for.
    pub checks: tokio::sync::Semaphore,
    /// Stores ([`Caps::stores`]): waited for, before a check slot.
    pub stores: tokio::sync::Semaphore,
    /// Spooled bytes ([`Caps::spool_bytes`]).
    pub spool: Arc<Shares>,
}

impl Admission {
    /// The shares `caps` allow.
    pub fn new(caps: Caps) -> Admission {
        Admission {
            rebuilds: Shares::new("rebuild slots", caps.rebuilds, caps.rebuilds_per_address),
            exports: Shares::new("export slots", caps.exports, caps.exports_per_address),
            checks: semaphore(caps.checks),
            stores: semaphore(caps.stores),
            spool: Shares::new(
                "bytes of spooled bodies",
                caps.spool_bytes,
                caps.spool_bytes_per_address,
            ),
        }
    }
}

/// A semaphore of `n` permits (at least one).
fn semaphore(n: u64) -> tokio::sync::Semaphore {
    tokio::sync::Semaphore::new(
        usize::try_from(n.max(1))
            .unwrap_or(1)
            .min(tokio::sync::Semaphore::MAX_PERMITS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_capped_per_address_and_in_all_and_given_back() {
        let s = Shares::new("slots", 3, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = s.take(Some(a), 1).unwrap();
        let a2 = s.take(Some(a), 1).unwrap();
        assert!(matches!(
            s.take(Some(a), 1),
            Err(Full::Address { cap: 2, .. })
        ));
        let b1 = s.take(Some(b), 1).unwrap();
        assert!(matches!(
            s.take(Some(b), 1),
            Err(Full::Server { cap: 3, .. })
        ));
        assert!(matches!(s.take(None, 1), Err(Full::Server { .. })));
        drop(a1);
        let mut b2 = s.take(Some(b), 1).unwrap();
        // Growing past a cap keeps what was held.
        assert!(b2.grow(1).is_err());
        assert_eq!(b2.amount(), 1);
        assert_eq!(s.held(Some(b)), (3, 2));
        drop((a2, b1, b2));
        assert_eq!(s.held(Some(a)), (0, 0));
        assert!(s.held.lock().unwrap().by_address.is_empty());
    }

    #[test]
    fn a_reply_waiting_longest_gives_its_share_once() {
        let s = Shares::new("slots", 2, 2);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        let r1 = s.take_reply(Some(a), 1).unwrap();
        let r2 = s.take_reply(Some(b), 1).unwrap();
        let (s1, s2) = (r1.stall().unwrap(), r2.stall().unwrap());
        // Full, and nobody has waited: refused.
        assert!(matches!(s.take_reply(Some(c), 1), Err(Full::Server { .. })));
        s1.waiting(true);
        std::thread::sleep(Duration::from_millis(20));
        s2.waiting(true);
        // Waiting, but not for a second yet.
        assert!(s.take_reply(Some(c), 1).is_err());
        std::thread::sleep(RECLAIM_AFTER + Duration::from_millis(50));
        // Both waited a second: the one that waited longest (r1) gives its share.
        let r3 = s.take_reply(Some(c), 1).unwrap();
        assert!(s1.is_revoked() && !s2.is_revoked());
        assert_eq!(s.held(Some(a)), (2, 0));
        assert_eq!(s.held(Some(c)), (2, 1));
        // The reclaimed reply's drop gives back nothing more; the others theirs.
        drop(r1);
        assert_eq!(s.held(None), (2, 0));
        // A reply that works again is not taken from.
        s2.waiting(false);
        assert!(s.take_reply(Some(a), 1).is_err());
        drop((r2, r3));
        assert_eq!(s.held(None), (0, 0));
        let h = s.held.lock().unwrap();
        assert!(h.by_address.is_empty() && h.replies.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_requests_get_slots_as_they_come_free_fewest_held_first() {
        let s = Shares::new("slots", 2, 0);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let r1 = s.take_reply(Some(a), 1).unwrap();
        let r2 = s.take_reply(Some(a), 1).unwrap();
        // Nothing comes free: refused once the patience is over, holding nothing.
        let t = std::time::Instant::now();
        let refused = s.wait_reply(Some(b), 1, Duration::from_millis(100)).await;
        assert!(matches!(refused, Err(Full::Server { .. })), "{refused:?}");
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(s.held.lock().unwrap().waiters.is_empty());
        // `a` (holding 2) starts waiting before `b` (holding none).
        let wait = |ip| {
            let s = s.clone();
            tokio::spawn(async move { s.wait_reply(Some(ip), 1, Duration::from_secs(5)).await })
        };
        let from_a = wait(a);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let from_b = wait(b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(s.held.lock().unwrap().waiters.len(), 2);
        // The first reply waits for its peer: a second later its slot goes to `b`, whose
        // address holds fewer, though `a` asked first.
        r1.stall().unwrap().waiting(true);
        let t = std::time::Instant::now();
        let got_b = from_b.await.unwrap().unwrap();
        assert!(t.elapsed() < RECLAIM_AFTER + Duration::from_millis(500));
        assert!(r1.stall().unwrap().is_revoked());
        assert!(!from_a.is_finished());
        // A slot given back goes to the one still waiting, at once.
        drop(r2);
        let got_a = tokio::time::timeout(Duration::from_millis(500), from_a)
            .await
            .expect("the freed slot is taken at once")
            .unwrap()
            .unwrap();
        assert_eq!(s.held(Some(a)), (2, 1));
        drop((r1, got_a, got_b));
        assert_eq!(s.held(None), (0, 0));
        assert!(s.held.lock().unwrap().waiters.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_address_whose_replies_waited_least_goes_first() {
        let s = Shares::new("slots", 2, 0);
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        // `a` left a reply unread 500 ms; `b` held one 300 ms, working, and read it as a
        // reader does, its pieces waiting a few tens of milliseconds each.
        let held = s.take_reply(Some(a), 1).unwrap();
        held.stall().unwrap().waiting(true);
        tokio::time::sleep(Duration::from_millis(500)).await;
        drop(held);
        let held = s.take_reply(Some(b), 1).unwrap();
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            held.stall().unwrap().waiting(true);
            tokio::time::sleep(Duration::from_millis(30)).await;
            held.stall().unwrap().waiting(false);
        }
        drop(held);
        {
            let h = s.held.lock().unwrap();
            assert!(
                !h.used.contains_key(&b),
                "a reader's short waits are not counted"
            );
            assert!(
                h.used[&a].now(Instant::now()) >= USE_STEP,
                "an unread reply's wait is"
            );
        }
        // `c` holds the only slot; `a` (holding none) starts waiting before `b`, which
        // holds another share of its own: `b` goes first all the same.
        let held = s.take_reply(Some(c), 1).unwrap();
        let b_holds = s.take(Some(b), 1).unwrap();
        let wait = |ip| {
            let s = s.clone();
            tokio::spawn(async move { s.wait_reply(Some(ip), 1, Duration::from_secs(5)).await })
        };
        let from_a = wait(a);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let from_b = wait(b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(held);
        let got_b = tokio::time::timeout(Duration::from_millis(500), from_b)
            .await
            .expect("the freed slot goes to the address whose replies waited least")
            .unwrap()
            .unwrap();
        assert!(!from_a.is_finished(), "`a` waits on");
        drop(got_b);
        let got_a = tokio::time::timeout(Duration::from_millis(500), from_a)
            .await
            .expect("then to the other")
            .unwrap()
            .unwrap();
        drop((got_a, b_holds));
        assert_eq!(s.held(None), (0, 0));
        assert!(s.held.lock().unwrap().waiting.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_address_with_fewer_requests_waiting_goes_first() {
        let s = Shares::new("slots", 1, 0);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let held = s.take_reply(None, 1).unwrap();
        let wait = |ip| {
            let s = s.clone();
            tokio::spawn(async move { s.wait_reply(Some(ip), 1, Duration::from_secs(5)).await })
        };
        // Three of `a`'s requests wait before `b`'s one; each gives its slot back once it
        // has it (which of them goes first is theirs to race for).
        let from_a: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move {
                    s.wait_reply(Some(a), 1, Duration::from_secs(5))
                        .await
                        .map(drop)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let from_b = wait(b);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(s.held.lock().unwrap().waiting.get(&a), Some(&3));
        drop(held);
        let got_b = tokio::time::timeout(Duration::from_millis(500), from_b)
            .await
            .expect("the freed slot goes to the address with fewer waiting")
            .unwrap()
            .unwrap();
        assert!(from_a.iter().all(|w| !w.is_finished()));
        drop(got_b);
        for w in from_a {
            tokio::time::timeout(Duration::from_secs(2), w)
                .await
                .expect("then each of the others, one at a time")
                .unwrap()
                .unwrap();
        }
        assert!(s.held.lock().unwrap().waiting.is_empty());
    }

    #[test]
    fn past_use_is_remembered_for_a_bounded_number_of_addresses() {
        let s = Shares::new("slots", 0, 0);
        let mut h = s.held.lock().unwrap();
        for i in 0..3 * USE_REMEMBERED as u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            Shares::record_use(&mut h, Some(ip), 1, 1 + u64::from(i % 7));
            assert!(h.used.len() <= USE_REMEMBERED);
        }
        assert!(h.used.len() > USE_REMEMBERED / 4, "{}", h.used.len());
    }

    #[tokio::test]
    async fn a_waiting_request_that_leaves_gives_its_place_up() {
        let s = Shares::new("slots", 1, 0);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let held = s.take_reply(Some(ip), 1).unwrap();
        let waiting = s.wait_reply(Some(ip), 1, Duration::from_secs(5));
        // The client goes while its request waits: its place is given up.
        assert!(tokio::time::timeout(Duration::from_millis(50), waiting)
            .await
            .is_err());
        assert!(s.held.lock().unwrap().waiters.is_empty());
        drop(held);
        assert!(s.wait_reply(Some(ip), 1, Duration::ZERO).await.is_ok());
    }

    #[test]
    fn zero_is_no_cap() {
        let s = Shares::new("bytes", 0, 0);
        let ip: IpAddr = "::1".parse().unwrap();
        let big = s.take(Some(ip), u64::MAX / 2).unwrap();
        assert_eq!(big.amount(), u64::MAX / 2);
    }
}
