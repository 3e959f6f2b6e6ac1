//! The cache's settings and CoreDNS's defaults for them (setup.rs reads
//! them from the Corefile).

use clusterdns_wire::Name;

/// Last-known-good defaults (RFC 8767 §5): the longest an entry may be
/// served past its TTL, one day (the RFC suggests one to three).
pub(crate) const LKG_MAX_AGE_S: u32 = 86_400;
/// The client-response timer: RFC 8767's 1.8 s, before the usual 2 s
/// client timeout.
pub(crate) const LKG_WAIT_MS: u64 = 1_800;

/// The cache's settings, CoreDNS's defaults in [`Config::default`].
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub zones: Vec<Name>,
    pub pcap: usize,
    pub ncap: usize,
    pub pttl: u32,
    pub minpttl: u32,
    pub nttl: u32,
    pub minnttl: u32,
    pub failttl: u32,
    pub prefetch: u32,
    pub prefetch_window_ms: u64,
    pub percentage: u32,
    pub stale_s: u32,
    pub stale_ttl: u32,
    pub verify: bool,
    pub keepttl: bool,
    /// Last-known-good: how long past its TTL an entry may still answer
    /// when the chain behind fails (0: off). Only without `serve_stale`.
    pub lkg_s: u32,
    /// Last-known-good: the client-response timer, how long a query for
    /// an expired entry waits for the chain before the stale answer goes.
    pub lkg_wait_ms: u64,
    pub pexcept: Vec<Name>,
    pub nexcept: Vec<Name>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            zones: vec![Name::root()],
            pcap: 10_000,
            ncap: 10_000,
            pttl: 3600,
            minpttl: 5,
            nttl: 1800,
            minnttl: 5,
            failttl: 5,
            prefetch: 0,
            prefetch_window_ms: 60_000,
            percentage: 10,
            stale_s: 0,
            stale_ttl: 0,
            verify: false,
            keepttl: false,
            lkg_s: LKG_MAX_AGE_S,
            lkg_wait_ms: LKG_WAIT_MS,
            pexcept: Vec::new(),
            nexcept: Vec::new(),
        }
    }
}
