// Page census of a bbolt-format db (ours or etcd's): file length against the high-water mark,
// free pages, freelist size, and per bucket its pages and how full they are.

use common::backend::Db;

const MIB: f64 = (1 << 20) as f64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        return Err("usage: bbolt_census <db>...".into());
    }
    for path in paths {
        let file_len = std::fs::metadata(&path)?.len();
        let db = Db::open_read_only(&path)?;
        let st = db.stats()?;
        let ps = st.page_size as u64;
        let tx = db.begin_read();
        println!("{path}");
        println!(
            "  file {:.2} MiB, high-water {} pages = {:.2} MiB, slack {:.2} MiB, txid {}",
            file_len as f64 / MIB,
            st.page_count,
            (st.page_count * ps) as f64 / MIB,
            file_len.saturating_sub(st.page_count * ps) as f64 / MIB,
            tx.txid(),
        );
        println!(
            "  free {} pages ({:.2} MiB), freelist {} pages, in use {:.2} MiB",
            st.free_pages,
            (st.free_pages * ps) as f64 / MIB,
            st.freelist_pages,
            (st.page_count - st.free_pages) as f64 * ps as f64 / MIB,
        );
        println!(
            "  {:<16} {:>8} {:>8} {:>7} {:>8} {:>9} {:>9} {:>6}",
            "bucket", "keys", "leaf", "branch", "overflow", "leaf fill", "br. fill", "depth"
        );
        for b in &st.buckets {
            let fill = |bytes: u64, pages: u64| {
                if pages == 0 {
                    "-".to_string()
                } else {
                    format!("{:.1}%", 100.0 * bytes as f64 / (pages * ps) as f64)
                }
            };
            println!(
                "  {:<16} {:>8} {:>8} {:>7} {:>8} {:>9} {:>9} {:>6}{}",
                String::from_utf8_lossy(&b.name),
                b.keys,
                b.leaf_pages,
                b.branch_pages,
                b.overflow_pages,
                fill(b.leaf_bytes, b.leaf_pages + b.overflow_pages),
                fill(b.branch_bytes, b.branch_pages),
                b.depth,
                if b.inline { " inline" } else { "" },
            );
        }
    }
    Ok(())
}
