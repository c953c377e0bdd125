// etcd 3.5's /livez and /readyz answers on a healthy member, asserted for any listener (the
// client port and --listen-metrics-urls): shared by the HTTP and the kubeadm tests.
#![allow(dead_code)]

use std::time::Duration;

use crate::http_client::{get, request};

/// etcd 3.5's /livez and /readyz (server/etcdserver/api/etcdhttp/health.go): "ok\n"; with
/// ?verbose one "[+]<check> ok" line per check first; ?exclude= drops a check (an unknown one
/// is ignored); a sub-path runs one check; GET only; text/plain with nosniff.
pub fn assert_probes_answer_as_etcd_3_5(base: &str) {
    let ok = |path: &str, body: &str| {
        let r = get(base, path);
        assert_eq!((r.status, r.body.as_str()), (200, body), "{base}{path}");
        assert_eq!(
            r.header("content-type"),
            Some("text/plain; charset=utf-8"),
            "{path}"
        );
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    };
    ok("/livez", "ok\n");
    ok("/readyz", "ok\n");
    ok("/livez?verbose", "[+]serializable_read ok\nok\n");
    ok(
        "/readyz?verbose",
        "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\nok\n",
    );
    ok(
        "/readyz?verbose=1&exclude=linearizable_read&exclude=nope",
        "[+]data_corruption ok\n[+]serializable_read ok\nok\n",
    );
    ok(
        "/readyz/linearizable_read?verbose",
        "[+]linearizable_read ok\nok\n",
    );
    ok("/livez/serializable_read", "ok\n");
    for missing in ["/livez/linearizable_read", "/readyz/", "/livez/x"] {
        assert_eq!(get(base, missing).status, 404, "{missing}");
    }
    let r = request(base, "POST", "/readyz", "", Duration::from_secs(5));
    assert_eq!((r.status, r.body.as_str()), (405, "Method Not Allowed\n"));
    assert_eq!(r.header("allow"), Some("GET"));
}

/// Probe paths asked of ours and of a running etcd 3.5 by `assert_probes_match`.
const PROBES: &[(&str, &str)] = &[
    ("GET", "/livez"),
    ("GET", "/readyz"),
    ("GET", "/livez?verbose"),
    ("GET", "/readyz?verbose"),
    ("GET", "/readyz?verbose=false"),
    ("GET", "/readyz?exclude=data_corruption"),
    ("GET", "/readyz?exclude=data_corruption&verbose"),
    (
        "GET",
        "/readyz?verbose&exclude=serializable_read&exclude=linearizable_read",
    ),
    ("GET", "/readyz?exclude=bogus&verbose"),
    ("GET", "/livez?exclude=serializable_read&verbose"),
    ("GET", "/livez/serializable_read"),
    ("GET", "/livez/serializable_read?verbose"),
    ("GET", "/readyz/data_corruption"),
    ("GET", "/readyz/linearizable_read?verbose"),
    ("GET", "/livez/linearizable_read"),
    ("GET", "/livez/bogus"),
    ("GET", "/readyz/"),
    ("POST", "/readyz"),
    ("HEAD", "/livez"),
    ("PUT", "/livez/serializable_read"),
];

/// What a client can tell of a probe's answer: status, the headers that matter and the body,
/// its "[+]check ok" lines sorted (etcd 3.5 lists its checks in Go's random map order).
fn probe_answer(base: &str, method: &str, path: &str) -> String {
    let r = request(base, method, path, "", Duration::from_secs(5));
    let mut lines: Vec<&str> = r.body.lines().collect();
    let last = lines.pop().unwrap_or_default();
    lines.sort_unstable();
    format!(
        "{method} {path}: {} content-type {:?} nosniff {:?} allow {:?} body {lines:?} then {last:?}",
        r.status,
        r.header("content-type"),
        r.header("x-content-type-options"),
        r.header("allow"),
    )
}

/// Every probe in PROBES answers on `ours` as on `etcd35`, a running etcd 3.5 member.
pub fn assert_probes_match(ours: &str, etcd35: &str) {
    for (method, path) in PROBES {
        assert_eq!(
            probe_answer(ours, method, path),
            probe_answer(etcd35, method, path),
            "ours ({ours}), then etcd 3.5 ({etcd35})"
        );
    }
}
