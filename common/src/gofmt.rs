// Values written and read the way Go programs do (time.Duration, strconv.ParseBool, os errors,
// go-humanize sizes, zap's timestamps), shared by the server, etcdctl and etcdutl so all print
// what etcd does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Parses a Go duration ("2s", "500ms", "1m30s", "1.5h").
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("time: invalid duration \"{s}\"");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let s2 = s.strip_prefix('+').unwrap_or(s);
    let mut total = 0f64;
    let mut rest = s2;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration \"{s}\""))?;
        if num_len == 0 {
            return Err(err());
        }
        let num: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("time: unknown unit \"{u}\" in duration \"{s}\"")),
        };
        total += num * mult;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration as Go's `time.Duration.String()` does ("19.353085ms", "1m2.5s").
pub fn format_go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trim_frac(ns, 1_000));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trim_frac(ns, 1_000_000));
    }
    let h = ns / 3_600_000_000_000;
    let rem = ns % 3_600_000_000_000;
    let m = rem / 60_000_000_000;
    let s_ns = rem % 60_000_000_000;
    let secs = trim_frac(s_ns, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{m}m{secs}s")
    } else {
        format!("{secs}s")
    }
}

/// `value / unit` with the fraction printed without trailing zeros.
fn trim_frac(value: u128, unit: u128) -> String {
    let whole = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let f = format!("{frac:0width$}");
    format!("{whole}.{}", f.trim_end_matches('0'))
}

/// Go's strconv.ParseBool.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "strconv.ParseBool: parsing \"{s}\": invalid syntax"
        )),
    }
}

/// An I/O error worded as Go's os package words it: "open <path>: no such file or directory".
pub fn go_io_error(op: &str, path: &str, e: &std::io::Error) -> String {
    let msg = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::AlreadyExists => "file exists".to_string(),
        _ => {
            let m = e.to_string();
            let m = m.split(" (os error").next().unwrap_or(&m).to_string();
            let mut c = m.chars();
            match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => m,
            }
        }
    };
    format!("{op} {path}: {msg}")
}

/// Human-readable byte size as Go's go-humanize `Bytes` (SI units: "20 kB", "1.2 MB").
pub fn humanize_bytes(n: u64) -> String {
    if n < 10 {
        return format!("{n} B");
    }
    let sizes = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    let e = ((n as f64).ln() / 1000f64.ln()).floor() as usize;
    let e = e.min(sizes.len() - 1);
    let val = (n as f64 / 1000f64.powi(e as i32) * 10.0 + 0.5).floor() / 10.0;
    if val < 10.0 {
        format!("{val:.1} {}", sizes[e])
    } else {
        format!("{val:.0} {}", sizes[e])
    }
}

/// Formats a time as etcd's zap encoder does in UTC: `2006-01-02T15:04:05.000Z` (the server's
/// log lines, and the warnings etcdctl prints as Go's clientv3 logs them).
pub fn format_ts(t: SystemTime) -> String {
    let (date_time, nanos) = utc_seconds(t);
    format!("{date_time}.{:03}Z", nanos / 1_000_000)
}

/// `2006-01-02T15:04:05` of `t` in UTC, and the nanoseconds past that second.
fn utc_seconds(t: SystemTime) -> (String, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let rem = secs.rem_euclid(86_400);
    let (y, m, dd) = civil_from_days(secs.div_euclid(86_400));
    let date_time = format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    );
    (date_time, d.subsec_nanos())
}

/// Formats a time as Go's time.RFC3339Nano in UTC: nanoseconds with trailing zeros dropped
/// (`2006-01-02T15:04:05.999999999Z`), as Go's encoding/json writes a time.Time.
pub fn format_rfc3339_nano(t: SystemTime) -> String {
    let (date_time, nanos) = utc_seconds(t);
    let frac = format!("{nanos:09}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{date_time}Z")
    } else {
        format!("{date_time}.{frac}Z")
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_nano_drops_trailing_zeros_as_go() {
        let t = UNIX_EPOCH + std::time::Duration::from_millis(951_782_401_500);
        assert_eq!(format_rfc3339_nano(t), "2000-02-29T00:00:01.5Z");
        assert_eq!(format_rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn durations_parse_and_print_as_go() {
        assert_eq!(
            parse_go_duration("100ms").unwrap(),
            Duration::from_millis(100)
        );
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5x").is_err());
        assert_eq!(format_go_duration(Duration::from_millis(100)), "100ms");
        assert_eq!(format_go_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(
            format_go_duration(Duration::from_nanos(19_353_085)),
            "19.353085ms"
        );
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_secs(62)), "1m2s");
        assert_eq!(parse_go_bool("T"), Ok(true));
        assert!(parse_go_bool("yes").is_err());
    }

    #[test]
    fn timestamps_are_zaps() {
        let t = UNIX_EPOCH + Duration::from_millis(1_795_638_144_806);
        assert_eq!(format_ts(t), "2026-11-25T20:22:24.806Z");
        assert_eq!(format_ts(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    }
}
