// --config-file: etcd's YAML configuration (the keys are the flag names; TLS settings nest
// under client-transport-security and peer-transport-security), turned into flags.
// As in etcd, a configuration file replaces every command-line flag and ETCD_* variable.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::{Yaml, YamlLoader};

/// Deepest nesting a configuration file may have. etcd's settings nest two levels; the bound
/// keeps the YAML loader's recursion (and the tree's drop) far from the end of the stack.
const MAX_DEPTH: usize = 64;
/// Most nodes a file may hold once its aliases are expanded (the loader copies an anchored
/// node at each alias, so a few lines of nested aliases could otherwise fill memory).
const MAX_NODES: u64 = 1 << 20;

/// Keys of the two transport-security sections and the flags they set.
const SECURITY_KEYS: &[(&str, &str)] = &[
    ("cert-file", "cert-file"),
    ("key-file", "key-file"),
    ("client-cert-auth", "client-cert-auth"),
    ("trusted-ca-file", "trusted-ca-file"),
    ("auto-tls", "auto-tls"),
    ("crl-file", "client-crl-file"),
];

/// Keys whose YAML spelling differs from their flag's: etcd 3.5 reads this setting from
/// `experimental-snapshot-catch-up-entries` (its JSON tag) although the flag says "catchup".
const KEY_ALIASES: &[(&str, &str)] = &[(
    "experimental-snapshot-catch-up-entries",
    "experimental-snapshot-catchup-entries",
)];

fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        // A YAML list (log-outputs, cipher-suites) is the flag's comma-separated value.
        Yaml::Array(items) => items
            .iter()
            .map(scalar)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(",")),
        Yaml::Null => Some(String::new()),
        _ => None,
    }
}

/// The command-line arguments equivalent to the YAML `text` (read from `path`), and
/// warnings for keys that set nothing.
pub fn to_args(path: &str, text: &str) -> Result<(Vec<String>, Vec<String>), String> {
    check_shape(text).map_err(|e| format!("error parsing the configuration file {path}: {e}"))?;
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| format!("error parsing the configuration file {path}: {e}"))?;
    let Some(doc) = docs.into_iter().next() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let map = match doc {
        Yaml::Hash(m) => m,
        Yaml::Null => return Ok((Vec::new(), Vec::new())),
        _ => {
            return Err(format!(
                "error parsing the configuration file {path}: not a mapping of settings"
            ));
        }
    };
    let mut args = Vec::new();
    let mut warnings = Vec::new();
    for (k, v) in map {
        let Some(key) = k.as_str().map(str::to_string) else {
            return Err(format!(
                "error parsing the configuration file {path}: a key is not a string"
            ));
        };
        let section = match key.as_str() {
            "client-transport-security" => Some(""),
            "peer-transport-security" => Some("peer-"),
            _ => None,
        };
        if let Some(prefix) = section {
            let Yaml::Hash(inner) = v else {
                if matches!(v, Yaml::Null) {
                    continue;
                }
                return Err(format!(
                    "error parsing the configuration file {path}: {key} must be a mapping"
                ));
            };
            for (ik, iv) in inner {
                let ik = ik.as_str().unwrap_or_default();
                let Some((_, flag)) = SECURITY_KEYS.iter().find(|(k, _)| *k == ik) else {
                    warnings.push(format!(
                        "configuration file {path}: unknown setting {key}.{ik} ignored"
                    ));
                    continue;
                };
                let value = scalar(&iv).ok_or_else(|| {
                    format!(
                        "error parsing the configuration file {path}: {key}.{ik} must be a value"
                    )
                })?;
                // The one key whose flag names differ: --client-crl-file / --peer-crl-file.
                let flag = if *flag == "client-crl-file" && !prefix.is_empty() {
                    "crl-file"
                } else {
                    flag
                };
                args.push(format!("--{prefix}{flag}={value}"));
            }
            continue;
        }
        let key = KEY_ALIASES
            .iter()
            .find(|(alias, _)| *alias == key)
            .map_or(key, |(_, flag)| flag.to_string());
        if matches!(key.as_str(), "config-file" | "help" | "version") {
            continue;
        }
        if super::flags::spec(&key).is_none() {
            warnings.push(format!(
                "configuration file {path}: unknown setting {key} ignored"
            ));
            continue;
        }
        let value = scalar(&v).ok_or_else(|| {
            format!("error parsing the configuration file {path}: {key} must be a value or a list")
        })?;
        args.push(format!("--{key}={value}"));
    }
    Ok((args, warnings))
}

/// Walks the YAML events without building the tree (the event parser does not recurse) and
/// refuses nesting past `MAX_DEPTH` and alias expansion past `MAX_NODES`.
fn check_shape(text: &str) -> Result<(), String> {
    let mut parser = Parser::new_from_str(text);
    // Open containers: the anchor each one defines and the node count when it opened.
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut anchored: HashMap<usize, u64> = HashMap::new();
    let mut nodes: u64 = 0;
    loop {
        let (ev, _) = parser.next_token().map_err(|e| e.to_string())?;
        match ev {
            Event::StreamEnd => return Ok(()),
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() == MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH} levels"));
                }
                open.push((anchor, nodes));
                nodes += 1;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = open.pop()
                    && anchor > 0
                {
                    anchored.insert(anchor, nodes - start);
                }
            }
            Event::Scalar(_, _, anchor, _) => {
                nodes += 1;
                if anchor > 0 {
                    anchored.insert(anchor, 1);
                }
            }
            Event::Alias(id) => nodes += anchored.get(&id).copied().unwrap_or(1),
            _ => {}
        }
        if nodes > MAX_NODES {
            return Err(format!(
                "more than {MAX_NODES} values once its aliases are expanded"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcds_sample_keys_become_flags() {
        let text = "name: 'infra1'\ndata-dir: /var/lib/etcd\nsnapshot-count: 10000\nheartbeat-interval: 100\n\
                    listen-client-urls: http://localhost:2379\nlog-outputs: [stderr]\nstrict-reconfig-check: true\n\
                    initial-cluster-state: 'new'\nenable-v2: false\nclient-transport-security:\n  cert-file: /c.pem\n  \
                    client-cert-auth: true\npeer-transport-security:\n  auto-tls: true\n  crl-file: /crl\n";
        let (args, warnings) = to_args("f.yml", text).unwrap();
        for want in [
            "--name=infra1",
            "--data-dir=/var/lib/etcd",
            "--snapshot-count=10000",
            "--heartbeat-interval=100",
            "--listen-client-urls=http://localhost:2379",
            "--log-outputs=stderr",
            "--strict-reconfig-check=true",
            "--initial-cluster-state=new",
            "--cert-file=/c.pem",
            "--client-cert-auth=true",
            "--peer-auto-tls=true",
            "--peer-crl-file=/crl",
        ] {
            assert!(
                args.contains(&want.to_string()),
                "{want} missing from {args:?}"
            );
        }
        assert!(warnings.iter().all(|w| !w.contains("snapshot-count")));
    }

    #[test]
    fn bad_yaml_is_a_clear_error() {
        let e = to_args("bad.yml", "name: [unclosed").unwrap_err();
        assert!(e.contains("bad.yml"), "{e}");
        assert!(to_args("list.yml", "- a\n- b\n").is_err());
    }
}
