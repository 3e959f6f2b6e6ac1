//! Label selectors in the API's text form (`app=web,tier!=db`, `env in (a,b)`, `!legacy`),
//! matched against the labels this crate keeps, without the API server: what `isolate`'s
//! allow-list by namespace label needs on every query.
//!
//! The grammar is the one `kubectl -l` and `labelSelector=` accept for labels: requirements
//! separated by commas, all of which must hold. `>`/`<` (numeric comparisons) are not
//! supported.

use std::fmt;

/// A label selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse label selector value: '{0}'")]
pub struct SelectorError(pub String);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    /// `k`
    Exists,
    /// `!k`
    Absent,
    /// `k=v`, `k==v`, `k in (v...)`
    In(Vec<Box<str>>),
    /// `k!=v`, `k notin (v...)`: also true when the label is absent.
    NotIn(Vec<Box<str>>),
}

/// A parsed label selector. The empty selector selects everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    text: Box<str>,
    reqs: Vec<(Box<str>, Op)>,
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 317
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}

fn is_value(s: &str) -> bool {
    s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Splits at commas outside parentheses.
fn requirements(s: &str) -> Option<Vec<&str>> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth -= 1,
            b',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
    }
    (depth == 0).then(|| {
        out.push(&s[start..]);
        out
    })
}

fn value_list(s: &str) -> Option<Vec<Box<str>>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    inner
        .split(',')
        .map(|v| {
            let v = v.trim();
            is_value(v).then(|| Box::from(v))
        })
        .collect()
}

fn requirement(r: &str) -> Option<(Box<str>, Op)> {
    let r = r.trim();
    if let Some(key) = r.strip_prefix('!') {
        let key = key.trim();
        return is_key(key).then(|| (Box::from(key), Op::Absent));
    }
    if let Some(at) = r.find(|c: char| c.is_ascii_whitespace() || c == '(') {
        let (key, rest) = (&r[..at], r[at..].trim_start());
        let set = if let Some(list) = rest.strip_prefix("notin") {
            Some((list, false))
        } else {
            rest.strip_prefix("in").map(|list| (list, true))
        };
        if let Some((list, is_in)) = set {
            if !is_key(key) {
                return None;
            }
            let values = value_list(list)?;
            let op = if is_in {
                Op::In(values)
            } else {
                Op::NotIn(values)
            };
            return Some((Box::from(key), op));
        }
    }
    let (key, op, value) = if let Some((k, v)) = r.split_once("!=") {
        (k, false, v)
    } else if let Some((k, v)) = r.split_once("==") {
        (k, true, v)
    } else if let Some((k, v)) = r.split_once('=') {
        (k, true, v)
    } else {
        return is_key(r).then(|| (Box::from(r), Op::Exists));
    };
    let (key, value) = (key.trim(), value.trim());
    if !is_key(key) || !is_value(value) {
        return None;
    }
    let values = vec![Box::from(value)];
    Some((
        Box::from(key),
        if op {
            Op::In(values)
        } else {
            Op::NotIn(values)
        },
    ))
}

impl LabelSelector {
    /// Parses `text`; the error is the API server's wording for a selector it refuses.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let err = || SelectorError(text.to_string());
        let mut reqs = Vec::new();
        if !text.trim().is_empty() {
            for r in requirements(text).ok_or_else(err)? {
                reqs.push(requirement(r).ok_or_else(err)?);
            }
        }
        Ok(LabelSelector {
            text: Box::from(text),
            reqs,
        })
    }

    /// Whether labels read through `label` (a key's value, `None` when absent) match.
    pub fn matches<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|(key, op)| {
            let v = label(key);
            match op {
                Op::Exists => v.is_some(),
                Op::Absent => v.is_none(),
                Op::In(vals) => v.is_some_and(|v| vals.iter().any(|x| **x == *v)),
                Op::NotIn(vals) => v.is_none_or(|v| !vals.iter().any(|x| **x == *v)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    fn on(s: &LabelSelector, labels: &[(&'static str, &'static str)]) -> bool {
        s.matches(|k| labels.iter().find(|(lk, _)| *lk == k).map(|(_, v)| *v))
    }

    #[test]
    fn requirements_match_as_the_api_server_does() {
        let team = [("team", "a"), ("env", "prod")];
        let other = [("team", "b")];
        for (s, t, o) in [
            ("team=a", true, false),
            ("team==a", true, false),
            ("team!=a", false, true),
            ("team", true, true),
            ("!env", false, true),
            ("env!=prod", false, true),
            ("team in (a, c)", true, false),
            ("team notin (a,c)", false, true),
            ("team in (a,b),env=prod", true, false),
            ("example.com/tier", false, false),
            ("", true, true),
        ] {
            let x = sel(s);
            assert_eq!(on(&x, &team), t, "{s} on team=a");
            assert_eq!(on(&x, &other), o, "{s} on team=b");
        }
    }

    #[test]
    fn bad_selectors_are_refused() {
        for s in [
            "team=(a)",
            "a b",
            "team in a",
            "team in (a",
            "=a",
            "!",
            "x>1",
            "k=v=w",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
    }
}
