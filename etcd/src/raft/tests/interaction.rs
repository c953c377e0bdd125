//! Transcript tests: each file in `raft/testdata/` is a scenario of commands with the exact
//! state they must produce. `RAFT_REWRITE=1` regenerates the expected output; commit such a
//! diff only after reading it and understanding why it changed.
//!
//! Format: lines starting with `#` are comments; `> command args` runs a command; the lines
//! after it, up to a blank line, are its expected output. Commands:
//!
//! - `nodes 1 2 3 [prevote=false] [checkquorum=false]` — a new cluster of voters
//! - `campaign 1`, `propose 1 data`, `read-index 1 ctx`, `transfer-leader 1 3` — act on a
//!   node, then deliver until the cluster is quiet
//! - `tick 1 10`, `tick-all 10` — advance logical time (settling after every tick)
//! - `isolate 3`, `recover` — cut a node off, restore every link
//! - `state` — one line per node; `applied 1` — what node 1 applied; `reads 1` — its reads

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::network::Network;

fn state(net: &Network) -> String {
    let mut out = String::new();
    for (id, n) in &net.nodes {
        let st = n.status();
        let _ = writeln!(
            out,
            "{id}: {:?} term={} vote={} lead={} commit={} applied={}",
            st.soft_state.raft_state,
            st.hard_state.term,
            st.hard_state.vote,
            st.soft_state.leader_id,
            st.hard_state.commit,
            st.applied
        );
    }
    out
}

fn id(arg: Option<&&str>) -> u64 {
    arg.and_then(|a| a.parse().ok()).expect("a node id")
}

fn run_command(net: &mut Option<Network>, line: &str) -> String {
    let args: Vec<&str> = line.split_whitespace().collect();
    let cmd = args[0];
    if cmd == "nodes" {
        let ids: Vec<u64> = args[1..].iter().filter_map(|a| a.parse().ok()).collect();
        let pre_vote = !args.contains(&"prevote=false");
        let check_quorum = !args.contains(&"checkquorum=false");
        let n = Network::with_config(&ids, |c| {
            c.pre_vote = pre_vote;
            c.check_quorum = check_quorum;
        });
        let out = state(&n);
        *net = Some(n);
        return out;
    }
    let net = net.as_mut().expect("`nodes` must come first");
    match cmd {
        "campaign" => {
            net.campaign(id(args.get(1)));
            state(net)
        }
        "propose" => {
            let r = net.propose(id(args.get(1)), args.get(2).unwrap_or(&"").as_bytes());
            match r {
                Ok(()) => state(net),
                Err(e) => format!("error: {e}\n"),
            }
        }
        "read-index" => {
            let node = id(args.get(1));
            let r = net
                .node(node)
                .read_index(args.get(2).unwrap_or(&"").as_bytes().to_vec());
            net.stabilize();
            match r {
                Ok(()) => "ok\n".to_string(),
                Err(e) => format!("error: {e}\n"),
            }
        }
        "transfer-leader" => {
            net.node(id(args.get(1))).transfer_leader(id(args.get(2)));
            net.stabilize();
            state(net)
        }
        "tick" => {
            let n = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1);
            net.tick(id(args.get(1)), n);
            state(net)
        }
        "tick-all" => {
            let n = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(1);
            net.tick_all(n);
            state(net)
        }
        "isolate" => {
            net.isolate(id(args.get(1)));
            "ok\n".to_string()
        }
        "recover" => {
            net.recover();
            "ok\n".to_string()
        }
        "state" => state(net),
        "applied" => {
            let data: Vec<String> = net
                .applied_data(id(args.get(1)))
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect();
            format!("{}\n", data.join(" "))
        }
        "reads" => {
            let node = id(args.get(1));
            let mut out = String::new();
            for rs in net.read_states.get(&node).into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "ctx={} index={}",
                    String::from_utf8_lossy(&rs.request_ctx),
                    rs.index
                );
            }
            if out.is_empty() {
                out.push_str("(none)\n");
            }
            out
        }
        other => panic!("unknown command {other:?}"),
    }
}

/// Runs one transcript and returns it with the actual outputs in place of the expected ones.
fn run_file(text: &str) -> String {
    let mut net = None;
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(cmd) = line.strip_prefix("> ") {
            out.push_str(line);
            out.push('\n');
            // Skip the recorded output: it is replaced by what the command prints now.
            while lines.peek().is_some_and(|l| !l.is_empty()) {
                lines.next();
            }
            out.push_str(&run_command(&mut net, cmd));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/raft/testdata")
}

#[test]
fn transcripts() {
    let rewrite = std::env::var("RAFT_REWRITE").is_ok();
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let got = run_file(&text);
        if rewrite {
            std::fs::write(&path, &got).unwrap();
        } else {
            assert_eq!(
                got,
                text,
                "{} differs (RAFT_REWRITE=1 regenerates it)",
                path.display()
            );
        }
    }
}
