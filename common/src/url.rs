// URLs as etcd's flags take them (--listen-client-urls and friends, --initial-cluster): scheme
// http, https, unix or unixs; http(s) need host:port and no path. Errors use etcd's wording.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub scheme: String,
    /// host:port for http(s); the socket path for unix(s).
    pub host: String,
    raw: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("URL scheme must be http, https, unix, or unixs: {s}"))?;
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "unix" | "unixs") {
            return Err(format!(
                "URL scheme must be http, https, unix, or unixs: {s}"
            ));
        }
        let (host, path) = match rest.find('/') {
            Some(i) if scheme.starts_with("http") => (&rest[..i], &rest[i..]),
            _ => (rest, ""),
        };
        if !path.is_empty() && path != "/" {
            return Err(format!("URL must not contain a path: {s}"));
        }
        if scheme.starts_with("http") && !has_port(host) {
            return Err(format!(
                "URL address does not have the form \"host:port\": {s}"
            ));
        }
        Ok(Url {
            scheme,
            host: host.to_string(),
            raw: s.trim_end_matches('/').to_string(),
        })
    }

    /// Parses a comma-separated list, as the flags take it.
    pub fn parse_list(s: &str) -> Result<Vec<Url>, String> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(Url::parse)
            .collect()
    }

    pub fn is_tls(&self) -> bool {
        self.scheme == "https" || self.scheme == "unixs"
    }

    /// The host part without the port (brackets of IPv6 removed).
    pub fn hostname(&self) -> &str {
        let h = match self.host.rfind(':') {
            Some(i) => &self.host[..i],
            None => &self.host,
        };
        h.trim_start_matches('[').trim_end_matches(']')
    }

    pub fn port(&self) -> Option<u16> {
        self.host.rsplit_once(':')?.1.parse().ok()
    }

    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

/// Parses `name1=url1,name2=url2` (etcd's --initial-cluster; etcdutl's restore takes it too).
pub fn parse_initial_cluster(s: &str) -> Result<Vec<(String, Url)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, url) = part
            .split_once('=')
            .ok_or_else(|| format!("missing '=' in initial cluster member {part:?}"))?;
        out.push((name.to_string(), Url::parse(url)?));
    }
    Ok(out)
}

fn has_port(host: &str) -> bool {
    match host.rsplit_once(':') {
        Some((h, p)) => {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && (!h.contains(':') || (h.starts_with('[') && h.ends_with(']')))
        }
        None => false,
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_etcds_forms_and_rejects_with_its_words() {
        let u = Url::parse("http://127.0.0.1:2379").unwrap();
        assert_eq!((u.hostname(), u.port()), ("127.0.0.1", Some(2379)));
        let v6 = Url::parse("https://[::1]:2380").unwrap();
        assert_eq!(
            (v6.hostname(), v6.port(), v6.is_tls()),
            ("::1", Some(2380), true)
        );
        assert!(Url::parse("unix://localhost:1234").is_ok());
        assert_eq!(
            Url::parse("foo").unwrap_err(),
            "URL scheme must be http, https, unix, or unixs: foo"
        );
        assert_eq!(
            Url::parse("http://foo").unwrap_err(),
            "URL address does not have the form \"host:port\": http://foo"
        );
        assert_eq!(
            Url::parse("http://1.2.3.4:5/x").unwrap_err(),
            "URL must not contain a path: http://1.2.3.4:5/x"
        );
        assert_eq!(Url::parse_list("http://a:1,http://b:2").unwrap().len(), 2);
    }
}
