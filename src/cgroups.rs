//! cgroup v2 paths for `--cgroup` and `--container`: where the hierarchy is mounted, a path's
//! id and depth (what the kernel compares), and the cgroup of a container by its id.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

/// A cgroup the kernel filter selects: the cgroup and everything beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFilter {
    /// Its path below the cgroup v2 root, as /proc/PID/cgroup writes it (`/system.slice/x`).
    pub path: String,
    /// The kernel's cgroup id (the directory's inode number in cgroup2fs).
    pub id: u64,
    /// Depth below the root (the root is 0).
    pub level: u32,
}

/// Where cgroup v2 is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts).
pub fn cgroup2_mount() -> Result<PathBuf> {
    let info =
        crate::procfs::read_self("mountinfo").context("reading /proc/self/mountinfo failed")?;
    info.lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            if right.split(' ').next()? != "cgroup2" {
                return None;
            }
            left.split(' ').nth(4).map(PathBuf::from)
        })
        .ok_or_else(|| anyhow!("no cgroup v2 hierarchy is mounted: --cgroup needs one"))
}

/// A cgroup given as a path below the v2 root (`/system.slice/nginx.service`) or as a
/// directory of the mounted hierarchy.
pub fn resolve(given: &str, mount: &std::path::Path) -> Result<CgroupFilter> {
    let mount_str = mount.to_string_lossy();
    let rel = given
        .strip_prefix(mount_str.as_ref())
        .unwrap_or(given)
        .trim_end_matches('/');
    let rel = if rel.starts_with('/') {
        rel.to_owned()
    } else {
        format!("/{rel}")
    };
    let dir = mount.join(rel.trim_start_matches('/'));
    let meta = std::fs::metadata(&dir)
        .with_context(|| format!("cgroup {given}: {} is not readable", dir.display()))?;
    if !meta.is_dir() {
        bail!(
            "cgroup {given}: {} is not a cgroup directory",
            dir.display()
        );
    }
    let level = rel.split('/').filter(|s| !s.is_empty()).count() as u32;
    Ok(CgroupFilter {
        path: if rel.is_empty() { "/".to_owned() } else { rel },
        id: meta.ino(),
        level,
    })
}

/// The cgroup path of the container whose id starts with `id` (as `docker ps` shows it),
/// from the processes running now.
pub fn container_cgroup(id: &str) -> Result<String> {
    if id.len() < 4 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("container {id:?}: expected its id (at least 4 hex digits, as docker ps shows)");
    }
    let id = id.to_ascii_lowercase();
    for path in crate::procfs::running_cgroups() {
        if crate::procinfo::container_id(&path).is_some_and(|c| {
            // 12 digits are shown; a longer id given is compared on the path itself.
            c.starts_with(&id[..id.len().min(12)]) && (id.len() <= 12 || path.contains(&id))
        }) {
            // The container's own cgroup: the path up to the segment with the id.
            let end = path
                .find(&id[..id.len().min(12)])
                .and_then(|at| path[at..].find('/').map(|e| at + e))
                .unwrap_or(path.len());
            return Ok(path[..end].to_owned());
        }
    }
    bail!("container {id}: no running process is in it")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_resolve_to_their_id_and_depth() {
        let mount = cgroup2_mount().unwrap();
        let root = resolve("/", &mount).unwrap();
        assert_eq!((root.path.as_str(), root.level), ("/", 0));
        let own = crate::procfs::read_cgroup(std::process::id()).unwrap();
        let mine = resolve(&own, &mount).unwrap();
        assert_eq!(
            mine.path,
            if own == "/" {
                "/".to_owned()
            } else {
                own.clone()
            }
        );
        // The same cgroup given as a directory of the mount.
        let by_dir = resolve(&format!("{}{own}", mount.display()), &mount).unwrap();
        assert_eq!(by_dir, mine);
        let e = resolve("/no/such/cgroup", &mount).unwrap_err();
        assert!(format!("{e:#}").contains("not readable"), "{e:#}");
        assert!(container_cgroup("zz").is_err());
    }
}
