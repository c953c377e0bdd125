// etcd 3.5's /livez and /readyz answers on a healthy member, asserted for any listener (the
// client port and --listen-metrics-urls): shared by the HTTP and the kubeadm tests.

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
