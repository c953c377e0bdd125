//! `-w table`: bordered tables for people, drawn with comfy-table in the shape etcd's tables
//! have (header centred, cells right-aligned); only list-like responses have a table.

use std::io::Write;

use comfy_table::{Cell, CellAlignment, ContentArrangement, Table};
use proto::etcdserverpb as pb;

use super::{
    EpHashKv, EpHealth, EpStatus, Printer, Rows, endpoint_hashkv_rows, endpoint_health_rows,
    endpoint_status_rows, member_list_rows,
};
use crate::error::Result;

pub struct TablePrinter;

/// Borders and the header rule only, no rule between rows: "+---+" lines as etcd draws them.
const ETCD_STYLE: &str = "||--+-++|    ++++++";

/// Centres a header in its column with the odd space on the right, where etcd's tables put
/// it (comfy-table's own centring puts it on the left).
fn centred(h: &str, width: usize) -> String {
    let len = h.chars().count();
    let gap = width.saturating_sub(len);
    let left = gap / 2;
    format!("{}{}{}", " ".repeat(left), h, " ".repeat(gap - left))
}

fn render(w: &mut dyn Write, rows: Rows) -> Result<()> {
    let widths: Vec<usize> = rows
        .header
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.rows
                .iter()
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
        .set_header(
            rows.header
                .iter()
                .zip(&widths)
                .map(|(h, wd)| Cell::new(centred(h, *wd)).set_alignment(CellAlignment::Left)),
        );
    for r in rows.rows {
        t.add_row(
            r.into_iter()
                .map(|c| Cell::new(c).set_alignment(CellAlignment::Right)),
        );
    }
    writeln!(w, "{t}")?;
    Ok(())
}

impl Printer for TablePrinter {
    fn name(&self) -> &'static str {
        "table"
    }

    fn member_list(&self, w: &mut dyn Write, r: &pb::MemberListResponse) -> Result<()> {
        render(w, member_list_rows(r))
    }

    fn endpoint_health(&self, w: &mut dyn Write, r: &[EpHealth]) -> Result<()> {
        render(w, endpoint_health_rows(r))
    }

    fn endpoint_status(&self, w: &mut dyn Write, r: &[EpStatus]) -> Result<()> {
        render(w, endpoint_status_rows(r))
    }

    fn endpoint_hashkv(&self, w: &mut dyn Write, r: &[EpHashKv]) -> Result<()> {
        render(w, endpoint_hashkv_rows(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact bytes etcd 3.4's `member list -w table` printed for a two-member cluster.
    #[test]
    fn member_table_is_drawn_as_etcd_draws_it() {
        let etcd = "\
+------------------+-----------+------+------------------------+------------------------+------------+
|        ID        |  STATUS   | NAME |       PEER ADDRS       |      CLIENT ADDRS      | IS LEARNER |
+------------------+-----------+------+------------------------+------------------------+------------+
| 87a955e2d793bc7d | unstarted |      | http://127.0.0.1:23999 |                        |      false |
| bdae9bbc11dd390d |   started |   n1 | http://127.0.0.1:23801 | http://127.0.0.1:23791 |      false |
+------------------+-----------+------+------------------------+------------------------+------------+
";
        let resp = pb::MemberListResponse {
            members: vec![
                pb::Member {
                    id: 0x87a955e2d793bc7d,
                    peer_ur_ls: vec!["http://127.0.0.1:23999".into()],
                    ..Default::default()
                },
                pb::Member {
                    id: 0xbdae9bbc11dd390d,
                    name: "n1".into(),
                    peer_ur_ls: vec!["http://127.0.0.1:23801".into()],
                    client_ur_ls: vec!["http://127.0.0.1:23791".into()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let mut out = Vec::new();
        assert!(TablePrinter.member_list(&mut out, &resp).is_ok());
        assert_eq!(String::from_utf8_lossy(&out), etcd);
    }
}
