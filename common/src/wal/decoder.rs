// Reads framed records from a run of WAL segments in order, checking the CRC-32C chain, and
// tells a torn tail (a write the crash cut short) apart from corruption in the middle.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::PathBuf;

use prost::Message;
use proto::walpb::Record;

use super::frame::{LEN_WORD, split_len_word};
use super::{RecordType, WalError};
use crate::fileutil::FileError;

/// Sector size assumed by the torn-write check: a write that the crash interrupted leaves whole
/// sectors unwritten (zero in a preallocated segment).
const SECTOR: u64 = 512;

/// Why decoding stopped before a clean end.
#[derive(Debug)]
pub enum DecodeError {
    /// The frame at `offset` of `file` was cut short or never fully written.
    Torn {
        file: PathBuf,
        offset: u64,
    },
    /// The record at `offset` is unreadable or fails its checksum and was fully written.
    Corrupt {
        file: PathBuf,
        offset: u64,
        reason: String,
    },
    CrcMismatch {
        file: PathBuf,
        offset: u64,
    },
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
}

impl DecodeError {
    /// The error a reader reports: a frame cut short is a repairable torn tail only in the last
    /// segment; in an older (sealed) segment it is corruption.
    pub fn into_wal_error_at(self, in_last_segment: bool) -> WalError {
        match self {
            DecodeError::Torn { file, offset } if in_last_segment => {
                WalError::TornTail { file, offset }
            }
            DecodeError::Torn { file, offset } => WalError::Corrupt {
                file,
                offset,
                reason: "record cut short in a segment that is not the last".into(),
            },
            other => other.into_wal_error(),
        }
    }

    pub fn into_wal_error(self) -> WalError {
        match self {
            DecodeError::Torn { file, offset } => WalError::TornTail { file, offset },
            DecodeError::Corrupt {
                file,
                offset,
                reason,
            } => WalError::Corrupt {
                file,
                offset,
                reason,
            },
            DecodeError::CrcMismatch { file, offset } => WalError::CrcMismatch { file, offset },
            DecodeError::Io { file, source } => WalError::File(FileError::Io {
                op: "read",
                path: file,
                source,
            }),
        }
    }
}

struct Segment {
    path: PathBuf,
    reader: BufReader<File>,
    size: u64,
}

pub struct Decoder {
    segments: Vec<Segment>,
    cur: usize,
    /// Offset in the current segment just past the last good record.
    off: u64,
    crc: u32,
    buf: Vec<u8>,
}

/// A decoded record and where it was.
pub struct Decoded {
    pub record: Record,
    pub file_index: usize,
    pub offset: u64,
}

impl Decoder {
    pub fn new(files: Vec<(PathBuf, File)>) -> std::io::Result<Decoder> {
        let mut segments = Vec::with_capacity(files.len());
        for (path, file) in files {
            let size = file.metadata()?.len();
            segments.push(Segment {
                path,
                // Every segment's reader exists from the start: a buffer no larger than its file
                // keeps a directory of many small segments from costing 1 MiB each.
                reader: BufReader::with_capacity(
                    usize::try_from(size)
                        .unwrap_or(usize::MAX)
                        .clamp(LEN_WORD, 1 << 20),
                    file,
                ),
                size,
            });
        }
        Ok(Decoder {
            segments,
            cur: 0,
            off: 0,
            crc: 0,
            buf: Vec::new(),
        })
    }

    /// The running CRC after the last good record: where the encoder continues the chain.
    pub fn last_crc(&self) -> u32 {
        self.crc
    }

    /// Offset just past the last good record of the segment being read (the last one at the end).
    pub fn last_offset(&self) -> u64 {
        self.off
    }

    pub fn is_last_segment(&self) -> bool {
        self.cur + 1 >= self.segments.len()
    }

    fn advance_segment(&mut self) -> bool {
        if self.cur + 1 < self.segments.len() {
            self.cur += 1;
            self.off = 0;
            true
        } else {
            false
        }
    }

    /// The next record, `None` at the clean end of the last segment.
    pub fn next(&mut self) -> Result<Option<Decoded>, DecodeError> {
        loop {
            if self.segments.is_empty() {
                return Ok(None);
            }
            let off = self.off;
            let seg = &mut self.segments[self.cur];
            let mut word = [0u8; LEN_WORD];
            let n = read_full(&mut seg.reader, &mut word).map_err(|source| DecodeError::Io {
                file: seg.path.clone(),
                source,
            })?;
            if n == 0 {
                if self.advance_segment() {
                    continue;
                }
                return Ok(None);
            }
            if n < LEN_WORD {
                return Err(DecodeError::Torn {
                    file: seg.path.clone(),
                    offset: off,
                });
            }
            let w = u64::from_le_bytes(word);
            if w == 0 {
                // Zero length: the preallocated, never written part of the segment.
                if self.advance_segment() {
                    continue;
                }
                return Ok(None);
            }
            let (len, pad) = split_len_word(w);
            let remaining = seg.size.saturating_sub(off + LEN_WORD as u64);
            if len + pad > remaining {
                // A length that runs past the end of the file is a frame cut short (or a length
                // word from a torn write); it cannot be a record.
                return Err(DecodeError::Torn {
                    file: seg.path.clone(),
                    offset: off,
                });
            }
            let total = (len + pad) as usize;
            self.buf.resize(total, 0);
            let n =
                read_full(&mut seg.reader, &mut self.buf).map_err(|source| DecodeError::Io {
                    file: seg.path.clone(),
                    source,
                })?;
            if n < total {
                return Err(DecodeError::Torn {
                    file: seg.path.clone(),
                    offset: off,
                });
            }
            let data_start = off + LEN_WORD as u64;
            let torn = is_torn(&self.buf[..len as usize], data_start);
            let record = match Record::decode(&self.buf[..len as usize]) {
                Ok(r) => r,
                Err(e) => {
                    return Err(if torn {
                        DecodeError::Torn {
                            file: seg.path.clone(),
                            offset: off,
                        }
                    } else {
                        DecodeError::Corrupt {
                            file: seg.path.clone(),
                            offset: off,
                            reason: format!("cannot decode record: {e}"),
                        }
                    });
                }
            };
            if record.r#type == RecordType::Crc as i64 {
                // A crc record restates the chain so far; 0 means "start of the chain here".
                if self.crc != 0 && record.crc != self.crc {
                    return Err(DecodeError::CrcMismatch {
                        file: seg.path.clone(),
                        offset: off,
                    });
                }
                self.crc = record.crc;
            } else {
                let crc = crc32c::crc32c_append(self.crc, record.data.as_deref().unwrap_or(&[]));
                if crc != record.crc {
                    return Err(if torn {
                        DecodeError::Torn {
                            file: seg.path.clone(),
                            offset: off,
                        }
                    } else {
                        DecodeError::CrcMismatch {
                            file: seg.path.clone(),
                            offset: off,
                        }
                    });
                }
                self.crc = crc;
            }
            self.off = off + LEN_WORD as u64 + len + pad;
            return Ok(Some(Decoded {
                record,
                file_index: self.cur,
                offset: off,
            }));
        }
    }
}

/// True when some sector-aligned piece of the frame is all zeros: the mark of a write that
/// stopped part way through a preallocated segment.
fn is_torn(frame: &[u8], file_offset: u64) -> bool {
    let mut start = 0usize;
    let mut pos = file_offset;
    while start < frame.len() {
        let to_boundary = (SECTOR - pos % SECTOR) as usize;
        let end = (start + to_boundary).min(frame.len());
        if frame[start..end].iter().all(|&b| b == 0) {
            return true;
        }
        pos += (end - start) as u64;
        start = end;
    }
    false
}

/// Reads until `buf` is full or the end of the file; returns how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_detection_by_zero_sector() {
        let mut frame = vec![1u8; 1024];
        assert!(!is_torn(&frame, 8));
        // Zero the piece from file offset 512 to 1024 (frame bytes 504..1016).
        for b in &mut frame[504..1016] {
            *b = 0;
        }
        assert!(is_torn(&frame, 8));
    }
}
