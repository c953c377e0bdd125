// Key-range permission checks: whether a user's roles grant READ or WRITE over a key or a key
// range, merging the roles' intervals as etcd does (a range must be covered without a gap).

use std::cmp::Ordering;

use proto::authpb::{Permission, Role, permission::Type as PermType};

/// The access a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    fn granted_by(self, t: i32) -> bool {
        match PermType::try_from(t) {
            Ok(PermType::Readwrite) => true,
            Ok(PermType::Read) => self == Access::Read,
            Ok(PermType::Write) => self == Access::Write,
            Err(_) => false,
        }
    }
}

/// An interval of keys `[begin, end)`; `end == None` reaches past every key (etcd's
/// "<open ended>", encoded as range_end `\0`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval {
    begin: Vec<u8>,
    end: Option<Vec<u8>>,
}

/// `a < b` for interval ends, where `None` is past every key.
fn end_cmp(a: &Option<Vec<u8>>, b: &Option<Vec<u8>>) -> Ordering {
    match (a, b) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (Some(x), Some(y)) => x.cmp(y),
    }
}

/// The interval a permission covers: a single key is `[key, key\0)`.
fn interval_of(p: &Permission) -> Interval {
    if p.range_end.is_empty() {
        let mut end = p.key.clone();
        end.push(0);
        Interval {
            begin: p.key.clone(),
            end: Some(end),
        }
    } else if p.range_end == [0] {
        Interval {
            begin: p.key.clone(),
            end: None,
        }
    } else {
        Interval {
            begin: p.key.clone(),
            end: Some(p.range_end.clone()),
        }
    }
}

/// Whether the permissions of `roles` give `access` to `key` (when `range_end` is empty) or
/// to every key of `[key, range_end)` (`range_end == "\0"`: every key from `key` on).
pub fn permitted(roles: &[&Role], key: &[u8], range_end: &[u8], access: Access) -> bool {
    let mut ivs: Vec<Interval> = roles
        .iter()
        .flat_map(|r| r.key_permission.iter())
        .filter(|p| access.granted_by(p.perm_type))
        .map(interval_of)
        .collect();
    if range_end.is_empty() {
        return ivs
            .iter()
            .any(|iv| iv.begin.as_slice() <= key && end_cmp(&iv.end, &Some(key.to_vec())).is_gt());
    }
    let want_end = if range_end == [0] {
        None
    } else {
        Some(range_end.to_vec())
    };
    // Sweep the intervals by their start: the covered prefix of the request grows while the
    // next interval starts inside it.
    ivs.sort_by(|a, b| a.begin.cmp(&b.begin));
    let mut covered_to: Option<Vec<u8>> = Some(key.to_vec());
    for iv in ivs {
        let Some(reach) = covered_to.as_ref() else {
            break;
        };
        if iv.begin.as_slice() > reach.as_slice() {
            break;
        }
        if end_cmp(&iv.end, &covered_to).is_gt() {
            covered_to = iv.end;
        }
    }
    end_cmp(&covered_to, &want_end).is_ge()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(t: PermType, key: &str, end: &[u8]) -> Permission {
        Permission {
            perm_type: t as i32,
            key: key.as_bytes().to_vec(),
            range_end: end.to_vec(),
        }
    }

    #[test]
    fn keys_ranges_prefixes_and_open_ends() {
        let r = Role {
            name: b"r".to_vec(),
            key_permission: vec![
                perm(PermType::Write, "k1", b""),
                perm(PermType::Write, "k2", b"k5"),
                perm(PermType::Readwrite, "p/", b"p0"),
                perm(PermType::Read, "z", &[0]),
                perm(PermType::Read, "a", b"c"),
                perm(PermType::Read, "c", b"e"),
            ],
        };
        let roles = [&r];
        let ok = |k: &str, e: &[u8], a| permitted(&roles, k.as_bytes(), e, a);
        assert!(ok("k1", b"", Access::Write));
        assert!(!ok("k1", b"", Access::Read));
        assert!(ok("k3", b"", Access::Write));
        assert!(ok("k2", b"k5", Access::Write));
        assert!(!ok("k2", b"k6", Access::Write));
        assert!(ok("p/x", b"", Access::Read));
        assert!(ok("p/", b"p0", Access::Read));
        assert!(!ok("p", b"q", Access::Read));
        assert!(ok("z", &[0], Access::Read));
        assert!(ok("zz", b"", Access::Read));
        assert!(!ok("y", &[0], Access::Read));
        // Adjacent intervals merge: [a, c) + [c, e) covers [b, d).
        assert!(ok("b", b"d", Access::Read));
        assert!(!ok("b", b"f", Access::Read));
        assert!(!permitted(&[], b"k", b"", Access::Read));
    }
}
