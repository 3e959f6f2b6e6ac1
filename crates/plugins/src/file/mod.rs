#![doc = include_str!("README.md")]

mod zone;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use clusterdns_contract::transfer::{TransferError, Transferer};
use clusterdns_contract::{
    BlockChain, BoxFuture, ChainTail, Flow, Plugin, PluginDef, PluginError, Request,
    ResponseWriter, SetupCtx,
};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Message, Name, Rcode, Record, RecordData, Rtype, Section};

use crate::pkg::upstream;

use clusterdns_wire::zonefile::Reader;
use zone::{Outcome, Zone, ZoneError};

/// Registration of *file*.
pub const DEF: PluginDef = PluginDef {
    name: "file",
    setup,
};

/// How often the file is checked for a new SOA serial by default.
pub const DEFAULT_RELOAD: Duration = Duration::from_secs(60);

/// One zone the plugin serves, and where its data comes from.
#[derive(Debug)]
struct Slot {
    origin: Name,
    path: PathBuf,
    /// The file's name as written (joined with nothing), for messages.
    shown: String,
    reload: Duration,
    by_mtime: bool,
    /// `None` until the file was read (it may be missing at start).
    data: ArcSwapOption<Zone>,
    mtime: parking_lot::Mutex<Option<SystemTime>>,
}

impl Slot {
    /// Reads the file for this slot's origin; the error as CoreDNS words it.
    fn read(&self) -> Result<Zone, String> {
        read_zone(&self.path, &self.shown, &self.origin)
    }

    /// One reload check (CoreDNS's reload ticker body).
    fn reload_once(&self) {
        let current = self.data.load_full();
        if self.by_mtime {
            let m = match std::fs::metadata(&self.path).and_then(|m| m.modified()) {
                Ok(m) => m,
                Err(e) => {
                    clusterdns_contract::error!(
                        "file",
                        "Failed to stat zone {:?} in {:?}: {}",
                        self.origin.to_string(),
                        self.shown,
                        e
                    );
                    return;
                }
            };
            if self.mtime.lock().is_some_and(|seen| m <= seen) {
                return;
            }
            *self.mtime.lock() = Some(m);
        }
        if let Err(e) = std::fs::metadata(&self.path) {
            clusterdns_contract::error!(
                "file",
                "Failed to open zone {:?} in {:?}: open {}: {}",
                self.origin.to_string(),
                self.shown,
                self.shown,
                e
            );
            return;
        }
        let zone = match self.read() {
            Ok(z) => z,
            Err(e) => {
                clusterdns_contract::error!(
                    "file",
                    "Parsing zone {:?}: {}",
                    self.origin.to_string(),
                    e
                );
                return;
            }
        };
        // By serial, a file whose SOA serial did not change is not taken.
        if !self.by_mtime
            && current
                .as_ref()
                .is_some_and(|c| c.serial() == zone.serial())
        {
            return;
        }
        let serial = zone.serial();
        self.data.store(Some(Arc::new(zone)));
        clusterdns_contract::info!(
            "file",
            "Successfully reloaded zone {:?} in {:?} with {} SOA serial",
            self.origin.to_string(),
            self.shown,
            serial
        );
    }
}

/// Reads and builds the zone of `origin` from `path`.
fn read_zone(path: &Path, shown: &str, origin: &Name) -> Result<Zone, String> {
    let mut records: Vec<Record> = Reader::read(path, shown, origin).map_err(|e| {
        format!("failed to parse file {shown:?} for origin {origin} with error {e}")
    })?;
    records.iter_mut().for_each(lowercase_targets);
    Zone::new(origin, records).map_err(|e| match e {
        ZoneError::NoSoa => format!("file {shown:?} has no SOA record for origin {origin}"),
    })
}

/// The names CoreDNS's zone lowercases as it inserts a record (NS, CNAME
/// and MX targets, the SOA's names); the others keep the file's case.
fn lowercase_targets(r: &mut Record) {
    match &mut r.data {
        RecordData::Ns(n) | RecordData::Cname(n) => *n = n.to_lowercase(),
        RecordData::Mx { exchange, .. } => *exchange = exchange.to_lowercase(),
        RecordData::Soa { mname, rname, .. } => {
            *mname = mname.to_lowercase();
            *rname = rname.to_lowercase();
        }
        _ => {}
    }
}

/// The *file* handler.
#[derive(Debug)]
pub struct File {
    slots: Vec<Arc<Slot>>,
    /// `None`: no fallthrough; else the zones that fall through.
    fall: Option<Vec<Name>>,
    /// The plugins behind this one: with none, names outside the zones
    /// are REFUSED, as CoreDNS does without a next plugin.
    tail: ChainTail,
    /// The block's whole chain, for CNAME targets outside the zone.
    whole: BlockChain,
}

/// What the synchronous pass leaves for the asynchronous one: the CNAME
/// target to resolve.
struct Pending {
    target: Name,
}

/// Upstream lookups nested in one another (a CNAME out of one zone into
/// another that points back), as CoreDNS's loop counter bounds them.
const MAX_DEPTH: u8 = 8;

tokio::task_local! {
    /// How deep in upstream lookups this task is.
    static DEPTH: u8;
}

/// The rcode and answer records of an upstream reply.
fn read_reply(msg: &[u8]) -> (Option<Rcode>, Vec<Record>) {
    let Ok(m) = Message::parse(msg) else {
        return (None, Vec::new());
    };
    let answers = m
        .section(Section::Answer)
        .filter_map(|r| r.to_owned_record(&m).ok())
        .collect();
    (Some(m.rcode()), answers)
}

impl File {
    /// The longest of the zones `name` is in.
    fn slot(&self, name: &Name) -> Option<&Slot> {
        self.slots
            .iter()
            .filter(|s| name.ends_with(&s.origin))
            .max_by_key(|s| s.origin.len())
            .map(|s| &**s)
    }

    /// Writes the reply for `plan` (and `more`, an upstream's answers),
    /// or passes the query on when it falls through.
    fn write_answer(
        &self,
        req: &Request<'_>,
        w: &mut ResponseWriter,
        zone: &Zone,
        plan: &zone::Plan<'_>,
        more: &[Record],
    ) -> Flow {
        let empty = plan.no_answer() && more.is_empty();
        if empty
            && matches!(plan.outcome, Outcome::NameError | Outcome::Success)
            && self.falls_through(req.qname_lower())
        {
            return Flow::Next;
        }
        let mut b = w.reply(req);
        b.set_aa(true);
        match plan.outcome {
            Outcome::Success | Outcome::NoData => {}
            Outcome::NameError => b.set_rcode(Rcode::NXDOMAIN),
            // A referral is not authoritative; a CNAME into one keeps AA.
            Outcome::Delegation => b.set_aa(!empty),
            Outcome::ServerFailure => {
                if empty {
                    w.write_error(req, Rcode::SERVFAIL);
                    return Flow::Answered;
                }
                b.set_rcode(Rcode::SERVFAIL);
            }
        }
        plan.write(zone, &mut b, more);
        b.finish();
        Flow::Answered
    }

    fn falls_through(&self, qname: &Name) -> bool {
        self.fall
            .as_ref()
            .is_some_and(|z| z.iter().any(|z| qname.ends_with(z)))
    }
}

impl Plugin for File {
    fn name(&self) -> &'static str {
        "file"
    }

    fn query(&self, req: &Request<'_>, w: &mut ResponseWriter) -> Flow {
        let qname = req.qname_lower();
        let Some(slot) = self.slot(qname) else {
            if self.tail.get().is_none_or(|c| c.plugins().is_empty()) {
                return Flow::Fail(PluginError::Refused { plugin: "file" });
            }
            return Flow::Next;
        };
        let guard = slot.data.load();
        let Some(zone) = guard.as_ref() else {
            w.write_error(req, Rcode::SERVFAIL);
            return Flow::Answered;
        };
        let qtype = req.qtype();
        if qtype == Rtype::AXFR || qtype == Rtype::IXFR {
            // Without *transfer* in front, transfers are refused.
            w.write_error(req, Rcode::REFUSED);
            return Flow::Answered;
        }
        let plan = zone.lookup(qname, qtype);
        // A CNAME leaving the zone: the block's chain resolves the target
        // on the asynchronous path.
        if let Some(target) = plan.upstream
            && self.whole.get().is_some()
        {
            return w.defer_with(Box::new(Pending { target }));
        }
        self.write_answer(req, w, zone, &plan, &[])
    }

    fn query_async<'a>(
        &'a self,
        req: &'a Request<'a>,
        w: &'a mut ResponseWriter,
    ) -> BoxFuture<'a, Flow> {
        Box::pin(async move {
            let p = match clusterdns_contract::note_or_query::<Pending>(self, req, w) {
                Ok(p) => p,
                Err(flow) => return flow,
            };
            let depth = DEPTH.try_with(|d| *d).unwrap_or(0);
            let reply = match self.whole.get() {
                Some(chain) if depth < MAX_DEPTH => {
                    let ask = upstream::lookup(&chain, req, &p.target, req.qtype());
                    DEPTH.scope(depth + 1, ask).await
                }
                _ => None,
            };
            let (rcode, more) = reply.as_deref().map_or((None, Vec::new()), read_reply);
            // The zone as it is now (a reload may have come in between).
            let qname = req.qname_lower();
            let Some(slot) = self.slot(qname) else {
                return Flow::Fail(PluginError::Refused { plugin: "file" });
            };
            let guard = slot.data.load();
            let Some(zone) = guard.as_ref() else {
                w.write_error(req, Rcode::SERVFAIL);
                return Flow::Answered;
            };
            let mut plan = zone.lookup(qname, req.qtype());
            plan.resolved(rcode, !more.is_empty());
            self.write_answer(req, w, zone, &plan, &more)
        })
    }

    fn transferer(&self) -> Option<&dyn Transferer> {
        Some(self)
    }
}

impl Transferer for File {
    fn transfer(
        &self,
        zone: &Name,
        serial: u32,
        out: &mut dyn FnMut(&Record),
    ) -> Result<(), TransferError> {
        let zone = zone.to_lowercase();
        let Some(slot) = self.slot(&zone).filter(|s| s.origin == zone) else {
            return Err(TransferError::NotAuthoritative);
        };
        let Some(z) = slot.data.load_full() else {
            return Err(TransferError::Failed("no SOA".into()));
        };
        if serial != 0 && z.serial() == serial {
            out(&z.soa);
            return Ok(());
        }
        z.transfer_records(out);
        Ok(())
    }
}

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let block_zones = ctx.zones();
    let mut slots: Vec<Arc<Slot>> = Vec::new();
    let mut fall: Option<Vec<Name>> = None;
    let mut reload = DEFAULT_RELOAD;
    let mut open_err: Option<(ConfigError, String)> = None;
    // As in CoreDNS, both carry over to the `file` lines that follow.
    let mut by_mtime = false;
    for d in dirs {
        let Some(first) = d.args.first() else {
            return Err(d.arg_err());
        };
        // Under *root*, CoreDNS reads and names the joined path.
        let shown = clusterdns_contract::parse::rooted(ctx.root.as_deref(), &first.text);
        let path = clusterdns_contract::parse::config_path(ctx.config_dir, &shown);
        let rest: Vec<&str> = d.args[1..].iter().map(|t| t.text.as_str()).collect();
        let names = clusterdns_contract::parse::origins_or_block(&rest, &block_zones);
        let readable = match std::fs::File::open(&path) {
            Ok(_) => true,
            Err(e) => {
                let text = match e.kind() {
                    std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                    _ => e.to_string(),
                };
                let msg = format!("open {shown}: {text}");
                open_err = Some((d.err(msg.clone()), msg));
                false
            }
        };
        let mut these = Vec::new();
        for origin in names {
            let data = if readable {
                let z = read_zone(&path, &shown, &origin).map_err(|m| d.err(m))?;
                Some(Arc::new(z))
            } else {
                None
            };
            these.push(Slot {
                origin,
                path: path.clone(),
                shown: shown.clone(),
                reload: Duration::ZERO,
                by_mtime: false,
                data: ArcSwapOption::new(data),
                mtime: parking_lot::Mutex::new(
                    std::fs::metadata(&path).and_then(|m| m.modified()).ok(),
                ),
            });
        }
        for p in &d.block {
            let args: Vec<&str> = p.arg_texts().collect();
            match p.name.text.as_str() {
                "fallthrough" => {
                    fall = Some(clusterdns_contract::parse::fall_zones(&args));
                }
                "reload" => {
                    let Some(a) = args.first() else {
                        return Err(p.err("reload duration value is expected"));
                    };
                    let v = clusterdns_contract::parse::signed_duration(p, a)?;
                    reload = Duration::from_nanos(u64::try_from(v.nanos()).map_err(|_| {
                        p.err(format!("invalid negative duration for reload '{a}'"))
                    })?);
                }
                "reload_by_mtime" => by_mtime = true,
                // Accepted and ignored, as CoreDNS does ("remove soon").
                "upstream" => {}
                other => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
        for mut s in these {
            s.reload = reload;
            s.by_mtime = by_mtime;
            let s = Arc::new(s);
            match slots.iter_mut().find(|x| x.origin == s.origin) {
                Some(x) => *x = s,
                None => slots.push(s),
            }
        }
    }
    if let Some((err, msg)) = open_err {
        if reload.is_zero() {
            return Err(err);
        }
        clusterdns_contract::warning!(
            "file",
            "Failed to open {:?}: trying again in {}",
            msg,
            clusterdns_contract::duration::format_go(reload)
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watched: Vec<Arc<Slot>> = slots
        .iter()
        .filter(|s| !s.reload.is_zero())
        .cloned()
        .collect();
    if !watched.is_empty() {
        ctx.shared
            .on_startup
            .push(Box::new(move || start(watched, stop_rx)));
        ctx.shared.on_shutdown.push(Box::new(move || {
            let _ = stop_tx.send(true);
            Ok(())
        }));
    }
    let tail = ChainTail::default();
    let whole = BlockChain::default();
    ctx.bind_chain(&whole);
    ctx.add_plugin(Arc::new(File {
        slots,
        fall,
        tail: tail.clone(),
        whole,
    }));
    ctx.bind_tail(&tail);
    Ok(())
}

/// The start-up hook: one reload loop per zone that has an interval.
fn start(slots: Vec<Arc<Slot>>, stop: tokio::sync::watch::Receiver<bool>) -> Result<(), String> {
    for slot in slots {
        crate::pkg::every::every(
            "file",
            slot.reload,
            slot.clone(),
            Slot::reload_once,
            stop.clone(),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
