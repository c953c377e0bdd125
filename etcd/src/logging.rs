// Server logs as etcd writes them with zap: one JSON object per line with `level`, `ts`,
// `caller`, `msg` and the event's fields, so operators' tools that read etcd's logs read ours.

use std::fmt::Write as _;
use std::io::Write;
use std::sync::Mutex;
use std::time::SystemTime;

use common::gofmt::format_ts;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::prelude::*;

use crate::config::LogLevel;

struct Fields {
    msg: String,
    map: Map<String, Value>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = value.to_string();
        } else {
            self.map
                .insert(field.name().into(), Value::String(value.into()));
        }
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.map.insert(field.name().into(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.map.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.map.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.map.insert(field.name().into(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut s = String::new();
        let _ = write!(s, "{value:?}");
        if field.name() == "message" {
            self.msg = s;
        } else {
            self.map.insert(field.name().into(), Value::String(s));
        }
    }
}

/// Where log lines go (--log-outputs): stderr, stdout, or files.
pub struct ZapLayer {
    outputs: Mutex<Vec<Box<dyn Write + Send>>>,
    max_level: Level,
}

impl ZapLayer {
    pub fn new(outputs: &[String], level: LogLevel) -> std::io::Result<ZapLayer> {
        let mut w: Vec<Box<dyn Write + Send>> = Vec::new();
        for o in outputs {
            match o.as_str() {
                "" | "default" | "stderr" => w.push(Box::new(std::io::stderr())),
                "stdout" => w.push(Box::new(std::io::stdout())),
                path => w.push(Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)?,
                )),
            }
        }
        let max_level = match level {
            LogLevel::Debug => Level::DEBUG,
            LogLevel::Info => Level::INFO,
            LogLevel::Warn => Level::WARN,
            _ => Level::ERROR,
        };
        Ok(ZapLayer {
            outputs: Mutex::new(w),
            max_level,
        })
    }
}

fn caller(file: Option<&str>, line: Option<u32>) -> String {
    let file = file.unwrap_or("?");
    let mut parts: Vec<&str> = file.rsplit('/').take(2).collect();
    parts.reverse();
    format!("{}:{}", parts.join("/"), line.unwrap_or(0))
}

impl<S: Subscriber> Layer<S> for ZapLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let md = event.metadata();
        if *md.level() > self.max_level {
            return;
        }
        let mut f = Fields {
            msg: String::new(),
            map: Map::new(),
        };
        event.record(&mut f);
        let level = match *md.level() {
            Level::ERROR => "error",
            Level::WARN => "warn",
            Level::INFO => "info",
            _ => "debug",
        };
        let mut obj = Map::new();
        obj.insert("level".into(), Value::from(level));
        obj.insert("ts".into(), Value::from(format_ts(SystemTime::now())));
        obj.insert("caller".into(), Value::from(caller(md.file(), md.line())));
        obj.insert("msg".into(), Value::from(f.msg));
        obj.extend(f.map);
        let mut line = Value::Object(obj).to_string();
        line.push('\n');
        if let Ok(mut outs) = self.outputs.lock() {
            for o in outs.iter_mut() {
                let _ = o.write_all(line.as_bytes());
            }
        }
    }
}

/// Installs the zap-style logger as the process's tracing subscriber.
pub fn init(outputs: &[String], level: LogLevel) -> std::io::Result<()> {
    let layer = ZapLayer::new(outputs, level)?;
    // The level as a filter, not only a check in on_event: callsites below it (h2's and
    // hyper's trace spans and events on every frame) are then never enabled, so they cost
    // nothing instead of a span in the registry per poll.
    let filter = tracing_subscriber::filter::LevelFilter::from_level(layer.max_level);
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_relative_to_the_crate() {
        assert_eq!(
            caller(Some("etcd/src/raft/node.rs"), Some(7)),
            "raft/node.rs:7"
        );
    }

    #[test]
    fn lines_are_json_with_etcds_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let layer = ZapLayer::new(&[path.to_str().unwrap().to_string()], LogLevel::Info).unwrap();
        let sub = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(sub, || {
            tracing::info!(
                address = "127.0.0.1:2379",
                "serving client traffic insecurely; this is strongly discouraged!"
            );
            tracing::debug!("not shown at info");
            tracing::warn!(took = 1500u64, "slow fdatasync");
        });
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["level"], "info");
        assert_eq!(
            lines[0]["msg"],
            "serving client traffic insecurely; this is strongly discouraged!"
        );
        assert_eq!(lines[0]["address"], "127.0.0.1:2379");
        assert!(
            lines[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("src/logging.rs:")
        );
        assert_eq!(lines[1]["level"], "warn");
        assert_eq!(lines[1]["took"], 1500);
    }
}
