// Property-based fuzzing of every on-disk parser: WAL segments, .snap files and the bbolt db
// open path (open, check, stats, hash, every bucket read), on mutations of real, valid files.
//
// Each target builds a valid file once, then proptest mutates a copy per case (bit flips, byte
// writes, truncation, insertion, removal, and length / count / page-id fields set to values such
// as 0, 1, u32::MAX, u64::MAX, the file length or a page's own id) and runs the parser in a
// watchdog thread. A case fails when the parser panics, overflows its stack, runs past
// `CASE_TIMEOUT` (cycles of page ids) or makes a single allocation larger than the bound
// `alloc_bound` derives from the input's size. Errors are the expected outcome.
//
// The default case counts (768 WAL dirs, 2048 .snap files, 768 per db fixture) run the whole
// file in 10-15 s in a test build on 2 cores. PROPTEST_CASES sets every count, for a long
// run: `PROPTEST_CASES=20000 cargo test -p common --test fuzz_formats`. A failure is shrunk
// and its seed saved in common/proptest-regressions/fuzz_formats.txt (commit it: those cases
// run first every time); each bug also gets a named test below with its minimal input.

mod wal_fixtures;

mod fuzz_support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::backend::{Db, Options, ReadTxn};
use common::snap::{self, Snapshotter};
use common::wal::{self, Wal, WalOptions};
use proptest::prelude::*;
use proptest::sample::Index;
use prost::Message;
use proto::raftpb;
use proto::walpb;
use wal_fixtures::{entry, hs, metadata, zero};

// ---------------------------------------------------------------------------------------------
// The harness: allocation tracking, watchdog, proptest settings.

/// Counts the largest single allocation made by the thread that armed it, so a parser that
/// trusts a length field (and asks for 2^40 bytes) is caught even when the allocator grants it.
struct Tracking;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: allocations also happen while thread-locals are torn down.
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// Safety: every call is forwarded unchanged to the system allocator; only sizes are noted.
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Tracking = Tracking;

/// A parser may keep fixed-size buffers (the WAL reader's 1 MiB) plus a few times what it read;
/// anything above means a length field was trusted.
fn alloc_bound(input_bytes: usize) -> usize {
    (2 << 20) + 16 * input_bytes
}

/// Runs `f` under the watchdog (its own thread: a panic, a stack overflow or a hang fails the
/// case) and fails when it allocates more than `alloc_bound` allows.
fn guarded(what: &str, input_bytes: usize, f: impl FnOnce() + Send + 'static) {
    let largest = fuzz_support::watchdog(what, move || {
        ARMED.with(|a| a.set(true));
        LARGEST.with(|l| l.set(0));
        f();
        ARMED.with(|a| a.set(false));
        LARGEST.with(Cell::get)
    });
    let bound = alloc_bound(input_bytes);
    assert!(
        largest <= bound,
        "{what}: an allocation of {largest} bytes for {input_bytes} bytes of input (bound {bound})"
    );
}

/// This file's saved failures, replayed first.
const REGRESSIONS: &str = "proptest-regressions/fuzz_formats.txt";

// ---------------------------------------------------------------------------------------------
// Mutations shared by every format.

/// A field value chosen for the edges parsers get wrong.
#[derive(Debug, Clone)]
enum Val {
    Zero,
    One,
    Two,
    Three,
    U16Max,
    U32Max,
    U64Max,
    /// 2^60: a length no file has, but small enough that size arithmetic does not wrap.
    Huge,
    /// The input's length in bytes, and one past it.
    Len,
    LenPlus1,
    /// Pages in the file, and the last page id.
    Pages,
    LastPage,
    /// The id of the page being changed (a child pointing at its parent or itself).
    SelfPage,
    Raw(u64),
}

struct ValCtx {
    len: u64,
    page_size: u64,
    self_page: u64,
}

impl Val {
    fn get(&self, c: &ValCtx) -> u64 {
        let pages = c.len / c.page_size.max(1);
        match self {
            Val::Zero => 0,
            Val::One => 1,
            Val::Two => 2,
            Val::Three => 3,
            Val::U16Max => u16::MAX as u64,
            Val::U32Max => u32::MAX as u64,
            Val::U64Max => u64::MAX,
            Val::Huge => 1 << 60,
            Val::Len => c.len,
            Val::LenPlus1 => c.len + 1,
            Val::Pages => pages,
            Val::LastPage => pages.saturating_sub(1),
            Val::SelfPage => c.self_page,
            Val::Raw(v) => *v,
        }
    }
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        Just(Val::Zero),
        Just(Val::One),
        Just(Val::Two),
        Just(Val::Three),
        Just(Val::U16Max),
        Just(Val::U32Max),
        Just(Val::U64Max),
        Just(Val::Huge),
        Just(Val::Len),
        Just(Val::LenPlus1),
        Just(Val::Pages),
        Just(Val::LastPage),
        Just(Val::SelfPage),
        any::<u64>().prop_map(Val::Raw),
        (0u64..64).prop_map(Val::Raw),
    ]
}

/// Byte-level damage anywhere in a file.
#[derive(Debug, Clone)]
enum Raw {
    Flip {
        at: Index,
        bit: u8,
    },
    Byte {
        at: Index,
        v: u8,
    },
    Truncate {
        at: Index,
    },
    Insert {
        at: Index,
        bytes: Vec<u8>,
    },
    Remove {
        at: Index,
        n: usize,
    },
    /// A little-endian word of 2, 4 or 8 bytes at an aligned offset.
    Word {
        at: Index,
        width: usize,
        v: Val,
    },
    /// A run of one byte value (a zeroed or 0xff sector).
    Fill {
        at: Index,
        n: usize,
        v: u8,
    },
}

fn raw() -> impl Strategy<Value = Raw> {
    prop_oneof![
        (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Raw::Flip { at, bit }),
        (any::<Index>(), any::<u8>()).prop_map(|(at, v)| Raw::Byte { at, v }),
        any::<Index>().prop_map(|at| Raw::Truncate { at }),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..24))
            .prop_map(|(at, bytes)| Raw::Insert { at, bytes }),
        (any::<Index>(), 1usize..64).prop_map(|(at, n)| Raw::Remove { at, n }),
        (
            any::<Index>(),
            prop::sample::select(vec![2usize, 4, 8]),
            val()
        )
            .prop_map(|(at, width, v)| Raw::Word { at, width, v }),
        (
            any::<Index>(),
            1usize..1024,
            prop::sample::select(vec![0u8, 0xff])
        )
            .prop_map(|(at, n, v)| Raw::Fill { at, n, v }),
    ]
}

fn put_word(b: &mut [u8], at: usize, width: usize, v: u64) {
    if at + width <= b.len() {
        b[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
    }
}

fn apply_raw(b: &mut Vec<u8>, m: &Raw, page_size: u64) {
    if b.is_empty() {
        return;
    }
    let len = b.len();
    match m {
        Raw::Flip { at, bit } => b[at.index(len)] ^= 1 << bit,
        Raw::Byte { at, v } => b[at.index(len)] = *v,
        Raw::Truncate { at } => b.truncate(at.index(len)),
        Raw::Insert { at, bytes } => {
            let i = at.index(len + 1);
            b.splice(i..i, bytes.iter().copied());
        }
        Raw::Remove { at, n } => {
            let i = at.index(len);
            b.drain(i..(i + n).min(len));
        }
        Raw::Word { at, width, v } => {
            let i = at.index(len) / width * width;
            let c = ValCtx {
                len: len as u64,
                page_size,
                self_page: i as u64 / page_size,
            };
            put_word(b, i, *width, v.get(&c));
        }
        Raw::Fill { at, n, v } => {
            let i = at.index(len);
            b[i..(i + n).min(len)].fill(*v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// WAL: a directory of several segments with entries, hard states and a snapshot marker.

/// Small segments so the fixture has several, each cut with crc, metadata and state records.
const WAL_SEGMENT: u64 = 4096;

fn wal_opts() -> WalOptions {
    WalOptions {
        segment_size: WAL_SEGMENT,
        unsafe_no_sync: true,
    }
}

/// The marker the fixture holds besides the zero one.
fn wal_marker() -> walpb::Snapshot {
    walpb::Snapshot {
        index: 20,
        term: 2,
        conf_state: Some(raftpb::ConfState {
            voters: vec![1, 2, 3],
            ..Default::default()
        }),
    }
}

struct WalFixture {
    /// (name, bytes) of every segment, in order.
    segments: Vec<(String, Vec<u8>)>,
    /// Offsets of each segment's frames (length words).
    frames: Vec<Vec<usize>>,
}

fn wal_fixture() -> &'static WalFixture {
    static F: OnceLock<WalFixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("wal");
        let mut w = Wal::create_with(&dir, &metadata(), wal_opts()).expect("create wal");
        for i in 1..=40u64 {
            let term = 1 + i / 15;
            let e = entry(i, term, 20 + (i as usize * 37) % 300);
            w.save(&hs(term, i), std::slice::from_ref(&e))
                .expect("save");
            if i == 20 {
                w.save_snapshot(&wal_marker()).expect("marker");
            }
        }
        // A conflicting tail: entries 35.. rewritten at a higher term.
        for i in 35..=38u64 {
            w.save(&hs(5, i), &[entry(i, 5, 50)]).expect("rewrite");
        }
        drop(w);
        let mut names: Vec<String> = fs::read_dir(&dir)
            .expect("read wal dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".wal"))
            .collect();
        names.sort();
        assert!(names.len() >= 3, "want several segments, got {names:?}");
        let segments: Vec<(String, Vec<u8>)> = names
            .into_iter()
            .map(|n| {
                let b = fs::read(dir.join(&n)).expect("read segment");
                (n, b)
            })
            .collect();
        let frames = segments.iter().map(|(_, b)| frame_offsets(b)).collect();
        WalFixture { segments, frames }
    })
}

/// Where each frame of a valid segment starts.
fn frame_offsets(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 8 <= b.len() {
        let w = u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"));
        if w == 0 {
            break;
        }
        let len = (w & 0x00ff_ffff_ffff_ffff) as usize;
        let pad = if w >> 63 == 1 {
            ((w >> 56) & 7) as usize
        } else {
            0
        };
        out.push(off);
        off += 8 + len + pad;
    }
    out
}

#[derive(Debug, Clone)]
enum WalMut {
    Raw {
        seg: Index,
        m: Raw,
    },
    /// A frame's length word set outright.
    LenWord {
        seg: Index,
        frame: Index,
        v: Val,
    },
    /// A byte of a record (the type, crc and data length varints come first).
    RecordByte {
        seg: Index,
        frame: Index,
        off: u8,
        v: u8,
    },
    /// A segment left out of the directory.
    Drop {
        seg: Index,
    },
    /// A segment's name with another sequence number or first index.
    Rename {
        seg: Index,
        seq: Option<Val>,
        index: Option<Val>,
    },
}

fn wal_mut() -> impl Strategy<Value = WalMut> {
    prop_oneof![
        4 => (any::<Index>(), raw()).prop_map(|(seg, m)| WalMut::Raw { seg, m }),
        2 => (any::<Index>(), any::<Index>(), val())
            .prop_map(|(seg, frame, v)| WalMut::LenWord { seg, frame, v }),
        2 => (any::<Index>(), any::<Index>(), 8u8..24, any::<u8>())
            .prop_map(|(seg, frame, off, v)| WalMut::RecordByte { seg, frame, off, v }),
        1 => any::<Index>().prop_map(|seg| WalMut::Drop { seg }),
        1 => (any::<Index>(), proptest::option::of(val()), proptest::option::of(val()))
            .prop_map(|(seg, seq, index)| WalMut::Rename { seg, seq, index }),
    ]
}

/// The fixture's segments with `muts` applied.
fn mutate_wal(muts: &[WalMut]) -> Vec<(String, Vec<u8>)> {
    let f = wal_fixture();
    let mut segs: Vec<Option<(String, Vec<u8>)>> = f.segments.iter().cloned().map(Some).collect();
    let n = segs.len();
    for m in muts {
        match m {
            WalMut::Raw { seg, m } => {
                if let Some((_, b)) = &mut segs[seg.index(n)] {
                    apply_raw(b, m, 8);
                }
            }
            WalMut::LenWord { seg, frame, v } => {
                let s = seg.index(n);
                if let Some((_, b)) = &mut segs[s]
                    && !f.frames[s].is_empty()
                {
                    let at = f.frames[s][frame.index(f.frames[s].len())];
                    let c = ValCtx {
                        len: b.len() as u64,
                        page_size: 8,
                        self_page: at as u64,
                    };
                    put_word(b, at, 8, v.get(&c));
                }
            }
            WalMut::RecordByte { seg, frame, off, v } => {
                let s = seg.index(n);
                if let Some((_, b)) = &mut segs[s]
                    && !f.frames[s].is_empty()
                {
                    let at = f.frames[s][frame.index(f.frames[s].len())] + *off as usize;
                    if at < b.len() {
                        b[at] = *v;
                    }
                }
            }
            WalMut::Drop { seg } => segs[seg.index(n)] = None,
            WalMut::Rename { seg, seq, index } => {
                if let Some((name, b)) = &mut segs[seg.index(n)] {
                    let (s0, i0) = wal::parse_wal_name(name).unwrap_or((0, 0));
                    let c = ValCtx {
                        len: b.len() as u64,
                        page_size: 1,
                        self_page: s0,
                    };
                    let s = seq.as_ref().map_or(s0, |v| v.get(&c));
                    let i = index.as_ref().map_or(i0, |v| v.get(&c));
                    *name = wal::wal_name(s, i);
                }
            }
        }
    }
    segs.into_iter().flatten().collect()
}

/// Every reader of a WAL directory, including the writable open, repair and a write after it.
fn exercise_wal(dir: &Path) {
    for at in [zero(), wal_marker()] {
        if let Ok(mut w) = Wal::open_for_read(dir, &at) {
            let _ = w.read_all();
        }
    }
    if let Ok(records) = wal::Records::open(dir) {
        for r in records {
            let _ = r.map(|r| r.record.encode_to_vec());
        }
    }
    let _ = wal::valid_snapshot_entries(dir);
    if let Ok(mut w) = Wal::open_with(dir, &wal_marker(), wal_opts())
        && w.read_all().is_ok()
    {
        let next = w.last_index().saturating_add(1);
        let _ = w.save(&hs(9, next), &[entry(next, 9, 100)]);
    }
    if let Ok(wal::RepairOutcome::Truncated { .. }) = wal::repair(dir)
        && let Ok(mut w) = Wal::open_with(dir, &zero(), wal_opts())
    {
        let _ = w.read_all();
    }
}

fn run_wal_case(segs: Vec<(String, Vec<u8>)>) {
    let input: usize = segs.iter().map(|(_, b)| b.len()).sum();
    guarded("wal", input, move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("wal");
        fs::create_dir(&dir).expect("mkdir");
        for (name, b) in &segs {
            fs::write(dir.join(name), b).expect("write segment");
        }
        exercise_wal(&dir);
    });
}

#[test]
fn wal_fixture_reads_back() {
    let segs = mutate_wal(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    fs::create_dir(&dir).unwrap();
    for (name, b) in &segs {
        fs::write(dir.join(name), b).unwrap();
    }
    let mut w = Wal::open_for_read(&dir, &wal_marker()).unwrap();
    let all = w.read_all().unwrap();
    assert_eq!(all.entries.first().map(|e| e.index), Some(21));
    assert_eq!(all.entries.last().map(|e| (e.index, e.term)), Some((38, 5)));
    assert_eq!(all.state.commit, 38);
}

proptest! {
    #![proptest_config(fuzz_support::config(768, REGRESSIONS))]

    #[test]
    fn wal_mutations_never_panic(muts in prop::collection::vec(wal_mut(), 1..4)) {
        run_wal_case(mutate_wal(&muts));
    }
}

// ---------------------------------------------------------------------------------------------
// .snap files.

fn snap_fixture() -> &'static Vec<u8> {
    static F: OnceLock<Vec<u8>> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let s = Snapshotter::new(tmp.path());
        let snapshot = raftpb::Snapshot {
            data: Some(
                br#"{"Root":{"Path":"/","Children":{"0":{"Path":"/0/members"}}}}"#
                    .repeat(20)
                    .to_vec(),
            ),
            metadata: Some(raftpb::SnapshotMetadata {
                conf_state: Some(raftpb::ConfState {
                    voters: vec![1, 0x8e9e05c52164694d, 3],
                    learners: vec![7],
                    ..Default::default()
                }),
                index: 20,
                term: 2,
            }),
        };
        s.save_snap(&snapshot).expect("save snap");
        fs::read(tmp.path().join(snap::snap_name(2, 20))).expect("read snap")
    })
}

fn run_snap_case(bytes: Vec<u8>) {
    let input = bytes.len();
    guarded("snap", input, move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join(snap::snap_name(2, 20));
        fs::write(&path, &bytes).expect("write snap");
        let _ = snap::read(&path);
        let _ = Snapshotter::new(tmp.path()).load();
    });
}

#[test]
fn snap_fixture_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.snap");
    fs::write(&path, snap_fixture()).unwrap();
    let s = snap::read(&path).unwrap();
    assert_eq!(s.metadata.map(|m| m.index), Some(20));
}

proptest! {
    #![proptest_config(fuzz_support::config(2048, REGRESSIONS))]

    #[test]
    fn snap_mutations_never_panic(muts in prop::collection::vec(raw(), 1..5)) {
        let mut b = snap_fixture().clone();
        for m in &muts {
            apply_raw(&mut b, m, 1);
        }
        run_snap_case(b);
    }
}

// ---------------------------------------------------------------------------------------------
// The bbolt db: several buckets, branch pages, an inline bucket, overflow values, a freelist.

const PAGE: u64 = 4096;

struct DbFixture {
    bytes: Vec<u8>,
    /// Page ids of branch and leaf pages (targets for element mutations).
    node_pages: Vec<u64>,
    persist_freelist: bool,
}

fn rev_key(main: u64, sub: u64) -> Vec<u8> {
    let mut k = main.to_be_bytes().to_vec();
    k.push(b'_');
    k.extend_from_slice(&sub.to_be_bytes());
    k
}

fn build_db(persist_freelist: bool) -> DbFixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("db");
    let opts = Options {
        persist_freelist,
        no_sync: true,
        ..Options::default()
    };
    let db = Db::open_with(&path, opts).expect("create db");
    let mut tx = db.begin_write().expect("begin");
    for b in [&b"key"[..], b"meta", b"lease", b"members", b"auth"] {
        tx.create_bucket(b).expect("bucket");
    }
    // 600 revisions: the key bucket needs branch pages.
    for i in 1..=600u64 {
        let v = format!("value-{i}-").repeat(1 + (i as usize % 7));
        tx.put(b"key", &rev_key(i, 0), v.as_bytes()).expect("put");
    }
    tx.put(b"meta", b"consistent_index", &42u64.to_be_bytes())
        .expect("put");
    // Values larger than a page: overflow pages.
    for i in 0..6u64 {
        let v = vec![b'a' + i as u8; 5000 + 3000 * i as usize];
        tx.put(b"lease", &i.to_be_bytes(), &v).expect("put");
    }
    tx.put(b"members", b"8e9e05c52164694d", br#"{"id":1}"#)
        .expect("put");
    tx.commit().expect("commit");
    // A second commit that frees pages, so the freelist is not empty.
    let mut tx = db.begin_write().expect("begin");
    for i in (1..=600u64).step_by(3) {
        tx.delete(b"key", &rev_key(i, 0)).expect("delete");
    }
    tx.delete(b"lease", &2u64.to_be_bytes()).expect("delete");
    tx.commit().expect("commit");
    db.check().expect("fixture is sound");
    drop(db);
    let bytes = fs::read(&path).expect("read db");
    let node_pages = (2..bytes.len() as u64 / PAGE)
        .filter(|&p| {
            let off = (p * PAGE) as usize;
            let id = u64::from_le_bytes(bytes[off..off + 8].try_into().expect("8"));
            let flags = u16::from_le_bytes(bytes[off + 8..off + 10].try_into().expect("2"));
            id == p && (flags == 1 || flags == 2)
        })
        .collect();
    DbFixture {
        bytes,
        node_pages,
        persist_freelist,
    }
}

fn db_fixture(persist_freelist: bool) -> &'static DbFixture {
    static WITH: OnceLock<DbFixture> = OnceLock::new();
    static WITHOUT: OnceLock<DbFixture> = OnceLock::new();
    if persist_freelist {
        WITH.get_or_init(|| build_db(true))
    } else {
        WITHOUT.get_or_init(|| build_db(false))
    }
}

#[derive(Debug, Clone)]
enum DbMut {
    Raw(Raw),
    /// A page header field: 0 id (u64), 1 flags (u16), 2 count (u16), 3 overflow (u32).
    Header {
        page: Index,
        field: u8,
        v: Val,
    },
    /// A field of one element of a branch or leaf page: the word at byte `off` (0, 4, 8, 12)
    /// of the element, `width` 4 or 8 bytes.
    Elem {
        page: Index,
        elem: Index,
        off: u8,
        width: u8,
        v: Val,
    },
    /// A meta field (0 magic .. 6 txid as 4/4/4/4/8/8/8/8/8 layout below), with the checksum
    /// recomputed when `fix_sum` so the change is believed.
    Meta {
        slot: u8,
        field: u8,
        v: Val,
        fix_sum: bool,
    },
    /// A whole page copied over another (a page with a stale id, or a duplicate subtree).
    CopyPage {
        from: Index,
        to: Index,
    },
}

fn db_mut() -> impl Strategy<Value = DbMut> {
    prop_oneof![
        3 => raw().prop_map(DbMut::Raw),
        2 => (any::<Index>(), 0u8..4, val())
            .prop_map(|(page, field, v)| DbMut::Header { page, field, v }),
        4 => (any::<Index>(), any::<Index>(), prop::sample::select(vec![0u8, 4, 8, 12]),
              prop::sample::select(vec![4u8, 8]), val())
            .prop_map(|(page, elem, off, width, v)| DbMut::Elem { page, elem, off, width, v }),
        2 => (0u8..2, 0u8..9, val(), prop::bool::weighted(0.8))
            .prop_map(|(slot, field, v, fix_sum)| DbMut::Meta { slot, field, v, fix_sum }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(from, to)| DbMut::CopyPage { from, to }),
    ]
}

fn fnv1a64(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// (offset after the page header, width) of the meta fields: magic, version, page size, flags,
/// root, sequence, freelist, high-water mark, txid.
const META_FIELDS: [(usize, usize); 9] = [
    (0, 4),
    (4, 4),
    (8, 4),
    (12, 4),
    (16, 8),
    (24, 8),
    (32, 8),
    (40, 8),
    (48, 8),
];

fn apply_db(b: &mut Vec<u8>, f: &DbFixture, m: &DbMut) {
    let len = b.len() as u64;
    let ctx = |page: u64| ValCtx {
        len,
        page_size: PAGE,
        self_page: page,
    };
    match m {
        DbMut::Raw(r) => apply_raw(b, r, PAGE),
        DbMut::Header { page, field, v } => {
            let p = page.index((len / PAGE).max(1) as usize) as u64;
            let at = (p * PAGE) as usize;
            let (off, width) = [(0, 8), (8, 2), (10, 2), (12, 4)][*field as usize % 4];
            put_word(b, at + off, width, v.get(&ctx(p)));
        }
        DbMut::Elem {
            page,
            elem,
            off,
            width,
            v,
        } => {
            let p = f.node_pages[page.index(f.node_pages.len())];
            let at = (p * PAGE) as usize;
            if at + 16 > b.len() {
                return;
            }
            let count = u16::from_le_bytes([b[at + 10], b[at + 11]]) as usize;
            let e = at + 16 + 16 * elem.index(count.max(1));
            let width = if *off == 12 { 4 } else { *width as usize };
            put_word(b, e + *off as usize, width, v.get(&ctx(p)));
        }
        DbMut::Meta {
            slot,
            field,
            v,
            fix_sum,
        } => {
            let at = *slot as usize * PAGE as usize + 16;
            if at + 64 > b.len() {
                return;
            }
            let (off, width) = META_FIELDS[*field as usize % META_FIELDS.len()];
            put_word(b, at + off, width, v.get(&ctx(*slot as u64)));
            if *fix_sum {
                let sum = fnv1a64(&b[at..at + 56]);
                b[at + 56..at + 64].copy_from_slice(&sum.to_le_bytes());
            }
        }
        DbMut::CopyPage { from, to } => {
            let pages = (len / PAGE) as usize;
            if pages < 3 {
                return;
            }
            let (s, d) = (2 + from.index(pages - 2), 2 + to.index(pages - 2));
            let page: Vec<u8> = b[s * PAGE as usize..(s + 1) * PAGE as usize].to_vec();
            b[d * PAGE as usize..(d + 1) * PAGE as usize].copy_from_slice(&page);
        }
    }
}

/// Reads everything the public API offers: every bucket forwards, backwards, by seek, range
/// and get; returns how many keys the forward walks saw. A cursor that loops is the
/// watchdog's to catch.
fn read_all_buckets(db: &Db) -> usize {
    let mut total = 0;
    let tx = db.begin_read();
    let Ok(names) = tx.bucket_names() else {
        return 0;
    };
    for name in &names {
        let _ = tx.sequence(name);
        let mut seen = Vec::new();
        if let Ok(mut c) = tx.cursor(name) {
            let mut e = c.first();
            while let Ok(Some((k, _))) = e {
                seen.push(k.to_vec());
                total += 1;
                e = c.next();
            }
            let mut e = c.last();
            while let Ok(Some(_)) = e {
                e = c.prev();
            }
            for k in seen.iter().step_by(17) {
                let _ = c.seek(k);
                let _ = c.next();
                let _ = c.prev();
            }
            let _ = c.seek(b"");
            let _ = c.seek(&[0xff; 20]);
        }
        for k in seen.iter().step_by(13) {
            let _ = tx.get(name, k);
        }
        if let Ok(b) = tx.bucket(name) {
            let _ = b.get(&rev_key(7, 0));
        }
        let _ = tx.range(name, &rev_key(10, 0), Some(&rev_key(400, 0)), 0);
        let _ = tx.range(name, b"consistent_index", None, 0);
        let _ = tx.for_each(name, &mut |_, _| Ok(()));
    }
    total
}

fn exercise_db(path: &Path, persist_freelist: bool) {
    if let Ok(db) = Db::open_read_only(path) {
        read_all_buckets(&db);
        let _ = db.check();
        let _ = db.stats();
        let _ = db.hash(&[]);
    }
    let opts = Options {
        persist_freelist,
        no_sync: true,
        ..Options::default()
    };
    if let Ok(db) = Db::open_with(path, opts) {
        let _ = db.check();
        read_all_buckets(&db);
        // A server writes to what it opened without checking it first: the copy-on-write path
        // (materialize, rebalance, spill, freelist reuse) meets the damage too.
        let first = |name: &[u8]| {
            let tx = db.begin_read();
            let mut c = tx.cursor(name).ok()?;
            c.first().ok().flatten().map(|(k, _)| k.to_vec())
        };
        if let Ok(mut tx) = db.begin_write() {
            let names = tx.bucket_names().unwrap_or_default();
            for (i, name) in names.iter().enumerate() {
                let _ = tx.put(name, &rev_key(1000 + i as u64, 0), &[7u8; 300]);
                if let Some(k) = first(name) {
                    let _ = tx.delete(name, &k);
                }
            }
            let _ = tx.delete_bucket(b"members");
            let _ = tx.create_bucket(b"new");
            let _ = tx.put(b"new", b"k", &[1u8; 5000]);
            let _ = tx.commit();
        }
        read_all_buckets(&db);
        let _ = db.check();
    }
}

fn run_db_case(bytes: Vec<u8>, persist_freelist: bool) {
    let input = bytes.len();
    guarded("db", input, move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path: PathBuf = tmp.path().join("db");
        fs::write(&path, &bytes).expect("write db");
        exercise_db(&path, persist_freelist);
    });
}

#[test]
fn db_fixtures_are_sound() {
    for persist in [true, false] {
        let f = db_fixture(persist);
        assert!(f.node_pages.len() > 10, "{} node pages", f.node_pages.len());
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        fs::write(&path, &f.bytes).unwrap();
        let db = Db::open_read_only(&path).unwrap();
        db.check().unwrap();
        let st = db.stats().unwrap();
        let key = st.buckets.iter().find(|b| b.name == b"key").unwrap();
        assert!(key.branch_pages >= 1 && key.keys == 400, "{key:?}");
        let lease = st.buckets.iter().find(|b| b.name == b"lease").unwrap();
        assert!(lease.overflow_pages > 0, "{lease:?}");
        assert!(st.buckets.iter().any(|b| b.inline));
    }
}

fn db_case(persist_freelist: bool, muts: &[DbMut]) {
    let f = db_fixture(persist_freelist);
    let mut b = f.bytes.clone();
    for m in muts {
        apply_db(&mut b, f, m);
    }
    run_db_case(b, f.persist_freelist);
}

proptest! {
    #![proptest_config(fuzz_support::config(768, REGRESSIONS))]

    #[test]
    fn db_mutations_never_panic(muts in prop::collection::vec(db_mut(), 1..4)) {
        db_case(true, &muts);
    }

    #[test]
    fn db_without_freelist_mutations_never_panic(
        muts in prop::collection::vec(db_mut(), 1..4)
    ) {
        db_case(false, &muts);
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-made dbs for the shapes random mutation rarely reaches: trees that are DAGs or chains.

fn page_header(id: u64, flags: u16, count: u16) -> Vec<u8> {
    let mut p = vec![0u8; PAGE as usize];
    p[0..8].copy_from_slice(&id.to_le_bytes());
    p[8..10].copy_from_slice(&flags.to_le_bytes());
    p[10..12].copy_from_slice(&count.to_le_bytes());
    p
}

fn leaf_page(id: u64, elems: &[(u32, &[u8], &[u8])]) -> Vec<u8> {
    let mut p = page_header(id, 0x02, elems.len() as u16);
    let mut data = 16 + 16 * elems.len();
    for (i, (flags, k, v)) in elems.iter().enumerate() {
        let e = 16 + 16 * i;
        p[e..e + 4].copy_from_slice(&flags.to_le_bytes());
        p[e + 4..e + 8].copy_from_slice(&((data - e) as u32).to_le_bytes());
        p[e + 8..e + 12].copy_from_slice(&(k.len() as u32).to_le_bytes());
        p[e + 12..e + 16].copy_from_slice(&(v.len() as u32).to_le_bytes());
        p[data..data + k.len()].copy_from_slice(k);
        data += k.len();
        p[data..data + v.len()].copy_from_slice(v);
        data += v.len();
    }
    p
}

fn branch_page(id: u64, elems: &[(Vec<u8>, u64)]) -> Vec<u8> {
    let mut p = page_header(id, 0x01, elems.len() as u16);
    let mut data = 16 + 16 * elems.len();
    for (i, (k, child)) in elems.iter().enumerate() {
        let e = 16 + 16 * i;
        p[e..e + 4].copy_from_slice(&((data - e) as u32).to_le_bytes());
        p[e + 4..e + 8].copy_from_slice(&(k.len() as u32).to_le_bytes());
        p[e + 8..e + 16].copy_from_slice(&child.to_le_bytes());
        p[data..data + k.len()].copy_from_slice(k);
        data += k.len();
    }
    p
}

fn bucket_value(root: u64) -> Vec<u8> {
    let mut v = root.to_le_bytes().to_vec();
    v.extend_from_slice(&0u64.to_le_bytes());
    v
}

/// A db image: two metas naming `root`, then `pages` from page 2 on, then (with `freelist`) an
/// empty freelist page; without it the metas say it is not persisted, as etcd writes.
fn craft_db(root: u64, pages: &[Vec<u8>], freelist: bool) -> Vec<u8> {
    let mut pages = pages.to_vec();
    let mut freelist_id = u64::MAX;
    if freelist {
        freelist_id = 2 + pages.len() as u64;
        pages.push(page_header(freelist_id, 0x10, 0));
    }
    let n = 2 + pages.len() as u64;
    let mut out = Vec::new();
    for slot in 0..2u64 {
        let mut p = page_header(slot, 0x04, 0);
        let m = &mut p[16..];
        m[0..4].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
        m[4..8].copy_from_slice(&2u32.to_le_bytes());
        m[8..12].copy_from_slice(&(PAGE as u32).to_le_bytes());
        m[16..24].copy_from_slice(&root.to_le_bytes());
        m[32..40].copy_from_slice(&freelist_id.to_le_bytes());
        m[40..48].copy_from_slice(&n.to_le_bytes());
        m[48..56].copy_from_slice(&slot.to_le_bytes());
        let sum = fnv1a64(&m[..56]);
        m[56..64].copy_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(&p);
    }
    for p in &pages {
        out.extend_from_slice(p);
    }
    out
}

/// Bucket "b" whose tree is `levels` branch pages of 200 elements, each pointing 200 times at
/// the next, above one leaf: 200^levels paths through a handful of pages.
fn dag_db(levels: u64, leaf: &[(u32, &[u8], &[u8])], freelist: bool) -> Vec<u8> {
    let mut pages = vec![leaf_page(2, &[(1, b"b", &bucket_value(3))])];
    for l in 0..levels {
        let id = 3 + l;
        let elems: Vec<(Vec<u8>, u64)> = (0..200u8).map(|i| (vec![b'k', i], id + 1)).collect();
        pages.push(branch_page(id, &elems));
    }
    pages.push(leaf_page(3 + levels, leaf));
    craft_db(2, &pages, freelist)
}

/// Opens `bytes` read-only and runs `f` on it under the watchdog.
fn on_crafted_db(what: &str, bytes: Vec<u8>, f: impl FnOnce(&Db) + Send + 'static) {
    with_crafted_db(what, bytes, false, move |db, _| f(db));
}

/// Opens `bytes` writable and runs `f` on it (and the file's path) under the watchdog. The
/// crafted file must persist its freelist: a writable open without one walks the trees.
fn on_writable_crafted_db(
    what: &str,
    bytes: Vec<u8>,
    f: impl FnOnce(&Db, &std::path::Path) + Send + 'static,
) {
    with_crafted_db(what, bytes, true, f);
}

fn with_crafted_db(
    what: &str,
    bytes: Vec<u8>,
    writable: bool,
    f: impl FnOnce(&Db, &std::path::Path) + Send + 'static,
) {
    let input = bytes.len();
    guarded(what, input, move || {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("db");
        fs::write(&path, &bytes).expect("write db");
        let db = if writable {
            Db::open(&path)
        } else {
            Db::open_read_only(&path)
        };
        f(&db.expect("open the crafted db"), &path);
    });
}

#[test]
fn crafted_db_reads_back() {
    // Sanity of the builder: one branch level, read as a tree.
    let bytes = dag_db(0, &[(0, b"k1", b"v1"), (0, b"k2", b"v2")], true);
    on_crafted_db("crafted", bytes, |db| {
        db.check().unwrap();
        let tx = db.begin_read();
        assert_eq!(tx.get(b"b", b"k2").unwrap(), Some(&b"v2"[..]));
    });
}

/// Bug: a cursor walked a DAG of branch pages path by path (200^6 leaf visits over 9 pages).
/// Now the second visit of a leaf is a corrupt-page error: its keys do not increase.
#[test]
fn dag_of_branch_pages_is_an_error_not_a_hang() {
    let bytes = dag_db(6, &[(0, b"k1", b"v1"), (0, b"k2", b"v2")], false);
    on_crafted_db("dag", bytes.clone(), |db| {
        let tx = db.begin_read();
        let mut c = tx.cursor(b"b").unwrap();
        let mut e = c.first();
        let mut n = 0;
        while let Ok(Some(_)) = e {
            n += 1;
            e = c.next();
        }
        assert!(
            e.is_err() && n == 2,
            "{n} entries, then {:?}",
            e.map(|_| ())
        );
        let mut e = c.last();
        let mut n = 0;
        while let Ok(Some(_)) = e {
            n += 1;
            e = c.prev();
        }
        assert!(e.is_err() && n == 2, "{n} entries backwards");
        assert!(db.hash(&[]).is_err());
        assert!(db.check().is_err());
    });
}

/// Bug: the same DAG over an empty leaf: `first()` skipped empty leaves one path at a time.
#[test]
fn dag_over_an_empty_leaf_is_an_error_not_a_hang() {
    let bytes = dag_db(6, &[], false);
    on_crafted_db("dag-empty", bytes, |db| {
        let tx = db.begin_read();
        let mut c = tx.cursor(b"b").unwrap();
        assert!(c.first().is_err());
        assert!(c.last().is_err());
        assert!(c.seek(b"a").is_err());
        assert!(tx.for_each(b"b", &mut |_, _| Ok(())).is_err());
    });
}

/// Bug: deleting a bucket freed its tree path by path, so a DAG of branch pages pushed every
/// path's pages onto the freed list (200^3 entries, 128 MiB, for 3 levels; 200^6 never ends)
/// and freed shared pages many times. Now a page reached twice is a corrupt-page error.
#[test]
fn deleting_a_bucket_whose_tree_is_a_dag_is_an_error() {
    // A persisted freelist: the writable open does not walk the trees (which would refuse it).
    let bytes = dag_db(3, &[(0, b"k1", b"v1")], true);
    on_writable_crafted_db("dag-delete", bytes, |db, _| {
        let mut tx = db.begin_write().unwrap();
        let e = tx.delete_bucket(b"b").unwrap_err().to_string();
        assert!(e.contains("reached twice"), "{e}");
    });
}

/// Bug: writes under two branch elements that share a child (a DAG) copied that child once per
/// path and freed its page twice at commit, so the freelist would hand it out twice (one
/// page, two owners). Now the commit refuses it as a corrupt page; nothing is written.
#[test]
fn writes_through_a_dag_fail_the_commit_instead_of_freeing_a_page_twice() {
    let bytes = dag_db(1, &[(0, b"k1", b"v1")], true);
    let before = bytes.clone();
    on_writable_crafted_db("dag-put", bytes, move |db, path| {
        let mut tx = db.begin_write().unwrap();
        tx.put(b"b", b"k\x05", b"x").unwrap();
        tx.put(b"b", b"k\x10", b"y").unwrap();
        let e = tx.commit().unwrap_err().to_string();
        assert!(e.contains("twice"), "{e}");
        let after = fs::read(path).unwrap();
        assert!(after == before, "the failed commit wrote into the file");
    });
}

/// Bug: check() reset its depth at each nested bucket, so a chain of buckets each holding the
/// next (one page each) recursed once per page: a stack overflow (an abort) for a file of a
/// few thousand pages. Now nesting counts toward the depth limit.
#[test]
fn chain_of_nested_buckets_is_an_error_not_a_stack_overflow() {
    const CHAIN: u64 = 5000;
    let mut pages = Vec::new();
    for id in 2..2 + CHAIN {
        pages.push(leaf_page(id, &[(1, b"n", &bucket_value(id + 1))]));
    }
    pages.push(leaf_page(2 + CHAIN, &[]));
    let bytes = craft_db(2, &pages, false);
    on_crafted_db("nested", bytes, |db| {
        assert!(db.check().is_err());
        assert!(db.stats().is_err());
    });
}

// ---------------------------------------------------------------------------------------------
// WAL regressions.

/// Writes the fixture's segments, the one at `rename` under another name.
fn wal_dir_with(rename: Option<(usize, String)>) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    fs::create_dir(&dir).unwrap();
    for (i, (name, b)) in wal_fixture().segments.iter().enumerate() {
        let name = match &rename {
            Some((r, new)) if *r == i => new.clone(),
            _ => name.clone(),
        };
        fs::write(dir.join(name), b).unwrap();
    }
    tmp
}

/// Bug (found by wal_mutations_never_panic): a segment named with sequence number u64::MAX
/// opened for writing; the next cut computed `seq + 1` and panicked (wal/mod.rs, cut). Now the
/// write that needs the cut fails with NoNextSegment.
#[test]
fn segment_at_the_largest_sequence_number_cannot_be_cut() {
    // The second segment holds the marker; renamed, it sorts last and is the only one read.
    let (_, index) = wal::parse_wal_name(&wal_fixture().segments[1].0).unwrap();
    let tmp = wal_dir_with(Some((1, wal::wal_name(u64::MAX, index))));
    let dir = tmp.path().join("wal");
    guarded("wal-max-seq", 1 << 16, move || {
        let mut w = Wal::open_with(&dir, &wal_marker(), wal_opts()).unwrap();
        w.read_all().unwrap();
        let mut saw = None;
        // Enough to fill the 4 KiB segment and force a cut.
        for i in 0..64u64 {
            let next = w.last_index() + 1;
            if let Err(e) = w.save(&hs(9, next), &[entry(next, 9, 200)]) {
                saw = Some((i, e));
                break;
            }
        }
        assert!(
            matches!(saw, Some((_, wal::WalError::NoNextSegment { .. }))),
            "{saw:?}"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// db regressions found by the mutations.

/// Bug (found by db_mutations_never_panic, minimal input: meta 0's txid set to u64::MAX with
/// its checksum fixed): begin_write released pending pages up to `txid + 1` and panicked
/// (backend/freelist.rs, release_up_to), and the commit would have overflowed too. Now the
/// write is refused with TxidExhausted; reads go on.
#[test]
fn meta_txid_at_u64_max_refuses_writes_without_panic() {
    let f = db_fixture(true);
    let mut bytes = f.bytes.clone();
    let m = DbMut::Meta {
        slot: 0,
        field: 8,
        v: Val::U64Max,
        fix_sum: true,
    };
    apply_db(&mut bytes, f, &m);
    let input = bytes.len();
    guarded("txid-max", input, move || {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        fs::write(&path, &bytes).unwrap();
        let db = Db::open(&path).unwrap();
        assert_eq!(db.txid(), u64::MAX);
        assert!(matches!(
            db.begin_write().err(),
            Some(common::backend::Error::TxidExhausted { .. })
        ));
        db.check().unwrap();
        // Slot 0 holds the fixture's first commit (600 revisions, before the deletes).
        assert_eq!(read_all_buckets(&db), 608);
    });
}
