//! Message IDs for upstream queries, from the operating system's
//! cryptographic random source (`getrandom`), as CoreDNS draws them from
//! `crypto/rand`: an off-path forger cannot learn the next IDs from the
//! ones it has seen, as it could from a fast seeded generator. The bytes
//! are fetched a buffer per thread at a time, so a query costs no system
//! call.

use std::cell::RefCell;

/// Random bytes fetched per system call: IDs for this many / 2 queries.
const BUF: usize = 512;

thread_local! {
    static POOL: RefCell<([u8; BUF], usize)> = const { RefCell::new(([0; BUF], BUF)) };
}

/// A random message ID.
pub(crate) fn id() -> u16 {
    POOL.with(|p| {
        let (buf, pos) = &mut *p.borrow_mut();
        if *pos + 2 > BUF {
            if getrandom::fill(buf).is_err() {
                // No OS randomness (a sandbox refusing the call): still
                // random, only not unpredictable.
                return fastrand::u16(..);
            }
            *pos = 0;
        }
        let id = u16::from_be_bytes([buf[*pos], buf[*pos + 1]]);
        *pos += 2;
        id
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_vary_across_refills() {
        let ids: std::collections::HashSet<u16> = (0..2000).map(|_| super::id()).collect();
        // 2000 draws from 65536 repeat about 30 values by chance.
        assert!(ids.len() > 1900, "{}", ids.len());
    }
}
