// Property-based fuzzing of etcdctl's txn grammar (compares, request lines, Go quoting): any
// input is an answer or an error, never a panic, and Go-quoted bytes come back byte for byte.
//
// PROPTEST_CASES raises the case counts for a long run; a failure is shrunk and its seed kept
// in etcdctl/proptest-regressions/commands/txn_fuzz.txt (commit it: those cases run first every time).

#[path = "../../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use proptest::prelude::*;
use proto::etcdserverpb::{compare, request_op};

use super::{parse_compare, parse_op, read_txn};
use crate::util::go_quote;

/// Pieces of the grammar, so random input reaches past the first token's check.
fn grammar_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("value(".to_string()),
        Just("mod(".to_string()),
        Just("create(".to_string()),
        Just("ver(".to_string()),
        Just("lease(".to_string()),
        Just("\"".to_string()),
        Just("`".to_string()),
        Just("\\".to_string()),
        Just("\\x".to_string()),
        Just("\\u".to_string()),
        Just("\\U".to_string()),
        Just(") ".to_string()),
        Just(" = ".to_string()),
        Just(" != ".to_string()),
        Just(" < ".to_string()),
        Just("\n".to_string()),
        Just("\n\n".to_string()),
        Just("put ".to_string()),
        Just("get ".to_string()),
        Just("del ".to_string()),
        Just("--prefix ".to_string()),
        Just("--from-key ".to_string()),
        Just("--lease=".to_string()),
        Just("--limit=".to_string()),
        Just("--rev=-".to_string()),
        Just("--prev-kv ".to_string()),
        "[a-f0-9é\u{ff}\u{1F600} ]{0,4}",
    ];
    prop::collection::vec(token, 0..48).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(fuzz_support::config(2048, "proptest-regressions/commands/txn_fuzz.txt"))]

    #[test]
    fn any_bytes_read_as_a_txn_never_panic(input in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = read_txn(&mut &input[..], false, "simple");
        let _ = read_txn(&mut &input[..], false, "json");
    }

    #[test]
    fn grammar_like_text_never_panics(text in grammar_text()) {
        let _ = read_txn(&mut text.as_bytes(), false, "simple");
        for line in text.lines() {
            let _ = parse_compare(line);
            let _ = parse_op(line, "simple");
        }
    }

    #[test]
    fn quoted_bytes_come_back_as_they_were(
        key in prop::collection::vec(any::<u8>(), 0..32),
        value in prop::collection::vec(any::<u8>(), 0..32),
        op in prop::sample::select(vec!["=", "!=", "<", ">"]),
    ) {
        let line = format!("value({}) {op} {}", go_quote(&key), go_quote(&value));
        let c = parse_compare(&line).map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
        prop_assert_eq!(&c.key, &key);
        prop_assert_eq!(c.target_union, Some(compare::TargetUnion::Value(value.clone())));
        let want = match op {
            "=" => compare::CompareResult::Equal,
            "!=" => compare::CompareResult::NotEqual,
            "<" => compare::CompareResult::Less,
            _ => compare::CompareResult::Greater,
        };
        prop_assert_eq!(c.result, want as i32);

        // A put of an empty key is refused, and a word starting with '-' is read as a flag, as
        // in Go; every other put keeps both byte strings.
        if !key.is_empty() && !key.starts_with(b"-") && !value.starts_with(b"-") {
            let line = format!("put {} {}", go_quote(&key), go_quote(&value));
            let op = parse_op(&line, "simple").map_err(|e| TestCaseError::fail(format!("{line}: {e}")))?;
            match op.request {
                Some(request_op::Request::RequestPut(p)) => {
                    prop_assert_eq!(p.key, key);
                    prop_assert_eq!(p.value, value);
                }
                other => prop_assert!(false, "{line} parsed as {other:?}"),
            }
        }
    }
}

/// Go's escapes that a byte-for-byte round trip does not produce: octal, \u, \U, raw strings.
#[test]
fn go_escapes_read_as_go_reads_them() {
    let key = |l: &str| parse_compare(l).map(|c| c.key).map_err(|e| e.to_string());
    assert_eq!(key(r#"value("k\377") = "v""#), Ok(b"k\xff".to_vec()));
    assert_eq!(
        key(r#"value("\u00e9\U0001F600") = "v""#),
        Ok("é😀".as_bytes().to_vec())
    );
    assert_eq!(key("value(`k\\x`) = `v`"), Ok(b"k\\x".to_vec()));
    for bad in [
        r#"value("\400") = "v""#,
        r#"value("\ud800") = "v""#,
        r#"value("\u12") = "v""#,
        r#"value("k\x+f") = "v""#,
    ] {
        assert!(key(bad).is_err(), "{bad} was accepted");
    }
    assert_eq!(
        parse_op(r#"put "a" "\777""#, "simple")
            .map_err(|e| e.to_string())
            .err(),
        Some("invalid syntax".to_string())
    );
}
