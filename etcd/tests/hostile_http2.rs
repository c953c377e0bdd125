// Hostile HTTP/2 on the client port: CONTINUATION floods and oversized frames stay bounded and
// the server goes on serving (issue 18); streams beyond --max-concurrent-streams are refused.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use cluster_support::Cluster;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// What one test sends in all, over as many connections as the server lets it open.
const SEND_TOTAL: usize = 256 << 20;
/// The growth the issue allows for that much hostile traffic.
const MAX_GROWTH_KIB: u64 = 64 << 10;

fn frame(typ: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, typ, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A request's header block as a Go client encodes it; `authority` decides whether the server's
/// rewriter re-encodes (a scheme in it) or steps aside (a plain host:port).
fn request_headers(authority: &str) -> Vec<u8> {
    let mut enc = loona_hpack::Encoder::new();
    enc.encode([
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (b":authority", authority.as_bytes()),
        (b":path", b"/etcdserverpb.Maintenance/Status"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ])
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Opens connections and writes `opening` then `filler` frames over and over until the server
/// closes each one, until SEND_TOTAL bytes went out. Returns the connections it took.
fn flood(port: u16, opening: &[u8], filler: &[u8]) -> usize {
    let mut sent = 0;
    let mut conns = 0;
    while sent < SEND_TOTAL {
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        conns += 1;
        let mut hello = PREFACE.to_vec();
        hello.extend_from_slice(&frame(0x4, 0, 0, &[])); // SETTINGS
        hello.extend_from_slice(opening);
        if s.write_all(&hello).is_err() {
            assert!(conns < 100_000, "the server refuses every connection");
            continue;
        }
        sent += hello.len();
        let mut batch = Vec::new();
        while batch.len() < 256 << 10 {
            batch.extend_from_slice(filler);
        }
        // Count what the socket took, partial writes included: a 16 MiB frame is refused
        // long before all of it is written.
        'conn: while sent < SEND_TOTAL {
            let mut off = 0;
            while off < batch.len() {
                match s.write(&batch[off..]) {
                    Ok(0) | Err(_) => break 'conn,
                    Ok(n) => {
                        off += n;
                        sent += n;
                    }
                }
            }
        }
    }
    conns
}

fn check(c: &mut Cluster, what: &str, opening: &[u8], filler: &[u8]) {
    let port: u16 = c.nodes[0]
        .client_url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("client port");
    let pid = c.nodes[0].child.as_ref().expect("running").id();
    let before = rss_kib(pid);
    let conns = flood(port, opening, filler);
    let after = rss_kib(pid);
    eprintln!("{what}: {conns} connections, RSS {before} KiB -> {after} KiB");
    assert!(
        after.saturating_sub(before) <= MAX_GROWTH_KIB,
        "{what}: RSS grew from {before} KiB to {after} KiB for {} MiB sent",
        SEND_TOTAL >> 20
    );
    assert!(c.nodes[0].exited().is_none(), "{what}: the server died");
    c.nodes[0].etcdctl_ok(&["put", "still", what]);
    assert_eq!(
        c.nodes[0]
            .etcdctl_ok(&["get", "still", "--print-value-only"])
            .trim(),
        what
    );
}

#[test]
fn continuation_floods_and_oversized_frames_stay_bounded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut c = Cluster::start(OURS, dir.path(), 1, false, &[]);
    c.nodes[0].etcdctl_ok(&["put", "warm", "up"]);

    // A HEADERS frame without END_HEADERS, then CONTINUATIONs forever: the first block of a
    // connection, which the server reads itself to fix a Go client's `:authority`.
    let block = request_headers("http://127.0.0.1:2379");
    let half = &block[..block.len() / 2];
    check(
        &mut c,
        "flood in the first block",
        &frame(0x1, 0, 1, half),
        &frame(0x9, 0, 1, &[0x82; 16_000]),
    );

    // The same after a first request with a plain authority: the HTTP/2 library's own limits.
    let good = request_headers("127.0.0.1:2379");
    let mut opening = frame(0x1, 0x4, 1, &good);
    opening.extend_from_slice(&frame(0x1, 0, 3, &[0x82]));
    check(
        &mut c,
        "flood after a request",
        &opening,
        &frame(0x9, 0, 3, &[0x82; 16_000]),
    );

    // Frames of 16 MiB, beyond the 16 KiB the server allows.
    let huge = vec![0x82; (1 << 24) - 1];
    check(&mut c, "oversized HEADERS", &[], &frame(0x1, 0, 1, &huge));
}

/// A connection that sends nothing, and one that never finishes its request's headers (the
/// slowloris pattern), are closed by the server within its 30 s start timeout instead of
/// being held forever (etcd 3.4.23 holds both); a client that talks at once is served.
#[test]
fn silent_and_half_sent_connections_are_closed() {
    use std::io::Read;
    let dir = tempfile::tempdir().expect("temp dir");
    let c = Cluster::start(OURS, dir.path(), 1, false, &[]);
    let addr = c.nodes[0]
        .client_url
        .trim_start_matches("http://")
        .to_string();
    let probes: Vec<_> = [&b""[..], b"GET /health HTTP/1.1\r\nHost: x\r\n"]
        .into_iter()
        .map(|sent| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                cluster_support::until_closed(&addr, sent, Duration::from_secs(60))
                    .map(|(got, _)| got)
            })
        })
        .collect();
    // Meanwhile the server answers a client that sends its request at once.
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("read the answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut got = probes
        .into_iter()
        .map(|p| p.join().expect("probe").unwrap_or_else(|e| panic!("{e}")));
    let silent = got.next().expect("silent probe");
    assert!(silent.is_empty(), "silent connection got {silent:?}");
    // A half-sent request is closed, with at most a 408 before the close.
    let half = String::from_utf8_lossy(&got.next().expect("half-sent probe")).to_string();
    assert!(
        half.is_empty() || half.starts_with("HTTP/1.1 408"),
        "half-sent request got {half:?}"
    );
}

/// Reads one frame: (type, flags, stream, payload); None at a close or after the timeout.
fn read_frame(s: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    use std::io::Read;
    let mut head = [0u8; 9];
    s.read_exact(&mut head).ok()?;
    let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    s.read_exact(&mut payload).ok()?;
    Some((head[3], head[4], stream, payload))
}

/// What a server started with --max-concurrent-streams=3 tells an HTTP/2 client: the limit
/// its SETTINGS advertise, and the streams (with their error codes) it resets when the client
/// opens five requests at once and leaves them open.
fn stream_limit(bin: &str) -> (Option<u32>, Vec<(u32, u32)>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let e = support::RealEtcd::start_bin(
        bin,
        &dir.path().join("d"),
        "default",
        &["--max-concurrent-streams=3"],
    );
    let addr = e.client_url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .expect("read timeout");
    let mut hello = PREFACE.to_vec();
    hello.extend_from_slice(&frame(0x4, 0, 0, &[]));
    s.write_all(&hello).expect("send the preface");
    let mut limit = None;
    while let Some((typ, flags, _, payload)) = read_frame(&mut s) {
        if typ == 0x4 && flags & 0x1 == 0 {
            for p in payload.chunks_exact(6) {
                if u16::from_be_bytes([p[0], p[1]]) == 0x3 {
                    limit = Some(u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
                }
            }
            break;
        }
    }
    let mut opening = frame(0x4, 0x1, 0, &[]);
    for id in [1, 3, 5, 7, 9] {
        opening.extend_from_slice(&frame(0x1, 0x4, id, &request_headers(&addr)));
    }
    s.write_all(&opening).expect("open the streams");
    let mut resets = Vec::new();
    while let Some((typ, _, stream, payload)) = read_frame(&mut s) {
        if typ == 0x3 && payload.len() == 4 {
            resets.push((
                stream,
                u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]),
            ));
        }
    }
    (limit, resets)
}

/// --max-concurrent-streams reached over HTTP/2: the limit is advertised, and the streams a
/// client opens beyond it are refused (RST_STREAM REFUSED_STREAM) while the first ones wait
/// for their request bodies, as the real etcd 3.4 does.
#[test]
fn streams_beyond_max_concurrent_streams_are_refused_as_etcd_does() {
    let real = std::thread::spawn(|| stream_limit("etcd"));
    let ours = stream_limit(OURS);
    let real = real.join().expect("the real etcd 3.4's run");
    assert_eq!(ours, real, "ours, then the real etcd 3.4's");
    assert_eq!(ours, (Some(3), vec![(7, 0x7), (9, 0x7)]));
}
