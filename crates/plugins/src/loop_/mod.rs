#![doc = include_str!("README.md")]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clusterdns_contract::log::Level;
use clusterdns_contract::{Flow, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Class, Header, MessageBuilder, Name, Rtype};
use parking_lot::Mutex;

/// Registration of *loop*.
pub const DEF: PluginDef = PluginDef {
    name: "loop",
    setup,
};

/// How long the probe keeps trying to reach the server.
const TRY_FOR: Duration = Duration::from_secs(30);
/// Timeout of one probe exchange (miekg/dns `dns.Exchange`).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(2);

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let d = clusterdns_contract::parse::once(dirs)?;
    if !d.args.is_empty() || !d.block.is_empty() {
        return Err(d.arg_err());
    }
    let zone_text = ctx.zones().into_iter().next().unwrap_or_else(|| ".".into());
    let zone = Name::from_ascii(&zone_text).map_err(|e| d.err(e.to_string()))?;
    let port = ctx
        .keys
        .first()
        .and_then(|k| k.port)
        .unwrap_or(ctx.dns_port);
    let host = ctx.bind.first().copied();
    let l = Arc::new(Loop::new(zone, zone_text, host, port).map_err(|e| d.err(e))?);
    ctx.add_plugin(l.clone());
    ctx.shared.on_startup.push(Box::new(move || {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|e| format!("plugin/loop: no runtime: {e}"))?;
        rt.spawn(l.probe());
        Ok(())
    }));
    Ok(())
}

/// The *loop* handler.
#[derive(Debug)]
pub struct Loop {
    zone_text: String,
    qname: Name,
    /// `host:port` as CoreDNS prints it (`:53` without `bind`).
    address: String,
    /// Where the probe is sent.
    target: SocketAddr,
    disabled: AtomicBool,
    /// Distinct (client, ID) pairs that carried the probe; a query the
    /// server runs twice (synchronous, then asynchronous pass) counts once.
    seen: Mutex<Vec<(SocketAddr, u16)>>,
}

impl Loop {
    fn new(zone: Name, zone_text: String, host: Option<IpAddr>, port: u16) -> Result<Self, String> {
        let r1 = fastrand::u64(..1 << 62);
        let r2 = fastrand::u64(..1 << 62);
        let qname = match Name::from_ascii(&format!("{r1}.{r2}.")).and_then(|n| n.concat(&zone)) {
            Ok(n) => n,
            Err(e) => return Err(format!("probe name: {e}")),
        };
        let address = match host {
            None => format!(":{port}"),
            Some(ip) => SocketAddr::new(ip, port).to_string(),
        };
        let target_ip = match host {
            None | Some(IpAddr::V4(Ipv4Addr::UNSPECIFIED)) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(IpAddr::V6(Ipv6Addr::UNSPECIFIED)) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            Some(ip) => ip,
        };
        Ok(Self {
            zone_text,
            qname: qname.to_lowercase(),
            address,
            target: SocketAddr::new(target_ip, port),
            disabled: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
        })
    }

    /// Sends the probe until it gets through (or 30s pass), then turns the
    /// check off two seconds later.
    async fn probe(self: Arc<Self>) {
        let deadline = tokio::time::Instant::now() + TRY_FOR;
        while tokio::time::Instant::now() < deadline {
            if self.disabled.load(Ordering::Relaxed) {
                return;
            }
            match self.exchange().await {
                Ok(()) => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    break;
                }
                Err(_) => {
                    self.seen.lock().clear();
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
        self.disabled.store(true, Ordering::Relaxed);
    }

    async fn exchange(&self) -> std::io::Result<()> {
        let id = fastrand::u16(..);
        let mut msg = Vec::with_capacity(96);
        let header = Header {
            id,
            flags: 0x0100,
            ..Header::default()
        };
        let mut b = MessageBuilder::new(&mut msg, header);
        b.push_question(&self.qname, Rtype::HINFO, Class::IN)
            .map_err(|_| std::io::Error::other("probe query"))?;
        b.finish();
        let bind: SocketAddr = if self.target.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = tokio::net::UdpSocket::bind(bind).await?;
        sock.connect(self.target).await?;
        sock.send(&msg).await?;
        let mut buf = vec![0u8; 65535];
        let wait = async {
            loop {
                let n = sock.recv(&mut buf).await?;
                if Header::parse(&buf[..n]).is_ok_and(|h| h.id == id && h.qr()) {
                    return Ok::<(), std::io::Error>(());
                }
            }
        };
        tokio::time::timeout(EXCHANGE_TIMEOUT, wait)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "i/o timeout"))?
    }
}

impl Plugin for Loop {
    fn name(&self) -> &'static str {
        "loop"
    }

    fn query(&self, req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        if self.disabled.load(Ordering::Relaxed)
            || req.qtype() != Rtype::HINFO
            || req.qname_lower().as_wire() != self.qname.as_wire()
        {
            return Flow::Next;
        }
        let count = {
            let mut seen = self.seen.lock();
            let id = (req.client, req.query.id());
            if !seen.contains(&id) {
                seen.push(id);
            }
            seen.len()
        };
        if count > 2 {
            clusterdns_contract::log::write(
                Level::Fatal,
                "loop",
                format_args!(
                    "Loop ({} -> {}) detected for zone \"{}\", see https://coredns.io/plugins/loop#troubleshooting. Query: \"HINFO {}\"",
                    req.client,
                    self.address,
                    self.zone_text,
                    req.qname()
                ),
            );
            std::process::exit(1);
        }
        Flow::Next
    }
}
