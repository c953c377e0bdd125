// Go-style durations as etcd's flags take them ("100ms", "1h30m", "5s", "0"), so the same
// values work here.

use std::time::Duration;

/// Parses a Go duration string; a bare "0" is zero.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(format!("time: invalid duration \"{s}\""));
    }
    let invalid = || format!("time: invalid duration \"{s}\"");
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration \"{s}\""))?;
        if num_len == 0 {
            return Err(invalid());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| invalid())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs_per = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("time: unknown unit \"{u}\" in duration \"{s}\"")),
        };
        total += n * secs_per;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats like Go's Duration.String for the values etcd logs ("100ms", "1s", "2h0m0s").
pub fn format_go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trim(ns as f64 / 1e3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trim(ns as f64 / 1e6));
    }
    let total = d.as_secs_f64();
    let h = (total / 3600.0).floor();
    let m = ((total - h * 3600.0) / 60.0).floor();
    let s = total - h * 3600.0 - m * 60.0;
    if h > 0.0 {
        format!("{h}h{m}m{}s", trim(s))
    } else if m > 0.0 {
        format!("{m}m{}s", trim(s))
    } else {
        format!("{}s", trim(s))
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_go_durations() {
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
        assert_eq!(format_go_duration(Duration::from_secs(1)), "1s");
        assert_eq!(format_go_duration(Duration::from_secs(7200)), "2h0m0s");
        assert_eq!(format_go_duration(Duration::from_millis(900)), "900ms");
    }
}
