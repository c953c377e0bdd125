// bbolt's meta page: magic, version, page size, root bucket, freelist, high-water mark, txid and
// an FNV-1a 64 checksum. Two copies (pages 0 and 1) alternate so a torn meta write is survivable.

use super::page::{FLAG_META, PAGE_HEADER_SIZE, put_header, u16_at, u32_at, u64_at};

pub const MAGIC: u32 = 0xED0C_DAED;
pub const VERSION: u32 = 2;
/// Freelist page id meaning "not persisted" (etcd runs bbolt with NoFreelistSync).
pub const PGID_NO_FREELIST: u64 = u64::MAX;
const META_LEN: usize = 56; // magic .. txid, the bytes the checksum covers

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub page_size: u32,
    pub flags: u32,
    pub root: u64,
    pub sequence: u64,
    pub freelist: u64,
    /// The high-water mark: the first page id never allocated.
    pub pgid: u64,
    pub txid: u64,
}

pub fn fnv1a64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Meta {
    /// Decodes the meta stored in a page image; the error says why it is not usable.
    pub fn decode(page: &[u8]) -> Result<Meta, String> {
        if page.len() < PAGE_HEADER_SIZE + META_LEN + 8 {
            return Err("file too short for a meta page".into());
        }
        let flags = u16_at(page, 8);
        if flags != FLAG_META {
            return Err(format!("page flags {flags:#x}, not a meta page"));
        }
        let m = &page[PAGE_HEADER_SIZE..];
        if u32_at(m, 0) != MAGIC {
            return Err(format!("bad magic {:#x}", u32_at(m, 0)));
        }
        if u32_at(m, 4) != VERSION {
            return Err(format!("unsupported version {}", u32_at(m, 4)));
        }
        let sum = u64_at(m, META_LEN);
        if fnv1a64(&m[..META_LEN]) != sum {
            return Err("checksum mismatch".into());
        }
        let meta = Meta {
            page_size: u32_at(m, 8),
            flags: u32_at(m, 12),
            root: u64_at(m, 16),
            sequence: u64_at(m, 24),
            freelist: u64_at(m, 32),
            pgid: u64_at(m, 40),
            txid: u64_at(m, 48),
        };
        if !(512..=65536).contains(&meta.page_size) || !meta.page_size.is_power_of_two() {
            return Err(format!("impossible page size {}", meta.page_size));
        }
        if meta.pgid < 3 || meta.root < 2 || meta.root >= meta.pgid {
            return Err(format!(
                "root page {} outside 2..{} (the high-water mark)",
                meta.root, meta.pgid
            ));
        }
        if meta.freelist != PGID_NO_FREELIST && (meta.freelist < 2 || meta.freelist >= meta.pgid) {
            return Err(format!("freelist page {} outside the file", meta.freelist));
        }
        Ok(meta)
    }

    /// A full meta page image for slot `id` (0 or 1).
    pub fn encode(&self, id: u64) -> Vec<u8> {
        let mut p = vec![0u8; self.page_size as usize];
        put_header(&mut p, id, FLAG_META, 0, 0);
        let m = &mut p[PAGE_HEADER_SIZE..];
        m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&VERSION.to_le_bytes());
        m[8..12].copy_from_slice(&self.page_size.to_le_bytes());
        m[12..16].copy_from_slice(&self.flags.to_le_bytes());
        m[16..24].copy_from_slice(&self.root.to_le_bytes());
        m[24..32].copy_from_slice(&self.sequence.to_le_bytes());
        m[32..40].copy_from_slice(&self.freelist.to_le_bytes());
        m[40..48].copy_from_slice(&self.pgid.to_le_bytes());
        m[48..56].copy_from_slice(&self.txid.to_le_bytes());
        let sum = fnv1a64(&m[..META_LEN]);
        m[META_LEN..META_LEN + 8].copy_from_slice(&sum.to_le_bytes());
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_checksum() {
        let m = Meta {
            page_size: 4096,
            flags: 0,
            root: 3,
            sequence: 0,
            freelist: 2,
            pgid: 4,
            txid: 9,
        };
        let mut p = m.encode(1);
        assert_eq!(Meta::decode(&p), Ok(m));
        p[PAGE_HEADER_SIZE + 50] ^= 1;
        assert_eq!(Meta::decode(&p), Err("checksum mismatch".to_string()));
    }

    #[test]
    fn fnv_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    }
}
