// MVCC revisions: {main, sub} where main counts write transactions and sub the changes inside
// one, and their 17-byte big-endian encoding used as keys of the db's `key` bucket.

use std::fmt;

/// Length of an encoded revision: main (8) + '_' + sub (8).
pub const REV_BYTES_LEN: usize = 17;
/// Length of a tombstone key: a revision followed by 't'.
pub const MARKED_REV_BYTES_LEN: usize = REV_BYTES_LEN + 1;
const TOMBSTONE_MARK: u8 = b't';

/// A point in the store's history; ordered by main, then sub.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Revision {
    pub main: i64,
    pub sub: i64,
}

impl Revision {
    pub const fn new(main: i64, sub: i64) -> Revision {
        Revision { main, sub }
    }

    /// The backend key of this revision (8-byte BE main, '_', 8-byte BE sub).
    pub fn to_bytes(self) -> [u8; REV_BYTES_LEN] {
        let mut b = [0u8; REV_BYTES_LEN];
        b[..8].copy_from_slice(&(self.main as u64).to_be_bytes());
        b[8] = b'_';
        b[9..].copy_from_slice(&(self.sub as u64).to_be_bytes());
        b
    }

    /// The backend key of a deletion at this revision.
    pub fn to_tombstone_bytes(self) -> [u8; MARKED_REV_BYTES_LEN] {
        let mut b = [0u8; MARKED_REV_BYTES_LEN];
        b[..REV_BYTES_LEN].copy_from_slice(&self.to_bytes());
        b[REV_BYTES_LEN] = TOMBSTONE_MARK;
        b
    }

    /// Decodes a backend key; `None` if it is not a revision key.
    pub fn from_bytes(b: &[u8]) -> Option<Revision> {
        if b.len() != REV_BYTES_LEN && b.len() != MARKED_REV_BYTES_LEN {
            return None;
        }
        if b[8] != b'_' || (b.len() == MARKED_REV_BYTES_LEN && b[REV_BYTES_LEN] != TOMBSTONE_MARK) {
            return None;
        }
        let main = u64::from_be_bytes(b[..8].try_into().ok()?) as i64;
        let sub = u64::from_be_bytes(b[9..17].try_into().ok()?) as i64;
        Some(Revision { main, sub })
    }
}

/// True when a `key` bucket key marks a deletion.
pub fn is_tombstone(b: &[u8]) -> bool {
    b.len() == MARKED_REV_BYTES_LEN && b[REV_BYTES_LEN] == TOMBSTONE_MARK
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.main, self.sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_is_etcds_and_sorts_like_revisions() {
        let r = Revision::new(2, 1);
        assert_eq!(
            r.to_bytes(),
            [0, 0, 0, 0, 0, 0, 0, 2, b'_', 0, 0, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(Revision::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(Revision::from_bytes(&r.to_tombstone_bytes()), Some(r));
        assert!(is_tombstone(&r.to_tombstone_bytes()));
        assert!(!is_tombstone(&r.to_bytes()));
        assert_eq!(Revision::from_bytes(b"consistent_index"), None);
        let revs = [
            Revision::new(1, 5),
            Revision::new(2, 0),
            Revision::new(2, 3),
            Revision::new(300, 0),
        ];
        for w in revs.windows(2) {
            assert!(w[0] < w[1]);
            assert!(w[0].to_bytes() < w[1].to_bytes());
        }
    }
}
