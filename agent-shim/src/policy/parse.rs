//! The policy file (docs/reference.md §7): TOML text → a validated [`Policy`], or one error line
//! naming the key and its `line:column`.
//!
//! Owns the file's grammar: the keys, the size syntax ([`parse_size`]) and the glob syntax
//! ([`Glob`]). Pure: no I/O, no agent state; the agent reads the file once at load and hands
//! the text here.
//!
//! Must never accept a file it does not fully understand: an unknown key, a bad size, a bad
//! pattern or a rule that names neither a thread nor a function is an error, and the agent
//! then refuses every cancel (a typo must never widen what may be cancelled).

use std::fmt;

use heaptui_protocol::{Mechanism, PermitRule, PolicySummary, Trigger};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A validated policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    pub dry_run: bool,
    /// Bytes; 0 when unset.
    pub min_release: u64,
    pub permits: Vec<Permit>,
    pub trigger: Option<TriggerRule>,
}

/// One `[[permit]]` rule: exactly one of a thread-name glob or a function glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit {
    pub matcher: Matcher,
    pub mechanism: Mechanism,
    /// 1-based position among the `[[permit]]` tables, for audit lines and refusals.
    pub index: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    Thread(Glob),
    Function(Glob),
}

/// The autonomous-mode trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TriggerRule {
    pub live_bytes: Option<u64>,
    pub on_malloc_failure: bool,
}

impl Permit {
    /// The rule as written, e.g. `permit #2: thread = "report-*" (cooperative)`.
    pub fn describe(&self) -> String {
        let (key, glob) = match &self.matcher {
            Matcher::Thread(g) => ("thread", g),
            Matcher::Function(g) => ("function", g),
        };
        format!(
            "permit #{}: {key} = {:?} ({})",
            self.index,
            glob.as_str(),
            mechanism_name(self.mechanism)
        )
    }

    /// Whether this rule permits a thread named `name` whose stack holds `functions`.
    pub fn matches<'a>(&self, name: &str, mut functions: impl Iterator<Item = &'a str>) -> bool {
        match &self.matcher {
            Matcher::Thread(g) => g.matches(name),
            Matcher::Function(g) => functions.any(|f| function_matches(g, f)),
        }
    }
}

/// A symbolized function name matches a function glob on the whole name, or on the name cut
/// at its argument list (`ns::Report::build(int)` matches `ns::Report::build`).
fn function_matches(glob: &Glob, function: &str) -> bool {
    if glob.matches(function) {
        return true;
    }
    match function.find('(') {
        Some(i) if i > 0 => glob.matches(&function[..i]),
        _ => false,
    }
}

/// `cooperative` or `pthread_cancel`, as written in the file.
pub fn mechanism_name(m: Mechanism) -> &'static str {
    match m {
        Mechanism::Cooperative => "cooperative",
        Mechanism::PthreadCancel => "pthread_cancel",
    }
}

impl Policy {
    /// What the protocol shows of it.
    pub fn summary(&self) -> PolicySummary {
        PolicySummary {
            dry_run: self.dry_run,
            min_release: self.min_release,
            permits: self
                .permits
                .iter()
                .map(|p| PermitRule {
                    thread: match &p.matcher {
                        Matcher::Thread(g) => Some(g.as_str().to_owned()),
                        Matcher::Function(_) => None,
                    },
                    function: match &p.matcher {
                        Matcher::Function(g) => Some(g.as_str().to_owned()),
                        Matcher::Thread(_) => None,
                    },
                    mechanism: p.mechanism,
                })
                .collect(),
            trigger: self.trigger.map(|t| Trigger {
                live_bytes: t.live_bytes,
                on_malloc_failure: t.on_malloc_failure,
            }),
        }
    }

    /// The first rule that permits the thread, if any.
    pub fn permit_for<'a, 'f>(
        &'a self,
        name: &str,
        functions: impl Fn() -> Box<dyn Iterator<Item = &'f str> + 'f>,
    ) -> Option<&'a Permit> {
        self.permits.iter().find(|p| p.matches(name, functions()))
    }
}

// ---- the file's shape (serde) ----

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    min_release: Option<Size>,
    #[serde(default)]
    permit: Vec<toml::Spanned<RawPermit>>,
    #[serde(default)]
    trigger: Option<toml::Spanned<RawTrigger>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPermit {
    thread: Option<Glob>,
    function: Option<Glob>,
    #[serde(default)]
    mechanism: Option<RawMechanism>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawMechanism {
    Cooperative,
    PthreadCancel,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrigger {
    live_bytes: Option<Size>,
    #[serde(default)]
    on_malloc_failure: bool,
}

/// A byte count: a non-negative integer, or a string as [`parse_size`] reads it.
struct Size(u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a byte count: an integer, or a string such as \"512 MiB\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                parse_size(v).map(Size).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Glob {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Glob::new(&text).map_err(de::Error::custom)
    }
}

// ---- sizes ----

/// Units of [`parse_size`], case-insensitive: `B`; binary `k`/`KiB` = 1024, `M`/`MiB`,
/// `G`/`GiB`, `T`/`TiB` (a bare letter means the binary unit, as `ulimit` and `sort -S` do);
/// decimal `kB`/`KB` = 1000, `MB`, `GB`, `TB`.
const UNITS: &[(&str, u64)] = &[
    ("", 1),
    ("b", 1),
    ("k", 1 << 10),
    ("kib", 1 << 10),
    ("kb", 1_000),
    ("m", 1 << 20),
    ("mib", 1 << 20),
    ("mb", 1_000_000),
    ("g", 1 << 30),
    ("gib", 1 << 30),
    ("gb", 1_000_000_000),
    ("t", 1 << 40),
    ("tib", 1 << 40),
    ("tb", 1_000_000_000_000),
];

/// Reads a size: a number (`1`, `1.5`), optional spaces, an optional unit (see [`UNITS`]:
/// `512k` = 524288, `1 MiB` = 1048576, `2GB` = 2000000000). Fractions are rounded down to a
/// whole byte.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_end);
    let unit = unit.trim_start();
    let num: String = num.chars().filter(|&c| c != '_').collect();
    let bad = |why: &str| format!("invalid size {text:?}: {why}");
    if num.is_empty() {
        return Err(bad("it does not start with a number"));
    }
    let (whole, frac) = match num.split_once('.') {
        Some((w, f)) => (w, f),
        None => (num.as_str(), ""),
    };
    if whole.is_empty() || frac.contains('.') || (num.contains('.') && frac.is_empty()) {
        return Err(bad("malformed number"));
    }
    if frac.len() > 9 {
        return Err(bad("more than 9 decimal places"));
    }
    let lower = unit.to_ascii_lowercase();
    let Some(&(_, mult)) = UNITS.iter().find(|(u, _)| *u == lower) else {
        return Err(bad(&format!(
            "unknown unit {unit:?} (use B, k/KiB, M/MiB, G/GiB, T/TiB = powers of 1024, or kB, MB, GB, TB = powers of 1000)"
        )));
    };
    let too_big = || bad("too large");
    let whole: u128 = whole.parse().map_err(|_| too_big())?;
    let frac_val: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| bad("malformed number"))?
    };
    let scale = 10u128.pow(frac.len() as u32);
    let bytes = whole
        .checked_mul(u128::from(mult))
        .and_then(|w| w.checked_add(frac_val * u128::from(mult) / scale))
        .ok_or_else(too_big)?;
    u64::try_from(bytes).map_err(|_| too_big())
}

// ---- globs ----

/// A shell-style glob: `*` (any run of characters), `?` (one character), `[abc]`, `[a-z]`,
/// `[!a-z]` (a class, `^` also negates), `\x` (a literal `x`). Matched on whole strings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    text: String,
    tokens: Vec<Tok>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Lit(char),
    Any,
    Star,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

impl Glob {
    pub fn new(text: &str) -> Result<Glob, String> {
        if text.is_empty() {
            return Err("empty pattern".into());
        }
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    if tokens.last() != Some(&Tok::Star) {
                        tokens.push(Tok::Star);
                    }
                }
                '?' => tokens.push(Tok::Any),
                '\\' => match chars.next() {
                    Some(x) => tokens.push(Tok::Lit(x)),
                    None => return Err(format!("pattern {text:?} ends with a lone backslash")),
                },
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut first = true;
                    loop {
                        let Some(mut lo) = chars.next() else {
                            return Err(format!("pattern {text:?} has an unclosed '['"));
                        };
                        if lo == ']' && !first {
                            break;
                        }
                        if lo == '\\' {
                            lo = chars.next().ok_or_else(|| {
                                format!("pattern {text:?} ends with a lone backslash")
                            })?;
                        }
                        first = false;
                        let mut hi = lo;
                        if chars.peek() == Some(&'-') {
                            let mut look = chars.clone();
                            look.next();
                            if let Some(&h) = look.peek()
                                && h != ']'
                            {
                                chars.next();
                                chars.next();
                                hi = h;
                                if hi < lo {
                                    return Err(format!(
                                        "pattern {text:?} has a backwards range {lo}-{hi}"
                                    ));
                                }
                            }
                        }
                        ranges.push((lo, hi));
                    }
                    tokens.push(Tok::Class { negated, ranges });
                }
                c => tokens.push(Tok::Lit(c)),
            }
        }
        Ok(Glob {
            text: text.to_owned(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the whole of `s` matches. Linear in `s` times the pattern length at worst
    /// (one backtrack point: the last star).
    pub fn matches(&self, s: &str) -> bool {
        let s: Vec<char> = s.chars().collect();
        let (mut p, mut i) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while i < s.len() {
            let step = match self.tokens.get(p) {
                Some(Tok::Star) => {
                    star = Some((p, i));
                    p += 1;
                    continue;
                }
                Some(Tok::Lit(c)) => *c == s[i],
                Some(Tok::Any) => true,
                Some(Tok::Class { negated, ranges }) => {
                    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&s[i])) != *negated
                }
                None => false,
            };
            if step {
                p += 1;
                i += 1;
            } else if let Some((sp, si)) = star {
                p = sp + 1;
                i = si + 1;
                star = Some((sp, si + 1));
            } else {
                return false;
            }
        }
        self.tokens[p..].iter().all(|t| *t == Tok::Star)
    }
}

// ---- the whole file ----

/// Parses and validates a policy file's text. The error is one line:
/// `line L, column C: `key`: what is wrong` (the key when one can be named).
pub fn parse(text: &str) -> Result<Policy, String> {
    let raw: RawPolicy = toml::from_str(text).map_err(|e| {
        let message = e.message().trim().replace('\n', " ");
        match e.span() {
            Some(span) => at(text, span.start, &message),
            None => message,
        }
    })?;
    let mut permits = Vec::with_capacity(raw.permit.len());
    for (i, spanned) in raw.permit.into_iter().enumerate() {
        let span = spanned.span();
        let rule = spanned.into_inner();
        let index = i + 1;
        let matcher = match (rule.thread, rule.function) {
            (Some(g), None) => Matcher::Thread(g),
            (None, Some(g)) => Matcher::Function(g),
            (Some(_), Some(_)) => {
                return Err(at(
                    text,
                    span.start,
                    &format!(
                        "`permit` #{index} sets both `thread` and `function`: write one rule for each"
                    ),
                ));
            }
            (None, None) => {
                return Err(at(
                    text,
                    span.start,
                    &format!(
                        "`permit` #{index} sets neither `thread` (a thread-name pattern) nor `function` (a function on the stack)"
                    ),
                ));
            }
        };
        let mechanism = match rule.mechanism {
            None | Some(RawMechanism::Cooperative) => Mechanism::Cooperative,
            Some(RawMechanism::PthreadCancel) => Mechanism::PthreadCancel,
        };
        permits.push(Permit {
            matcher,
            mechanism,
            index,
        });
    }
    let trigger = match raw.trigger {
        None => None,
        Some(spanned) => {
            let span = spanned.span();
            let t = spanned.into_inner();
            if t.live_bytes.is_none() && !t.on_malloc_failure {
                return Err(at(
                    text,
                    span.start,
                    "`trigger` sets neither `live_bytes` nor `on_malloc_failure = true`: remove the table or set one",
                ));
            }
            Some(TriggerRule {
                live_bytes: t.live_bytes.map(|s| s.0),
                on_malloc_failure: t.on_malloc_failure,
            })
        }
    };
    Ok(Policy {
        dry_run: raw.dry_run,
        min_release: raw.min_release.map_or(0, |s| s.0),
        permits,
        trigger,
    })
}

/// `line L, column C: message`, with the line's key (`key = …`) named when the message does
/// not already quote it.
fn at(text: &str, offset: usize, message: &str) -> String {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line_no = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..offset].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with('[') && !k.starts_with('#'));
    match key {
        Some(k) if !message.contains(&format!("`{k}`")) => {
            format!("line {line_no}, column {column}: `{k}`: {message}")
        }
        _ => format!("line {line_no}, column {column}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_every_unit() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("4096", 4096),
            ("12 B", 12),
            ("512k", 512 << 10),
            ("512K", 512 << 10),
            ("1 KiB", 1024),
            ("1kB", 1000),
            ("1 KB", 1000),
            ("1 MiB", 1 << 20),
            ("1M", 1 << 20),
            ("3 MB", 3_000_000),
            ("2GB", 2_000_000_000),
            ("2 GiB", 2 << 30),
            ("1g", 1 << 30),
            ("1 TiB", 1 << 40),
            ("1 TB", 1_000_000_000_000),
            ("1.5 MiB", 3 << 19),
            ("0.5k", 512),
            ("1_000", 1000),
            ("  7 mib ", 7 << 20),
        ];
        for &(text, want) in cases {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_sizes_say_why() {
        for (text, why) in [
            ("", "does not start with a number"),
            ("MiB", "does not start with a number"),
            ("-1 MiB", "does not start with a number"),
            ("12 parsecs", "unknown unit \"parsecs\""),
            ("1.2.3", "malformed number"),
            ("1.", "malformed number"),
            (".5", "malformed number"),
            ("1.0000000001 B", "more than 9 decimal places"),
            ("99999999999999999999999", "too large"),
            ("20000000 TiB", "too large"),
            ("1 MiB extra", "unknown unit"),
        ] {
            let e = parse_size(text).unwrap_err();
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(e.contains(&format!("{text:?}")), "{e}");
        }
    }

    #[test]
    fn globs_match_like_a_shell() {
        let m = |p: &str, s: &str| Glob::new(p).unwrap().matches(s);
        assert!(m("report-*", "report-builder"));
        assert!(m("report-*", "report-"));
        assert!(!m("report-*", "xreport-1"));
        assert!(m("*", ""));
        assert!(m("*-*-*", "a-b-c"));
        assert!(!m("*-*-*", "a-b"));
        assert!(m("w?rker", "worker"));
        assert!(!m("w?rker", "wrker"));
        assert!(m("worker-[0-9]", "worker-7"));
        assert!(!m("worker-[0-9]", "worker-x"));
        assert!(m("worker-[!0-9]", "worker-x"));
        assert!(m("worker-[^0-9]", "worker-x"));
        assert!(m("[]a]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m(r"a\*b", "a*b"));
        assert!(!m(r"a\*b", "axb"));
        assert!(m("*a*a*a*b", "aaaaaaaaaaaaaaab"));
        assert!(!m("*a*a*a*b", "aaaaaaaaaaaaaaaa"));
        assert!(m("é*", "école"));
        assert!(!m("exact", "exactly"));
    }

    #[test]
    fn bad_globs_say_why() {
        assert!(Glob::new("").unwrap_err().contains("empty"));
        assert!(Glob::new("a[bc").unwrap_err().contains("unclosed '['"));
        assert!(Glob::new("a\\").unwrap_err().contains("lone backslash"));
        assert!(Glob::new("[z-a]").unwrap_err().contains("backwards range"));
    }

    const FULL: &str = r#"
dry_run = false
min_release = "1 MiB"            # bytes, or a size with a unit

[[permit]]
thread = "report-*"
mechanism = "cooperative"

[[permit]]
function = "build_report"

[[permit]]
thread = "legacy-*"
mechanism = "pthread_cancel"

[trigger]
live_bytes = "512 MiB"
on_malloc_failure = true
"#;

    #[test]
    fn the_spec_example_parses() {
        let p = parse(FULL).unwrap();
        assert!(!p.dry_run);
        assert_eq!(p.min_release, 1 << 20);
        assert_eq!(p.permits.len(), 3);
        assert_eq!(
            p.permits[0].matcher,
            Matcher::Thread(Glob::new("report-*").unwrap())
        );
        assert_eq!(p.permits[0].mechanism, Mechanism::Cooperative);
        assert_eq!(
            p.permits[1].matcher,
            Matcher::Function(Glob::new("build_report").unwrap())
        );
        assert_eq!(p.permits[1].mechanism, Mechanism::Cooperative);
        assert_eq!(p.permits[2].mechanism, Mechanism::PthreadCancel);
        assert_eq!(p.permits[2].index, 3);
        assert_eq!(
            p.trigger,
            Some(TriggerRule {
                live_bytes: Some(512 << 20),
                on_malloc_failure: true
            })
        );
        let s = p.summary();
        assert_eq!(s.permits[1].function.as_deref(), Some("build_report"));
        assert_eq!(s.permits[1].thread, None);
        assert_eq!(s.trigger.unwrap().live_bytes, Some(512 << 20));
        assert_eq!(
            p.permits[0].describe(),
            "permit #1: thread = \"report-*\" (cooperative)"
        );
    }

    #[test]
    fn the_shipped_example_parses() {
        let p = parse(include_str!("../../../examples/policy.toml")).unwrap();
        assert_eq!(p.permits.len(), 3);
        assert_eq!(p.permits[2].mechanism, Mechanism::PthreadCancel);
        assert_eq!(p.trigger.unwrap().live_bytes, Some(512 << 20));
    }

    #[test]
    fn defaults_permit_nothing() {
        let p = parse("").unwrap();
        assert_eq!(
            p,
            Policy {
                dry_run: false,
                min_release: 0,
                permits: vec![],
                trigger: None
            }
        );
        let p = parse("min_release = 4096\ndry_run = true").unwrap();
        assert_eq!((p.min_release, p.dry_run), (4096, true));
    }

    #[test]
    fn rules_match_names_and_stack_functions() {
        let p = parse(FULL).unwrap();
        let none = || Box::new(std::iter::empty::<&str>()) as Box<dyn Iterator<Item = &str>>;
        assert_eq!(p.permit_for("report-builder", none).unwrap().index, 1);
        assert!(p.permit_for("worker-1", none).is_none());
        let stack = || {
            Box::new(["nanosleep", "build_report", "main"].into_iter())
                as Box<dyn Iterator<Item = &str>>
        };
        assert_eq!(p.permit_for("worker-1", stack).unwrap().index, 2);
        let cpp = parse("[[permit]]\nfunction = \"ns::Report::build\"").unwrap();
        let stack = || {
            Box::new(["ns::Report::build(int)", "main"].into_iter())
                as Box<dyn Iterator<Item = &str>>
        };
        assert!(cpp.permit_for("x", stack).is_some());
    }

    fn err(text: &str) -> String {
        let e = parse(text).unwrap_err();
        assert!(!e.contains('\n'), "one line: {e}");
        e
    }

    #[test]
    fn errors_name_the_key_and_the_line() {
        let e = err("dry_run = false\nmin_relase = 5\n");
        assert!(e.starts_with("line 2, column 1:"), "{e}");
        assert!(e.contains("min_relase"), "{e}");

        let e = err("min_release = \"12 parsecs\"\n");
        assert!(e.starts_with("line 1, column 15: `min_release`:"), "{e}");
        assert!(e.contains("unknown unit \"parsecs\""), "{e}");

        let e = err("min_release = -5\n");
        assert!(e.contains("`min_release`") && e.contains("negative"), "{e}");

        let e = err("[[permit]]\nthread = \"a[b\"\n");
        assert!(e.starts_with("line 2, column 10: `thread`:"), "{e}");
        assert!(e.contains("unclosed '['"), "{e}");

        let e = err("[[permit]]\nthread = \"a\"\nmechanism = \"sigkill\"\n");
        assert!(e.starts_with("line 3"), "{e}");
        assert!(e.contains("sigkill") && e.contains("mechanism"), "{e}");

        let e = err("[[permit]]\nthred = \"a\"\n");
        assert!(e.contains("thred"), "{e}");

        let e = err("[[permit]]\nthread = \"a\"\n[[permit]]\nmechanism = \"cooperative\"\n");
        assert!(e.contains("`permit` #2 sets neither"), "{e}");
        assert!(e.starts_with("line 3") || e.starts_with("line 4"), "{e}");

        let e = err("[[permit]]\nthread = \"a\"\nfunction = \"f\"\n");
        assert!(e.contains("`permit` #1 sets both"), "{e}");

        let e = err("[trigger]\n");
        assert!(e.contains("`trigger` sets neither"), "{e}");

        let e = err("[trigger]\nlive_bytes = \"lots\"\n");
        assert!(e.contains("`live_bytes`") && e.starts_with("line 2"), "{e}");

        let e = err("[trigger]\nlive_bytes = 5\nsoft = 1\n");
        assert!(e.contains("soft"), "{e}");

        let e = err("dry_run = \"yes\"\n");
        assert!(e.contains("`dry_run`"), "{e}");

        let e = err("this is not toml");
        assert!(e.starts_with("line 1"), "{e}");
    }
}
