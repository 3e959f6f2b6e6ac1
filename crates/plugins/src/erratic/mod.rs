#![doc = include_str!("README.md")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clusterdns_contract::{
    AutoPather, BoxFuture, Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx,
    note_or_query,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Name, RData, Rcode, Rtype, Section};

const NAME: &str = "erratic";

/// Registration of *erratic*.
pub const DEF: PluginDef = PluginDef { name: NAME, setup };

/// The address of every A answer (RFC 5737's documentation range).
pub const A: std::net::Ipv4Addr = std::net::Ipv4Addr::new(192, 0, 2, 53);
/// The address of every AAAA answer (RFC 3849's documentation prefix).
pub const AAAA: std::net::Ipv6Addr = std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x53);
/// How many A records `large` puts in an answer.
const LARGE: usize = 30;

/// What the Corefile asked for. An amount of 0 turns that behaviour off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Config {
    /// Drop the queries whose number is a multiple of this.
    drop: u64,
    /// Delay the queries whose number is a multiple of this...
    delay: u64,
    /// ...by this long.
    duration: Duration,
    /// Truncate the replies whose number has no bit in common with this.
    truncate: u64,
    /// Answer A queries with the same record thirty times.
    large: bool,
}

/// The amount of a `drop`, `delay` or `truncate` line: a 32-bit integer
/// (CoreDNS's `strconv.ParseInt(s, 10, 32)`), not negative.
fn amount(p: &Directive, s: &str) -> Result<u64, ConfigError> {
    let n = clusterdns_contract::parse::parse_int32(p, s)?;
    u64::try_from(n).map_err(|_| p.err(format!("illegal amount value given {s:?}")))
}

/// Reads every `erratic` directive of the block into one configuration,
/// as CoreDNS does: later lines overwrite earlier ones.
fn parse(dirs: &[&Directive]) -> Result<Config, ConfigError> {
    let mut c = Config {
        drop: 2,
        delay: 0,
        duration: Duration::ZERO,
        truncate: 0,
        large: false,
    };
    // Whether a `drop` line gave an amount: without one, a `delay` or
    // `truncate` turns the default dropping off.
    let mut drop_given = false;
    for d in dirs {
        // CoreDNS skips arguments of the directive without a word; they
        // would mean nothing, so they are refused here.
        clusterdns_contract::parse::no_args(d)?;
        for p in &d.block {
            let args: Vec<&str> = p.arg_texts().collect();
            if !p.block.is_empty() {
                return Err(p.err(format!("unexpected block after '{}'", p.name.text)));
            }
            match (p.name.text.as_str(), args.as_slice()) {
                ("drop", []) => {}
                ("drop", [n]) => {
                    c.drop = amount(p, n)?;
                    drop_given = true;
                }
                ("delay", [..]) if args.len() <= 2 => {
                    c.delay = 2;
                    c.duration = Duration::from_millis(100);
                    if let Some(n) = args.first() {
                        c.delay = amount(p, n)?;
                    }
                    if let Some(t) = args.get(1) {
                        let t = clusterdns_contract::parse::signed_duration(p, t)?;
                        // Go sleeps not at all for a negative duration.
                        c.duration = if t.negative {
                            Duration::ZERO
                        } else {
                            t.magnitude
                        };
                    }
                }
                ("truncate", []) => c.truncate = 2,
                ("truncate", [n]) => c.truncate = amount(p, n)?,
                // CoreDNS reads a word after `large` as the next property.
                ("large", [first, ..]) => {
                    return Err(p.err(format!("unknown property '{first}'")));
                }
                ("large", []) => c.large = true,
                ("drop" | "delay" | "truncate", _) => return Err(p.arg_err()),
                (other, _) => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
    }
    if (c.delay > 0 || c.truncate > 0) && !drop_given {
        c.drop = 0;
    }
    Ok(c)
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let config = parse(dirs)?;
    let queries = Arc::new(AtomicU64::new(0));
    let seen = queries.clone();
    // CoreDNS's erratic reports ready while it has seen 3 or 4 queries,
    // so that tests can watch readiness come and go.
    ctx.add_ready(
        NAME,
        Arc::new(move || (3..5).contains(&seen.load(Ordering::Relaxed))),
    );
    let search = ["a.example.org.", "b.example.org."]
        .into_iter()
        .filter_map(|s| Name::from_ascii(s).ok())
        .chain([Name::root()])
        .collect();
    ctx.add_plugin(Arc::new(Erratic {
        config,
        queries,
        search,
    }));
    Ok(())
}

/// The *erratic* handler.
#[derive(Debug)]
pub struct Erratic {
    config: Config,
    /// Queries seen since setup; the first is number 0.
    queries: Arc<AtomicU64>,
    /// The search path it gives *autopath*.
    search: Vec<Name>,
}

/// What happens to one query, decided by its number.
#[derive(Debug, Clone, Copy)]
struct Fate {
    drop: bool,
    delay: bool,
    truncate: bool,
}

impl Erratic {
    /// Numbers the query and decides its fate. CoreDNS's truncation test
    /// is `n & AMOUNT == 0` (a bitwise and, not a remainder), kept here so
    /// that the same queries are truncated.
    fn fate(&self) -> Fate {
        let n = self.queries.fetch_add(1, Ordering::Relaxed);
        let c = &self.config;
        Fate {
            drop: c.drop > 0 && n.is_multiple_of(c.drop),
            delay: c.delay > 0 && n.is_multiple_of(c.delay),
            truncate: c.truncate > 0 && n & c.truncate == 0,
        }
    }

    /// Writes the reply of a query whose fate is decided (and whose delay,
    /// if any, is over).
    fn answer(&self, req: &Request<'_>, w: &mut ResponseWriter, fate: Fate) -> Flow {
        if fate.drop {
            // Nothing written: the server sends nothing.
            w.clear();
            return Flow::Answered;
        }
        let rdata = match req.qtype() {
            Rtype::A => RData::A(A),
            Rtype::AAAA => RData::Aaaa(AAAA),
            Rtype::AXFR => {
                transfer(req, w, fate.truncate);
                return Flow::Answered;
            }
            _ => {
                // CoreDNS returns SERVFAIL without an error: the server
                // writes it and *errors* logs nothing.
                w.write_error(req, Rcode::SERVFAIL);
                return Flow::Answered;
            }
        };
        let copies = if self.config.large && req.qtype() == Rtype::A {
            LARGE
        } else {
            1
        };
        let mut b = w.reply(req);
        b.set_aa(true);
        b.set_tc(fate.truncate);
        for _ in 0..copies {
            // 30 records of at most 255 + 14 bytes fit a 64K message.
            let _ = b.push(Section::Answer, req.qname(), Class::IN, 0, &rdata);
        }
        b.finish();
        Flow::Answered
    }
}

/// Serial, refresh, retry, expire and minimum of the transfer's SOA.
const SOA_VALUES: [u32; 5] = [2018050825, 7200, 3600, 1209600, 3600];

/// The zone transfer CoreDNS's erratic sends for an AXFR of QNAME, in one
/// message: SOA, NS `b.QNAME`, NS `a.QNAME`, AAAA for `a.` and `b.`, and
/// the closing SOA unless the reply is one to truncate. All TTLs are 0.
/// When the names cannot be formed nothing is sent: for the root, where
/// CoreDNS's would be `a..`, CoreDNS fails to pack the message and sends
/// nothing too; for a name too long for another label it sends a message
/// that does not parse (README, Differences from CoreDNS).
fn transfer(req: &Request<'_>, w: &mut ResponseWriter, truncate: bool) {
    let zone = req.qname();
    // `LABEL.QNAME`, when that is a name.
    let under = |label: &[u8]| {
        (!zone.is_root())
            .then(|| zone.prepend_label(label).ok())
            .flatten()
    };
    let (Some(a), Some(b), Ok(mname), Ok(rname)) = (
        under(b"a"),
        under(b"b"),
        Name::from_ascii("sns.dns.icann.org."),
        Name::from_ascii("noc.dns.icann.org."),
    ) else {
        w.clear();
        return;
    };
    let [serial, refresh, retry, expire, minimum] = SOA_VALUES;
    let soa = RData::Soa {
        mname: &mname,
        rname: &rname,
        serial,
        refresh,
        retry,
        expire,
        minimum,
    };
    let records: [(&Name, RData<'_>); 5] = [
        (zone, soa),
        (zone, RData::Ns(&b)),
        (zone, RData::Ns(&a)),
        (&a, RData::Aaaa(ip6(0x2001, 0xbd8, 0x53))),
        (&b, RData::Aaaa(ip6(0x2001, 0x500, 0x54))),
    ];
    let mut m = w.reply(req);
    m.set_aa(true);
    let closing = (!truncate).then_some((zone, soa));
    for (owner, rdata) in records.iter().chain(closing.iter()) {
        // Under 700 bytes with the longest name: always fits.
        let _ = m.push(Section::Answer, owner, Class::IN, 0, rdata);
    }
    m.finish();
}

/// `FIRST:SECOND::LAST`.
fn ip6(first: u16, second: u16, last: u16) -> std::net::Ipv6Addr {
    std::net::Ipv6Addr::new(first, second, 0, 0, 0, 0, 0, last)
}

impl Plugin for Erratic {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let fate = self.fate();
        if fate.delay && !fate.drop {
            return w.defer_with(Box::new(fate));
        }
        self.answer(req, w, fate)
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let fate = match note_or_query::<Fate>(self, req, w) {
                Ok(fate) => *fate,
                Err(flow) => return flow,
            };
            tokio::time::sleep(self.config.duration).await;
            self.answer(req, w, fate)
        })
    }

    fn auto_pather(&self) -> Option<&dyn AutoPather> {
        Some(self)
    }
}

impl AutoPather for Erratic {
    /// Always `a.example.org.`, `b.example.org.`, then the name as asked:
    /// CoreDNS's fixed search path for testing *autopath*.
    fn auto_path(&self, _req: &Request<'_>, out: &mut Vec<Name>) {
        out.extend_from_slice(&self.search);
    }
}

#[cfg(test)]
mod tests;
