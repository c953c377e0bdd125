//! A small JSON writer that produces what Go's encoding/json produces for etcd's structs:
//! fields in declaration order, `omitempty` zero values left out, bytes as base64.

use base64::Engine;

/// One JSON object under construction; fields appear in the order they are added.
pub struct Obj {
    buf: String,
}

impl Default for Obj {
    fn default() -> Self {
        Self::new()
    }
}

impl Obj {
    pub fn new() -> Self {
        Obj {
            buf: String::from("{"),
        }
    }

    /// Adds an already-encoded JSON value.
    pub fn raw(&mut self, name: &str, json: &str) -> &mut Self {
        if self.buf.len() > 1 {
            self.buf.push(',');
        }
        self.buf.push_str(&string(name));
        self.buf.push(':');
        self.buf.push_str(json);
        self
    }

    pub fn num(&mut self, name: &str, v: impl std::fmt::Display) -> &mut Self {
        self.raw(name, &v.to_string())
    }

    /// A number with `omitempty`.
    pub fn num_nz<T: std::fmt::Display + PartialEq + Default>(
        &mut self,
        name: &str,
        v: T,
    ) -> &mut Self {
        if v != T::default() {
            self.raw(name, &v.to_string());
        }
        self
    }

    pub fn bool(&mut self, name: &str, v: bool) -> &mut Self {
        self.raw(name, if v { "true" } else { "false" })
    }

    pub fn bool_nz(&mut self, name: &str, v: bool) -> &mut Self {
        if v {
            self.raw(name, "true");
        }
        self
    }

    pub fn str(&mut self, name: &str, v: &str) -> &mut Self {
        self.raw(name, &string(v))
    }

    pub fn str_nz(&mut self, name: &str, v: &str) -> &mut Self {
        if !v.is_empty() {
            self.raw(name, &string(v));
        }
        self
    }

    /// Bytes with `omitempty`, base64 as Go encodes `[]byte`.
    pub fn bytes_nz(&mut self, name: &str, v: &[u8]) -> &mut Self {
        if !v.is_empty() {
            self.raw(name, &bytes(v));
        }
        self
    }

    /// A nested value with `omitempty` semantics for a nil pointer.
    pub fn opt(&mut self, name: &str, v: Option<String>) -> &mut Self {
        if let Some(v) = v {
            self.raw(name, &v);
        }
        self
    }

    /// A slice with `omitempty`: left out when empty.
    pub fn arr_nz(&mut self, name: &str, items: Vec<String>) -> &mut Self {
        if !items.is_empty() {
            self.raw(name, &array(items));
        }
        self
    }

    pub fn finish(&mut self) -> String {
        let mut s = std::mem::take(&mut self.buf);
        s.push('}');
        s
    }
}

/// A JSON array of encoded values.
pub fn array(items: Vec<String>) -> String {
    format!("[{}]", items.join(","))
}

/// A base64 JSON string, as Go encodes `[]byte`.
pub fn bytes(b: &[u8]) -> String {
    format!(
        "\"{}\"",
        base64::engine::general_purpose::STANDARD.encode(b)
    )
}

/// A JSON string escaped as Go's encoding/json does (HTML-safe, \u00XX for controls).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omits_zero_values_and_keeps_order() {
        let mut o = Obj::new();
        o.num_nz("a", 0u64)
            .num_nz("b", 7i64)
            .bytes_nz("c", b"")
            .bytes_nz("d", b"foo");
        assert_eq!(o.finish(), "{\"b\":7,\"d\":\"Zm9v\"}");
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(
            string("a<b>&\"\n\u{1}"),
            "\"a\\u003cb\\u003e\\u0026\\\"\\n\\u0001\""
        );
    }
}
