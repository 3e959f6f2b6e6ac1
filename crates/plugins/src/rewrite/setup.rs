//! Reading `rewrite` lines into rules, with CoreDNS's error texts.

use regex::Regex;

use super::rules::{
    AnswerRule, Cname, Edns, EdnsAction, EdnsData, EdnsKind, Kind, Match, Mode, NameRule, Rule,
    StrRewriter, Variable,
};
use clusterdns_corefile::Directive;
use clusterdns_gocompat::strconv;
use clusterdns_wire::{Name, Rcode, Rtype};

use clusterdns_gocompat::regexp as goregexp;

/// CoreDNS's limit on a regex pattern's length.
const MAX_REGEX_LEN: usize = 10000;

/// The words of one `rewrite` directive: its arguments, and when it has
/// fewer than two, the words of its block, flattened into one rule (as
/// CoreDNS reads a block token by token).
pub(super) fn words(d: &Directive) -> Vec<String> {
    let mut out: Vec<String> = d.args.iter().map(|t| t.text.clone()).collect();
    if out.len() < 2 {
        flatten(&d.block, &mut out);
    }
    out
}

fn flatten(block: &[Directive], out: &mut Vec<String>) {
    for line in block {
        out.push(line.name.text.clone());
        out.extend(line.args.iter().map(|t| t.text.clone()));
        flatten(&line.block, out);
    }
}

/// One rule from its words (CoreDNS `newRule`).
pub(super) fn rule(args: &[String]) -> Result<Rule, String> {
    let Some(first) = args.first() else {
        return Err("no rule type specified for rewrite".into());
    };
    let arg0 = first.to_lowercase();
    let (mode, rest) = match arg0.as_str() {
        "continue" | "stop" => {
            if args.len() < 2 {
                return Err(format!("{arg0} rule must begin with a rule type"));
            }
            let mode = if arg0 == "stop" {
                Mode::Stop
            } else {
                Mode::Continue
            };
            (mode, &args[1..])
        }
        _ => (Mode::Stop, args),
    };
    let rule_type = rest[0].to_lowercase();
    let params = &rest[1..];
    let kind = match rule_type.as_str() {
        "answer" => return Err("response rewrites must begin with a name rule".into()),
        "name" => Kind::Name(Box::new(name_rule(params)?)),
        "class" | "type" => {
            if rest.len() != 3 {
                return Err(format!("{rule_type} rules must have exactly two arguments"));
            }
            if rule_type == "class" {
                Kind::Class(class(&params[0])?, class(&params[1])?)
            } else {
                Kind::Type(rtype(&params[0])?, rtype(&params[1])?)
            }
        }
        "edns0" => Kind::Edns(edns_rule(params)?),
        "ttl" => ttl_rule(params)?,
        "cname" => Kind::Cname(cname_rule(params)?),
        "rcode" => rcode_rule(params)?,
        _ => return Err(format!("invalid rule type {}", strconv::quote(&args[0]))),
    };
    Ok(Rule { mode, kind })
}

fn class(s: &str) -> Result<u16, String> {
    let up = s.to_uppercase();
    match up.as_str() {
        "IN" => Ok(1),
        "CS" => Ok(2),
        "CH" => Ok(3),
        "HS" => Ok(4),
        "NONE" => Ok(254),
        "ANY" => Ok(255),
        _ => Err(format!("invalid class {}", strconv::quote(&up))),
    }
}

fn rtype(s: &str) -> Result<u16, String> {
    let up = s.to_uppercase();
    match Rtype::from_mnemonic(&up) {
        Some(t) => Ok(t.0),
        None => Err(format!("invalid type {}", strconv::quote(&up))),
    }
}

/// `plugin.Name(s).Normalize()`: lowercase and fully qualified.
fn normalize(s: &str) -> String {
    let mut out = s.to_lowercase();
    if !out.ends_with('.') {
        out.push('.');
    }
    out
}

/// How many of `{0}`…`{100}` the replacement uses.
fn sub_expr_usage(s: &str) -> usize {
    (0..=100)
        .filter(|i| s.contains(&format!("{{{i}}}")))
        .count()
}

/// CoreDNS `isValidRegexPattern`.
fn valid_regex(from: &str, to: &str) -> Result<Regex, String> {
    if from.len() > MAX_REGEX_LEN {
        return Err(format!(
            "regex pattern too long: {} > {MAX_REGEX_LEN}",
            from.len()
        ));
    }
    let re = Regex::new(from).map_err(|_| format!("invalid regex matching pattern: {from}"))?;
    if sub_expr_usage(to) > re.captures_len() - 1 {
        return Err(format!(
            "the rewrite regex pattern ({to}) uses more subexpressions than its corresponding matching regex pattern ({from})"
        ));
    }
    Ok(re)
}

fn name_rule(args: &[String]) -> Result<NameRule, String> {
    if args.len() < 2 {
        return Err("too few arguments for a name rule".into());
    }
    let (how, mut from, mut to) = if args.len() == 2 {
        (
            "exact".to_string(),
            normalize(&args[0]),
            normalize(&args[1]),
        )
    } else {
        let how = args[0].to_lowercase();
        if how == "regex" {
            (how, args[1].clone(), args[2].clone())
        } else {
            let (f, t) = (normalize(&args[1]), normalize(&args[2]));
            (how, f, t)
        }
    };
    if (how == "exact" || how == "suffix") && !from.ends_with('.') {
        from.push('.');
    }
    if (how == "exact" || how == "suffix") && !to.ends_with('.') {
        to.push('.');
    }
    let (auto, mut answers) = if args.len() > 3 {
        answer_rules(&how, &args[3..])?
    } else {
        (false, Vec::new())
    };
    let m = match how.as_str() {
        "exact" => {
            valid_regex(&to, &from)?;
            let wire = Name::from_ascii(&from)
                .ok()
                .zip(Name::from_ascii(&to).ok())
                .map(Box::new);
            return Ok(NameRule {
                m: Match::Exact(from),
                auto: true,
                replacement: to,
                wire,
                answers,
            });
        }
        "prefix" => Match::Prefix(from),
        "suffix" => {
            // The reverse suffix rewrite stands in for `auto`.
            if auto {
                let back = StrRewriter::suffix(&to, &from);
                answers.splice(
                    0..0,
                    [AnswerRule::Name(back.clone()), AnswerRule::Value(back)],
                );
            }
            return Ok(NameRule {
                m: Match::Suffix(from),
                auto: false,
                replacement: to,
                wire: None,
                answers,
            });
        }
        "substring" => Match::Substring(from),
        "regex" => {
            let re = valid_regex(&from, &to)?;
            to = normalize(&args[2]);
            Match::Regex(re)
        }
        _ => {
            return Err(format!(
                "name rule supports only exact, prefix, suffix, substring, and regex name matching, received: {how}"
            ));
        }
    };
    Ok(NameRule {
        m,
        auto,
        replacement: to,
        wire: None,
        answers,
    })
}

/// CoreDNS `parseAnswerRules`: the `answer auto|name|value` options.
fn answer_rules(name: &str, args: &[String]) -> Result<(bool, Vec<AnswerRule>), String> {
    if args.len() < 2 {
        return Err(format!("invalid arguments for {name} rule"));
    }
    let mut auto = false;
    let mut rules = Vec::new();
    let mut name_rules = 0;
    let mut last = "";
    let mut i = 0;
    while i < args.len() {
        if last.is_empty() && args[i] != "answer" {
            return Err(format!(
                "exceeded the number of arguments for a non-answer rule argument for {name} rule"
            ));
        }
        if args[i] == "answer" {
            i += 1;
        }
        if i == args.len() {
            return Err(format!("type missing for answer rule for {name} rule"));
        }
        last = &args[i];
        i += 1;
        match last {
            "auto" => auto = true,
            "name" | "value" => {
                if args.len() - i < 2 {
                    return Err(format!(
                        "{last} answer rule for {name} rule: 2 arguments required"
                    ));
                }
                let re = valid_regex(&args[i], &args[i + 1])
                    .map_err(|e| format!("{last} answer rule for {name} rule: {e}"))?;
                let rw = StrRewriter::Regex {
                    re,
                    replacement: normalize(&args[i + 1]),
                };
                if last == "name" {
                    rules.push(AnswerRule::Name(rw));
                    name_rules += 1;
                } else {
                    rules.push(AnswerRule::Value(rw));
                }
                i += 2;
            }
            other => {
                return Err(format!(
                    "invalid type {} for answer rule for {name} rule",
                    strconv::quote(other)
                ));
            }
        }
    }
    if auto && name_rules > 0 {
        return Err(
            "auto name answer rule cannot be combined with explicit name anwer rules".into(),
        );
    }
    Ok((auto, rules))
}

/// The name matcher of a ttl or rcode rule (`what` names the rule).
fn matcher(how: &str, s: &str, what: &str) -> Result<Match, String> {
    Ok(match how.to_lowercase().as_str() {
        "exact" => Match::Exact(normalize(s)),
        "prefix" => Match::Prefix(normalize(s)),
        "suffix" => Match::Suffix(normalize(s)),
        "substring" => Match::Substring(normalize(s)),
        "regex" => {
            if s.len() > MAX_REGEX_LEN {
                return Err(format!(
                    "regex pattern too long in a {what} rule: {} > {MAX_REGEX_LEN}",
                    s.len()
                ));
            }
            Match::Regex(
                Regex::new(s)
                    .map_err(|_| format!("invalid regex pattern in a {what} rule: {s}"))?,
            )
        }
        _ => {
            return Err(format!(
                "{what} rule supports only exact, prefix, suffix, substring, and regex name matching"
            ));
        }
    })
}

fn ttl_rule(args: &[String]) -> Result<Kind, String> {
    if args.len() < 2 {
        return Err(format!("too few ({}) arguments for a ttl rule", args.len()));
    }
    let s = match args.len() {
        2 => args[1].as_str(),
        3 => args[2].as_str(),
        _ => "",
    };
    let Some((min, max)) = ttl_range(s) else {
        return Err(format!("invalid TTL '{s}' for a ttl rule"));
    };
    let m = if args.len() == 3 {
        matcher(&args[0], &args[1], "ttl")?
    } else {
        Match::Exact(normalize(&args[0]))
    };
    Ok(Kind::Ttl { m, min, max })
}

/// Go's `strconv.ParseUint(s, 10, 32)`.
fn parse_u32(s: &str) -> Option<u32> {
    clusterdns_gocompat::strconv::parse_uint(s, 10, 32)
        .ok()
        .and_then(|n| u32::try_from(n).ok())
}

/// CoreDNS `isValidTTL`: `N`, `MIN-MAX`, `-MAX` or `MIN-`.
fn ttl_range(v: &str) -> Option<(u32, u32)> {
    let parts: Vec<&str> = v.split('-').collect();
    match parts.as_slice() {
        [one] => parse_u32(one).map(|n| (n, n)),
        [lo, hi] => {
            let min = if lo.is_empty() { 0 } else { parse_u32(lo)? };
            let max = match (lo.is_empty(), hi.is_empty()) {
                (true, true) => return None,
                (false, true) => 2_147_483_647,
                _ => parse_u32(hi)?,
            };
            (min <= max).then_some((min, max))
        }
        _ => None,
    }
}

fn rcode_rule(args: &[String]) -> Result<Kind, String> {
    if args.len() < 3 {
        return Err(format!(
            "too few ({}) arguments for a rcode rule",
            args.len()
        ));
    }
    let (old, new) = match args.len() {
        3 => (args[1].as_str(), args[2].as_str()),
        4 => (args[2].as_str(), args[3].as_str()),
        _ => ("", ""),
    };
    let Some(old) = rcode(old) else {
        return Err(format!("invalid matching RCODE '{old}' for a rcode rule"));
    };
    let Some(new) = rcode(new) else {
        return Err(format!(
            "invalid replacement RCODE '{new}' for a rcode rule"
        ));
    };
    let m = if args.len() == 4 {
        matcher(&args[0], &args[1], "rcode")?
    } else {
        Match::Exact(normalize(&args[0]))
    };
    Ok(Kind::Rcode { m, old, new })
}

/// CoreDNS `isValidRCode`: 0 to 23, or a mnemonic.
fn rcode(v: &str) -> Option<u16> {
    if let Some(n) = parse_u32(v)
        && n <= 23
    {
        return u16::try_from(n).ok();
    }
    let up = v.to_uppercase();
    // miekg/dns names 16 BADSIG; BADVERS is not in its table.
    if up == "BADVERS" {
        return None;
    }
    Rcode::from_mnemonic(&up).map(|r| r.0)
}

fn cname_rule(args: &[String]) -> Result<Cname, String> {
    let (how, mut from, mut to) = match args.len() {
        3 => {
            let how = args[0].to_lowercase();
            if !matches!(
                how.as_str(),
                "exact" | "prefix" | "suffix" | "substring" | "regex"
            ) {
                return Err(format!("unknown cname rewrite type: {how}"));
            }
            (how, args[1].to_lowercase(), args[2].to_lowercase())
        }
        2 => (
            "exact".to_string(),
            args[0].to_lowercase(),
            args[1].to_lowercase(),
        ),
        n => return Err(format!("too few ({n}) arguments for a cname rule")),
    };
    if how == "exact" {
        from = normalize(&from);
        to = normalize(&to);
    }
    let m = match how.as_str() {
        "exact" => Match::Exact(from),
        "prefix" => Match::Prefix(from),
        "suffix" => Match::Suffix(from),
        "substring" => Match::Substring(from),
        _ => {
            if from.len() > MAX_REGEX_LEN {
                return Err(format!(
                    "regex pattern too long in a cname rule: {} > {MAX_REGEX_LEN}",
                    from.len()
                ));
            }
            Match::Regex(Regex::new(&from).map_err(|e| {
                format!(
                    "invalid cname rewrite regex pattern: error parsing regexp: {}",
                    goregexp::describe(&from, &e)
                )
            })?)
        }
    };
    Ok(Cname { m, to })
}

fn edns_rule(args: &[String]) -> Result<Edns, String> {
    if args.len() < 2 {
        return Err("too few arguments for an EDNS0 rule".into());
    }
    let rule_type = args[0].to_lowercase();
    let action = match args[1].to_lowercase().as_str() {
        "append" => EdnsAction::Append,
        "replace" => EdnsAction::Replace,
        "set" => EdnsAction::Set,
        "unset" => return edns_unset(&rule_type, args),
        other => return Err(format!("invalid action: {}", strconv::quote(other))),
    };
    let mut args = args;
    let revert = args.last().is_some_and(|a| a == "revert");
    if revert {
        args = &args[..args.len() - 1];
    }
    let kind = match rule_type.as_str() {
        "local" => {
            if args.len() != 4 {
                return Err("EDNS0 local rules require three or four args".into());
            }
            let code = edns_code(&args[2])?;
            let data = &args[3];
            if data.starts_with('{') && data.ends_with('}') {
                let Some(v) = variable(data) else {
                    return Err(format!(
                        "unsupported variable name {}",
                        strconv::quote(data)
                    ));
                };
                EdnsKind::Local {
                    code,
                    data: EdnsData::Variable(v),
                }
            } else {
                let bytes = match data.strip_prefix("0x") {
                    Some(h) => {
                        clusterdns_gocompat::hex::decode_string(h).map_err(|e| e.to_string())?
                    }
                    None => data.as_bytes().to_vec(),
                };
                EdnsKind::Local {
                    code,
                    data: EdnsData::Fixed(bytes),
                }
            }
        }
        "nsid" => {
            if args.len() != 2 {
                return Err("EDNS0 NSID rules can accept no more than one arg".into());
            }
            EdnsKind::Nsid
        }
        "subnet" => {
            if args.len() != 4 {
                return Err("EDNS0 subnet rules require three or four args".into());
            }
            subnet(&args[2], &args[3])?
        }
        other => return Err(format!("invalid rule type {}", strconv::quote(other))),
    };
    Ok(Edns {
        action,
        kind,
        revert,
    })
}

/// Go's `strconv.ParseUint(s, 0, 16)`, its error as the text.
fn uint16(s: &str) -> Result<u64, String> {
    strconv::parse_uint(s, 0, 16).map_err(|e| e.to_string())
}

fn edns_code(s: &str) -> Result<u16, String> {
    uint16(s).map(|n| n as u16)
}

fn subnet(v4: &str, v6: &str) -> Result<EdnsKind, String> {
    let v4 = uint16(v4)?;
    if v4 > 32 {
        return Err(format!("invalid IPv4 bit mask length {v4}"));
    }
    let v6 = uint16(v6)?;
    if v6 > 128 {
        return Err(format!("invalid IPv6 bit mask length {v6}"));
    }
    Ok(EdnsKind::Subnet {
        v4: v4 as u8,
        v6: v6 as u8,
    })
}

fn edns_unset(rule_type: &str, args: &[String]) -> Result<Edns, String> {
    let kind = match rule_type {
        "local" => {
            if args.len() != 3 {
                return Err("local unset action requires exactly two arguments".into());
            }
            EdnsKind::Local {
                code: edns_code(&args[2])?,
                data: EdnsData::Fixed(Vec::new()),
            }
        }
        "nsid" => {
            if args.len() != 2 {
                return Err("nsid unset action requires exactly one argument".into());
            }
            EdnsKind::Nsid
        }
        "subnet" => {
            if args.len() != 2 {
                return Err("subnet unset action requires exactly one argument".into());
            }
            EdnsKind::Subnet { v4: 0, v6: 0 }
        }
        other => return Err(format!("invalid rule type {}", strconv::quote(other))),
    };
    Ok(Edns {
        action: EdnsAction::Unset,
        kind,
        revert: false,
    })
}

/// A `{…}` variable of an EDNS0 local rule: a built-in one, or a
/// metadata label (`{plugin/label}`).
fn variable(s: &str) -> Option<Variable> {
    Some(match s {
        "{qname}" => Variable::Qname,
        "{qtype}" => Variable::Qtype,
        "{client_ip}" => Variable::ClientIp,
        "{client_port}" => Variable::ClientPort,
        "{protocol}" => Variable::Protocol,
        "{server_ip}" => Variable::ServerIp,
        "{server_port}" => Variable::ServerPort,
        _ => {
            let label = &s[1..s.len() - 1];
            let slash = label.find('/')?;
            if slash == 0 || slash >= label.len() - 1 {
                return None;
            }
            Variable::Metadata
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_ranges() {
        assert_eq!(ttl_range("30"), Some((30, 30)));
        assert_eq!(ttl_range("30-300"), Some((30, 300)));
        assert_eq!(ttl_range("-30"), Some((0, 30)));
        assert_eq!(ttl_range("30-"), Some((30, 2_147_483_647)));
        assert_eq!(ttl_range("-"), None);
        assert_eq!(ttl_range("300-30"), None);
        assert_eq!(ttl_range("+5"), None);
        assert_eq!(ttl_range("1-2-3"), None);
    }
}
