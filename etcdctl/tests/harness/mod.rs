// The comparison harness behind compat.rs: runs the same steps with the real Go etcdctl on one
// server and with ours on a twin server fed the same history, then compares what they print.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::RealEtcd;

/// Path of our etcdctl binary, built by cargo for the integration tests.
pub const OURS: &str = env!("CARGO_BIN_EXE_etcdctl");

/// Which client a run uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Client {
    /// Debian's Go etcdctl 3.4, the oracle.
    Go,
    /// This crate's binary.
    Ours,
}

/// One server under test. Today both twins are real etcd 3.4 processes; when our server
/// exists, `Twin::start` can start it in place of the second one (or of both) and the same
/// tables run unchanged.
pub struct Server {
    pub etcd: RealEtcd,
    pub cluster_id: u64,
    pub member_id: u64,
    /// Lease and member IDs created on this server, named by the step that captured them.
    pub ids: HashMap<&'static str, u64>,
}

impl Server {
    pub fn start(dir: &Path, name: &str) -> Server {
        Self::start_with(dir, name, &[])
    }

    /// Starts a server with extra etcd flags.
    pub fn start_with(dir: &Path, name: &str, extra: &[&str]) -> Server {
        Self::start_bin("etcd", dir, name, extra)
    }

    /// Starts another etcd-compatible server binary (e.g. etcd-rs) as this twin.
    pub fn start_bin(bin: &str, dir: &Path, name: &str, extra: &[&str]) -> Server {
        let etcd = RealEtcd::start_bin(bin, &dir.join(name), "default", extra);
        let out = etcd.etcdctl_ok(&["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("status json");
        let hdr = &v[0]["Status"]["header"];
        Server {
            cluster_id: hdr["cluster_id"].as_u64().expect("cluster_id"),
            member_id: hdr["member_id"].as_u64().expect("member_id"),
            etcd,
            ids: HashMap::new(),
        }
    }

    pub fn url(&self) -> &str {
        &self.etcd.client_url
    }

    /// Replaces what must differ between twin servers with placeholders:
    /// - cluster and member IDs (derived from each server's own peer URL), decimal and hex;
    /// - client and peer URLs (each server has its own free ports);
    /// - lease and member IDs created by the steps (derived from the member ID, the clock or
    ///   random numbers), decimal and hex.
    pub fn normalise(&self, s: &str) -> String {
        let mut s = s.to_string();
        s = s.replace(&self.files_dir().display().to_string(), "<DIR>");
        s = s.replace(&self.etcd.client_url, "<CLIENT_URL>");
        s = s.replace(&self.etcd.peer_url, "<PEER_URL>");
        for (id, name) in [
            (self.cluster_id, "<CLUSTER_ID>"),
            (self.member_id, "<MEMBER_ID>"),
        ] {
            s = unpad(&s, id, name);
            s = s.replace(&id.to_string(), name);
            s = s.replace(&format!("{id:016x}"), name);
            s = s.replace(&format!("{id:x}"), name);
        }
        for (n, id) in &self.ids {
            let name = format!("<ID_{n}>");
            s = unpad(&s, *id, &name);
            s = s.replace(&id.to_string(), &name);
            s = s.replace(&format!("{id:016x}"), &name);
            s = s.replace(&format!("{id:x}"), &name);
        }
        table_cells(&normalise_durations(&hide_session_keys(&s)))
    }

    /// A directory for files a step writes (snapshots); steps name it `{DIR}`.
    pub fn files_dir(&self) -> std::path::PathBuf {
        let d = self.etcd.data_dir.with_extension("files");
        let _ = std::fs::create_dir_all(&d);
        d
    }
}

/// etcd prints some IDs with "%16x", padding an ID of fewer than 16 hex digits with spaces,
/// so one twin may print "cluster  abc" where the other prints "cluster abcd": the padded
/// form after its separating space becomes the plain name.
fn unpad(s: &str, id: u64, name: &str) -> String {
    let padded = format!(" {id:16x}");
    if padded.trim_start().len() == 16 {
        return s.to_string();
    }
    s.replace(&padded, &format!(" {name}"))
}

/// Column widths follow the longest cell, and IDs and durations differ in length between
/// the twins: tables are compared cell by cell (rule lines dropped, cells trimmed). The
/// layout itself is checked by a unit test of the table printer against etcd's output.
pub fn table_cells(s: &str) -> String {
    if !s.starts_with("+-") {
        return s.to_string();
    }
    s.lines()
        .filter(|l| !l.starts_with('+'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lock and election keys end in the session's lease ID in hex ("name/694d77aa9e38260f"),
/// which differs between the twins even when no step captured it.
pub fn hide_session_keys(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if b[i] == b'/' {
            // %x drops leading zeros: 12 to 16 hex digits.
            let n = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit())
                .count();
            if (12..=16).contains(&n) {
                out.push_str("/<SESSION>");
                i += 1 + n;
                continue;
            }
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Durations measured by the client ("took = 1.2ms") differ from run to run.
pub fn normalise_durations(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let units = ["ns", "µs", "ms", "s", "m", "h"];
    let b = s.as_bytes();
    let mut i = 0;
    while i < s.len() {
        // A duration starts with a digit that does not follow an alphanumeric character.
        let starts = b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if starts {
            let mut j = i;
            let mut saw_unit = false;
            loop {
                let k = j + s[j..]
                    .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .unwrap_or(s.len() - j);
                if k == j {
                    break;
                }
                let rest = &s[k..];
                let unit = units
                    .iter()
                    .filter(|u| rest.starts_with(**u))
                    .max_by_key(|u| u.len());
                match unit {
                    Some(u) => {
                        j = k + u.len();
                        saw_unit = true;
                    }
                    None => break,
                }
                if !s[j..].starts_with(|c: char| c.is_ascii_digit()) {
                    break;
                }
            }
            let end_ok = j >= s.len() || !s.as_bytes()[j].is_ascii_alphanumeric();
            if saw_unit && end_ok {
                out.push_str("<DURATION>");
                i = j;
                continue;
            }
        }
        let c = s[i..].chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// What one step prints.
#[derive(Debug, PartialEq)]
pub struct Seen {
    pub code: Option<i32>,
    pub stdout: String,
    /// The first line of stderr, without the Go client's JSON log lines.
    pub stderr_first: String,
    /// All of stderr but those log lines (compared by `Cmp::WholeStderr` only).
    pub stderr: String,
}

impl Seen {
    /// What `Cmp::Full` compares.
    fn same(&self, o: &Seen) -> bool {
        self.code == o.code && self.stdout == o.stdout && self.stderr_first == o.stderr_first
    }
}

/// How strictly a step's outputs are compared.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    /// stdout, exit code and the first stderr line.
    Full,
    /// Exit code and the first stderr line only: for errors where etcd's Go client also
    /// prints its whole usage text to stdout, which we do not reproduce.
    ErrorOnly,
    /// Exit code only (the error text differs; see the step's comment).
    CodeOnly,
    /// stdout, exit code and every stderr line (usage blocks printed before an error).
    WholeStderr,
    /// Like Full, but the order of lines, of JSON array items and of the names in
    /// ETCD_INITIAL_CLUSTER does not matter: the server lists members by their random IDs,
    /// so twin servers list the same members in different orders.
    Unordered,
}

/// The order-free form of an output, for `Cmp::Unordered`.
pub fn unordered(s: &str) -> String {
    fn sort_json(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Array(items) => {
                items.iter_mut().for_each(sort_json);
                items.sort_by_key(|x| x.to_string());
            }
            serde_json::Value::Object(m) => m.values_mut().for_each(sort_json),
            _ => {}
        }
    }
    // Placeholders stand where JSON numbers were: quote them so the text parses.
    let mut quoted = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        let close = rest[i..].find('>').map(|j| i + j);
        let name_ok = close.is_some_and(|c| {
            rest[i + 1..c]
                .chars()
                .all(|ch| ch.is_ascii_uppercase() || ch.is_ascii_digit() || ch == '_')
        });
        match close {
            Some(c) if name_ok && !rest[..i].ends_with('"') => {
                quoted.push_str(&rest[..i]);
                quoted.push('"');
                quoted.push_str(&rest[i..=c]);
                quoted.push('"');
                rest = &rest[c + 1..];
            }
            _ => {
                quoted.push_str(&rest[..=i]);
                rest = &rest[i + 1..];
            }
        }
    }
    quoted.push_str(rest);
    if let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&quoted) {
        sort_json(&mut v);
        return v.to_string();
    }
    let mut lines: Vec<String> = s
        .lines()
        .map(|l| match l.strip_prefix("ETCD_INITIAL_CLUSTER=") {
            Some(rest) => {
                let mut names: Vec<&str> = rest.trim_matches('"').split(',').collect();
                names.sort();
                format!("ETCD_INITIAL_CLUSTER={}", names.join(","))
            }
            None => l.to_string(),
        })
        .collect();
    lines.sort();
    lines.join("\n")
}

/// One row of a table.
pub struct Step {
    pub args: &'static [&'static str],
    pub stdin: Option<&'static str>,
    pub cmp: Cmp,
    /// When set, the step's output holds a new lease or member ID to remember under this
    /// name; later steps write `{name}` in their args for it.
    pub capture: Option<&'static str>,
    /// Numbers that follow these texts are masked: remaining TTLs tick on each server's own
    /// clock, so the twins may be a second apart.
    pub mask: &'static [&'static str],
    /// For commands that never end by themselves (watch, keep-alive): both clients run at
    /// the same time for this long and are then killed; what they printed is compared.
    pub stream_ms: Option<u64>,
}

pub const fn step(args: &'static [&'static str]) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::Full,
        capture: None,
        mask: &[],
        stream_ms: None,
    }
}

pub const fn err(args: &'static [&'static str]) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::ErrorOnly,
        capture: None,
        mask: &[],
        stream_ms: None,
    }
}

pub const fn code(args: &'static [&'static str]) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::CodeOnly,
        capture: None,
        mask: &[],
        stream_ms: None,
    }
}

pub const fn input(args: &'static [&'static str], stdin: &'static str) -> Step {
    Step {
        args,
        stdin: Some(stdin),
        cmp: Cmp::Full,
        capture: None,
        mask: &[],
        stream_ms: None,
    }
}

pub const fn masked(args: &'static [&'static str], mask: &'static [&'static str]) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::Full,
        capture: None,
        mask,
        stream_ms: None,
    }
}

/// A step compared without regard to the order of members (see `Cmp::Unordered`).
pub const fn anyorder(args: &'static [&'static str]) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::Unordered,
        capture: None,
        mask: &[],
        stream_ms: None,
    }
}

/// A step whose output holds a new ID (lease or member) to remember under `name`.
pub const fn capture(args: &'static [&'static str], name: &'static str) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::Full,
        capture: Some(name),
        mask: &[],
        stream_ms: None,
    }
}

/// A step for a command that streams until killed (see `Step::stream_ms`).
pub const fn stream(args: &'static [&'static str], ms: u64) -> Step {
    Step {
        args,
        stdin: None,
        cmp: Cmp::Full,
        capture: None,
        mask: &[],
        stream_ms: Some(ms),
    }
}

/// Runs a client binary against a server with the given args and stdin.
pub fn run_client(client: Client, url: &str, args: &[String], stdin: Option<&str>) -> Output {
    let child = spawn_client(client, url, args, stdin);
    // A client that does not end by itself must not hang the suite: kill it after 30s
    // (its exit code is then None, which no expected outcome has). Output is read by the
    // waiting thread meanwhile, so a full pipe cannot stall the client.
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(out) => out.expect("wait client"),
        Err(_) => {
            // Safety: signalling the client process this harness started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            rx.recv().expect("client thread").expect("wait client")
        }
    }
}

/// Starts a client binary; its stdin gets `stdin` and is then closed.
pub fn spawn_client(
    client: Client,
    url: &str,
    args: &[String],
    stdin: Option<&str>,
) -> std::process::Child {
    let bin = match client {
        Client::Go => "etcdctl",
        Client::Ours => OURS,
    };
    let mut cmd = Command::new(bin);
    cmd.env("ETCDCTL_API", "3")
        .env_remove("ETCDCTL_ENDPOINTS")
        .env_remove("ETCDCTL_WRITE_OUT")
        .arg(format!("--endpoints={url}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
    {
        let mut sin = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            let _ = sin.write_all(s.as_bytes());
        }
    }
    child
}

pub fn seen(out: &Output) -> Seen {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("{\"level\""))
        .collect();
    Seen {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr_first: lines.first().copied().unwrap_or("").to_string(),
        stderr: lines.join("\n"),
    }
}

/// The ID in "lease <hex> granted", "Member <hex> added", `"ID":<dec>` or `"ID" : <dec>`.
fn find_id(out: &str) -> Option<u64> {
    for mark in ["\"ID\":", "\"ID\" : "] {
        if let Some(rest) = out.split(mark).nth(1) {
            let n = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            return rest[..n].parse().ok();
        }
    }
    let rest = out
        .split("lease ")
        .nth(1)
        .or_else(|| out.split("Member ").nth(1))?;
    let hex = rest.split_whitespace().next()?;
    u64::from_str_radix(hex, 16).ok()
}

/// Masks the number following each of `marks`.
fn mask_numbers(s: &str, marks: &[&str]) -> String {
    let mut s = s.to_string();
    for m in marks {
        let mut out = String::new();
        let mut rest = s.as_str();
        while let Some(i) = rest.find(m) {
            out.push_str(&rest[..i + m.len()]);
            rest = &rest[i + m.len()..];
            let n = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                .unwrap_or(rest.len());
            if n > 0 {
                out.push_str("<N>");
            }
            rest = &rest[n..];
        }
        out.push_str(rest);
        s = out;
    }
    s
}

/// Two servers with the same history: `go` is driven by the Go etcdctl, `ours` by ours.
pub struct Twin {
    pub dir: tempfile::TempDir,
    pub go: Server,
    pub ours: Server,
}

impl Twin {
    pub fn start() -> Twin {
        Self::start_with(&[])
    }

    /// Twins started with extra etcd flags (both the same).
    pub fn start_with(extra: &[&str]) -> Twin {
        let dir = tempfile::tempdir().expect("tempdir");
        let go = Server::start_with(dir.path(), "go", extra);
        // TWIN_SERVER_BIN=<path to an etcd binary> runs our etcdctl against that server
        // (etcd-rs) while the Go etcdctl keeps the real etcd: the tables then compare both.
        let ours = match std::env::var("TWIN_SERVER_BIN") {
            Ok(bin) if !bin.is_empty() => Server::start_bin(&bin, dir.path(), "ours", extra),
            _ => Server::start_with(dir.path(), "ours", extra),
        };
        Twin { dir, go, ours }
    }

    fn args_for(server: &Server, args: &[&str]) -> Vec<String> {
        args.iter()
            .map(|a| {
                let mut a = a.replace("{DIR}", &server.files_dir().display().to_string());
                a = a.replace("{SELF}", &format!("{:x}", server.member_id));
                for (n, id) in &server.ids {
                    a = a.replace(&format!("{{{n}}}"), &format!("{id:x}"));
                }
                a
            })
            .collect()
    }

    /// Runs every step on both twins and returns the differences, one message per step.
    pub fn run_table(&mut self, steps: &[Step]) -> Vec<String> {
        let mut failures = Vec::new();
        for s in steps {
            let (go_out, our_out) = if let Some(ms) = s.stream_ms {
                let mut g = spawn_client(
                    Client::Go,
                    self.go.url(),
                    &Self::args_for(&self.go, s.args),
                    s.stdin,
                );
                let mut o = spawn_client(
                    Client::Ours,
                    self.ours.url(),
                    &Self::args_for(&self.ours, s.args),
                    s.stdin,
                );
                pause(ms);
                let _ = g.kill();
                let _ = o.kill();
                (
                    g.wait_with_output().expect("wait go"),
                    o.wait_with_output().expect("wait ours"),
                )
            } else {
                let go_out = run_client(
                    Client::Go,
                    self.go.url(),
                    &Self::args_for(&self.go, s.args),
                    s.stdin,
                );
                let our_out = run_client(
                    Client::Ours,
                    self.ours.url(),
                    &Self::args_for(&self.ours, s.args),
                    s.stdin,
                );
                (go_out, our_out)
            };
            if let Some(name) = s.capture {
                if let Some(id) = find_id(&String::from_utf8_lossy(&go_out.stdout)) {
                    self.go.ids.insert(name, id);
                }
                if let Some(id) = find_id(&String::from_utf8_lossy(&our_out.stdout)) {
                    self.ours.ids.insert(name, id);
                }
            }
            let protobuf = s.args.windows(2).any(|w| w == ["-w", "protobuf"]);
            let (go_out, our_out) = if protobuf {
                (normalise_protobuf(go_out), normalise_protobuf(our_out))
            } else {
                (go_out, our_out)
            };
            let mut a = seen(&go_out);
            let mut b = seen(&our_out);
            a.stdout = self.go.normalise(&a.stdout);
            a.stderr_first = self.go.normalise(&a.stderr_first);
            b.stdout = self.ours.normalise(&b.stdout);
            b.stderr_first = self.ours.normalise(&b.stderr_first);
            a.stdout = mask_numbers(&a.stdout, s.mask);
            b.stdout = mask_numbers(&b.stdout, s.mask);
            let same = match s.cmp {
                Cmp::Full => a.same(&b),
                Cmp::ErrorOnly => a.code == b.code && a.stderr_first == b.stderr_first,
                Cmp::CodeOnly => a.code == b.code,
                Cmp::WholeStderr => a.same(&b) && a.stderr == b.stderr,
                Cmp::Unordered => {
                    a.code == b.code
                        && a.stderr_first == b.stderr_first
                        && unordered(&a.stdout) == unordered(&b.stdout)
                }
            };
            if !same {
                failures.push(format!(
                    "step {:?} (stdin {:?}):\n  go:   {:?}\n  ours: {:?}",
                    s.args, s.stdin, a, b
                ));
            }
        }
        failures
    }
}

/// Fails the test with every difference at once, so one run shows the whole picture.
pub fn assert_no_failures(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Waits a little, for steps that need the server to settle (lease expiry etc.).
pub fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// `-w protobuf` output holds the server's IDs as varints inside the header (field 1), where
/// text replacement cannot reach them: decode that header, zero the IDs, and re-encode.
pub fn normalise_protobuf(mut out: Output) -> Output {
    use prost::Message;
    let b = out.stdout.clone();
    let mut res = Vec::new();
    let mut i = 0;
    let varint = |b: &[u8], i: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let x = *b.get(*i)?;
            *i += 1;
            v |= u64::from(x & 0x7f) << shift;
            if x & 0x80 == 0 {
                return Some(v);
            }
            shift += 7;
        }
    };
    while i < b.len() {
        let start = i;
        let Some(tag) = varint(&b, &mut i) else {
            return out;
        };
        let (field, wt) = (tag >> 3, tag & 7);
        match wt {
            0 => {
                if varint(&b, &mut i).is_none() {
                    return out;
                }
                res.extend_from_slice(&b[start..i]);
            }
            2 => {
                let Some(len) = varint(&b, &mut i) else {
                    return out;
                };
                let end = i + len as usize;
                if end > b.len() {
                    return out;
                }
                if field == 1
                    && let Ok(mut h) = proto::etcdserverpb::ResponseHeader::decode(&b[i..end])
                {
                    h.cluster_id = 0;
                    h.member_id = 0;
                    let enc = h.encode_to_vec();
                    res.push(0x0a);
                    prost::encoding::encode_varint(enc.len() as u64, &mut res);
                    res.extend_from_slice(&enc);
                    i = end;
                    continue;
                }
                res.extend_from_slice(&b[start..end]);
                i = end;
            }
            _ => return out,
        }
    }
    out.stdout = res;
    out
}

impl Twin {
    /// Runs one command with environment variables and no `--endpoints` flag from the
    /// harness; `{URL}` in args and values stands for each twin's client URL. Returns the
    /// difference, if any.
    pub fn compare_env(&self, args: &[&str], env: &[(&str, &str)], cmp: Cmp) -> Option<String> {
        let run = |client: Client, server: &Server| -> Seen {
            let bin = match client {
                Client::Go => "etcdctl",
                Client::Ours => OURS,
            };
            let mut cmd = Command::new(bin);
            cmd.env("ETCDCTL_API", "3")
                .env_remove("ETCDCTL_ENDPOINTS")
                .env_remove("ETCDCTL_WRITE_OUT")
                .args(args.iter().map(|a| a.replace("{URL}", server.url())))
                .stdin(Stdio::null());
            for (k, v) in env {
                cmd.env(k, v.replace("{URL}", server.url()));
            }
            let out = cmd.output().unwrap_or_else(|e| panic!("run {bin}: {e}"));
            let mut s = seen(&out);
            s.stdout = server.normalise(&s.stdout);
            s.stderr_first = server.normalise(&s.stderr_first);
            s
        };
        let a = run(Client::Go, &self.go);
        let b = run(Client::Ours, &self.ours);
        let same = match cmp {
            Cmp::Full => a.same(&b),
            Cmp::ErrorOnly => a.code == b.code && a.stderr_first == b.stderr_first,
            Cmp::CodeOnly => a.code == b.code,
            Cmp::WholeStderr => a.same(&b) && a.stderr == b.stderr,
            Cmp::Unordered => a.code == b.code && unordered(&a.stdout) == unordered(&b.stdout),
        };
        (!same).then(|| format!("{args:?} env {env:?}:\n  go:   {a:?}\n  ours: {b:?}"))
    }
}

/// Masks what differs between any two runs of a client: the time and client UUID in
/// clientv3's warning lines.
pub fn mask_client_noise(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("\"ts\":\"") {
        out.push_str(&rest[..i + 6]);
        rest = &rest[i + 6..];
        let end = rest.find('"').unwrap_or(rest.len());
        out.push_str("<TS>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    let mut s = out;
    let mut from = 0;
    while let Some(i) = s[from..].find("endpoint://client-") {
        let start = from + i + "endpoint://client-".len();
        if s.is_char_boundary(start + 36) {
            s.replace_range(start..start + 36, "<UUID>");
        }
        from = start;
    }
    s
}
