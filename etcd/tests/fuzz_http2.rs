// Property-based fuzzing of the HTTP/2 header path in front of the gRPC server (api/authority.rs:
// frame parsing, HPACK decoding, the `:authority` rewrite): random frame sequences, some with
// well-formed header blocks carrying Go's `http://` authority, read through the rewriter.
// Any input is passed on or refused, never a panic, and the output stays bounded by the input.
//
// PROPTEST_CASES raises the case count for a long run; a failure is shrunk and its seed kept in
// etcd/tests/fuzz_http2.proptest-regressions (commit it: those cases run first every time).

#[path = "../../common/tests/fuzz_support/mod.rs"]
mod fuzz_support;

use etcd::api::authority::AuthorityFix;
use proptest::prelude::*;
use tokio::io::AsyncReadExt;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;

/// One HPACK "literal without indexing, new name" field (lengths below 127, no Huffman).
fn literal(name: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = vec![0x00, name.len() as u8];
    out.extend_from_slice(name);
    out.push(value.len() as u8);
    out.extend_from_slice(value);
    out
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A header block as a gRPC client sends it, sometimes with Go's scheme in `:authority`.
fn header_block() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec![
            b"http://127.0.0.1:2379".to_vec(),
            b"127.0.0.1:2379".to_vec(),
            b"https://[::1]:2379".to_vec(),
            b"http://".to_vec(),
            b"".to_vec(),
        ]),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(|(authority, junk)| {
            let mut b = literal(b":method", b"POST");
            b.extend(literal(b":scheme", b"http"));
            b.extend(literal(b":path", b"/etcdserverpb.KV/Range"));
            b.extend(literal(b":authority", &authority));
            b.extend(literal(b"content-type", b"application/grpc"));
            b.extend(junk);
            b
        })
}

/// A frame: a header block split over HEADERS and CONTINUATION, or any frame at all.
fn frames() -> impl Strategy<Value = Vec<u8>> {
    let any_frame = (
        any::<u8>(),
        any::<u8>(),
        0u32..8,
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(kind, flags, stream, payload)| frame(kind % 12, flags, stream, &payload));
    let headers = (header_block(), 1u32..8, any::<u8>(), 0usize..3).prop_map(
        |(block, stream, flags, split)| {
            // END_HEADERS on the last piece; the first's other flags are random.
            let cut = block.len() * split / 3;
            if cut == 0 {
                frame(HEADERS, (flags & !0x28) | 0x4, stream, &block)
            } else {
                let mut out = frame(HEADERS, flags & !0x2c, stream, &block[..cut]);
                out.extend(frame(CONTINUATION, 0x4, stream, &block[cut..]));
                out
            }
        },
    );
    prop::collection::vec(prop_oneof![2 => headers, 1 => any_frame], 0..12).prop_map(|f| f.concat())
}

/// Reads all of `input` through the rewriter; the bytes it passed on, or its error.
fn rewrite(input: &[u8]) -> std::io::Result<Vec<u8>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut out = Vec::new();
        AuthorityFix::new(input)
            .read_to_end(&mut out)
            .await
            .map(|_| out)
    })
}

proptest! {
    #![proptest_config(fuzz_support::config(2048, "tests/fuzz_http2.proptest-regressions"))]

    #[test]
    fn frame_sequences_are_passed_on_or_refused(body in frames(), preface in any::<bool>()) {
        let input = if preface { [PREFACE, &body].concat() } else { body };
        if let Ok(out) = rewrite(&input) {
            // A rewrite only drops a scheme from a header block (and re-encodes it).
            prop_assert!(out.len() <= input.len() + 4096, "{} bytes out of {}", out.len(), input.len());
        }
    }

    #[test]
    fn any_bytes_after_the_preface_are_passed_on_or_refused(body in prop::collection::vec(any::<u8>(), 0..2048)) {
        let input = [PREFACE, &body].concat();
        if let Ok(out) = rewrite(&input) {
            prop_assert!(out.len() <= input.len() + 4096);
        }
    }

    #[test]
    fn frames_without_headers_pass_unchanged(
        fs in prop::collection::vec((0u8..12, any::<u8>(), 0u32..8, prop::collection::vec(any::<u8>(), 0..64)), 0..12)
    ) {
        let body: Vec<u8> = fs
            .iter()
            .filter(|(kind, ..)| *kind != HEADERS && *kind != CONTINUATION && *kind != 0x5)
            .flat_map(|(kind, flags, stream, payload)| frame(*kind, *flags, *stream, payload))
            .collect();
        let input = [PREFACE, &body].concat();
        prop_assert_eq!(rewrite(&input).map_err(|e| e.to_string()), Ok(input));
    }
}

/// Go's `http://host:port` authority reaches the server without its scheme.
#[test]
fn a_go_authority_loses_its_scheme() {
    let mut block = literal(b":method", b"POST");
    block.extend(literal(b":authority", b"http://127.0.0.1:2379"));
    let input = [PREFACE, &frame(HEADERS, 0x4, 1, &block)].concat();
    let out = rewrite(&input).expect("rewritten");
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("127.0.0.1:2379") && !text.contains("http://"),
        "{text:?}"
    );
}
