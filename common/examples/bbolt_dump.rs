// Prints every bucket, key and value of a bbolt-format db: a debugging aid for the backend
// (`cargo run -p common --example bbolt_dump -- path/to/db`).

use common::backend::{Db, ReadTxn};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: bbolt_dump <db>")?;
    let db = Db::open_read_only(&path)?;
    let tx = db.begin_read();
    for b in tx.bucket_names()? {
        println!("bucket {}", String::from_utf8_lossy(&b));
        tx.for_each(&b, &mut |k, v| {
            println!("  {:?} = {} bytes", String::from_utf8_lossy(k), v.len());
            Ok(())
        })?;
    }
    db.check()?;
    let st = db.stats()?;
    println!(
        "pages {} free {} root depth {}",
        st.page_count, st.free_pages, st.root_depth
    );
    for b in st.buckets {
        println!(
            "  {} keys {} depth {} leaf {} branch {} inline {}",
            String::from_utf8_lossy(&b.name),
            b.keys,
            b.depth,
            b.leaf_pages,
            b.branch_pages,
            b.inline
        );
    }
    Ok(())
}
