// Power loss, not just kill -9: members run on a FUSE filesystem that forgets every write not
// yet fsynced when the power is cut (power_loss_fs/), and must keep every acknowledged write.
//
// kill -9 alone cannot show a missing fsync: the page cache outlives the process. Here the cut
// comes after the kill, so what a member finds on restart is what it had synced. The last test
// proves the cut bites: with --unsafe-no-fsync a member must lose acknowledged writes.

#[path = "../../common/tests/support/mod.rs"]
mod support;

#[path = "cluster_support/mod.rs"]
mod cluster_support;

#[path = "power_loss_fs/mod.rs"]
mod power_loss_fs;

use std::path::Path;
use std::time::{Duration, Instant};

use cluster_support::{Node, Writer, members};
use power_loss_fs::PowerFs;

const OURS: &str = env!("CARGO_BIN_EXE_etcd");
/// Power cuts per test: enough to land at many points of the WAL/db cycle, few enough for the
/// whole file to take well under a minute.
const ROUNDS: usize = 10;
const CLUSTER_ROUNDS: usize = 5;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// `POWER_LOSS_SEED` repeats a run's cut times.
fn seeded(test: &str) -> Rng {
    let seed = std::env::var("POWER_LOSS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_u64 ^ std::process::id() as u64);
    eprintln!("{test}: seed {seed} (POWER_LOSS_SEED={seed} repeats it)");
    Rng(seed | 1)
}

/// A FUSE mount at `<dir>/mnt` over `<dir>/disk`, and `n` members whose data dirs are on it
/// and whose logs are not (a log is never fsynced: it would be lost with the power).
fn setup(dir: &Path, n: usize, extra: &[&str]) -> (PowerFs, Vec<Node>) {
    let fs = PowerFs::mount(&dir.join("disk"), &dir.join("mnt"));
    let mnt = fs.mountpoint().to_path_buf();
    let nodes = members(&dir.join("logs"), n, false, extra, |m| {
        m.data_dir = mnt.join(&m.name);
    });
    (fs, nodes)
}

/// Starts `nodes` and waits until each serves.
fn start_all(nodes: &mut [Node]) {
    for m in nodes.iter_mut() {
        m.spawn(OURS);
    }
    for m in nodes.iter_mut() {
        m.wait_healthy(Duration::from_secs(30));
    }
}

/// Writes through `clients` clients over every member for `for_ms` once the first write is
/// acknowledged, then kills every member with -9: the keys acknowledged before the kill.
fn write_then_kill(nodes: &mut [Node], prefix: &str, clients: usize, for_ms: u64) -> Vec<String> {
    let w = Writer::start_many(
        nodes.iter().map(|m| m.client_url.clone()).collect(),
        prefix,
        clients,
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while w.acked_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "no write acknowledged within 20 s; log {}:\n{}",
            nodes[0].log_path().display(),
            nodes[0].log_tail(10)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(for_ms));
    for m in nodes.iter_mut() {
        m.kill9();
    }
    // Every reply the writer saw was sent before the kill.
    w.finish()
}

/// The acknowledged keys missing from the member's store (a serializable read of the one
/// member: after a cut of all members, each must have them).
fn missing(node: &Node, prefix: &str, acked: &[String]) -> Vec<String> {
    let out = node.etcdctl_ok(&["get", prefix, "--prefix", "--keys-only", "--consistency=s"]);
    let present: std::collections::HashSet<&str> = out.lines().filter(|l| !l.is_empty()).collect();
    acked
        .iter()
        .filter(|k| !present.contains(k.as_str()))
        .cloned()
        .collect()
}

fn assert_none_missing(nodes: &[Node], prefix: &str, acked: &[String], round: usize) {
    for m in nodes {
        let lost = missing(m, prefix, acked);
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged writes lost by {} after a power cut, e.g. {:?}; log {}",
            lost.len(),
            acked.len(),
            m.name,
            &lost[..lost.len().min(5)],
            m.log_path().display()
        );
    }
}

/// One round: `clients` write `<prefix><round>-…` for a while, every member is killed, and the
/// power is cut (every other round keeping a random half of the unsynced writes). Returns the
/// acknowledged keys.
fn write_and_cut(
    fs: &mut PowerFs,
    nodes: &mut [Node],
    rng: &mut Rng,
    prefix: &str,
    clients: usize,
    round: usize,
) -> Vec<String> {
    let ms = rng.between(100, 1200);
    let got = write_then_kill(nodes, &format!("{prefix}{round}-"), clients, ms);
    let unsynced = fs.unsynced_changes();
    let names = fs.unsynced_names();
    if round % 2 == 1 {
        fs.power_cut_keeping_some(rng.next());
    } else {
        fs.power_cut();
    }
    eprintln!(
        "round {round}: cut {ms} ms into the writes, {} acknowledged, {unsynced} unsynced \
         changes of which {} kept, {} names undone {names:?}",
        got.len(),
        fs.stats().changes_kept,
        names.len()
    );
    got
}

#[test]
fn a_power_cut_loses_no_acknowledged_write() {
    let mut rng = seeded("one member");
    let dir = tempfile::tempdir().expect("temp dir");
    // Snapshots every 1000 entries: .snap files are made and purged, and the WAL gets
    // snapshot markers, between the cuts.
    let (mut fs, mut nodes) = setup(dir.path(), 1, &["--snapshot-count=1000"]);
    start_all(&mut nodes);
    let mut acked = Vec::new();
    for round in 0..ROUNDS {
        acked.extend(write_and_cut(&mut fs, &mut nodes, &mut rng, "p", 4, round));
        start_all(&mut nodes);
        assert_none_missing(&nodes, "p", &acked, round);
    }
    let snaps = std::fs::read_dir(dir.path().join("disk/m1/member/snap"))
        .expect("read the snap dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".snap"))
        })
        .count();
    assert!(
        snaps > 0,
        "no snapshot was made: the snap path went untested"
    );
    let s = fs.stats();
    eprintln!(
        "{} writes acknowledged across {ROUNDS} power cuts, {snaps} .snap files kept; the filesystem saw {} writes, {} fsyncs, {} directory fsyncs",
        acked.len(),
        s.writes,
        s.fsyncs,
        s.dir_fsyncs
    );
}

#[test]
fn a_power_cut_of_the_whole_cluster_loses_no_acknowledged_write() {
    let mut rng = seeded("three members");
    let dir = tempfile::tempdir().expect("temp dir");
    // One disk for all three: the whole data center goes dark at once.
    let (mut fs, mut nodes) = setup(dir.path(), 3, &[]);
    start_all(&mut nodes);
    let mut acked = Vec::new();
    for round in 0..CLUSTER_ROUNDS {
        acked.extend(write_and_cut(&mut fs, &mut nodes, &mut rng, "c", 6, round));
        start_all(&mut nodes);
        // Every member, not just a quorum: each acknowledged entry was fsynced by a majority,
        // and the others catch up from it.
        for m in &nodes {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !missing(m, "c", &acked).is_empty() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        assert_none_missing(&nodes, "c", &acked, round);
    }
    eprintln!(
        "{} writes acknowledged across {CLUSTER_ROUNDS} cluster-wide power cuts",
        acked.len()
    );
}

/// The harness must be able to fail: a member that skips the WAL's fdatasync
/// (--unsafe-no-fsync) loses acknowledged writes to a power cut. If it did not, the cut would
/// not be simulating one. The db is not committed during the burst (a batch interval of an
/// hour): our backend fsyncs its commits even with --unsafe-no-fsync, and a commit would keep
/// the writes before it; so every write of the burst lives only in the unsynced WAL.
#[test]
fn without_fsync_a_power_cut_loses_acknowledged_writes() {
    const UNSAFE: [&str; 3] = [
        "--unsafe-no-fsync",
        "--backend-batch-interval=1h",
        "--backend-batch-limit=1000000",
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut fs, mut nodes) = setup(dir.path(), 1, &[]);
    // Made with fsync, so the data dir itself survives every cut below.
    start_all(&mut nodes);
    let base = write_then_kill(&mut nodes, "base-", 2, 200);
    for round in 0..3 {
        nodes[0].extra = UNSAFE.iter().map(|s| s.to_string()).collect();
        start_all(&mut nodes);
        let got = write_then_kill(&mut nodes, &format!("u{round}-"), 4, 300);
        let undone = fs.unsynced_changes();
        fs.power_cut();
        nodes[0].extra.clear();
        start_all(&mut nodes);
        let lost = missing(&nodes[0], &format!("u{round}-"), &got);
        eprintln!(
            "round {round}: {} of {} acknowledged writes lost ({undone} unsynced changes undone)",
            lost.len(),
            got.len()
        );
        assert!(
            !lost.is_empty(),
            "round {round}: --unsafe-no-fsync lost none of {} writes to a power cut: the harness does not drop unsynced writes",
            got.len()
        );
        // What was written with fsync is still there.
        assert_none_missing(&nodes, "base-", &base, round);
        nodes[0].kill9();
    }
}

/// The filesystem alone: what a cut keeps and forgets, file by file.
#[test]
fn the_filesystem_forgets_exactly_what_was_not_synced() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut fs = PowerFs::mount(&dir.path().join("disk"), &dir.path().join("mnt"));
    let m = fs.mountpoint().to_path_buf();
    let sync_dir = |p: &Path| {
        std::fs::File::open(p)
            .and_then(|d| d.sync_all())
            .expect("fsync dir")
    };
    std::fs::create_dir(m.join("d")).expect("mkdir");
    sync_dir(&m);
    // Synced data and names survive; what came after does not.
    let mut f = std::fs::File::create(m.join("d/kept")).expect("create");
    f.write_all(b"synced").expect("write");
    f.sync_data().expect("fdatasync");
    sync_dir(&m.join("d"));
    f.write_all(b" and not").expect("write");
    std::os::unix::fs::FileExt::write_all_at(&f, b"S", 0).expect("overwrite");
    f.set_len(100).expect("grow");
    drop(f);
    let mut g = std::fs::File::create(m.join("d/gone")).expect("create");
    g.write_all(b"x").expect("write");
    g.sync_all().expect("fsync");
    drop(g);
    sync_dir(&m.join("d"));
    // Its own fsync does not make a new name durable.
    std::fs::write(m.join("d/new"), b"never named durably").expect("create");
    std::fs::File::open(m.join("d/new"))
        .and_then(|f| f.sync_all())
        .expect("fsync");
    std::fs::remove_file(m.join("d/gone")).expect("unlink");
    std::fs::rename(m.join("d/kept"), m.join("d/moved")).expect("rename");
    // A truncation that is synced is kept.
    std::fs::write(m.join("short"), b"0123456789").expect("create");
    sync_dir(&m);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.join("short"))
        .expect("open");
    f.set_len(4).expect("truncate");
    f.sync_all().expect("fsync");
    drop(f);

    fs.power_cut();
    assert_eq!(std::fs::read(m.join("d/kept")).expect("kept"), b"synced");
    assert!(!m.join("d/moved").exists(), "an unsynced rename was kept");
    assert!(
        !m.join("d/new").exists(),
        "a name never synced in its dir was kept"
    );
    assert_eq!(
        std::fs::read(m.join("d/gone")).expect("gone comes back"),
        b"x"
    );
    assert_eq!(std::fs::read(m.join("short")).expect("short"), b"0123");
    // And it goes on working after the cut.
    std::fs::write(m.join("after"), b"ok").expect("write after the cut");
    assert_eq!(std::fs::read(m.join("after")).expect("read"), b"ok");

    // A cut that keeps some unsynced writes: each byte is its synced or its written value,
    // and over a few cuts each write is sometimes kept, sometimes not, later ones without
    // earlier ones too.
    sync_dir(&m);
    let mut seen = std::collections::HashSet::new();
    for seed in 1..=24u64 {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.join("after"))
            .expect("open");
        std::os::unix::fs::FileExt::write_all_at(&f, b"....", 0).expect("write");
        f.sync_all().expect("fsync");
        for (i, b) in b"abcd".iter().enumerate() {
            std::os::unix::fs::FileExt::write_all_at(&f, &[*b], i as u64).expect("write");
        }
        drop(f);
        fs.power_cut_keeping_some(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let got = std::fs::read(m.join("after")).expect("read");
        assert_eq!(got.len(), 4, "{got:?}");
        for (i, (&g, &w)) in got.iter().zip(b"abcd").enumerate() {
            assert!(g == b'.' || g == w, "byte {i} is {g} after a partial cut");
        }
        seen.insert(got);
    }
    assert!(
        seen.len() >= 4,
        "24 partial cuts kept too few combinations: {seen:?}"
    );
    assert!(
        seen.iter().any(|g| g[0] == b'.' && g[3] == b'd'),
        "no cut kept a later write without an earlier one: {seen:?}"
    );
}

/// --unsafe-no-fsync skips every fsync of a member's files, the db's included (etcd 3.5 hands
/// it to bbolt as NoSync): writes acknowledged meanwhile make no fsync reach the disk.
#[test]
fn unsafe_no_fsync_makes_no_file_fsync() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (fs, mut nodes) = setup(dir.path(), 1, &[]);
    // The data dir is made with fsync first, then the member runs without.
    start_all(&mut nodes);
    nodes[0].kill9();
    nodes[0].extra = vec!["--unsafe-no-fsync".to_string()];
    start_all(&mut nodes);
    let before = fs.stats();
    let w = Writer::start_many(vec![nodes[0].client_url.clone()], "n-", 4);
    while w.acked_count() < 300 {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Several backend commits (every 100 ms) land meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    let acked = w.finish();
    std::thread::sleep(Duration::from_millis(300));
    let after = fs.stats();
    eprintln!(
        "{} writes acknowledged; file fsyncs {} -> {}, writes {} -> {}",
        acked.len(),
        before.fsyncs,
        after.fsyncs,
        before.writes,
        after.writes
    );
    assert!(after.writes > before.writes, "the member wrote nothing");
    assert_eq!(
        after.fsyncs, before.fsyncs,
        "a member with --unsafe-no-fsync fsynced its files"
    );
    nodes[0].kill9();
}
