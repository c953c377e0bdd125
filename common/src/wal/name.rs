// WAL segment file names: `<seq:016x>-<index:016x>.wal`, where index is the raft index of the
// first entry the segment may hold, so the segment holding an index is found by name alone.

/// The name of segment `seq` whose first entry index is `index`.
pub fn wal_name(seq: u64, index: u64) -> String {
    format!("{seq:016x}-{index:016x}.wal")
}

/// Parses `<seq>-<index>.wal`; anything else is not a segment.
pub fn parse_wal_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(".wal")?;
    let (seq, index) = stem.split_once('-')?;
    if seq.len() != 16 || index.len() != 16 {
        return None;
    }
    Some((
        u64::from_str_radix(seq, 16).ok()?,
        u64::from_str_radix(index, 16).ok()?,
    ))
}

/// The position in `names` (sorted) of the last segment whose first index is ≤ `index`: the
/// segment where reading must start to find the snapshot marker at `index`.
pub fn search_index(names: &[String], index: u64) -> Option<usize> {
    names.iter().enumerate().rev().find_map(|(i, n)| {
        let (_, first) = parse_wal_name(n)?;
        (first <= index).then_some(i)
    })
}

/// True when the sequence numbers of `names` follow one another without a gap.
pub fn is_valid_seq(names: &[String]) -> bool {
    let mut last: Option<u64> = None;
    for n in names {
        let Some((seq, _)) = parse_wal_name(n) else {
            return false;
        };
        if let Some(prev) = last
            && prev.checked_add(1) != Some(seq)
        {
            return false;
        }
        last = Some(seq);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_search() {
        assert_eq!(wal_name(0, 0), "0000000000000000-0000000000000000.wal");
        assert_eq!(parse_wal_name(&wal_name(3, 0x2a)), Some((3, 0x2a)));
        assert_eq!(parse_wal_name("0.tmp"), None);
        assert_eq!(parse_wal_name("zz-00.wal"), None);
        let names: Vec<String> = vec![wal_name(0, 0), wal_name(1, 10), wal_name(2, 20)];
        assert_eq!(search_index(&names, 0), Some(0));
        assert_eq!(search_index(&names, 15), Some(1));
        assert_eq!(search_index(&names, 20), Some(2));
        assert!(is_valid_seq(&names));
        assert!(!is_valid_seq(&[wal_name(0, 0), wal_name(2, 5)]));
        // Two segments at the largest sequence number: no overflow, just not a sequence.
        assert!(!is_valid_seq(&[
            wal_name(u64::MAX, 0),
            wal_name(u64::MAX, 1)
        ]));
    }
}
