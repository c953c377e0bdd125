//! Small conversions etcdctl needs to look like a Go program: durations, booleans, integers
//! with strconv's error texts, %q quoting and the `\x..` hex form of `--hex`.

pub use common::gofmt::{format_go_duration, parse_go_bool, parse_go_duration};

/// Go's strconv.ParseInt(s, base, 64) with its error text.
pub fn parse_go_i64(s: &str, base: u32) -> Result<i64, String> {
    let digits = s.strip_prefix('+').unwrap_or(s);
    if digits.is_empty() || digits.starts_with('+') {
        return Err(format!("strconv.ParseInt: parsing \"{s}\": invalid syntax"));
    }
    i64::from_str_radix(digits, base).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.ParseInt: parsing \"{s}\": {why}")
    })
}

/// Go's strconv.ParseUint(s, base, 64) with its error text.
pub fn parse_go_u64(s: &str, base: u32) -> Result<u64, String> {
    if s.is_empty() || s.starts_with('+') || s.starts_with('-') {
        return Err(format!(
            "strconv.ParseUint: parsing \"{s}\": invalid syntax"
        ));
    }
    u64::from_str_radix(s, base).map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow => "value out of range",
            _ => "invalid syntax",
        };
        format!("strconv.ParseUint: parsing \"{s}\": {why}")
    })
}

/// Go's `%q` of a string (strconv.Quote): printable text kept, the rest escaped.
pub fn go_quote(b: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut i = 0;
    while i < b.len() {
        // Decode one UTF-8 char if valid, else escape the byte.
        let rest = &b[i..];
        let valid = match std::str::from_utf8(rest) {
            Ok(s) => s,
            Err(e) => {
                // Safety of the slice: valid_up_to is a char boundary of valid UTF-8.
                std::str::from_utf8(&rest[..e.valid_up_to()]).unwrap_or("")
            }
        };
        if let Some(c) = valid.chars().next() {
            match c {
                '\x07' => out.push_str("\\a"),
                '\x08' => out.push_str("\\b"),
                '\x0c' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\x0b' => out.push_str("\\v"),
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    out.push_str(&format!("\\x{:02x}", c as u32))
                }
                c if c.is_control() => {
                    let v = c as u32;
                    if v < 0x10000 {
                        out.push_str(&format!("\\u{v:04x}"))
                    } else {
                        out.push_str(&format!("\\U{v:08x}"))
                    }
                }
                c => out.push(c),
            }
            i += c.len_utf8();
        } else {
            out.push_str(&format!("\\x{:02x}", b[i]));
            i += 1;
        }
    }
    out.push('"');
    out
}

/// The `--hex` form of bytes: every byte as `\xNN`.
pub fn hex_escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 4);
    for x in b {
        s.push_str(&format!("\\x{x:02x}"));
    }
    s
}

/// The end of the range that holds every key starting with `key` (etcd's prefix end).
pub fn prefix_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All bytes were 0xff (or the key is empty): the range runs to the end of the keyspace.
    vec![0]
}

pub use common::gofmt::{go_io_error, humanize_bytes};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_fail_with_strconv_text() {
        assert_eq!(
            parse_go_i64("zz", 16),
            Err("strconv.ParseInt: parsing \"zz\": invalid syntax".to_string())
        );
        assert_eq!(parse_go_i64("-12", 10), Ok(-12));
        assert_eq!(parse_go_u64("ff", 16), Ok(255));
    }

    #[test]
    fn quoting_matches_go() {
        assert_eq!(go_quote(b"a\"b\n"), "\"a\\\"b\\n\"");
        assert_eq!(go_quote(b"\xff"), "\"\\xff\"");
        assert_eq!(go_quote("é".as_bytes()), "\"é\"");
    }

    #[test]
    fn prefix_end_carries() {
        assert_eq!(prefix_end(b"p/"), b"p0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b""), vec![0]);
    }

    #[test]
    fn sizes_as_humanize() {
        assert_eq!(humanize_bytes(20480), "20 kB");
        assert_eq!(humanize_bytes(25 * 1024), "26 kB");
        assert_eq!(humanize_bytes(1_234_567), "1.2 MB");
        assert_eq!(humanize_bytes(5), "5 B");
    }
}
