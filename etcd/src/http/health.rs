// etcd's health endpoints: /health as etcd 3.4 answers it ({"health":"true"}, 503 and
// "false" without a leader, with an alarm or when a read fails), /livez and /readyz in etcd
// 3.5's healthz style, and /version.

use std::time::Duration;

use http::{Response, StatusCode};

use super::{Body, go_error, text};
use crate::metrics::METRICS;
use crate::server::EtcdServer;

/// How long the health read may take (etcd gives its health range one second).
const READ_TIMEOUT: Duration = Duration::from_secs(1);

fn query_flag(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

/// A linearizable read (a ReadIndex round) within the timeout.
async fn linearizable_read_ok(server: &EtcdServer) -> Result<(), String> {
    match tokio::time::timeout(READ_TIMEOUT, server.linearizable_read()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.message.to_string()),
        Err(_) => Err("context deadline exceeded".into()),
    }
}

/// A serializable read: the local store answers.
fn serializable_read_ok(server: &EtcdServer) -> Result<(), String> {
    match server.failure() {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

pub async fn health(server: &EtcdServer, query: Option<&str>) -> Response<Body> {
    let serializable = query_flag(query, "serializable").as_deref() == Some("true");
    let healthy = if !server.alarms().is_empty() {
        tracing::warn!("serving /health false; alarm is active");
        false
    } else if server.leader() == 0 {
        tracing::warn!("serving /health false; no leader");
        false
    } else {
        let read = if serializable {
            serializable_read_ok(server)
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

/// etcd 3.5's /livez: the process answers and its store can be read.
pub async fn livez(server: &EtcdServer, query: Option<&str>) -> Response<Body> {
    checks(
        "livez",
        query,
        vec![("serializable_read", serializable_read_ok(server))],
    )
}

/// etcd 3.5's /readyz: no corruption alarm, reads work both ways.
pub async fn readyz(server: &EtcdServer, query: Option<&str>) -> Response<Body> {
    let corrupt = server
        .alarms()
        .iter()
        .any(|a| a.alarm == proto::etcdserverpb::AlarmType::Corrupt as i32);
    let lin = if server.leader() == 0 {
        Err("etcdserver: no leader".to_string())
    } else {
        linearizable_read_ok(server).await
    };
    checks(
        "readyz",
        query,
        vec![
            (
                "data_corruption",
                if corrupt {
                    Err("alarm activated: CORRUPT".into())
                } else {
                    Ok(())
                },
            ),
            ("serializable_read", serializable_read_ok(server)),
            ("linearizable_read", lin),
        ],
    )
}

/// The healthz page: "ok", or with ?verbose one line per check; 503 listing the checks when
/// one fails. `?exclude=<name>` skips a check, as etcd's.
fn checks(
    name: &str,
    query: Option<&str>,
    results: Vec<(&str, Result<(), String>)>,
) -> Response<Body> {
    let verbose = query_flag(query, "verbose").is_some();
    let excluded: Vec<String> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.strip_prefix("exclude="))
        .map(str::to_string)
        .collect();
    let mut lines = String::new();
    let mut failed = false;
    for (check, r) in results {
        if excluded.iter().any(|e| e == check) {
            lines.push_str(&format!("[+]{check} excluded: ok\n"));
            continue;
        }
        match r {
            Ok(()) => lines.push_str(&format!("[+]{check} ok\n")),
            Err(e) => {
                failed = true;
                lines.push_str(&format!("[-]{check} failed: {e}\n"));
            }
        }
    }
    if failed {
        return go_error(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("{lines}{name} check failed"),
        );
    }
    if verbose {
        return text(
            StatusCode::OK,
            &format!("{lines}{name} check passed\n"),
            None,
        );
    }
    text(StatusCode::OK, "ok", None)
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
