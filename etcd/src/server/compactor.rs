// Auto-compaction (--auto-compaction-mode/-retention): the leader proposes compactions so
// history does not grow without bound. Revision mode keeps the last N revisions; periodic
// mode keeps the revisions of the last retention period.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::etcdserverpb::{CompactionRequest, InternalRaftRequest};

use super::EtcdServer;
use crate::config::{CompactionMode, parse_go_duration};

/// How often revision mode looks (etcd: every 5 minutes).
const REVISION_CHECK: Duration = Duration::from_secs(300);

/// The retention as a duration for periodic mode: a Go duration, or a bare number of hours.
pub fn periodic_retention(s: &str) -> Option<Duration> {
    if let Ok(h) = s.trim().parse::<u64>() {
        return Some(Duration::from_secs(h * 3600)).filter(|d| !d.is_zero());
    }
    parse_go_duration(s).ok().filter(|d| !d.is_zero())
}

async fn compact(server: &EtcdServer, rev: i64, mode: &str) {
    let req = InternalRaftRequest {
        compaction: Some(CompactionRequest {
            revision: rev,
            physical: false,
        }),
        ..Default::default()
    };
    match server.propose(req).await.map(|o| o.result) {
        Ok(Ok(_)) => tracing::info!(compact_revision = rev, "completed auto {mode} compaction"),
        Ok(Err(e)) | Err(e) => {
            tracing::warn!(compact_revision = rev, error = %e, "failed auto {mode} compaction")
        }
    }
}

/// Runs for the life of the server; does nothing when auto-compaction is off.
pub async fn run(server: Arc<EtcdServer>) {
    let cfg = server.cfg().clone();
    match cfg.auto_compaction_mode {
        CompactionMode::Revision => {
            let Ok(keep) = cfg.auto_compaction_retention.trim().parse::<i64>() else {
                tracing::warn!(retention = %cfg.auto_compaction_retention, "auto revision compaction needs a number of revisions");
                return;
            };
            if keep <= 0 {
                return;
            }
            let mut tick = tokio::time::interval(REVISION_CHECK);
            loop {
                tick.tick().await;
                let target = server.kv().current_rev() - keep;
                if server.is_leader() && target > server.kv().compact_rev() {
                    compact(&server, target, "revision").await;
                }
            }
        }
        CompactionMode::Periodic => {
            let Some(retention) = periodic_retention(&cfg.auto_compaction_retention) else {
                return;
            };
            // Sample the revision often enough to compact to "retention ago" precisely.
            let every = (retention / 10).max(Duration::from_millis(100));
            let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let now = Instant::now();
                samples.push_back((now, server.kv().current_rev()));
                // The newest sample at least `retention` old is what may go.
                let mut target = None;
                while let Some(&(t, rev)) = samples.front() {
                    if now.duration_since(t) >= retention {
                        target = Some(rev);
                        samples.pop_front();
                    } else {
                        break;
                    }
                }
                if let Some(rev) = target
                    && server.is_leader()
                    && rev > server.kv().compact_rev()
                {
                    compact(&server, rev, "periodic").await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_units() {
        assert_eq!(periodic_retention("1"), Some(Duration::from_secs(3600)));
        assert_eq!(periodic_retention("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(periodic_retention("0"), None);
        assert_eq!(periodic_retention("x"), None);
    }
}
