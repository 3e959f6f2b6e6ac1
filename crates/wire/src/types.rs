//! Numeric protocol codes: record type, class, response code, opcode.
//!
//! Each is a transparent newtype over its wire integer, so unknown values
//! survive a round trip. `Display` prints the mnemonic used by miekg/dns
//! (and so by CoreDNS logs and metrics labels); values without one print
//! as `TYPE65280` / `CLASS9` (RFC 3597) or, for rcodes and opcodes, as the
//! bare number. `FromStr` accepts both forms, case-insensitively.

use core::fmt;
use core::str::FromStr;

/// Error returned when a mnemonic is not recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("unknown mnemonic")]
pub struct UnknownMnemonic;

/// Defines a code newtype with constants, a mnemonic table, `Display`,
/// `Debug` and `FromStr`. `aliases` are accepted by `FromStr` and get a
/// constant but never win in `Display`.
macro_rules! code_type {
    (
        $(#[$meta:meta])*
        $ty:ident($int:ty), prefix = $prefix:literal,
        { $( $konst:ident = $val:literal => $text:literal, )* }
        aliases { $( $akonst:ident = $aval:literal => $atext:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $ty(pub $int);

        impl $ty {
            $(
                #[doc = concat!("`", $text, "` (", stringify!($val), ").")]
                pub const $konst: $ty = $ty($val);
            )*
            $(
                #[doc = concat!("`", $atext, "` (", stringify!($aval), "), an alias.")]
                pub const $akonst: $ty = $ty($aval);
            )*

            /// The mnemonic of this value, if it has one.
            pub const fn mnemonic(self) -> Option<&'static str> {
                match self.0 {
                    $( $val => Some($text), )*
                    _ => None,
                }
            }

            /// Looks a mnemonic up, ignoring ASCII case. Does not accept
            /// the numeric form; use `FromStr` for that.
            pub fn from_mnemonic(s: &str) -> Option<$ty> {
                $( if s.eq_ignore_ascii_case($text) { return Some($ty($val)); } )*
                $( if s.eq_ignore_ascii_case($atext) { return Some($ty($aval)); } )*
                None
            }
        }

        impl From<$int> for $ty {
            fn from(v: $int) -> Self {
                $ty(v)
            }
        }

        impl From<$ty> for $int {
            fn from(v: $ty) -> Self {
                v.0
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.mnemonic() {
                    Some(m) => f.pad(m),
                    None => write!(f, concat!($prefix, "{}"), self.0),
                }
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(self, f)
            }
        }

        impl FromStr for $ty {
            type Err = UnknownMnemonic;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                if let Some(v) = $ty::from_mnemonic(s) {
                    return Ok(v);
                }
                let digits = match s.get(..$prefix.len()) {
                    Some(p) if p.eq_ignore_ascii_case($prefix) => &s[$prefix.len()..],
                    _ => return Err(UnknownMnemonic),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(UnknownMnemonic);
                }
                digits.parse::<$int>().map($ty).map_err(|_| UnknownMnemonic)
            }
        }
    };
}

code_type! {
    /// A resource record type (RFC 1035 TYPE / QTYPE).
    Rtype(u16), prefix = "TYPE",
    {
        A = 1 => "A",
        NS = 2 => "NS",
        MD = 3 => "MD",
        MF = 4 => "MF",
        CNAME = 5 => "CNAME",
        SOA = 6 => "SOA",
        MB = 7 => "MB",
        MG = 8 => "MG",
        MR = 9 => "MR",
        NULL = 10 => "NULL",
        PTR = 12 => "PTR",
        HINFO = 13 => "HINFO",
        MINFO = 14 => "MINFO",
        MX = 15 => "MX",
        TXT = 16 => "TXT",
        RP = 17 => "RP",
        AFSDB = 18 => "AFSDB",
        X25 = 19 => "X25",
        ISDN = 20 => "ISDN",
        RT = 21 => "RT",
        NSAPPTR = 23 => "NSAP-PTR",
        SIG = 24 => "SIG",
        KEY = 25 => "KEY",
        PX = 26 => "PX",
        GPOS = 27 => "GPOS",
        AAAA = 28 => "AAAA",
        LOC = 29 => "LOC",
        NXT = 30 => "NXT",
        EID = 31 => "EID",
        NIMLOC = 32 => "NIMLOC",
        SRV = 33 => "SRV",
        ATMA = 34 => "ATMA",
        NAPTR = 35 => "NAPTR",
        KX = 36 => "KX",
        CERT = 37 => "CERT",
        DNAME = 39 => "DNAME",
        OPT = 41 => "OPT",
        APL = 42 => "APL",
        DS = 43 => "DS",
        SSHFP = 44 => "SSHFP",
        IPSECKEY = 45 => "IPSECKEY",
        RRSIG = 46 => "RRSIG",
        NSEC = 47 => "NSEC",
        DNSKEY = 48 => "DNSKEY",
        DHCID = 49 => "DHCID",
        NSEC3 = 50 => "NSEC3",
        NSEC3PARAM = 51 => "NSEC3PARAM",
        TLSA = 52 => "TLSA",
        SMIMEA = 53 => "SMIMEA",
        HIP = 55 => "HIP",
        NINFO = 56 => "NINFO",
        RKEY = 57 => "RKEY",
        TALINK = 58 => "TALINK",
        CDS = 59 => "CDS",
        CDNSKEY = 60 => "CDNSKEY",
        OPENPGPKEY = 61 => "OPENPGPKEY",
        CSYNC = 62 => "CSYNC",
        ZONEMD = 63 => "ZONEMD",
        SVCB = 64 => "SVCB",
        HTTPS = 65 => "HTTPS",
        SPF = 99 => "SPF",
        UINFO = 100 => "UINFO",
        UID = 101 => "UID",
        GID = 102 => "GID",
        UNSPEC = 103 => "UNSPEC",
        NID = 104 => "NID",
        L32 = 105 => "L32",
        L64 = 106 => "L64",
        LP = 107 => "LP",
        EUI48 = 108 => "EUI48",
        EUI64 = 109 => "EUI64",
        TKEY = 249 => "TKEY",
        TSIG = 250 => "TSIG",
        IXFR = 251 => "IXFR",
        AXFR = 252 => "AXFR",
        MAILB = 253 => "MAILB",
        MAILA = 254 => "MAILA",
        ANY = 255 => "ANY",
        URI = 256 => "URI",
        CAA = 257 => "CAA",
        AVC = 258 => "AVC",
        AMTRELAY = 260 => "AMTRELAY",
        TA = 32768 => "TA",
        DLV = 32769 => "DLV",
    }
    aliases {}
}

code_type! {
    /// A record class (RFC 1035 CLASS / QCLASS).
    Class(u16), prefix = "CLASS",
    {
        IN = 1 => "IN",
        CS = 2 => "CS",
        CH = 3 => "CH",
        HS = 4 => "HS",
        NONE = 254 => "NONE",
        ANY = 255 => "ANY",
    }
    aliases {
        CHAOS = 3 => "CHAOS",
    }
}

code_type! {
    /// A response code, 12 bits wide: the low 4 bits live in the header,
    /// the high 8 in the OPT record (RFC 6891). Names follow miekg/dns
    /// `RcodeToString`, which prints 16 as `BADSIG` (BADVERS shares the
    /// value and is accepted by `FromStr`).
    Rcode(u16), prefix = "",
    {
        NOERROR = 0 => "NOERROR",
        FORMERR = 1 => "FORMERR",
        SERVFAIL = 2 => "SERVFAIL",
        NXDOMAIN = 3 => "NXDOMAIN",
        NOTIMP = 4 => "NOTIMP",
        REFUSED = 5 => "REFUSED",
        YXDOMAIN = 6 => "YXDOMAIN",
        YXRRSET = 7 => "YXRRSET",
        NXRRSET = 8 => "NXRRSET",
        NOTAUTH = 9 => "NOTAUTH",
        NOTZONE = 10 => "NOTZONE",
        DSOTYPENI = 11 => "DSOTYPENI",
        BADSIG = 16 => "BADSIG",
        BADKEY = 17 => "BADKEY",
        BADTIME = 18 => "BADTIME",
        BADMODE = 19 => "BADMODE",
        BADNAME = 20 => "BADNAME",
        BADALG = 21 => "BADALG",
        BADTRUNC = 22 => "BADTRUNC",
        BADCOOKIE = 23 => "BADCOOKIE",
    }
    aliases {
        BADVERS = 16 => "BADVERS",
        NOTIMPL = 4 => "NOTIMPL",
    }
}

impl Rcode {
    /// The low 4 bits, carried in the header.
    pub const fn low(self) -> u8 {
        (self.0 & 0x0F) as u8
    }

    /// The high 8 bits, carried in the OPT record's TTL field.
    pub const fn high(self) -> u8 {
        ((self.0 >> 4) & 0xFF) as u8
    }

    /// Joins the header's 4 bits and the OPT record's 8 bits.
    pub const fn from_parts(low: u8, high: u8) -> Rcode {
        Rcode(((high as u16) << 4) | (low as u16 & 0x0F))
    }
}

code_type! {
    /// A header opcode (4 bits).
    Opcode(u8), prefix = "",
    {
        QUERY = 0 => "QUERY",
        IQUERY = 1 => "IQUERY",
        STATUS = 2 => "STATUS",
        NOTIFY = 4 => "NOTIFY",
        UPDATE = 5 => "UPDATE",
    }
    aliases {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rtype_display_and_parse() {
        assert_eq!(Rtype::A.to_string(), "A");
        assert_eq!(Rtype::AAAA.to_string(), "AAAA");
        assert_eq!(Rtype(65535).to_string(), "TYPE65535");
        assert_eq!(Rtype(0).to_string(), "TYPE0");
        assert_eq!("srv".parse::<Rtype>(), Ok(Rtype::SRV));
        assert_eq!("TYPE123".parse::<Rtype>(), Ok(Rtype(123)));
        assert_eq!("type1".parse::<Rtype>(), Ok(Rtype::A));
        assert_eq!("NSAP-PTR".parse::<Rtype>(), Ok(Rtype::NSAPPTR));
        assert!("TYPE".parse::<Rtype>().is_err());
        assert!("TYPE65536".parse::<Rtype>().is_err());
        assert!("TYPE+1".parse::<Rtype>().is_err());
        assert!("BOGUS".parse::<Rtype>().is_err());
        assert!("".parse::<Rtype>().is_err());
        for v in [1u16, 5, 28, 33, 41, 255, 999, 65535] {
            assert_eq!(Rtype(v).to_string().parse::<Rtype>(), Ok(Rtype(v)));
        }
        assert_eq!(format!("{:>5}", Rtype::A), "    A");
        assert_eq!(format!("{:?}", Rtype::MX), "MX");
    }

    #[test]
    fn class_display_and_parse() {
        assert_eq!(Class::IN.to_string(), "IN");
        assert_eq!(Class::CH.to_string(), "CH");
        assert_eq!(Class(9).to_string(), "CLASS9");
        assert_eq!("chaos".parse::<Class>(), Ok(Class::CH));
        assert_eq!("CLASS9".parse::<Class>(), Ok(Class(9)));
        assert_eq!("any".parse::<Class>(), Ok(Class::ANY));
        assert!("9".parse::<Class>().is_err());
    }

    #[test]
    fn rcode_display_and_parse() {
        assert_eq!(Rcode::NOERROR.to_string(), "NOERROR");
        assert_eq!(Rcode::NXDOMAIN.to_string(), "NXDOMAIN");
        assert_eq!(Rcode::BADVERS, Rcode(16));
        assert_eq!(Rcode::BADVERS.to_string(), "BADSIG");
        assert_eq!(Rcode(12).to_string(), "12");
        assert_eq!(Rcode(4095).to_string(), "4095");
        assert_eq!("BADVERS".parse::<Rcode>(), Ok(Rcode(16)));
        assert_eq!("servfail".parse::<Rcode>(), Ok(Rcode::SERVFAIL));
        assert_eq!("12".parse::<Rcode>(), Ok(Rcode(12)));
        assert!("x".parse::<Rcode>().is_err());
        assert_eq!(Rcode::BADVERS.low(), 0);
        assert_eq!(Rcode::BADVERS.high(), 1);
        assert_eq!(Rcode::from_parts(3, 0), Rcode::NXDOMAIN);
        assert_eq!(Rcode::from_parts(0x0, 1), Rcode::BADVERS);
        assert_eq!(Rcode::from_parts(0xF, 0xFF), Rcode(4095));
    }

    #[test]
    fn opcode_display_and_parse() {
        assert_eq!(Opcode::QUERY.to_string(), "QUERY");
        assert_eq!(Opcode::UPDATE.to_string(), "UPDATE");
        assert_eq!(Opcode(3).to_string(), "3");
        assert_eq!("notify".parse::<Opcode>(), Ok(Opcode::NOTIFY));
        assert_eq!("3".parse::<Opcode>(), Ok(Opcode(3)));
        assert_eq!(u8::from(Opcode::STATUS), 2);
        assert_eq!(Opcode::from(4u8), Opcode::NOTIFY);
    }
}
