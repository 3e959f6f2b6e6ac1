#![doc = include_str!("README.md")]

mod shuffle;

use std::sync::Arc;

use clusterdns_contract::{Flow, Outcome, Plugin, PluginDef, Request, ResponseWriter, SetupCtx};
use clusterdns_corefile::{ConfigError, Directive};
use clusterdns_wire::{Rcode, Rtype};

use shuffle::{Plan, Subnet};

/// Registration of *loadbalance*.
pub const DEF: PluginDef = PluginDef {
    name: "loadbalance",
    setup,
};

fn setup(ctx: &mut SetupCtx<'_>, dirs: &[&Directive]) -> Result<(), ConfigError> {
    let mut prefer = Vec::new();
    // As CoreDNS, every `loadbalance` line is read; they share one handler.
    for d in dirs {
        let args: Vec<&str> = d.arg_texts().collect();
        match args.as_slice() {
            [] | ["round_robin"] => {}
            ["round_robin", ..] => {
                return Err(d.err("unknown property for round_robin"));
            }
            ["weighted", ..] => {
                return Err(d.err(
                    "the weighted policy is not supported yet (use round_robin, the default)",
                ));
            }
            [other, ..] => return Err(d.err(format!("unknown policy: {other}"))),
        }
        for p in &d.block {
            match p.name.text.as_str() {
                "prefer" => {
                    for a in &p.args {
                        let net = Subnet::parse(&a.text)
                            .map_err(|e| a.err(format!("invalid CIDR {:?}: {e}", a.text)))?;
                        prefer.push(net);
                    }
                }
                other => return Err(p.err(format!("unknown property '{other}'"))),
            }
        }
    }
    ctx.add_plugin(Arc::new(LoadBalance { prefer }));
    Ok(())
}

/// The *loadbalance* handler: passes every query on and shuffles the
/// reply in its `response` hook.
#[derive(Debug)]
pub struct LoadBalance {
    prefer: Vec<Subnet>,
}

impl Plugin for LoadBalance {
    fn name(&self) -> &'static str {
        "loadbalance"
    }

    fn query(&self, _req: &Request<'_>, _w: &mut ResponseWriter) -> Flow {
        Flow::Next
    }

    fn response(&self, req: &Request<'_>, w: &mut ResponseWriter, _outcome: &Outcome) {
        if w.rcode() != Rcode::NOERROR {
            return;
        }
        if req.qtype() == Rtype::AXFR || req.qtype() == Rtype::IXFR {
            return;
        }
        let plan = Plan {
            prefer: &self.prefer,
        };
        shuffle::shuffle(w.buffer_mut(), &plan);
    }
}

#[cfg(test)]
mod tests;
