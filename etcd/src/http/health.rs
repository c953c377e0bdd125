// etcd's health endpoints: /health as etcd 3.4 answers it ({"health":"true"}, 503 and
// "false" without a leader, with an alarm or when a read fails), etcd 3.5's /livez and /readyz
// (per-check lines, ?verbose, ?exclude=, sub-paths per check), and /version.

use std::time::Duration;

use http::{HeaderValue, Method, Response, StatusCode, header};

use super::{Body, go_error, text};
use crate::metrics::METRICS;
use crate::server::EtcdServer;

/// How long the health read may take (etcd gives its health range one second).
const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// A linearizable read (a ReadIndex round) within the timeout.
async fn linearizable_read_ok(server: &EtcdServer) -> Result<(), String> {
    match tokio::time::timeout(READ_TIMEOUT, server.linearizable_read()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.message.to_string()),
        Err(_) => Err("context deadline exceeded".into()),
    }
}

/// /health. `?exclude=<ALARM>` (repeatable, e.g. NOSPACE) ignores an alarm of that type, as
/// etcd 3.4.23 and 3.5 do: kubeadm's liveness probe (`/health?exclude=NOSPACE&serializable=true`)
/// must not restart a member whose only trouble is a full quota.
pub async fn health(server: &EtcdServer, query: Option<&str>) -> Response<Body> {
    let serializable = query_values(query, "serializable")
        .first()
        .map(String::as_str)
        == Some("true");
    let excluded = query_values(query, "exclude");
    let alarm = server.alarms().into_iter().find(|a| {
        let name = proto::etcdserverpb::AlarmType::try_from(a.alarm)
            .map(|t| t.as_str_name())
            .unwrap_or("UNKNOWN");
        !excluded.iter().any(|e| e == name)
    });
    let healthy = if let Some(a) = alarm {
        tracing::warn!(alarm = ?a, "serving /health false; alarm is active");
        false
    } else if server.leader() == 0 {
        tracing::warn!("serving /health false; no leader");
        false
    } else {
        let read = if serializable {
            read_check(server, true).await
        } else {
            linearizable_read_ok(server).await
        };
        if let Err(e) = &read {
            tracing::warn!(error = %e, "serving /health false; QGET fails");
        }
        read.is_ok()
    };
    if healthy {
        METRICS.health_success.inc();
        text(StatusCode::OK, r#"{"health":"true"}"#, None)
    } else {
        METRICS.health_failures.inc();
        go_error(StatusCode::SERVICE_UNAVAILABLE, r#"{"health":"false"}"#)
    }
}

/// The checks of etcd 3.5's /livez and /readyz, in the order ours runs them (etcd's order is
/// a Go map's, so it varies between runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    DataCorruption,
    SerializableRead,
    LinearizableRead,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::DataCorruption => "data_corruption",
            Check::SerializableRead => "serializable_read",
            Check::LinearizableRead => "linearizable_read",
        }
    }
}

/// etcd's two check registries: /livez asks whether the process should be restarted (its
/// store answers a local read), /readyz whether it can serve (no CORRUPT alarm, local and
/// quorum reads work).
const LIVEZ: &[Check] = &[Check::SerializableRead];
const READYZ: &[Check] = &[
    Check::DataCorruption,
    Check::SerializableRead,
    Check::LinearizableRead,
];

/// The registry a path belongs to and, for a sub-path such as /readyz/linearizable_read, the
/// one check it runs. None: not a probe path (etcd's mux matches these paths exactly).
fn probe(path: &str) -> Option<(&'static str, &'static [Check], Option<Check>)> {
    let rest = path.strip_prefix('/')?;
    let (root, sub) = match rest.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (rest, None),
    };
    let (name, checks) = match root {
        "livez" => ("/livez", LIVEZ),
        "readyz" => ("/readyz", READYZ),
        _ => return None,
    };
    match sub {
        None => Some((name, checks, None)),
        Some(s) => checks
            .iter()
            .find(|c| c.name() == s)
            .map(|c| (name, checks, Some(*c))),
    }
}

/// A read as etcd's check makes it: keys-only, limit 1, through the store; a linearizable one
/// first waits for a ReadIndex round (as long as the server's request timeout, like etcd's).
async fn read_check(server: &EtcdServer, serializable: bool) -> Result<(), String> {
    if let Some(f) = server.failure() {
        return Err(f);
    }
    if !serializable {
        server
            .linearizable_read()
            .await
            .map_err(|e| e.message.to_string())?;
    }
    let req = proto::etcdserverpb::RangeRequest {
        keys_only: true,
        limit: 1,
        serializable,
        ..Default::default()
    };
    crate::apply::kv::range(server.kv(), &req)
        .map(|_| ())
        .map_err(|e| e.message.to_string())
}

async fn run(server: &EtcdServer, check: Check) -> Result<(), String> {
    match check {
        Check::DataCorruption => {
            let corrupt = proto::etcdserverpb::AlarmType::Corrupt as i32;
            if server.alarms().iter().any(|a| a.alarm == corrupt) {
                Err("alarm activated: CORRUPT".into())
            } else {
                Ok(())
            }
        }
        Check::SerializableRead => read_check(server, true).await,
        Check::LinearizableRead => read_check(server, false).await,
    }
}

/// The values of a query parameter (a bare `name` counts, with an empty value), decoded as
/// Go's url.Query decodes them.
fn query_values(query: Option<&str>, name: &str) -> Vec<String> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (unescape(k) == name).then(|| unescape(v))
        })
        .collect()
}

/// Query-string unescaping: `+` is a space, `%XX` a byte; a malformed escape stays as is.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
            (b'+', _, _) => out.push(b' '),
            (c, _, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The health endpoints etcd 3.5 serves on the client and the metrics listeners: /health,
/// /livez, /readyz and the per-check sub-paths. None: `path` is not one of them.
pub async fn route(
    server: &EtcdServer,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<Response<Body>> {
    if path == "/health" {
        return Some(if method == Method::GET {
            health(server, query).await
        } else {
            tracing::warn!(status_code = 405, "/health error");
            method_not_allowed()
        });
    }
    let (root, checks, only) = probe(path)?;
    Some(if method == Method::GET {
        probe_endpoint(server, root, checks, only, query).await
    } else {
        tracing::warn!(path, status_code = 405, "Health request error");
        method_not_allowed()
    })
}

/// etcd 3.5's /livez, /readyz and their per-check sub-paths. `?exclude=<check>` (repeatable)
/// skips checks on the root paths; an unknown name is only logged, as etcd's. Success:
/// "ok\n" ("[+]<check> ok" lines first with `?verbose`); failure: 503 with every check's line
/// ("[-]<check> failed: <error>") whatever `verbose` says.
async fn probe_endpoint(
    server: &EtcdServer,
    root: &str,
    checks: &[Check],
    only: Option<Check>,
    query: Option<&str>,
) -> Response<Body> {
    let selected: Vec<Check> = match only {
        Some(c) => vec![c],
        None => {
            let excluded = query_values(query, "exclude");
            let unknown: Vec<String> = excluded
                .iter()
                .filter(|e| !e.is_empty() && !checks.iter().any(|c| c.name() == e.as_str()))
                .map(|e| format!("{e:?}"))
                .collect();
            if !unknown.is_empty() {
                tracing::warn!(missing_health_checks = %unknown.join(","), "some health checks cannot be excluded");
            }
            checks
                .iter()
                .copied()
                .filter(|c| !excluded.iter().any(|e| e == c.name()))
                .collect()
        }
    };
    let mut reason = String::new();
    let mut failed = false;
    for check in selected {
        match run(server, check).await {
            Ok(()) => reason.push_str(&format!("[+]{} ok\n", check.name())),
            Err(e) => {
                failed = true;
                reason.push_str(&format!("[-]{} failed: {e}\n", check.name()));
            }
        }
    }
    let path = match only {
        Some(c) => format!("{root}/{}", c.name()),
        None => root.to_string(),
    };
    if failed {
        tracing::error!(path, reason, status_code = 503, "Health check error");
        return go_error(StatusCode::SERVICE_UNAVAILABLE, &reason);
    }
    let body = if !query_values(query, "verbose").is_empty() {
        format!("{reason}ok\n")
    } else {
        "ok\n".to_string()
    };
    let mut r = text(StatusCode::OK, &body, Some("text/plain; charset=utf-8"));
    r.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// Go's answer to a method a GET-only health handler does not take.
pub fn method_not_allowed() -> Response<Body> {
    let mut r = go_error(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
    r.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    r
}

/// {"etcdserver":"<server version>","etcdcluster":"<cluster version>"} as etcd's /version.
pub fn version(server: &EtcdServer) -> Response<Body> {
    let cluster = server
        .kv()
        .backend()
        .get(common::backend::buckets::CLUSTER, b"clusterVersion")
        .ok()
        .flatten()
        .and_then(|v| String::from_utf8(v).ok())
        .unwrap_or_else(|| "not_decided".into());
    let body = serde_json::json!({
        "etcdserver": crate::version::ETCD_VERSION,
        "etcdcluster": cluster,
    });
    text(StatusCode::OK, &body.to_string(), Some("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_paths_match_exactly_as_etcds_mux() {
        let p = |path| probe(path).map(|(root, checks, only)| (root, checks.len(), only));
        assert_eq!(p("/livez"), Some(("/livez", 1, None)));
        assert_eq!(p("/readyz"), Some(("/readyz", 3, None)));
        assert_eq!(
            p("/readyz/linearizable_read"),
            Some(("/readyz", 3, Some(Check::LinearizableRead)))
        );
        assert_eq!(
            p("/livez/serializable_read"),
            Some(("/livez", 1, Some(Check::SerializableRead)))
        );
        for none in [
            "/livez/",
            "/readyz/",
            "/livez/linearizable_read",
            "/readyz/x",
            "/readyzz",
            "/health",
            "readyz",
        ] {
            assert_eq!(p(none), None, "{none}");
        }
    }

    #[test]
    fn query_values_decode_as_go() {
        let q = Some("exclude=linearizable%5Fread&verbose&exclude=&x=a+b&exclude=%zz");
        assert_eq!(query_values(q, "exclude"), ["linearizable_read", "", "%zz"]);
        assert_eq!(query_values(q, "verbose"), [""]);
        assert_eq!(query_values(q, "x"), ["a b"]);
        assert!(query_values(None, "verbose").is_empty());
        assert_eq!(unescape("%e2%9c%93%"), "✓%");
    }
}
