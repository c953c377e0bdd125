// `etcdutl defrag`: offline compaction of a stopped member's db (a compact copy renamed over
// the old file), reporting the size before and after.

use common::backend::{Db, DefragStep};

use crate::datadir::DataDir;
use crate::error::{Error, Result};

/// The db's size before and after.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Defragged {
    pub before: u64,
    pub after: u64,
}

pub fn defrag(dir: &DataDir) -> Result<Defragged> {
    dir.ensure_not_running()?;
    let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let before = size(&dir.db);
    let bar = crate::progress::spinner("defragmenting");
    let db = Db::open(&dir.db)
        .map_err(|e| Error::failed(format!("cannot open the db {}: {e}", dir.db.display())))?;
    db.defrag_with(&mut |step| {
        if let (Some(b), DefragStep::Copying { keys }) = (&bar, step) {
            b.set_message(format!("defragmenting: {keys} keys copied"));
        }
    })?;
    drop(db);
    crate::progress::finish(bar);
    Ok(Defragged {
        before,
        after: size(&dir.db),
    })
}
