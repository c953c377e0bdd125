//! `etcdctl txn`: reads a transaction in etcd's grammar from stdin (compares, blank line,
//! success requests, blank line, failure requests, blank line) and runs it; `-i` prompts.

use std::ffi::OsString;
use std::io::BufRead;
use std::os::unix::ffi::OsStringExt;

use clap::{Args, Parser};
use proto::etcdserverpb::{Compare, RequestOp, TxnRequest, compare, request_op};

use super::Ctx;
use crate::error::{CtlError, Result};
use crate::global::go_bool;
use crate::util::parse_go_i64;

/// Txn processes all the requests in one transaction
#[derive(Args, Debug)]
pub struct TxnArgs {
    /// Input transaction in interactive mode
    #[arg(short = 'i', long, default_value = "false", num_args = 0..=1, default_missing_value = "true", require_equals = true, value_parser = go_bool)]
    pub interactive: bool,
    /// Refused with etcd's message (clap would call them unknown flags).
    #[arg(hide = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// One request line of a transaction, parsed with the commands' own flags.
#[derive(Parser, Debug)]
#[command(no_binary_name = true)]
enum OpLine {
    Get(super::get::GetArgs),
    Put(super::put::PutArgs),
    Del(super::del::DelArgs),
}

/// Splits a request line into words; double-quoted words are Go-unquoted (so `"a b"` and
/// `"line\n"` work as in etcd). Words are bytes: `"k\xff"` is the byte 0xff, as in Go.
pub fn argify(line: &str) -> Result<Vec<OsString>> {
    let mut out = Vec::new();
    let mut chars = line.char_indices().peekable();
    while let Some(&(i, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if c == '"' {
            // Go's etcdctl hands strconv.Unquote's error up unchanged.
            let (s, used) = go_unquote(&line[i..])
                .ok_or_else(|| CtlError::InvalidInput("invalid syntax".into()))?;
            out.push(OsString::from_vec(s));
            let end = i + used;
            while chars.peek().is_some_and(|&(j, _)| j < end) {
                chars.next();
            }
            continue;
        }
        let mut end = line.len();
        while let Some(&(j, ch)) = chars.peek() {
            if ch.is_whitespace() {
                end = j;
                break;
            }
            chars.next();
        }
        out.push(OsString::from(&line[i..end]));
    }
    Ok(out)
}

/// Reads one Go-quoted string at the start of `s` (double quotes with Go's escapes, or back
/// quotes taken raw); returns its bytes and how many bytes of `s` it used.
pub fn go_unquote(s: &str) -> Option<(Vec<u8>, usize)> {
    if let Some(raw) = s.strip_prefix('`') {
        let end = raw.find('`')?;
        return Some((raw.as_bytes()[..end].to_vec(), end + 2));
    }
    let mut it = s.char_indices();
    if it.next()?.1 != '"' {
        return None;
    }
    // `n` hex digits, all of them there.
    fn hex(it: &mut std::str::CharIndices, n: usize) -> Option<u32> {
        (0..n).try_fold(0u32, |acc, _| Some(acc * 16 + it.next()?.1.to_digit(16)?))
    }
    let mut out: Vec<u8> = Vec::new();
    while let Some((i, c)) = it.next() {
        match c {
            '"' => return Some((out, i + 1)),
            '\\' => {
                let (_, e) = it.next()?;
                match e {
                    'n' => out.push(b'\n'),
                    't' => out.push(b'\t'),
                    'r' => out.push(b'\r'),
                    'a' => out.push(7),
                    'b' => out.push(8),
                    'f' => out.push(12),
                    'v' => out.push(11),
                    '\\' => out.push(b'\\'),
                    '"' => out.push(b'"'),
                    '\'' => out.push(b'\''),
                    // A byte, not a character: `\xff` is 0xff, not U+00FF.
                    'x' => out.push(u8::try_from(hex(&mut it, 2)?).ok()?),
                    '0'..='7' => {
                        let mut v = e.to_digit(8)?;
                        for _ in 0..2 {
                            v = v * 8 + it.next()?.1.to_digit(8)?;
                        }
                        out.push(u8::try_from(v).ok()?);
                    }
                    'u' | 'U' => {
                        let ch = char::from_u32(hex(&mut it, if e == 'u' { 4 } else { 8 })?)?;
                        out.extend_from_slice(ch.to_string().as_bytes());
                    }
                    _ => return None,
                }
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    None
}

/// Reads `target("key") op "value"` as Go's `Sscanf(rest, "%q) %s %q")` does: the fields read
/// before the first mismatch (the rest empty), and how many there were.
fn scan_compare(rest: &str) -> (Vec<u8>, String, Vec<u8>, usize) {
    let (mut key, mut op, mut value) = (Vec::new(), String::new(), Vec::new());
    let mut scan = || -> Option<usize> {
        let r = rest.trim_start();
        let (k, used) = go_unquote(r)?;
        key = k;
        let r = r[used..].strip_prefix(')')?.trim_start();
        let word_end = r.find(char::is_whitespace).unwrap_or(r.len());
        if word_end == 0 {
            return None;
        }
        op = r[..word_end].to_string();
        let r = r[word_end..].trim_start();
        value = go_unquote(r)?.0;
        Some(3)
    };
    let n = scan();
    let n = n.unwrap_or(match (op.is_empty(), key.is_empty()) {
        (false, _) => 2,
        (true, false) => 1,
        (true, true) => 0,
    });
    (key, op, value, n)
}

/// Parses one compare line: `target("key") op "value"`, with etcdctl 3.4's messages for the
/// lines it refuses (text after the value is ignored, as Go's scanner ignores it).
pub fn parse_compare(line: &str) -> Result<Compare> {
    let line = line.trim();
    let malformed = || CtlError::InvalidInput(format!("malformed comparison: {line}"));
    let Some((target_word, rest)) = line.split_once('(') else {
        return Err(malformed());
    };
    let (key, op_word, value, n) = scan_compare(rest);
    if n != 3 {
        return Err(CtlError::InvalidInput(format!(
            "malformed comparison: {line}; got {target_word}({}) {op_word} {}",
            crate::util::go_quote(&key),
            crate::util::go_quote(&value),
        )));
    }
    let op = match op_word.as_str() {
        "=" => compare::CompareResult::Equal,
        "!=" => compare::CompareResult::NotEqual,
        "<" => compare::CompareResult::Less,
        ">" => compare::CompareResult::Greater,
        // Go's client panics here; a clear error is kinder and exits as other bad input.
        _ => return Err(malformed()),
    };
    let bad = || CtlError::InvalidInput(format!("invalid txn compare request: {line}"));
    // Numbers are ASCII; other bytes fail to parse as they do in Go.
    let text = String::from_utf8_lossy(&value).into_owned();
    let num = |v: &str| parse_go_i64(v, 10).map_err(|_| bad());
    use compare::{CompareTarget as T, TargetUnion as U};
    let (target, union) = match target_word {
        "c" | "create" => (T::Create, U::CreateRevision(num(&text)?)),
        "m" | "mod" => (T::Mod, U::ModRevision(num(&text)?)),
        "val" | "value" => (T::Value, U::Value(value)),
        "ver" | "version" => (T::Version, U::Version(num(&text)?)),
        "lease" => (
            T::Lease,
            U::Lease(parse_go_i64(&text, 16).map_err(|_| bad())?),
        ),
        _ => {
            return Err(CtlError::InvalidInput(format!(
                "malformed comparison: {line} (unknown target {target_word})"
            )));
        }
    };
    Ok(Compare {
        result: op as i32,
        target: target as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(union),
    })
}

/// Parses one request line (`get`, `put` or `del` with their flags).
pub fn parse_op(line: &str, write_out: &str) -> Result<RequestOp> {
    let words = argify(line)?;
    if words.len() < 2 {
        return Err(CtlError::InvalidInput(format!(
            "invalid txn compare request: {line}"
        )));
    }
    // Only these three: Go's etcdctl refuses "delete" here too (3.4 and 3.5).
    if !["get", "put", "del"].contains(&words[0].to_str().unwrap_or_default()) {
        return Err(CtlError::InvalidInput(format!(
            "invalid txn request: {line}"
        )));
    }
    // A flag error is Go's "invalid txn request", after the usage of the request's command
    // (cobra's own template: etcd parses each line with a command of its own).
    let op = OpLine::try_parse_from(&words).map_err(|_| {
        let root = <crate::Cli as clap::CommandFactory>::command();
        if let Some(cmd) = words[0].to_str().and_then(|w| root.find_subcommand(w)) {
            eprint!("{}", crate::help::cobra_usage(cmd));
        }
        CtlError::InvalidInput(format!("invalid txn request: {line}"))
    })?;
    let request = match op {
        OpLine::Get(a) => {
            request_op::Request::RequestRange(super::get::build_request(&a, write_out)?)
        }
        OpLine::Put(a) => {
            request_op::Request::RequestPut(super::put::build_request(&a, &mut std::io::empty())?)
        }
        OpLine::Del(a) => request_op::Request::RequestDeleteRange(super::del::build_request(&a)?),
    };
    Ok(RequestOp {
        request: Some(request),
    })
}

/// Reads lines up to a blank one, parsing each as it arrives: a bad line fails at once, before
/// the blank line (Go's etcdctl does the same, so a typo on a terminal is reported right away).
/// Running out of input first is etcd's "EOF" error.
fn read_section<T>(input: &mut dyn BufRead, parse: impl Fn(&str) -> Result<T>) -> Result<Vec<T>> {
    let mut parsed = Vec::new();
    loop {
        let mut l = String::new();
        let n = input.read_line(&mut l)?;
        if n == 0 {
            return Err(CtlError::InvalidInput("EOF".into()));
        }
        let l = l.trim_end_matches(['\n', '\r']);
        if l.is_empty() {
            return Ok(parsed);
        }
        parsed.push(parse(l)?);
    }
}

/// Reads a whole transaction in etcd's grammar, printing the prompts when interactive.
pub fn read_txn(input: &mut dyn BufRead, interactive: bool, write_out: &str) -> Result<TxnRequest> {
    let prompt = |p: &str| {
        if interactive {
            println!("{p}");
        }
    };
    prompt("compares:");
    let compare = read_section(input, parse_compare)?;
    prompt("success requests (get, put, del):");
    let success = read_section(input, |l| parse_op(l, write_out))?;
    prompt("failure requests (get, put, del):");
    let failure = read_section(input, |l| parse_op(l, write_out))?;
    Ok(TxnRequest {
        compare,
        success,
        failure,
    })
}

pub async fn run(ctx: &Ctx, a: &TxnArgs) -> Result<()> {
    if !a.args.is_empty() {
        return Err(CtlError::bad_args("txn command does not accept argument"));
    }
    let req = {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        read_txn(&mut lock, a.interactive, &ctx.g.write_out)?
    };
    let c = ctx.client().await?;
    let resp = c.unary(c.kv().txn(req)).await?;
    ctx.print(|p, w| p.txn(w, &resp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argify_unquotes_like_go() {
        assert_eq!(
            argify(r#"put k "x y""#).ok(),
            Some(vec!["put".into(), "k".into(), "x y".into()])
        );
        assert_eq!(
            argify(r#"put k "a\nb""#).ok(),
            Some(vec!["put".into(), "k".into(), "a\nb".into()])
        );
    }

    #[test]
    fn compares_parse_every_target() {
        for l in [
            r#"value("k") = "v""#,
            r#"mod("k") > "0""#,
            r#"create("k") != "0""#,
            r#"version("k") < "3""#,
            r#"c("k") = "1""#,
        ] {
            assert!(parse_compare(l).is_ok(), "{l}");
        }
        assert!(parse_compare("bogus").is_err());
        assert!(parse_compare(r#"mod("k") = "x""#).is_err());
        assert!(parse_compare(r#"value("k") ~ "x""#).is_err());
    }

    #[test]
    fn txn_needs_three_terminated_sections() {
        let mut ok = &b"value(\"a\") = \"b\"\n\nput a c\n\nget a\n\n"[..];
        let t = read_txn(&mut ok, false, "simple").map_err(|e| e.to_string());
        assert_eq!(
            t.map(|t| (t.compare.len(), t.success.len(), t.failure.len())),
            Ok((1, 1, 1))
        );
        let mut eof = &b"value(\"a\") = \"b\"\n\nput a c\n"[..];
        assert_eq!(
            read_txn(&mut eof, false, "simple")
                .map_err(|e| e.to_string())
                .err(),
            Some("EOF".to_string())
        );
        // A bad line fails when it is read, not at its section's end: nothing after it is needed.
        let mut bad = &b"value(\"a\") = \n"[..];
        assert_eq!(
            read_txn(&mut bad, false, "simple")
                .map_err(|e| e.to_string())
                .err(),
            Some("malformed comparison: value(\"a\") =; got value(\"a\") = \"\"".to_string())
        );
    }
}

#[cfg(test)]
#[path = "txn_fuzz.rs"]
mod fuzz;
