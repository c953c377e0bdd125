// Cluster alarms (NOSPACE, CORRUPT), kept in the backend's `alarm` bucket and changed through
// raft. While NOSPACE is raised, writes that grow the db are refused until `alarm disarm`.

use std::sync::Mutex;

use prost::Message;
use proto::etcdserverpb::{AlarmMember, AlarmType};

use crate::mvcc::{KvStore, WriteTxn};
use common::backend::buckets;

#[derive(Debug, Default)]
pub struct Alarms {
    list: Mutex<Vec<AlarmMember>>,
}

impl Alarms {
    /// The alarms recorded in the backend.
    pub fn load(kv: &KvStore) -> Alarms {
        let rows = kv
            .backend()
            .range(buckets::ALARM, &[0], Some(&[0xff; 32]), 0)
            .unwrap_or_default();
        let list = rows
            .into_iter()
            .filter_map(|(k, _)| AlarmMember::decode(k.as_slice()).ok())
            .collect();
        Alarms {
            list: Mutex::new(list),
        }
    }

    /// Takes the alarms of a store whose contents were replaced (a snapshot from the leader).
    pub fn reload(&self, kv: &KvStore) {
        let fresh = Alarms::load(kv).list();
        *self.lock() = fresh;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AlarmMember>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn list(&self) -> Vec<AlarmMember> {
        self.lock().clone()
    }

    pub fn has(&self, t: AlarmType) -> bool {
        self.lock().iter().any(|a| a.alarm == t as i32)
    }

    /// Raises `m` (recorded in `w`'s atomic group); false if it was already raised.
    pub fn activate(&self, w: &mut WriteTxn<'_>, m: AlarmMember) -> bool {
        let mut l = self.lock();
        if l.contains(&m) {
            return false;
        }
        let key = m.encode_to_vec();
        w.put_raw(buckets::ALARM, &key, b"");
        // In the bucket's key order, as a restart loads them: every member lists them alike.
        let at = l.partition_point(|a| a.encode_to_vec() < key);
        l.insert(at, m);
        true
    }

    /// Clears `m`; false if it was not raised.
    pub fn deactivate(&self, w: &mut WriteTxn<'_>, m: &AlarmMember) -> bool {
        let mut l = self.lock();
        let before = l.len();
        l.retain(|a| a != m);
        if l.len() == before {
            return false;
        }
        w.delete_raw(buckets::ALARM, &m.encode_to_vec());
        true
    }
}
