// etcd's peer wire formats (docs/RAFTHTTP.md §3–§5): the message stream's length-prefixed
// frames, the msgappv2 encoding of the msgapp stream, and the headers raft requests carry.
//
// Decoders are incremental (HTTP chunks are not frame boundaries) and bounded: a frame
// announcing more than MAX_FRAME bytes fails the stream instead of being waited for.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message as _;
use proto::raftpb::{Entry, Message, MessageType};

/// The largest frame a stream or request body may announce (etcd's default max request is
/// 1.5 MiB; raft batches stay far below this).
pub const MAX_FRAME: u64 = 512 << 20;

/// Header names (Go canonicalises them; HTTP header names are case-insensitive).
pub const H_CLUSTER_ID: &str = "x-etcd-cluster-id";
pub const H_SERVER_FROM: &str = "x-server-from";
pub const H_SERVER_VERSION: &str = "x-server-version";
pub const H_MIN_CLUSTER_VERSION: &str = "x-min-cluster-version";
pub const H_PEER_URLS: &str = "x-peerurls";
pub const H_RAFT_TO: &str = "x-raft-to";

/// The minimum cluster version this member can join (what etcd 3.4/3.5 send).
pub const MIN_CLUSTER_VERSION: &str = "3.0.0";

/// Member and cluster IDs in paths and headers: lowercase hex without leading zeros.
pub fn id_path(id: u64) -> String {
    format!("{id:x}")
}

/// A malformed stream or body.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("frame of {0} bytes is larger than allowed")]
    TooLarge(u64),
    #[error("failed to decode raft message: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("failed to parse type {0} in msgappv2 stream")]
    UnknownMsgAppType(u8),
}

/// The link heartbeat an idle message stream carries (to 0, from 0, term 0).
pub fn is_link_heartbeat(m: &Message) -> bool {
    m.r#type == MessageType::MsgHeartbeat as i32 && m.to == 0 && m.from == 0 && m.term == 0
}

pub fn link_heartbeat() -> Message {
    Message {
        r#type: MessageType::MsgHeartbeat as i32,
        ..Default::default()
    }
}

/// One message-stream frame: 8-byte big-endian length, then the message.
pub fn encode_frame(m: &Message, out: &mut BytesMut) {
    out.put_u64(m.encoded_len() as u64);
    m.encode(out)
        .unwrap_or_else(|_| unreachable!("BytesMut grows"));
}

/// Reads length-prefixed messages from a byte stream that arrives in pieces.
#[derive(Default)]
pub struct FrameDecoder {
    buf: BytesMut,
}

impl FrameDecoder {
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole message, if one has arrived.
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        if self.buf.len() < 8 {
            return Ok(None);
        }
        let len = u64::from_be_bytes(self.buf[..8].try_into().unwrap_or([0; 8]));
        if len > MAX_FRAME {
            return Err(WireError::TooLarge(len));
        }
        if (self.buf.len() as u64) < 8 + len {
            return Ok(None);
        }
        self.buf.advance(8);
        let body = self.buf.split_to(len as usize);
        Ok(Some(Message::decode(body)?))
    }
}

/// msgappv2 frame kinds (the first byte).
const APP_LINK_HEARTBEAT: u8 = 0;
const APP_ENTRIES: u8 = 1;
const APP_MESSAGE: u8 = 2;

/// What both ends of one msgapp connection remember: the term and the index the next
/// AppEntries frame continues from.
#[derive(Debug, Default, Clone, Copy)]
struct AppState {
    term: u64,
    index: u64,
}

/// Writes MsgApps in the msgappv2 encoding (one per connection: the state starts afresh).
#[derive(Default)]
pub struct MsgAppEncoder {
    st: AppState,
}

impl MsgAppEncoder {
    pub fn link_heartbeat(out: &mut BytesMut) {
        out.put_u8(APP_LINK_HEARTBEAT);
    }

    /// Encodes MsgApp `m`: as entries only when the reader can rebuild it from its state,
    /// else whole.
    pub fn encode(&mut self, m: &Message, out: &mut BytesMut) {
        let n = m.entries.len() as u64;
        let continues = self.st.term != 0
            && m.term == self.st.term
            && m.log_term == self.st.term
            && m.index == self.st.index
            && !m.reject
            && m.reject_hint == 0
            && m.context.as_deref().unwrap_or_default().is_empty();
        if continues {
            out.put_u8(APP_ENTRIES);
            out.put_u64(n);
            for e in &m.entries {
                out.put_u64(e.encoded_len() as u64);
                e.encode(out)
                    .unwrap_or_else(|_| unreachable!("BytesMut grows"));
            }
            out.put_u64(m.commit);
            self.st.index += n;
        } else {
            out.put_u8(APP_MESSAGE);
            encode_frame(m, out);
            self.st = AppState {
                term: m.term,
                index: m.index + n,
            };
        }
    }
}

/// Reads a msgapp stream: rebuilds each frame into the MsgApp it stands for.
pub struct MsgAppDecoder {
    buf: BytesMut,
    st: AppState,
    /// The stream's ends: the writer is `from`, we are `to`.
    local: u64,
    remote: u64,
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_be_bytes)
}

impl MsgAppDecoder {
    pub fn new(local: u64, remote: u64) -> MsgAppDecoder {
        MsgAppDecoder {
            buf: BytesMut::new(),
            st: AppState::default(),
            local,
            remote,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next MsgApp (None for a link heartbeat or when more bytes are needed: call again
    /// until `Ok(None)` and `pending() == false`).
    pub fn next_message(&mut self) -> Result<Option<Message>, WireError> {
        loop {
            let Some(&kind) = self.buf.first() else {
                return Ok(None);
            };
            match kind {
                APP_LINK_HEARTBEAT => {
                    self.buf.advance(1);
                }
                APP_MESSAGE => {
                    let Some(len) = read_u64(&self.buf, 1) else {
                        return Ok(None);
                    };
                    if len > MAX_FRAME {
                        return Err(WireError::TooLarge(len));
                    }
                    if (self.buf.len() as u64) < 9 + len {
                        return Ok(None);
                    }
                    self.buf.advance(9);
                    let m = Message::decode(self.buf.split_to(len as usize))?;
                    self.st = AppState {
                        term: m.term,
                        index: m.index + m.entries.len() as u64,
                    };
                    return Ok(Some(m));
                }
                APP_ENTRIES => {
                    // Walk the frame without consuming it until it is whole.
                    let Some(n) = read_u64(&self.buf, 1) else {
                        return Ok(None);
                    };
                    if n > MAX_FRAME {
                        return Err(WireError::TooLarge(n));
                    }
                    let mut at = 9usize;
                    let mut spans = Vec::with_capacity(n.min(4096) as usize);
                    for _ in 0..n {
                        let Some(len) = read_u64(&self.buf, at) else {
                            return Ok(None);
                        };
                        if len > MAX_FRAME {
                            return Err(WireError::TooLarge(len));
                        }
                        let start = at + 8;
                        let end = start + len as usize;
                        if self.buf.len() < end {
                            return Ok(None);
                        }
                        spans.push((start, end));
                        at = end;
                    }
                    let Some(commit) = read_u64(&self.buf, at) else {
                        return Ok(None);
                    };
                    let frame = self.buf.split_to(at + 8).freeze();
                    let entries = spans
                        .into_iter()
                        .map(|(s, e)| Entry::decode(frame.slice(s..e)))
                        .collect::<Result<Vec<_>, _>>()?;
                    let m = Message {
                        r#type: MessageType::MsgApp as i32,
                        to: self.local,
                        from: self.remote,
                        term: self.st.term,
                        log_term: self.st.term,
                        index: self.st.index,
                        entries,
                        commit,
                        ..Default::default()
                    };
                    self.st.index += n;
                    return Ok(Some(m));
                }
                other => return Err(WireError::UnknownMsgAppType(other)),
            }
        }
    }
}

/// A message as a single frame's bytes (for the snapshot request's first part).
pub fn frame_bytes(m: &Message) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + m.encoded_len());
    encode_frame(m, &mut b);
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(term: u64, log_term: u64, index: u64, ents: &[u64], commit: u64) -> Message {
        Message {
            r#type: MessageType::MsgApp as i32,
            to: 2,
            from: 1,
            term,
            log_term,
            index,
            entries: ents
                .iter()
                .map(|i| Entry {
                    term,
                    index: *i,
                    data: Some(vec![*i as u8; 3]),
                    ..Default::default()
                })
                .collect(),
            commit,
            ..Default::default()
        }
    }

    #[test]
    fn msgappv2_round_trips_and_uses_short_frames_when_it_can() {
        let msgs = vec![
            app(2, 1, 2, &[3], 2),
            app(2, 2, 3, &[4, 5], 3),
            app(2, 2, 5, &[], 5),
            // Re-sent from an older index: must go whole.
            app(2, 2, 3, &[4], 5),
            app(3, 2, 4, &[5], 5),
        ];
        let mut enc = MsgAppEncoder::default();
        let mut out = BytesMut::new();
        let mut kinds = Vec::new();
        for m in &msgs {
            let before = out.len();
            enc.encode(m, &mut out);
            kinds.push(out[before]);
        }
        MsgAppEncoder::link_heartbeat(&mut out);
        assert_eq!(kinds, [2, 1, 1, 2, 2]);
        // Fed one byte at a time, as the worst chunking would.
        let mut dec = MsgAppDecoder::new(2, 1);
        let mut got = Vec::new();
        for b in out.iter() {
            dec.push(&[*b]);
            while let Some(m) = dec.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn the_message_stream_is_length_prefixed_and_bounded() {
        let m = Message {
            r#type: MessageType::MsgHeartbeat as i32,
            to: 2,
            from: 1,
            term: 2,
            commit: 6,
            ..Default::default()
        };
        let mut out = BytesMut::new();
        encode_frame(&m, &mut out);
        encode_frame(&link_heartbeat(), &mut out);
        let mut dec = FrameDecoder::default();
        dec.push(&out[..5]);
        assert!(dec.next_message().unwrap().is_none());
        dec.push(&out[5..]);
        assert_eq!(dec.next_message().unwrap(), Some(m));
        assert!(is_link_heartbeat(&dec.next_message().unwrap().unwrap()));
        let mut bad = FrameDecoder::default();
        bad.push(&u64::MAX.to_be_bytes());
        assert!(matches!(bad.next_message(), Err(WireError::TooLarge(_))));
        let mut garbage = MsgAppDecoder::new(2, 1);
        garbage.push(&[7]);
        assert!(matches!(
            garbage.next_message(),
            Err(WireError::UnknownMsgAppType(7))
        ));
    }
}
