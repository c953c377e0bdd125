//! Help and usage text as etcd's etcdctl prints it (NAME, USAGE, COMMANDS, DESCRIPTION,
//! OPTIONS, GLOBAL OPTIONS; pflag's flag forms; Go's tab-aligned columns), from the clap tree.

use std::time::Duration;

use clap::{Arg, ArgAction, Command};

use crate::commands::version::{API_VERSION, ETCDCTL_VERSION};

/// The command at `path` below `root` (names of subcommands, in order).
pub fn find<'a>(root: &'a Command, path: &[String]) -> Option<&'a Command> {
    let mut cmd = root;
    for name in path {
        cmd = subcommand(cmd, name)?;
    }
    Some(cmd)
}

/// The full names of the commands `path` names (prefixes resolved), if it names one.
pub fn resolve(root: &Command, path: &[String]) -> Option<Vec<String>> {
    let mut cmd = root;
    let mut names = Vec::new();
    for word in path {
        cmd = subcommand(cmd, word)?;
        names.push(cmd.get_name().to_string());
    }
    Some(names)
}

/// The subcommand of `cmd` that `word` names, as cobra finds it with prefix matching on (etcdctl
/// turns it on): a name or alias equal to the word, else the one command whose name or alias
/// starts with it. An ambiguous prefix names nothing.
pub fn subcommand<'a>(cmd: &'a Command, word: &str) -> Option<&'a Command> {
    if let Some(c) = cmd.find_subcommand(word) {
        return Some(c);
    }
    if word.is_empty() {
        return None;
    }
    let mut matches = cmd.get_subcommands().filter(|c| {
        c.get_name().starts_with(word) || c.get_all_aliases().any(|a| a.starts_with(word))
    });
    let first = matches.next()?;
    matches.next().is_none().then_some(first)
}

/// The full help page of the command at `path`. `help_flag` is false only for the page
/// `etcdctl help <unknown topic>` prints, which etcd prints without the -h line.
pub fn render(root: &Command, path: &[String], help_flag: bool) -> String {
    let Some(cmd) = find(root, path) else {
        return String::new();
    };
    let is_root = path.is_empty();
    let mut t = String::new();
    let name = if is_root {
        root.get_name().to_string()
    } else {
        path.join(" ")
    };
    t.push_str(&format!("NAME:\n\t{name} - {}\n\n", about(cmd)));
    t.push_str(&format!("USAGE:\n\t{}\n\n", use_line(root, path, cmd)));
    if is_root {
        t.push_str(&format!("VERSION:\n\t{ETCDCTL_VERSION}\n\n"));
    }
    if cmd.has_subcommands() {
        t.push_str(&format!("API VERSION:\n\t{API_VERSION}\n\n\nCOMMANDS:\n"));
        let mut rows = Vec::new();
        listed(cmd, "", &mut rows);
        for (n, short) in rows {
            t.push_str(&format!("\t{n}\t{short}\n"));
        }
        t.push('\n');
    }
    if let Some(long) = cmd.get_long_about() {
        t.push_str("DESCRIPTION:\n");
        for line in long.to_string().lines() {
            t.push_str(&format!("\t{line}\n"));
        }
        t.push('\n');
    }
    let help_name = if is_root {
        root.get_name()
    } else {
        cmd.get_name()
    };
    let mut local: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some() && !a.is_hide_set())
        .filter(|a| is_root || !a.is_global_set())
        .collect();
    let mut inherited: Vec<&Arg> = Vec::new();
    if !is_root {
        let mut at = root;
        inherited.extend(
            at.get_arguments()
                .filter(|a| a.is_global_set() && !a.is_hide_set()),
        );
        for p in &path[..path.len() - 1] {
            if let Some(next) = at.find_subcommand(p) {
                at = next;
                inherited.extend(
                    at.get_arguments()
                        .filter(|a| a.is_global_set() && !a.is_hide_set()),
                );
            }
        }
        // A group's own global flags are listed among its options, as etcd lists them.
        local.extend(
            cmd.get_arguments()
                .filter(|a| a.is_global_set() && !a.is_hide_set()),
        );
        local.dedup_by(|a, b| a.get_id() == b.get_id());
    }
    let mut opts: Vec<(String, String)> = local.iter().map(|a| flag_row(a)).collect();
    if help_flag {
        opts.push((
            "  -h, --help[=false]".to_string(),
            format!("help for {help_name}"),
        ));
    }
    t.push_str("OPTIONS:\n");
    t.push_str(&rows_text(opts));
    t.push('\n');
    if !is_root {
        t.push_str("GLOBAL OPTIONS:\n");
        t.push_str(&rows_text(inherited.iter().map(|a| flag_row(a)).collect()));
        t.push('\n');
    }
    tabwrite(&t)
}

fn about(cmd: &Command) -> String {
    cmd.get_about().map(|s| s.to_string()).unwrap_or_default()
}

/// "etcdctl get [options] <key> [range_end] [flags]": the arguments part is the command's
/// overridden usage; groups take "<subcommand>" unless they say otherwise.
fn use_line(root: &Command, path: &[String], cmd: &Command) -> String {
    let mut s = root.get_name().to_string();
    for p in path {
        s.push(' ');
        s.push_str(p);
    }
    let args = cmd.get_overridden_usage().map(|u| u.to_string());
    match args.as_deref() {
        // A trailing '!' marks a usage line etcd prints without " [flags]".
        Some(a) if a.ends_with('!') => {
            let a = &a[..a.len() - 1];
            if !a.is_empty() {
                s.push(' ');
                s.push_str(a);
            }
            return s;
        }
        Some(a) if !a.is_empty() => {
            s.push(' ');
            s.push_str(a);
        }
        Some(_) => {}
        None if cmd.has_subcommands() && !path.is_empty() => s.push_str(" <subcommand>"),
        None => {}
    }
    s.push_str(" [flags]");
    s
}

/// The runnable commands under `cmd`, groups expanded, sorted by name at each level.
fn listed(cmd: &Command, prefix: &str, rows: &mut Vec<(String, String)>) {
    let mut subs: Vec<&Command> = cmd.get_subcommands().filter(|c| !c.is_hide_set()).collect();
    subs.sort_by(|a, b| a.get_name().cmp(b.get_name()));
    for s in subs {
        let name = format!("{prefix}{}", s.get_name());
        if s.has_subcommands() {
            listed(s, &format!("{name} "), rows);
        } else {
            rows.push((name, about(s)));
        }
    }
}

/// Flag rows sorted by long name, as pflag sorts them.
fn rows_text(mut rows: Vec<(String, String)>) -> String {
    rows.sort_by(|a, b| long_of(&a.0).cmp(long_of(&b.0)));
    rows.iter().map(|(f, h)| format!("{f}\t{h}\n")).collect()
}

fn long_of(row: &str) -> &str {
    let after = row.split("--").nth(1).unwrap_or(row);
    after.split(['=', '[']).next().unwrap_or(after)
}

/// The Go type a flag has, as far as its printed default goes.
#[derive(Debug, PartialEq)]
enum GoType {
    Bool,
    Int,
    Duration,
    String,
    Strings,
}

fn go_type(a: &Arg) -> GoType {
    let t = a.get_value_parser().type_id();
    if matches!(a.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
        || t == std::any::TypeId::of::<bool>()
    {
        GoType::Bool
    } else if t == std::any::TypeId::of::<Duration>() {
        GoType::Duration
    } else if [
        std::any::TypeId::of::<i64>(),
        std::any::TypeId::of::<u64>(),
        std::any::TypeId::of::<i32>(),
        std::any::TypeId::of::<u32>(),
        std::any::TypeId::of::<usize>(),
        std::any::TypeId::of::<isize>(),
    ]
    .iter()
    .any(|id| t == *id)
    {
        GoType::Int
    } else if matches!(a.get_action(), ArgAction::Append) {
        GoType::Strings
    } else {
        GoType::String
    }
}

/// "  -w, --write-out" / "      --limit": a flag's names as pflag lists them.
fn flag_names(a: &Arg) -> String {
    let long = a.get_long().unwrap_or_default();
    match a.get_short() {
        Some(c) => format!("  -{c}, --{long}"),
        None => format!("      --{long}"),
    }
}

/// "      --limit=0" / "  -w, --write-out=\"simple\"" / "      --prefix[=false]" and its help.
fn flag_row(a: &Arg) -> (String, String) {
    let mut s = flag_names(a);
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let first = defaults.first().cloned();
    match go_type(a) {
        GoType::Bool => s.push_str(&format!("[={}]", first.as_deref().unwrap_or("false"))),
        GoType::Int => s.push_str(&format!("={}", first.as_deref().unwrap_or("0"))),
        GoType::Duration => s.push_str(&format!("={}", first.as_deref().unwrap_or("0s"))),
        GoType::String => s.push_str(&format!("=\"{}\"", first.as_deref().unwrap_or(""))),
        GoType::Strings => s.push_str(&format!("=[{}]", defaults.join(","))),
    }
    let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
    (s, help)
}

/// The usage block cobra's default template prints for a command built on its own (as etcd's
/// txn builds one per request line to parse its flags): the use line, then pflag's flag list
/// with the added -h row, sorted by name, help text aligned three spaces past the longest.
pub fn cobra_usage(cmd: &Command) -> String {
    let name = cmd.get_name();
    let args = cmd
        .get_overridden_usage()
        .map(|u| format!(" {u}"))
        .unwrap_or_default();
    let mut rows: Vec<(String, String, String)> = cmd
        .get_arguments()
        .filter(|a| a.get_long().is_some() && !a.is_hide_set())
        .map(|a| {
            let long = a.get_long().unwrap_or_default().to_string();
            let flag = flag_names(a);
            let default = a
                .get_default_values()
                .first()
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (type_name, default) = match go_type(a) {
                GoType::Bool => ("", (default == "true").then(|| default.clone())),
                GoType::Int => (
                    "int",
                    (!default.is_empty() && default != "0").then(|| default.clone()),
                ),
                GoType::Duration => (
                    "duration",
                    (!default.is_empty() && default != "0s").then(|| default.clone()),
                ),
                GoType::String => (
                    "string",
                    (!default.is_empty()).then(|| format!("{default:?}")),
                ),
                GoType::Strings => ("strings", None),
            };
            let flag = if type_name.is_empty() {
                flag
            } else {
                format!("{flag} {type_name}")
            };
            let mut help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            if let Some(d) = default {
                help.push_str(&format!(" (default {d})"));
            }
            (long, flag, help)
        })
        .collect();
    rows.push((
        "help".into(),
        "  -h, --help".into(),
        format!("help for {name}"),
    ));
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0) + 3;
    let mut out = format!("Usage:\n   {name}{args} [flags]\n\nFlags:\n");
    for (_, flag, help) in rows {
        out.push_str(&format!("{flag:width$}{help}\n"));
    }
    out.push('\n');
    out
}

/// Go's text/tabwriter with minwidth 0, tab width 8, padding 1 and tabs as padding: the
/// tab-terminated cells of consecutive lines form columns padded to a common tab stop.
pub fn tabwrite(text: &str) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    // widths[i][c]: the padded width of line i's terminated cell c.
    let mut widths: Vec<Vec<usize>> = lines.iter().map(|cells| vec![0; cells.len() - 1]).collect();
    let mut col = 0;
    loop {
        let mut any = false;
        let mut i = 0;
        while i < lines.len() {
            if lines[i].len() - 1 <= col {
                i += 1;
                continue;
            }
            any = true;
            let start = i;
            let mut max = 0;
            while i < lines.len() && lines[i].len() - 1 > col {
                max = max.max(lines[i][col].chars().count());
                i += 1;
            }
            let width = (max + 1).div_ceil(8) * 8;
            for w in &mut widths[start..i] {
                w[col] = width;
            }
        }
        if !any {
            break;
        }
        col += 1;
    }
    let mut out = String::with_capacity(text.len() + 64);
    for (i, cells) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let last = cells.len() - 1;
        for (c, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if c < last {
                let pad = widths[i][c] - cell.chars().count();
                out.extend(std::iter::repeat_n('\t', pad.div_ceil(8)));
            }
        }
    }
    out
}

/// The root commands in the order etcdctl 3.4 adds them to cobra (then cobra's completion).
const GO_ORDER: &[&str] = &[
    "get",
    "put",
    "del",
    "txn",
    "compaction",
    "alarm",
    "defrag",
    "endpoint",
    "move-leader",
    "watch",
    "version",
    "lease",
    "member",
    "snapshot",
    "make-mirror",
    "migrate",
    "lock",
    "elect",
    "auth",
    "user",
    "role",
    "check",
    "completion",
];

/// Commands within edit distance 2 of `typed`, or starting with it, as cobra suggests them.
pub fn suggestions(root: &Command, typed: &str) -> Vec<String> {
    let typed_l = typed.to_lowercase();
    // cobra lists them in the order etcdctl added them (sorting is off), help excluded.
    let rank = |n: &str| {
        GO_ORDER
            .iter()
            .position(|g| *g == n)
            .unwrap_or(GO_ORDER.len())
    };
    let mut names: Vec<&str> = root
        .get_subcommands()
        .filter(|c| !c.is_hide_set() && c.get_name() != "help")
        .map(|c| c.get_name())
        .collect();
    names.sort_by_key(|n| (rank(n), n.to_string()));
    names
        .into_iter()
        .filter(|n| {
            levenshtein(&typed_l, &n.to_lowercase()) <= 2 || n.to_lowercase().starts_with(&typed_l)
        })
        .map(str::to_string)
        .collect()
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_pad_to_a_common_tab_stop() {
        let t = "NAME:\n\tget - x\n\nOPTIONS:\n  --a\thelp a\n      --insecure-skip-tls-verify[=false]\tb\n\n";
        let out = tabwrite(t);
        assert_eq!(
            out,
            "NAME:\n\tget - x\n\nOPTIONS:\n  --a\t\t\t\t\t\thelp a\n      --insecure-skip-tls-verify[=false]\tb\n\n"
        );
        // Three cells: the empty first column takes one tab.
        assert_eq!(
            tabwrite("\tgrant\tCreates\n\tkeep-alive\tKeeps\n"),
            "\tgrant\t\tCreates\n\tkeep-alive\tKeeps\n"
        );
    }

    #[test]
    fn suggests_as_cobra_does() {
        let root = Command::new("etcdctl")
            .subcommand(Command::new("alarm"))
            .subcommand(Command::new("auth"))
            .subcommand(Command::new("get"))
            .subcommand(Command::new("del"));
        assert_eq!(suggestions(&root, "a"), vec!["alarm", "auth"]);
        assert_eq!(suggestions(&root, "gett"), vec!["get"]);
        assert!(suggestions(&root, "zzzzzz").is_empty());
    }
}
