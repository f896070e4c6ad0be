//! A profile as a top-down tree (a flame graph as text), for the terminal UI's Profile view:
//! processes at the top, then (off-CPU) the blocked state, then the frames from the root.
//! Each node has its total (its subtree's samples or nanoseconds) and its self part (stacks
//! that end there). Pure data: built from a [`Profile`], no screen.

use std::collections::{HashMap, HashSet};

use super::{kind_name, Profile};

/// What the tree shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeOptions {
    /// Off-CPU time (nanoseconds) instead of on-CPU samples.
    pub off_cpu: bool,
    /// One process only.
    pub pid: Option<u32>,
    /// One thread only (stacks kept per thread: `--profile-threads`).
    pub tid: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    /// Samples (on-CPU) or nanoseconds (off-CPU) of the subtree, and of stacks ending here.
    pub total: u64,
    pub self_value: u64,
    pub children: Vec<usize>,
    pub parent: Option<usize>,
    pub depth: usize,
}

/// The tree: node 0 is the root (all processes).
#[derive(Clone, Debug)]
pub struct Tree {
    pub nodes: Vec<Node>,
}

/// A row of the tree as shown: a node, with whether it is open.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub node: usize,
    pub depth: usize,
    pub name: String,
    pub total: u64,
    pub self_value: u64,
    pub has_children: bool,
    pub expanded: bool,
    /// The name holds the search text.
    pub matched: bool,
}

impl Tree {
    pub fn build(p: &Profile, opts: &TreeOptions) -> Tree {
        let mut t = Tree {
            nodes: vec![Node {
                name: "all".to_owned(),
                total: 0,
                self_value: 0,
                children: Vec::new(),
                parent: None,
                depth: 0,
            }],
        };
        // Per node, its children by name (a wide node costs no scan per stack).
        let mut index: Vec<HashMap<String, usize>> = vec![HashMap::new()];
        let mut proc_names: HashMap<u32, String> = HashMap::new();
        // Sorted input: the same profile always builds the same tree.
        let mut stacks: Vec<_> = p
            .stacks
            .iter()
            .filter(|(k, _)| k.kind.is_on_cpu() != opts.off_cpu)
            .filter(|(k, _)| opts.pid.is_none_or(|pid| k.tgid == pid))
            .filter(|(k, _)| opts.tid.is_none_or(|tid| k.tid == Some(tid)))
            .collect();
        stacks.sort_by(|a, b| {
            (a.0.tgid, a.0.tid, a.0.kind, &a.0.frames[..]).cmp(&(
                b.0.tgid,
                b.0.tid,
                b.0.kind,
                &b.0.frames[..],
            ))
        });
        for (k, tally) in stacks {
            let v = if opts.off_cpu { tally.ns } else { tally.count };
            if v == 0 {
                continue;
            }
            let pname = proc_names.entry(k.tgid).or_insert_with(|| {
                let comm = p.processes.get(&k.tgid).map_or("?", |pr| pr.comm.as_str());
                format!("{comm}-{}", k.tgid)
            });
            let mut at = t.child(0, pname.clone(), &mut index);
            let mut path = vec![0, at];
            if opts.off_cpu {
                at = t.child(at, format!("[{}]", kind_name(k.kind)), &mut index);
                path.push(at);
            }
            for f in k.frames.iter() {
                at = t.child(at, f.to_string(), &mut index);
                path.push(at);
            }
            for n in path {
                t.nodes[n].total += v;
            }
            t.nodes[at].self_value += v;
        }
        // Heaviest first among siblings (then by name, for a stable order).
        let order: Vec<Vec<usize>> = t
            .nodes
            .iter()
            .map(|n| {
                let mut c = n.children.clone();
                c.sort_by(|a, b| {
                    t.nodes[*b]
                        .total
                        .cmp(&t.nodes[*a].total)
                        .then_with(|| t.nodes[*a].name.cmp(&t.nodes[*b].name))
                });
                c
            })
            .collect();
        for (n, c) in t.nodes.iter_mut().zip(order) {
            n.children = c;
        }
        t
    }

    /// The child of `parent` named `name` (made if new).
    fn child(
        &mut self,
        parent: usize,
        name: String,
        index: &mut Vec<HashMap<String, usize>>,
    ) -> usize {
        if let Some(c) = index[parent].get(&name) {
            return *c;
        }
        let id = self.nodes.len();
        index[parent].insert(name.clone(), id);
        index.push(HashMap::new());
        let depth = self.nodes[parent].depth + 1;
        self.nodes.push(Node {
            name,
            total: 0,
            self_value: 0,
            children: Vec::new(),
            parent: Some(parent),
            depth,
        });
        self.nodes[parent].children.push(id);
        id
    }

    pub fn root_total(&self) -> u64 {
        self.nodes[0].total
    }

    /// A node's path from the root (names joined by `;`): what stays expanded as the tree is
    /// built again from newer data.
    pub fn path(&self, mut n: usize) -> String {
        let mut names = Vec::new();
        while let Some(p) = self.nodes[n].parent {
            names.push(self.nodes[n].name.as_str());
            n = p;
        }
        names.reverse();
        names.join(";")
    }

    /// The paths of the heaviest chain from the root: each node's heaviest child, down to a
    /// node whose heaviest child holds under half of it (where the profile branches).
    pub fn hottest_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = 0;
        while let Some(&c) = self.nodes[at].children.first() {
            out.push(self.path(c));
            if self.nodes[c].total * 2 < self.nodes[at].total && at != 0 {
                break;
            }
            at = c;
        }
        // The chain's last node is shown, not opened.
        out.pop();
        out
    }

    /// The rows shown: the children of expanded nodes (by path), depth first. With a search,
    /// the nodes on a path to a match are shown open whatever `expanded` says, and only those.
    pub fn rows(&self, expanded: &HashSet<String>, search: &str) -> Vec<Row> {
        let needle = search.to_lowercase();
        let on_match_path: Option<Vec<bool>> = (!needle.is_empty()).then(|| {
            let mut keep = vec![false; self.nodes.len()];
            for (i, n) in self.nodes.iter().enumerate() {
                if n.name.to_lowercase().contains(&needle) {
                    let mut at = Some(i);
                    while let Some(a) = at {
                        if keep[a] {
                            break;
                        }
                        keep[a] = true;
                        at = self.nodes[a].parent;
                    }
                }
            }
            keep
        });
        let mut out = Vec::new();
        let mut stack: Vec<usize> = self.nodes[0].children.iter().rev().copied().collect();
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if on_match_path.as_ref().is_some_and(|k| !k[n]) {
                continue;
            }
            let matched = !needle.is_empty() && node.name.to_lowercase().contains(&needle);
            let open = match &on_match_path {
                Some(k) => node.children.iter().any(|c| k[*c]),
                None => expanded.contains(&self.path(n)),
            };
            out.push(Row {
                node: n,
                depth: node.depth - 1,
                name: node.name.clone(),
                total: node.total,
                self_value: node.self_value,
                has_children: !node.children.is_empty(),
                expanded: open && !node.children.is_empty(),
                matched,
            });
            if open {
                stack.extend(node.children.iter().rev().copied());
            }
        }
        out
    }

    /// The value of the stacks that pass through a node whose name holds `search` (each
    /// stack counted once, at its first match from the root).
    pub fn matched_total(&self, search: &str) -> u64 {
        let needle = search.to_lowercase();
        if needle.is_empty() {
            return 0;
        }
        let mut sum = 0;
        let mut stack = vec![0usize];
        while let Some(n) = stack.pop() {
            let node = &self.nodes[n];
            if n != 0 && node.name.to_lowercase().contains(&needle) {
                sum += node.total;
                continue;
            }
            stack.extend(node.children.iter().copied());
        }
        sum
    }
}

/// `part` of `whole` in percent, one decimal.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        (part as f64 * 1000.0 / whole as f64).round() / 10.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Frame, Kind, StackKey, Tally};

    fn profile() -> Profile {
        let mut p = Profile::default();
        let mut add = |tgid, kind, f: &[&str], count, ns| {
            p.add(
                StackKey {
                    tgid,
                    tid: None,
                    kind,
                    frames: f.iter().map(|s| Frame::from(*s)).collect(),
                },
                if tgid == 7 { "burn" } else { "idle" },
                Tally { count, ns },
            )
        };
        add(7, Kind::OnCpu, &["_start", "main", "hot"], 60, 0);
        add(7, Kind::OnCpu, &["_start", "main", "warm", "hot"], 20, 0);
        add(7, Kind::OnCpu, &["_start", "main"], 10, 0);
        add(8, Kind::OnCpu, &["main", "spin"], 10, 0);
        add(7, Kind::Interruptible, &["main", "nanosleep"], 5, 100);
        add(7, Kind::Uninterruptible, &["main", "read"], 1, 300);
        p
    }

    #[test]
    fn totals_and_self_add_up_top_down() {
        let t = Tree::build(&profile(), &TreeOptions::default());
        assert_eq!(t.root_total(), 100);
        let all: HashSet<String> = (1..t.nodes.len()).map(|n| t.path(n)).collect();
        let rows = t.rows(&all, "");
        let names: Vec<(usize, &str, u64, u64)> = rows
            .iter()
            .map(|r| (r.depth, r.name.as_str(), r.total, r.self_value))
            .collect();
        assert_eq!(
            names,
            vec![
                (0, "burn-7", 90, 0),
                (1, "_start", 90, 0),
                (2, "main", 90, 10),
                (3, "hot", 60, 60),
                (3, "warm", 20, 0),
                (4, "hot", 20, 20),
                (0, "idle-8", 10, 0),
                (1, "main", 10, 0),
                (2, "spin", 10, 10),
            ]
        );
        assert_eq!(percent(60, 100), 60.0);
        assert_eq!(
            t.matched_total("HOT"),
            80,
            "both paths through hot, each once"
        );
    }

    #[test]
    fn collapsed_nodes_hide_their_children_and_the_hottest_path_opens() {
        let t = Tree::build(&profile(), &TreeOptions::default());
        let rows = t.rows(&HashSet::new(), "");
        assert_eq!(rows.len(), 2, "processes only");
        assert!(rows.iter().all(|r| r.has_children && !r.expanded));
        let hot: HashSet<String> = t.hottest_paths().into_iter().collect();
        assert_eq!(
            hot,
            ["burn-7", "burn-7;_start", "burn-7;_start;main"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        );
        let rows = t.rows(&hot, "");
        assert_eq!(
            rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["burn-7", "_start", "main", "hot", "warm", "idle-8"]
        );
    }

    #[test]
    fn a_search_opens_the_paths_to_its_matches_only() {
        let t = Tree::build(&profile(), &TreeOptions::default());
        let rows = t.rows(&HashSet::new(), "spin");
        assert_eq!(
            rows.iter()
                .map(|r| (r.name.as_str(), r.matched))
                .collect::<Vec<_>>(),
            [("idle-8", false), ("main", false), ("spin", true)]
        );
    }

    #[test]
    fn off_cpu_shows_time_under_the_blocked_state_and_a_process_filter_narrows() {
        let opts = TreeOptions {
            off_cpu: true,
            pid: Some(7),
            tid: None,
        };
        let t = Tree::build(&profile(), &opts);
        assert_eq!(t.root_total(), 400);
        let all: HashSet<String> = (1..t.nodes.len()).map(|n| t.path(n)).collect();
        let rows = t.rows(&all, "");
        assert_eq!(rows[0].name, "burn-7");
        assert_eq!(
            (rows[1].name.as_str(), rows[1].total),
            ("[uninterruptible]", 300)
        );
        assert_eq!(rows.last().unwrap().name, "nanosleep");
        let t = Tree::build(
            &profile(),
            &TreeOptions {
                off_cpu: false,
                pid: Some(8),
                tid: None,
            },
        );
        assert_eq!(t.root_total(), 10);
    }

    /// Stacks kept per thread: a thread filter keeps that thread's; no filter adds them up
    /// under the process as before.
    #[test]
    fn a_thread_filter_narrows_to_its_stacks() {
        let mut p = Profile::default();
        for (tid, f, count) in [(7, "accept", 5), (9, "work", 30), (10, "work", 20)] {
            p.add(
                StackKey {
                    tgid: 7,
                    tid: Some(tid),
                    kind: Kind::OnCpu,
                    frames: ["main", f].iter().map(|s| Frame::from(*s)).collect(),
                },
                "srv",
                Tally { count, ns: 0 },
            );
        }
        let opts = |tid| TreeOptions {
            off_cpu: false,
            pid: Some(7),
            tid,
        };
        assert_eq!(Tree::build(&p, &opts(None)).root_total(), 55);
        let t = Tree::build(&p, &opts(Some(9)));
        assert_eq!(t.root_total(), 30);
        let all: HashSet<String> = (1..t.nodes.len()).map(|n| t.path(n)).collect();
        let names: Vec<String> = t.rows(&all, "").into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["srv-7", "main", "work"]);
        // The whole profile, unfiltered: one "work" node of both threads.
        let t = Tree::build(&p, &TreeOptions::default());
        let all: HashSet<String> = (1..t.nodes.len()).map(|n| t.path(n)).collect();
        let work = t.rows(&all, "").into_iter().find(|r| r.name == "work");
        assert_eq!(work.map(|r| r.total), Some(50));
        assert_eq!(Tree::build(&p, &opts(Some(11))).root_total(), 0);
    }
}
