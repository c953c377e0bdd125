// bbolt's page layout: the 16-byte page header, branch and leaf elements, and bounds-checked
// views over page bytes, so a corrupt page becomes an error naming its id, never a panic.

use super::error::{Result, corrupt};

pub const PAGE_HEADER_SIZE: usize = 16;
pub const ELEMENT_SIZE: usize = 16;
pub const FLAG_BRANCH: u16 = 0x01;
pub const FLAG_LEAF: u16 = 0x02;
pub const FLAG_META: u16 = 0x04;
pub const FLAG_FREELIST: u16 = 0x10;
/// Leaf element flag: the value is a bucket header (+ an inline page when root is 0).
pub const BUCKET_LEAF_FLAG: u32 = 0x01;
/// bbolt's limits, kept so files we write stay readable by bbolt.
pub const MAX_KEY_SIZE: usize = 32768;
pub const MAX_VALUE_SIZE: usize = (1 << 31) - 2;
/// A tree deeper than this cannot come from a valid file (it would hold more pages than exist);
/// meeting it means a branch points back up the tree.
pub const MAX_DEPTH: usize = 64;

pub fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(a)
}
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Writes a page header into the first 16 bytes of `b`.
pub fn put_header(b: &mut [u8], id: u64, flags: u16, count: u16, overflow: u32) {
    b[0..8].copy_from_slice(&id.to_le_bytes());
    b[8..10].copy_from_slice(&flags.to_le_bytes());
    b[10..12].copy_from_slice(&count.to_le_bytes());
    b[12..16].copy_from_slice(&overflow.to_le_bytes());
}

/// The bytes of one page (with its overflow pages) of a mapped file, after the header checks.
/// Returns the page's bytes; `count`/`flags` are checked by the typed views below.
pub fn page_bytes(map: &[u8], page_size: usize, hwm: u64, pgid: u64) -> Result<&[u8]> {
    if pgid >= hwm {
        return Err(corrupt(
            pgid,
            format!("page id is beyond the high-water mark {hwm}"),
        ));
    }
    let start = (pgid as usize)
        .checked_mul(page_size)
        .ok_or_else(|| corrupt(pgid, "page offset overflows"))?;
    if start + page_size > map.len() {
        return Err(corrupt(pgid, "page lies beyond the end of the file"));
    }
    let head = &map[start..start + PAGE_HEADER_SIZE];
    let id = u64_at(head, 0);
    if id != pgid {
        return Err(corrupt(
            pgid,
            format!("header says page {id}, not the id of its position"),
        ));
    }
    let overflow = u32_at(head, 12) as u64;
    let end_pg = pgid + overflow + 1;
    if end_pg > hwm {
        return Err(corrupt(
            pgid,
            format!("{overflow} overflow pages reach past the high-water mark {hwm}"),
        ));
    }
    let end = start + (overflow as usize + 1) * page_size;
    if end > map.len() {
        return Err(corrupt(
            pgid,
            "overflow pages lie beyond the end of the file",
        ));
    }
    Ok(&map[start..end])
}

/// A branch or leaf page (or an inline bucket's page image), with bounds-checked elements.
#[derive(Clone, Copy, Debug)]
pub struct NodePage<'a> {
    /// The page id for error messages (an inline page reports its bucket's parent page id 0).
    pub pgid: u64,
    pub leaf: bool,
    pub count: usize,
    buf: &'a [u8],
}

impl<'a> NodePage<'a> {
    pub fn parse(pgid: u64, buf: &'a [u8]) -> Result<NodePage<'a>> {
        if buf.len() < PAGE_HEADER_SIZE {
            return Err(corrupt(pgid, "page shorter than its header"));
        }
        let flags = u16_at(buf, 8);
        let leaf = match flags {
            FLAG_LEAF => true,
            FLAG_BRANCH => false,
            f => {
                return Err(corrupt(
                    pgid,
                    format!("flags {f:#x}, expected a branch (0x01) or leaf (0x02) page"),
                ));
            }
        };
        let count = u16_at(buf, 10) as usize;
        if PAGE_HEADER_SIZE + count * ELEMENT_SIZE > buf.len() {
            return Err(corrupt(
                pgid,
                format!("{count} elements do not fit in {} bytes", buf.len()),
            ));
        }
        if !leaf && count == 0 {
            return Err(corrupt(pgid, "branch page with no elements"));
        }
        Ok(NodePage {
            pgid,
            leaf,
            count,
            buf,
        })
    }

    fn slice(&self, i: usize, pos_off: usize, len: usize) -> Result<&'a [u8]> {
        let elem = PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
        let start = elem
            .checked_add(pos_off)
            .filter(|s| s.checked_add(len).is_some_and(|e| e <= self.buf.len()))
            .ok_or_else(|| {
                corrupt(
                    self.pgid,
                    format!("element {i} points outside the page (pos {pos_off}, len {len})"),
                )
            })?;
        Ok(&self.buf[start..start + len])
    }

    fn elem(&self, i: usize) -> Result<usize> {
        if i >= self.count {
            return Err(corrupt(
                self.pgid,
                format!("element {i} of {} requested", self.count),
            ));
        }
        Ok(PAGE_HEADER_SIZE + i * ELEMENT_SIZE)
    }

    /// The key of element `i` (leaf or branch).
    pub fn key(&self, i: usize) -> Result<&'a [u8]> {
        let e = self.elem(i)?;
        if self.leaf {
            let pos = u32_at(self.buf, e + 4) as usize;
            let ksize = u32_at(self.buf, e + 8) as usize;
            self.slice(i, pos, ksize)
        } else {
            let pos = u32_at(self.buf, e) as usize;
            let ksize = u32_at(self.buf, e + 4) as usize;
            self.slice(i, pos, ksize)
        }
    }

    /// Leaf element `i`: (flags, key, value).
    pub fn leaf_elem(&self, i: usize) -> Result<(u32, &'a [u8], &'a [u8])> {
        let e = self.elem(i)?;
        if !self.leaf {
            return Err(corrupt(self.pgid, "leaf element read from a branch page"));
        }
        let flags = u32_at(self.buf, e);
        let pos = u32_at(self.buf, e + 4) as usize;
        let ksize = u32_at(self.buf, e + 8) as usize;
        let vsize = u32_at(self.buf, e + 12) as usize;
        let kv = self.slice(i, pos, ksize + vsize)?;
        Ok((flags, &kv[..ksize], &kv[ksize..]))
    }

    /// Branch element `i`: (key, child page id).
    pub fn branch_elem(&self, i: usize) -> Result<(&'a [u8], u64)> {
        let e = self.elem(i)?;
        if self.leaf {
            return Err(corrupt(self.pgid, "branch element read from a leaf page"));
        }
        let key = self.key(i)?;
        Ok((key, u64_at(self.buf, e + 8)))
    }

    /// Bytes the page's contents take: header, elements, keys and values (what a split
    /// counts against the fill percent).
    pub fn used_bytes(&self) -> Result<usize> {
        let mut data = 0;
        for i in 0..self.count {
            data += if self.leaf {
                let (_, k, v) = self.leaf_elem(i)?;
                k.len() + v.len()
            } else {
                self.key(i)?.len()
            };
        }
        Ok(node_size(self.count, data))
    }

    /// First index whose key is >= `key` (leaf positioning).
    pub fn lower_bound(&self, key: &[u8]) -> Result<usize> {
        let (mut lo, mut hi) = (0, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if key_cmp(self.key(mid)?, key).is_lt() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The child to descend into for `key`: the last element whose key is <= `key`, or 0.
    pub fn child_index(&self, key: &[u8]) -> Result<usize> {
        let i = self.lower_bound(key)?;
        if i < self.count && self.key(i)? == key {
            Ok(i)
        } else {
            Ok(i.saturating_sub(1))
        }
    }
}

/// Byte-wise key order, comparing the first 8 bytes as one integer: most keys differ there
/// (etcd's revisions, hashed ids), which spares a memcmp call per binary-search step.
#[inline]
pub fn key_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    if let (Some(x), Some(y)) = (a.first_chunk::<8>(), b.first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
    }
    a.cmp(b)
}

/// Serialized size of a leaf/branch page holding these elements.
pub fn node_size(n: usize, data: usize) -> usize {
    PAGE_HEADER_SIZE + n * ELEMENT_SIZE + data
}

/// Writes a leaf page image: elements, then each key followed by its value.
pub fn write_leaf<'e>(
    out: &mut [u8],
    id: u64,
    overflow: u32,
    elems: impl ExactSizeIterator<Item = (u32, &'e [u8], &'e [u8])> + Clone,
) {
    let n = elems.len();
    put_header(out, id, FLAG_LEAF, n as u16, overflow);
    let mut data = PAGE_HEADER_SIZE + n * ELEMENT_SIZE;
    for (i, (flags, k, v)) in elems.enumerate() {
        let e = PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
        out[e..e + 4].copy_from_slice(&flags.to_le_bytes());
        out[e + 4..e + 8].copy_from_slice(&((data - e) as u32).to_le_bytes());
        out[e + 8..e + 12].copy_from_slice(&(k.len() as u32).to_le_bytes());
        out[e + 12..e + 16].copy_from_slice(&(v.len() as u32).to_le_bytes());
        out[data..data + k.len()].copy_from_slice(k);
        data += k.len();
        out[data..data + v.len()].copy_from_slice(v);
        data += v.len();
    }
}

/// Writes a branch page image: elements, then the keys.
pub fn write_branch<'e>(
    out: &mut [u8],
    id: u64,
    overflow: u32,
    elems: impl ExactSizeIterator<Item = (&'e [u8], u64)>,
) {
    let n = elems.len();
    put_header(out, id, FLAG_BRANCH, n as u16, overflow);
    let mut data = PAGE_HEADER_SIZE + n * ELEMENT_SIZE;
    for (i, (k, pgid)) in elems.enumerate() {
        let e = PAGE_HEADER_SIZE + i * ELEMENT_SIZE;
        out[e..e + 4].copy_from_slice(&((data - e) as u32).to_le_bytes());
        out[e + 4..e + 8].copy_from_slice(&(k.len() as u32).to_le_bytes());
        out[e + 8..e + 16].copy_from_slice(&pgid.to_le_bytes());
        out[data..data + k.len()].copy_from_slice(k);
        data += k.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_cmp_is_bytewise_order() {
        let keys: [&[u8]; 8] = [
            b"",
            b"a",
            b"ab",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefgi",
            b"b",
            b"\xff",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(key_cmp(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn leaf_roundtrip_and_corrupt_offsets() {
        let mut buf = vec![0u8; 4096];
        let elems = [(0u32, &b"a"[..], &b"1"[..]), (0, b"bb", b"22")];
        write_leaf(&mut buf, 7, 0, elems.iter().copied());
        let p = NodePage::parse(7, &buf).unwrap();
        assert_eq!(p.leaf_elem(1).unwrap(), (0, &b"bb"[..], &b"22"[..]));
        assert_eq!(p.lower_bound(b"b").unwrap(), 1);
        // An element whose pos points past the page must be an error, not a panic.
        buf[PAGE_HEADER_SIZE + 4..PAGE_HEADER_SIZE + 8].copy_from_slice(&5000u32.to_le_bytes());
        let p = NodePage::parse(7, &buf).unwrap();
        let e = p.leaf_elem(0).unwrap_err().to_string();
        assert!(e.contains("page 7"), "{e}");
        // A count that cannot fit.
        buf[10..12].copy_from_slice(&300u16.to_le_bytes());
        assert!(NodePage::parse(7, &buf).is_err());
    }
}
