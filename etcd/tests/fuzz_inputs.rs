// Property-based fuzzing of the server's parsers of operator and client text: the YAML
// configuration file (through flag parsing and the whole Config build) and the JSON gateway's
// request bodies for every message type. Any input is a value or an error, never a panic.
//
// PROPTEST_CASES raises the case counts for a long run; a failure is shrunk and its seed kept
// in etcd/tests/fuzz_inputs.proptest-regressions (commit it: those cases run first every time).

#[path = "../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use etcd::api::descriptors;
use etcd::config::{Config, file};
use etcd::http::json;
use proptest::prelude::*;

/// YAML-shaped configuration text: real keys (flags and the two TLS sections), values of
/// every YAML kind, nesting, anchors and the odd broken token.
fn yaml_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("name: ".to_string()),
        Just("data-dir: ".to_string()),
        Just("listen-client-urls: ".to_string()),
        Just("initial-cluster: ".to_string()),
        Just("heartbeat-interval: ".to_string()),
        Just("quota-backend-bytes: ".to_string()),
        Just("log-outputs: ".to_string()),
        Just("feature-gates: ".to_string()),
        Just("experimental-snapshot-catch-up-entries: ".to_string()),
        Just("client-transport-security:\n  ".to_string()),
        Just("peer-transport-security:\n  ".to_string()),
        Just("cert-file: ".to_string()),
        Just("auto-tls: ".to_string()),
        Just("unknown-key: ".to_string()),
        Just("\n".to_string()),
        Just("\n  ".to_string()),
        Just("- ".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just(", ".to_string()),
        Just(": ".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("!!binary ".to_string()),
        Just("'".to_string()),
        Just("\"".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("~".to_string()),
        Just("1e999".to_string()),
        Just("-9223372036854775809".to_string()),
        Just("http://127.0.0.1:0".to_string()),
        Just("---\n".to_string()),
        "[a-z0-9=,.é ]{0,6}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

/// Reads `text` as etcd reads a config file: YAML to flags, then the whole configuration.
fn read_config(text: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("etcd.conf.yml");
    std::fs::write(&path, text).expect("write config");
    let _ = file::to_args(&path.display().to_string(), text);
    let args = vec![format!("--config-file={}", path.display())];
    let _ = Config::from_args(&args, &[]);
}

/// Every request message type the gateway decodes from JSON (collected once, not per case).
fn request_types() -> &'static [prost_reflect::MessageDescriptor] {
    static TYPES: std::sync::LazyLock<Vec<prost_reflect::MessageDescriptor>> =
        std::sync::LazyLock::new(|| {
            let pool = descriptors::pool().expect("descriptor pool");
            pool.all_messages()
                .filter(|m| {
                    m.package_name() == "etcdserverpb"
                        || m.package_name() == "v3electionpb"
                        || m.package_name() == "v3lockpb"
                })
                .collect()
        });
    &TYPES
}

/// JSON-shaped text: the fields of etcd's requests, every JSON kind, deep nesting.
fn json_text() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("{".to_string()),
        Just("}".to_string()),
        Just("[".to_string()),
        Just("]".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just("\"key\"".to_string()),
        Just("\"range_end\"".to_string()),
        Just("\"value\"".to_string()),
        Just("\"lease\"".to_string()),
        Just("\"ID\"".to_string()),
        Just("\"TTL\"".to_string()),
        Just("\"compare\"".to_string()),
        Just("\"success\"".to_string()),
        Just("\"request_put\"".to_string()),
        Just("\"request_txn\"".to_string()),
        Just("\"create_request\"".to_string()),
        Just("\"result\"".to_string()),
        Just("\"target\"".to_string()),
        Just("\"VALUE\"".to_string()),
        Just("\"sort_order\"".to_string()),
        Just("\"a2V5\"".to_string()),
        Just("\"!!\"".to_string()),
        Just("\"9223372036854775808\"".to_string()),
        Just("-1".to_string()),
        Just("1e400".to_string()),
        Just("1.5".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        Just("\"\\u0000\"".to_string()),
        Just("\"\\ud800\"".to_string()),
        "[a-z0-9 ]{0,4}",
    ];
    prop::collection::vec(token, 0..48).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(fuzz_support::config(1024, "tests/fuzz_inputs.proptest-regressions"))]

    #[test]
    fn yaml_like_config_files_never_panic(text in yaml_text()) {
        read_config(&text);
    }

    #[test]
    fn any_bytes_as_a_config_file_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        read_config(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn json_like_gateway_bodies_never_panic(text in json_text(), pick in any::<prop::sample::Index>()) {
        let types = request_types();
        let desc = &types[pick.index(types.len())];
        if let Ok(bytes) = json::request_from_json(desc, text.as_bytes()) {
            // What the gateway accepted is a valid message of that type.
            let back = prost_reflect::DynamicMessage::decode(desc.clone(), &bytes[..]);
            prop_assert!(back.is_ok(), "{} from {text}: {back:?}", desc.full_name());
        }
    }

    #[test]
    fn any_bytes_as_a_gateway_body_or_answer_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256),
        pick in any::<prop::sample::Index>(),
    ) {
        let types = request_types();
        let desc = &types[pick.index(types.len())];
        let _ = json::request_from_json(desc, &bytes);
        let _ = json::response_to_json(desc, &bytes);
    }
}

/// Nesting deep enough to overflow a recursive parser's stack is an error, not a crash.
#[test]
fn deeply_nested_config_and_json_are_errors_not_crashes() {
    for depth in [1_000, 100_000] {
        read_config(&format!(
            "log-outputs: {}{}",
            "[".repeat(depth),
            "]".repeat(depth)
        ));
        read_config(&format!("{}x", "- ".repeat(depth)));
        let deep = format!(
            "log-outputs:\n{}",
            (0..depth.min(200))
                .map(|i| format!("{}- \n", "  ".repeat(i)))
                .collect::<String>()
        );
        assert!(
            file::to_args("deep.yml", &deep)
                .is_err_and(|e| e.contains("nested deeper than 64 levels"))
        );
        let types = request_types();
        let txn = types
            .iter()
            .find(|d| d.full_name() == "etcdserverpb.TxnRequest")
            .expect("TxnRequest");
        let nested = format!(
            "{}{{}}{}",
            r#"{"success":[{"request_txn":"#.repeat(depth),
            "}]}".repeat(depth)
        );
        let parsed = json::request_from_json(txn, nested.as_bytes());
        // Go's encoding/json refuses nesting past 10000 levels too.
        if depth > 10_000 {
            assert!(parsed.is_err(), "{depth} levels accepted");
        }
    }
}

/// Aliases of aliases ("billion laughs") would copy one anchored node exponentially often.
#[test]
fn alias_expansion_is_bounded() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let prev = format!("*a{}", i - 1);
        text += &format!("a{i}: &a{i} [{}]\n", vec![prev; 10].join(", "));
    }
    let err = file::to_args("laughs.yml", &text).expect_err("expanded 10^12 nodes");
    assert!(err.contains("once its aliases are expanded"), "{err}");
    // A few aliases, as people use them, are fine.
    let ok = "x: &u http://127.0.0.1:2379\nlisten-client-urls: *u\nadvertise-client-urls: *u\n";
    let (args, _) = file::to_args("ok.yml", ok).expect("aliases");
    assert!(
        args.contains(&"--listen-client-urls=http://127.0.0.1:2379".to_string()),
        "{args:?}"
    );
}
