// Result printing shared by etcdutl's commands: etcd's `-w simple|json|table|fields` formats,
// tables drawn with comfy-table in the shape etcd's tables have.

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table};

use crate::error::{Error, Result};

/// The output formats etcdutl accepts (etcd's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Simple,
    Json,
    Table,
    Fields,
}

impl Format {
    /// Parses -w as etcd's tools do; protobuf has no meaning offline.
    pub fn parse(s: &str) -> Result<Format> {
        match s {
            "simple" => Ok(Format::Simple),
            "json" => Ok(Format::Json),
            "table" => Ok(Format::Table),
            "fields" => Ok(Format::Fields),
            "protobuf" => Err(Error::BadArgs(
                "protobuf not supported as output format".into(),
            )),
            _ => Err(Error::BadArgs("unsupported output format".into())),
        }
    }
}

/// Borders and the header rule only: "+---+" lines as etcd draws them.
const ETCD_STYLE: &str = "||--+-++|    ++++++";

/// A table as etcd draws it: upper-case headers centred (odd space right), cells right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain(std::iter::once(h.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut t = Table::new();
    t.load_preset(ETCD_STYLE)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().zip(&widths).map(|(h, w)| {
            let gap = w.saturating_sub(h.chars().count());
            let left = gap / 2;
            Cell::new(format!(
                "{}{}{}",
                " ".repeat(left),
                h,
                " ".repeat(gap - left)
            ))
            .set_alignment(CellAlignment::Left)
        }));
    for r in rows {
        t.add_row(
            r.iter()
                .map(|c| Cell::new(c).set_alignment(CellAlignment::Right)),
        );
    }
    format!("{t}\n")
}
