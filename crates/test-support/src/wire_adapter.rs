//! Queries built and responses parsed with the project's own `clusterdns-wire`.

use clusterdns_wire::header::{FLAG_AD, FLAG_CD, FLAG_RD};
use clusterdns_wire::{Class, Header, Message, MessageBuilder, Name, Rtype, Section};

use crate::dns::{Flags, Query, Response, ResponseEdns, Rr};

pub(crate) fn build_query(q: &Query) -> Result<Vec<u8>, String> {
    let name = Name::from_ascii(&q.name).map_err(|e| format!("bad name {:?}: {e}", q.name))?;
    let qtype: Rtype = (q.qtype.parse()).map_err(|_| format!("unknown type {:?}", q.qtype))?;
    let qclass: Class = (q.qclass.parse()).map_err(|_| format!("unknown class {:?}", q.qclass))?;
    let mut flags = 0;
    for (on, bit) in [(q.rd, FLAG_RD), (q.cd, FLAG_CD), (q.ad, FLAG_AD)] {
        if on {
            flags |= bit;
        }
    }
    let header = Header {
        id: q.id,
        flags,
        ..Header::default()
    };
    let mut buf = Vec::with_capacity(512);
    let mut b = MessageBuilder::new(&mut buf, header);
    b.push_question(&name, qtype, qclass)
        .map_err(|_| "question too long".to_string())?;
    if let Some(e) = q.edns {
        b.push_opt(e.udp_size, e.dnssec_ok, &[])
            .map_err(|_| "OPT does not fit".to_string())?;
    }
    b.finish();
    Ok(buf)
}

pub(crate) fn parse_response(bytes: &[u8]) -> Result<Response, String> {
    let msg = Message::parse(bytes).map_err(|e| format!("unparsable message: {e}"))?;
    let h = msg.header();
    let flags = Flags {
        qr: h.qr(),
        aa: h.aa(),
        tc: h.tc(),
        rd: h.rd(),
        ra: h.ra(),
        z: h.z(),
        ad: h.ad(),
        cd: h.cd(),
    };
    let question = msg
        .question()
        .map(|(name, qtype, qclass)| vec![format!("{name} {qclass} {qtype}")])
        .unwrap_or_default();
    let mut answer = Vec::new();
    let mut authority = Vec::new();
    let mut additional = Vec::new();
    let mut edns = None;
    for view in msg.records() {
        if view.rtype == Rtype::OPT && view.section == Section::Additional && edns.is_none() {
            let mut options = Vec::new();
            let data = view.rdata_bytes(&msg);
            let mut rest = data;
            while rest.len() >= 4 {
                let code = u16::from_be_bytes([rest[0], rest[1]]);
                let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
                let Some(value) = rest.get(4..4 + len) else {
                    break;
                };
                options.push((code, value.to_vec()));
                rest = &rest[4 + len..];
            }
            edns = Some(ResponseEdns {
                udp_size: view.class.0,
                version: (view.ttl >> 16) as u8,
                dnssec_ok: view.ttl & 0x8000 != 0,
                z: (view.ttl & 0x7fff) as u16,
                options,
            });
            continue;
        }
        let rec = view
            .to_owned_record(&msg)
            .map_err(|e| format!("record {} {}: {e}", view.name, view.rtype))?;
        let rr = Rr {
            name: rec.name.to_string(),
            rtype: rec.rtype().to_string(),
            class: rec.class.to_string(),
            ttl: rec.ttl,
            rdata: rec.data.to_string(),
        };
        match view.section {
            Section::Answer => answer.push(rr),
            Section::Authority => authority.push(rr),
            Section::Additional => additional.push(rr),
        }
    }
    Ok(Response {
        id: h.id,
        opcode: h.opcode().0,
        flags,
        rcode: msg.rcode().0,
        question,
        answer,
        authority,
        additional,
        edns,
        size: msg.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_round_trips() {
        let q = Query::new("Web.NS.svc.cluster.local.", "srv")
            .edns(1232)
            .cd(true)
            .id(7);
        let wire = build_query(&q).unwrap();
        let m = Message::parse(&wire).unwrap();
        let h = m.header();
        assert_eq!(h.id, 7);
        assert!(h.rd() && h.cd() && !h.qr());
        let (name, qtype, qclass) = m.question().unwrap();
        assert_eq!(name.to_string(), "Web.NS.svc.cluster.local.");
        assert_eq!(qtype, Rtype::SRV);
        assert_eq!(qclass, Class::IN);
        let parsed = parse_response(&wire).unwrap();
        let e = parsed.edns.unwrap();
        assert_eq!(e.udp_size, 1232);
        assert!(!e.dnssec_ok);
        assert!(parsed.answer.is_empty());
    }

    #[test]
    fn numeric_types_and_classes() {
        let q = Query::new("x.", "TYPE65").class("CLASS3");
        let m = Message::parse(&build_query(&q).unwrap())
            .unwrap()
            .question()
            .unwrap();
        assert_eq!((m.1.0, m.2.0), (65, 3));
        assert!(build_query(&Query::new("x.", "NOPE")).is_err());
    }
}
