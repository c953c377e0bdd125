// The freelist: which pages are free now, which were freed by a commit that open readers may
// still see (pending by txid), and bbolt's freelist page codec (count 0xFFFF escape).

use std::collections::{BTreeMap, BTreeSet};

use super::error::{Result, corrupt};
use super::page::{FLAG_FREELIST, PAGE_HEADER_SIZE, put_header, u16_at, u64_at};

#[derive(Clone, Debug, Default)]
pub struct Freelist {
    free: BTreeSet<u64>,
    /// Pages freed by the commit with this txid: still reachable from older versions.
    pending: BTreeMap<u64, Vec<u64>>,
}

impl Freelist {
    pub fn from_ids(ids: impl IntoIterator<Item = u64>) -> Freelist {
        Freelist {
            free: ids.into_iter().collect(),
            pending: BTreeMap::new(),
        }
    }

    /// Free plus pending pages: the pages a fresh open could reuse.
    pub fn len(&self) -> usize {
        self.free.len() + self.pending.values().map(Vec::len).sum::<usize>()
    }

    /// Marks `n` pages from `id` as freed by commit `txid`.
    pub fn free_run(&mut self, txid: u64, id: u64, n: u64) {
        self.pending.entry(txid).or_default().extend(id..id + n);
    }

    /// Refuses a commit's frees that name a page twice, or a page already free: only a tree
    /// that reaches one page by two paths (a corrupt file) frees so, and recording it would
    /// hand the page out twice. Sorts `runs` (their order means nothing to the freelist).
    pub fn check_frees(&self, runs: &mut [(u64, u64)]) -> Result<()> {
        runs.sort_unstable();
        let mut end = 0;
        for &(id, n) in runs.iter() {
            if id < end {
                return Err(corrupt(
                    id,
                    "page is reached twice in the tree: freed twice",
                ));
            }
            if let Some(&free) = self.free.range(id..id + n).next() {
                return Err(corrupt(free, "page is reached from the tree but is free"));
            }
            end = id + n;
        }
        Ok(())
    }

    /// Makes free the pages freed by commits no open reader can see any more: a reader of
    /// version R may reach pages freed by commit T only when R < T.
    pub fn release_up_to(&mut self, min_reader_txid: u64) {
        let keep = match min_reader_txid.checked_add(1) {
            Some(first_kept) => self.pending.split_off(&first_kept),
            None => BTreeMap::new(),
        };
        for ids in std::mem::replace(&mut self.pending, keep).into_values() {
            self.free.extend(ids);
        }
    }

    /// Takes `n` contiguous free pages, or None when no such run exists.
    pub fn allocate(&mut self, n: u64) -> Option<u64> {
        let start = if n == 1 {
            *self.free.iter().next()?
        } else {
            let mut run_start = 0;
            let mut prev = None;
            let mut found = None;
            for &id in &self.free {
                match prev {
                    Some(p) if p + 1 == id => {}
                    _ => run_start = id,
                }
                prev = Some(id);
                if id + 1 - run_start == n {
                    found = Some(run_start);
                    break;
                }
            }
            found?
        };
        for id in start..start + n {
            self.free.remove(&id);
        }
        Some(start)
    }

    /// Undoes a failed commit: its allocations from the freelist go back, its frees are
    /// forgotten. Pages it took from above the high-water mark `hwm` do not become free: they
    /// are outside the committed image (a freelist naming them would not open), and the next
    /// commit takes them from the high-water mark again.
    pub fn rollback(&mut self, txid: u64, allocated: &[(u64, u64)], hwm: u64) {
        self.pending.remove(&txid);
        for &(id, n) in allocated {
            self.free.extend((id..id + n).filter(|&p| p < hwm));
        }
    }

    /// Every id a freshly opened db may reuse: free plus pending (no reader survives a reopen).
    pub fn all_ids(&self) -> Vec<u64> {
        // The free set is already in order (and after a compaction holds thousands of pages);
        // only the few pending runs need sorting before the two are merged.
        let mut pending: Vec<u64> = self.pending.values().flatten().copied().collect();
        pending.sort_unstable();
        let mut v = Vec::with_capacity(self.free.len() + pending.len());
        let mut pending = pending.into_iter().peekable();
        for &id in &self.free {
            while let Some(p) = pending.next_if(|&p| p < id) {
                v.push(p);
            }
            v.push(id);
        }
        v.extend(pending);
        v
    }
}

/// Bytes needed for a freelist page holding `n` ids.
pub fn page_bytes_for(n: usize) -> usize {
    PAGE_HEADER_SIZE + 8 * (n + usize::from(n >= 0xFFFF))
}

pub fn encode(out: &mut [u8], id: u64, overflow: u32, ids: &[u64]) {
    let n = ids.len();
    let mut off = PAGE_HEADER_SIZE;
    if n >= 0xFFFF {
        put_header(out, id, FLAG_FREELIST, 0xFFFF, overflow);
        out[off..off + 8].copy_from_slice(&(n as u64).to_le_bytes());
        off += 8;
    } else {
        put_header(out, id, FLAG_FREELIST, n as u16, overflow);
    }
    for &i in ids {
        out[off..off + 8].copy_from_slice(&i.to_le_bytes());
        off += 8;
    }
}

/// Decodes a freelist page (with overflow pages); ids must lie in 2..hwm.
pub fn decode(pgid: u64, buf: &[u8], hwm: u64) -> Result<Vec<u64>> {
    let flags = u16_at(buf, 8);
    if flags != FLAG_FREELIST {
        return Err(corrupt(
            pgid,
            format!("flags {flags:#x}, expected a freelist page (0x10)"),
        ));
    }
    let mut n = u16_at(buf, 10) as usize;
    let mut off = PAGE_HEADER_SIZE;
    if n == 0xFFFF {
        if buf.len() < off + 8 {
            return Err(corrupt(pgid, "freelist count word missing"));
        }
        n = usize::try_from(u64_at(buf, off)).unwrap_or(usize::MAX);
        off += 8;
    }
    if n > (buf.len() - off) / 8 {
        return Err(corrupt(
            pgid,
            format!("freelist of {n} ids does not fit in its pages"),
        ));
    }
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = u64_at(buf, off + 8 * i);
        if id < 2 || id >= hwm {
            return Err(corrupt(
                pgid,
                format!("freelist holds page {id}, outside 2..{hwm}"),
            ));
        }
        ids.push(id);
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_pages_wait_for_readers() {
        let mut f = Freelist::default();
        f.free_run(5, 10, 2);
        f.release_up_to(4);
        assert_eq!(f.allocate(1), None);
        f.release_up_to(5);
        assert_eq!(f.allocate(2), Some(10));
    }

    #[test]
    fn release_at_the_largest_txid_does_not_overflow() {
        let mut f = Freelist::default();
        f.free_run(u64::MAX, 10, 1);
        f.release_up_to(u64::MAX);
        assert_eq!(f.allocate(1), Some(10));
    }

    #[test]
    fn rollback_returns_only_pages_below_the_high_water_mark() {
        let mut f = Freelist::from_ids([3, 4]);
        assert_eq!(f.allocate(2), Some(3));
        f.free_run(7, 5, 1);
        // The failed commit took 3..5 from the freelist and 10..12 from the high-water mark 10.
        f.rollback(7, &[(3, 2), (10, 2)], 10);
        assert_eq!(f.all_ids(), vec![3, 4]);
    }

    #[test]
    fn frees_naming_a_page_twice_or_a_free_page_are_refused() {
        let f = Freelist::from_ids([20, 21]);
        assert!(f.check_frees(&mut [(5, 2), (7, 1), (3, 1)]).is_ok());
        assert!(f.check_frees(&mut [(5, 2), (6, 1)]).is_err());
        assert!(f.check_frees(&mut [(9, 1), (9, 1)]).is_err());
        assert!(f.check_frees(&mut [(18, 3)]).is_err());
    }

    #[test]
    fn all_ids_lists_free_and_pending_pages_in_order() {
        let mut f = Freelist::from_ids([2, 5, 9]);
        f.free_run(3, 6, 2);
        f.free_run(4, 3, 1);
        f.free_run(5, 12, 1);
        assert_eq!(f.all_ids(), vec![2, 3, 5, 6, 7, 9, 12]);
        assert_eq!(f.len(), 7);
    }

    #[test]
    fn large_freelist_roundtrip() {
        let ids: Vec<u64> = (2..70_000).collect();
        let mut buf = vec![0u8; page_bytes_for(ids.len())];
        encode(&mut buf, 5, 0, &ids);
        assert_eq!(decode(5, &buf, 70_000).unwrap(), ids);
        assert!(decode(5, &buf, 100).is_err());
    }
}
