// Accepts the HTTP/2 `:authority` that etcd 3.4's Go clients send for per-endpoint calls
// (`http://127.0.0.1:2379`, scheme included): Rust's h2 rejects it as malformed (the stream is
// reset with PROTOCOL_ERROR) where Go's grpc server takes it. This wrapper sits between the
// socket and the HTTP/2 server, decodes each request header block (HPACK), strips a scheme
// from `:authority`, and re-encodes the block; every other byte passes through unchanged.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const PREFACE_LEN: usize = 24;
const PREFACE: &[u8; PREFACE_LEN] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
const TYPE_HEADERS: u8 = 0x1;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// Bytes read from the socket at a time while frames are being looked at.
const READ_CHUNK: usize = 16 * 1024;
/// The largest frame the server accepts (its SETTINGS_MAX_FRAME_SIZE, set to this in serve.rs):
/// a bigger frame is refused at its header, before any of it is buffered.
pub const MAX_FRAME: usize = 16_384;
/// The server advertises a 16 KiB header list (hyper's default), so a client that follows the
/// protocol never sends a block near this; a header block (the HEADERS frame and its
/// CONTINUATIONs, as received) beyond it ends the connection instead of growing without bound.
const MAX_HEADER_BLOCK: usize = 64 * 1024;
/// The same bound on the decoded list (RFC 7541 size: name + value + 32 per field), since
/// indexed fields let a few bytes stand for a 4 KiB table entry.
const MAX_DECODED_HEADERS: usize = 64 * 1024;

struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    block: Vec<u8>,
    /// The frames as received, forwarded as they are when nothing needs fixing.
    raw: Vec<u8>,
}

/// The inbound side of one connection, rewritten frame by frame.
pub struct AuthorityFix<S> {
    inner: S,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_pos: usize,
    preface_seen: bool,
    pending: Option<PendingBlock>,
    decoder: loona_hpack::Decoder<'static>,
    encoder: loona_hpack::Encoder<'static>,
    eof: bool,
    /// What a read lands in before it is parsed (until the connection passes through).
    scratch: Option<Vec<u8>>,
    /// Set once the first header block showed a well-formed authority: from then on bytes
    /// pass through untouched (a client keeps one authority per connection).
    passthrough: bool,
    /// Set once a block was rewritten: every later block must be re-encoded too, since the
    /// server's HPACK state now follows our encoder.
    rewriting: bool,
}

impl<S> AuthorityFix<S> {
    pub fn new(inner: S) -> AuthorityFix<S> {
        AuthorityFix {
            inner,
            inbuf: Vec::new(),
            out: Vec::new(),
            out_pos: 0,
            preface_seen: false,
            pending: None,
            decoder: loona_hpack::Decoder::new(),
            encoder: loona_hpack::Encoder::new(),
            eof: false,
            scratch: None,
            passthrough: false,
            rewriting: false,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// `http://host:port[/...]` → `host:port`; anything else is returned unchanged.
pub fn fix_authority(v: &[u8]) -> Option<Vec<u8>> {
    let s = std::str::from_utf8(v).ok()?;
    let (_, rest) = s.split_once("://")?;
    let host = rest.split('/').next().unwrap_or(rest);
    Some(host.as_bytes().to_vec())
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<S> AuthorityFix<S> {
    /// Moves complete frames from `inbuf` to `out`, rewriting header blocks.
    fn process(&mut self) -> io::Result<()> {
        if !self.preface_seen {
            // HTTP/1.1 on the same port (curl, the JSON gateway): not HTTP/2, pass through.
            let n = self.inbuf.len().min(PREFACE_LEN);
            if self.inbuf[..n] != PREFACE[..n] {
                self.passthrough = true;
                self.preface_seen = true;
                self.out.append(&mut self.inbuf);
                return Ok(());
            }
            if self.inbuf.len() < PREFACE_LEN {
                return Ok(());
            }
            self.out.extend(self.inbuf.drain(..PREFACE_LEN));
            self.preface_seen = true;
        }
        // Frames are taken from a cursor and the consumed bytes dropped once: draining each
        // frame would move the rest of the buffer once per frame.
        let mut pos = 0;
        let r = self.process_frames(&mut pos);
        self.inbuf.drain(..pos);
        r
    }

    /// The frame loop of `process`: `pos` is how far `inbuf` has been consumed.
    fn process_frames(&mut self, pos: &mut usize) -> io::Result<()> {
        loop {
            if self.passthrough {
                self.out.extend_from_slice(&self.inbuf[*pos..]);
                *pos = self.inbuf.len();
                return Ok(());
            }
            let head = &self.inbuf[*pos..];
            if head.len() < FRAME_HEADER_LEN {
                return Ok(());
            }
            let len = ((head[0] as usize) << 16) | ((head[1] as usize) << 8) | head[2] as usize;
            if len > MAX_FRAME {
                return Err(bad(format!(
                    "frame of {len} bytes exceeds the {MAX_FRAME}-byte maximum"
                )));
            }
            if head.len() < FRAME_HEADER_LEN + len {
                return Ok(());
            }
            let typ = head[3];
            if self.pending.is_some() && typ != TYPE_CONTINUATION {
                // Anything else between a HEADERS frame and its END_HEADERS is a protocol error;
                // passing it on would also reorder it before the block.
                return Err(bad(format!("frame of type {typ} inside a header block")));
            }
            let flags = head[4];
            let stream_id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
            let range = *pos..*pos + FRAME_HEADER_LEN + len;
            *pos = range.end;
            if typ != TYPE_HEADERS && typ != TYPE_CONTINUATION {
                self.out.extend_from_slice(&self.inbuf[range]);
                continue;
            }
            let frame = self.inbuf[range].to_vec();
            let payload = &frame[FRAME_HEADER_LEN..];
            if typ == TYPE_HEADERS {
                let mut start = 0;
                let mut end = payload.len();
                if flags & FLAG_PADDED != 0 {
                    let pad = *payload
                        .first()
                        .ok_or_else(|| bad("empty padded HEADERS frame".into()))?
                        as usize;
                    start = 1;
                    end = end
                        .checked_sub(pad)
                        .ok_or_else(|| bad("HEADERS padding longer than the frame".into()))?;
                }
                if flags & FLAG_PRIORITY != 0 {
                    start += 5;
                }
                if start > end {
                    return Err(bad("malformed HEADERS frame".into()));
                }
                let block = PendingBlock {
                    stream_id,
                    end_stream: flags & FLAG_END_STREAM != 0,
                    block: payload[start..end].to_vec(),
                    raw: frame.clone(),
                };
                if flags & FLAG_END_HEADERS != 0 {
                    self.emit(block)?;
                } else {
                    self.pending = Some(block);
                }
            } else {
                let mut block = self
                    .pending
                    .take()
                    .ok_or_else(|| bad("CONTINUATION without HEADERS".into()))?;
                if block.stream_id != stream_id {
                    return Err(bad("CONTINUATION on another stream than its HEADERS".into()));
                }
                if block.raw.len() + frame.len() > MAX_HEADER_BLOCK {
                    return Err(bad(format!(
                        "header block over {MAX_HEADER_BLOCK} bytes on stream {stream_id}"
                    )));
                }
                block.block.extend_from_slice(payload);
                block.raw.extend_from_slice(&frame);
                if flags & FLAG_END_HEADERS != 0 {
                    self.emit(block)?;
                } else {
                    self.pending = Some(block);
                }
            }
        }
    }

    fn emit(&mut self, b: PendingBlock) -> io::Result<()> {
        let mut headers: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut decoded = 0usize;
        self.decoder
            .decode_with_cb(&b.block, |n, v| {
                decoded = decoded.saturating_add(n.len() + v.len() + 32);
                if decoded <= MAX_DECODED_HEADERS {
                    headers.push((n.into_owned(), v.into_owned()));
                }
            })
            .map_err(|e| bad(format!("undecodable request headers: {e:?}")))?;
        if decoded > MAX_DECODED_HEADERS {
            return Err(bad(format!(
                "request headers of {decoded} bytes decoded exceed {MAX_DECODED_HEADERS}"
            )));
        }
        let needs_fix = headers
            .iter()
            .any(|(n, v)| n == b":authority" && fix_authority(v).is_some());
        if !needs_fix && !self.rewriting {
            // The server's decoder sees exactly what the client encoded: nothing more to do on
            // this connection.
            self.out.extend_from_slice(&b.raw);
            self.passthrough = true;
            return Ok(());
        }
        self.rewriting = true;
        let fixed: Vec<(Vec<u8>, Vec<u8>)> = headers
            .into_iter()
            .map(|(n, v)| {
                if n == b":authority"
                    && let Some(f) = fix_authority(&v)
                {
                    (n, f)
                } else {
                    (n, v)
                }
            })
            .collect();
        let block = self
            .encoder
            .encode(fixed.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let chunks: Vec<&[u8]> = if block.is_empty() {
            vec![&[][..]]
        } else {
            block.chunks(MAX_FRAME).collect()
        };
        for (i, chunk) in chunks.iter().enumerate() {
            let last = i + 1 == chunks.len();
            let (typ, mut flags) = if i == 0 {
                (TYPE_HEADERS, if b.end_stream { FLAG_END_STREAM } else { 0 })
            } else {
                (TYPE_CONTINUATION, 0)
            };
            if last {
                flags |= FLAG_END_HEADERS;
            }
            let len = chunk.len();
            self.out.extend_from_slice(&[
                (len >> 16) as u8,
                (len >> 8) as u8,
                len as u8,
                typ,
                flags,
            ]);
            self.out.extend_from_slice(&b.stream_id.to_be_bytes());
            self.out.extend_from_slice(chunk);
        }
        Ok(())
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.out_pos < this.out.len() {
                let n = (this.out.len() - this.out_pos).min(buf.remaining());
                buf.put_slice(&this.out[this.out_pos..this.out_pos + n]);
                this.out_pos += n;
                if this.out_pos == this.out.len() {
                    this.out.clear();
                    this.out_pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            if this.passthrough && this.inbuf.is_empty() {
                // Nothing held back and nothing left to look at: the socket reads straight
                // into the server's buffer.
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            // Zeroed once per connection, not once per read.
            let scratch = this.scratch.get_or_insert_with(|| vec![0u8; READ_CHUNK]);
            let mut rb = ReadBuf::new(scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let got = rb.filled();
                    if got.is_empty() {
                        this.eof = true;
                        // Whatever is left unparsed goes through as is; the server will
                        // judge the truncated frame.
                        let rest = std::mem::take(&mut this.inbuf);
                        this.out.extend(rest);
                        continue;
                    }
                    this.inbuf.extend_from_slice(got);
                    if let Err(e) = this.process() {
                        return Poll::Ready(Err(e));
                    }
                    if this.passthrough {
                        this.scratch = None;
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for AuthorityFix<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_scheme_and_path() {
        assert_eq!(
            fix_authority(b"http://127.0.0.1:2379"),
            Some(b"127.0.0.1:2379".to_vec())
        );
        assert_eq!(fix_authority(b"https://h:1/x"), Some(b"h:1".to_vec()));
        assert_eq!(fix_authority(b"127.0.0.1:2379"), None);
    }

    #[test]
    fn rewrites_header_blocks_and_passes_other_frames() {
        let mut client_enc = loona_hpack::Encoder::new();
        let block = client_enc.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":authority", b"http://127.0.0.1:2379"),
            (b":path", b"/etcdserverpb.Maintenance/Status"),
        ]);
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        // HEADERS split over a CONTINUATION, then a DATA frame.
        let (a, b) = block.split_at(block.len() / 2);
        wire.extend_from_slice(&[0, 0, a.len() as u8, TYPE_HEADERS, 0, 0, 0, 0, 1]);
        wire.extend_from_slice(a);
        wire.extend_from_slice(&[
            0,
            0,
            b.len() as u8,
            TYPE_CONTINUATION,
            FLAG_END_HEADERS,
            0,
            0,
            0,
            1,
        ]);
        wire.extend_from_slice(b);
        wire.extend_from_slice(&[0, 0, 3, 0x0, FLAG_END_STREAM, 0, 0, 0, 1, 7, 8, 9]);

        let mut fix = AuthorityFix::new(());
        // Feed it in awkward pieces.
        for piece in wire.chunks(5) {
            fix.inbuf.extend_from_slice(piece);
            fix.process().unwrap();
        }
        let out = fix.out.clone();
        assert_eq!(&out[..24], b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let len = ((out[24] as usize) << 16) | ((out[25] as usize) << 8) | out[26] as usize;
        assert_eq!(out[27], TYPE_HEADERS);
        assert_eq!(out[28] & FLAG_END_HEADERS, FLAG_END_HEADERS);
        let mut server_dec = loona_hpack::Decoder::new();
        let headers = server_dec.decode(&out[33..33 + len]).unwrap();
        assert!(headers.contains(&(b":authority".to_vec(), b"127.0.0.1:2379".to_vec())));
        assert_eq!(
            &out[33 + len..],
            &[0, 0, 3, 0x0, FLAG_END_STREAM, 0, 0, 0, 1, 7, 8, 9]
        );
    }
}

#[cfg(test)]
mod passthrough_tests {
    use super::*;

    #[test]
    fn a_good_authority_switches_the_connection_to_passthrough() {
        let mut enc = loona_hpack::Encoder::new();
        let block = enc.encode([
            (&b":authority"[..], &b"127.0.0.1:2379"[..]),
            (b":path", b"/x"),
        ]);
        let mut wire = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        wire.extend_from_slice(&[
            0,
            0,
            block.len() as u8,
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            0,
            0,
            0,
            1,
        ]);
        wire.extend_from_slice(&block);
        wire.extend_from_slice(b"anything after is not parsed");
        let mut fix = AuthorityFix::new(());
        fix.inbuf.extend_from_slice(&wire);
        fix.process().unwrap();
        assert!(fix.passthrough);
        assert_eq!(fix.out, wire);
    }

    /// Reads through the wrapper as the HTTP/2 server does, the client writing in pieces:
    /// every byte arrives once and in order, before passthrough (parsed) and after (straight
    /// into the reader's buffer).
    #[tokio::test]
    async fn reads_through_the_wrapper_keep_every_byte_in_order() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut enc = loona_hpack::Encoder::new();
        let block = enc.encode([
            (&b":authority"[..], &b"127.0.0.1:2379"[..]),
            (b":path", b"/x"),
        ]);
        let mut wire = PREFACE.to_vec();
        let n = block.len() as u8;
        wire.extend_from_slice(&[0, 0, n, TYPE_HEADERS, FLAG_END_HEADERS, 0, 0, 0, 1]);
        wire.extend_from_slice(&block);
        for i in 0..2000u32 {
            wire.extend_from_slice(&[0, 0, 4, 0, 0, 0, 0, 0, 1]);
            wire.extend_from_slice(&i.to_be_bytes());
        }
        let (mut client, server) = tokio::io::duplex(64);
        let sent = wire.clone();
        let writer = tokio::spawn(async move {
            for piece in sent.chunks(7) {
                client.write_all(piece).await.expect("write");
            }
        });
        let mut fix = AuthorityFix::new(server);
        let mut got = Vec::new();
        let mut buf = [0u8; 100];
        while got.len() < wire.len() {
            let n = fix.read(&mut buf).await.expect("read");
            assert!(n > 0, "early end after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        writer.await.expect("writer");
        assert!(fix.passthrough && fix.scratch.is_none());
        assert_eq!(got, wire);
    }
}

#[cfg(test)]
mod bound_tests {
    use super::*;

    fn frame(typ: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, typ, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn started() -> AuthorityFix<()> {
        let mut fix = AuthorityFix::new(());
        fix.inbuf.extend_from_slice(PREFACE);
        fix.process().expect("preface");
        fix
    }

    #[test]
    fn a_continuation_flood_ends_the_connection_within_the_bound() {
        let mut fix = started();
        fix.inbuf
            .extend_from_slice(&frame(TYPE_HEADERS, 0, 1, &[0x82]));
        fix.process().expect("first frame");
        let chunk = frame(TYPE_CONTINUATION, 0, 1, &[0x82; 1000]);
        let mut sent = 0;
        let err = loop {
            fix.inbuf.extend_from_slice(&chunk);
            sent += chunk.len();
            assert!(sent < 1 << 20, "a 1 MiB header block was accepted");
            if let Err(e) = fix.process() {
                break e;
            }
        };
        assert!(err.to_string().contains("header block over"), "{err}");
        assert!(sent <= MAX_HEADER_BLOCK + chunk.len());
    }

    #[test]
    fn empty_continuations_count_too() {
        let mut fix = started();
        fix.inbuf
            .extend_from_slice(&frame(TYPE_HEADERS, 0, 1, &[0x82]));
        let empty = frame(TYPE_CONTINUATION, 0, 1, &[]);
        let mut frames = 0;
        loop {
            fix.inbuf.extend_from_slice(&empty);
            frames += 1;
            assert!(
                frames < 100_000,
                "endless empty CONTINUATIONs were accepted"
            );
            if fix.process().is_err() {
                break;
            }
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_at_its_header() {
        let mut fix = started();
        // Only the 9-byte header of a 16 MiB HEADERS frame has arrived.
        fix.inbuf
            .extend_from_slice(&[0xff, 0xff, 0xff, TYPE_HEADERS, 0, 0, 0, 0, 1]);
        let err = fix.process().expect_err("16 MiB frame");
        assert!(
            err.to_string().contains("exceeds the 16384-byte maximum"),
            "{err}"
        );
    }

    #[test]
    fn indexed_fields_cannot_inflate_a_small_block() {
        let mut enc = Vec::new();
        // A 4000-byte literal added to the dynamic table (index 62), then 40 references to it:
        // about 100 bytes on the wire that decode to 160 KB.
        enc.push(0x40); // literal with incremental indexing, new name
        enc.push(0x01);
        enc.push(b'x');
        enc.extend_from_slice(&[0x7f, 0xa1, 0x1e]); // value length 4000 = 127 + 0x21 + 0x1e * 128
        enc.extend(std::iter::repeat_n(b'a', 4000));
        enc.extend(std::iter::repeat_n(0x80 | 62, 40));
        let mut fix = started();
        fix.inbuf.extend_from_slice(&frame(
            TYPE_HEADERS,
            FLAG_END_HEADERS,
            1,
            &enc[..MAX_FRAME.min(enc.len())],
        ));
        let err = fix.process().expect_err("header bomb");
        assert!(err.to_string().contains("decoded exceed"), "{err}");
    }

    #[test]
    fn a_data_frame_inside_a_header_block_is_a_protocol_error() {
        let mut fix = started();
        fix.inbuf
            .extend_from_slice(&frame(TYPE_HEADERS, 0, 1, &[0x82]));
        fix.inbuf.extend_from_slice(&frame(0x0, 0, 1, b"x"));
        assert!(fix.process().is_err());
    }
}
