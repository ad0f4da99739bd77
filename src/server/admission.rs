//! What the replay server lets one client, and all of them, hold at once (`http.md` §8.15):
//! expensive work (rebuilds, exports) in slots, spooled request bodies in bytes of disk,
//! each capped per address and in all. A share is taken without waiting or refused at once (the client is told to come back), so that no request waits on another's
//! share: what deadlocked a budget shared a KiB at a time cannot happen. Shares are given
//! back when dropped, however the request ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// A capped amount (slots, bytes), per address and in all.
#[derive(Debug)]
pub struct Shares {
    what: &'static str,
    total: u64,
    per_address: u64,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    total: u64,
    by_address: HashMap<IpAddr, u64>,
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
        })
    }

    /// Takes `n` for `ip` (no address: only the server's cap counts), or says which cap is
    /// full. Nothing waits.
    pub fn take(self: &Arc<Self>, ip: Option<IpAddr>, n: u64) -> Result<Share, Full> {
        let mut share = Share {
            shares: self.clone(),
            ip,
            n: 0,
        };
        share.grow(n)?;
        Ok(share)
    }

    /// What is held now, in all and by `ip`.
    pub fn held(&self, ip: Option<IpAddr>) -> (u64, u64) {
        let h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let own = ip.and_then(|ip| h.by_address.get(&ip).copied());
        (h.total, own.unwrap_or(0))
    }

    fn add(&self, ip: Option<IpAddr>, n: u64) -> Result<(), Full> {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
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

    fn remove(&self, ip: Option<IpAddr>, n: u64) {
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
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
}

impl Share {
    /// Takes `more` on top of what is held, or says which cap is full (what is held stays).
    pub fn grow(&mut self, more: u64) -> Result<(), Full> {
        self.shares.add(self.ip, more)?;
        self.n += more;
        Ok(())
    }

    /// What is held.
    pub fn amount(&self) -> u64 {
        self.n
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.shares.remove(self.ip, self.n);
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
            rebuilds: 48,
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
    fn zero_is_no_cap() {
        let s = Shares::new("bytes", 0, 0);
        let ip: IpAddr = "::1".parse().unwrap();
        let big = s.take(Some(ip), u64::MAX / 2).unwrap();
        assert_eq!(big.amount(), u64::MAX / 2);
    }
}
