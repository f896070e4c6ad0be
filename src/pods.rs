//! Kubernetes pods: a process's pod from its cgroup path (the pod's UID in the `kubepods`
//! hierarchy), and the pod's namespace and name from the kubelet's log directories
//! (`/var/log/pods/<namespace>_<name>_<uid>/`, made for every pod whatever the container
//! runtime, and readable without talking to the API server or the runtime).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Where the kubelet keeps each pod's logs, one directory per pod.
pub const POD_LOG_DIR: &str = "/var/log/pods";

/// A pod, as `kubectl get pods -n NAMESPACE` names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pod {
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub namespace: String,
    #[serde(deserialize_with = "crate::record::limits::string")]
    pub name: String,
}

/// The pod UID in a cgroup path (with dashes, as the API shows it): the systemd driver's
/// `kubepods-burstable-pod<uid, '_' for '-'>.slice` and the cgroupfs driver's
/// `/kubepods/burstable/pod<uid>/`. The UID must be one (36 characters: hex and dashes), so
/// any other segment starting with `pod` is not taken for it.
pub fn pod_uid(cgroup: &str) -> Option<String> {
    if !cgroup.contains("kubepods") {
        return None;
    }
    cgroup.split('/').find_map(segment_uid)
}

/// The pod UID a cgroup path segment names, if it is a pod's own.
fn segment_uid(seg: &str) -> Option<String> {
    let seg = seg.strip_suffix(".slice").unwrap_or(seg);
    let at = seg.rfind("pod")?;
    let uid = seg[at + 3..].replace('_', "-");
    is_uid(&uid).then_some(uid)
}

fn is_uid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// The pods of the kubelet's log directories under `dir`: `<namespace>_<name>_<uid>` (neither
/// a namespace nor a pod name may hold `_`, so the split is exact), by UID.
pub fn pods_in(dir: &Path) -> HashMap<String, Pod> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            let mut parts = n.splitn(3, '_');
            let (namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
            (is_uid(uid) && !namespace.is_empty() && !name.is_empty()).then(|| {
                (
                    uid.to_owned(),
                    Pod {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                    },
                )
            })
        })
        .collect()
}

/// Known pods by UID, read again from the log directories when a UID is not among them (a
/// pod started since), at most once a second.
struct PodCache {
    by_uid: HashMap<String, Pod>,
    read_at: Option<Instant>,
}

static CACHE: LazyLock<Mutex<PodCache>> = LazyLock::new(|| {
    Mutex::new(PodCache {
        by_uid: HashMap::new(),
        read_at: None,
    })
});

/// The pod of a process in cgroup `cgroup`, if it runs in one the kubelet knows on this host.
pub fn pod_of_cgroup(cgroup: &str) -> Option<Pod> {
    let uid = pod_uid(cgroup)?;
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if !c.by_uid.contains_key(&uid)
        && c.read_at
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
    {
        c.by_uid = pods_in(Path::new(POD_LOG_DIR));
        c.read_at = Some(Instant::now());
    }
    c.by_uid.get(&uid).cloned()
}

/// The UID of the pod `given` (`NAME` or `NAMESPACE/NAME`) among `pods`; an error that says
/// why not (none, or the same name in several namespaces).
pub fn find_pod(given: &str, pods: &HashMap<String, Pod>) -> Result<String> {
    let (namespace, name) = match given.split_once('/') {
        Some((ns, n)) => (Some(ns), n),
        None => (None, given),
    };
    let mut found: Vec<(&String, &Pod)> = pods
        .iter()
        .filter(|(_, p)| p.name == name && namespace.is_none_or(|ns| p.namespace == ns))
        .collect();
    found.sort_by(|a, b| a.1.namespace.cmp(&b.1.namespace));
    match found.as_slice() {
        [(uid, _)] => Ok((*uid).clone()),
        [] => bail!(
            "pod {given}: not found on this host (pods are read from {POD_LOG_DIR}, which the \
             kubelet keeps; give NAMESPACE/NAME)"
        ),
        many => bail!(
            "pod {given}: in several namespaces ({}): give NAMESPACE/NAME",
            many.iter()
                .map(|(_, p)| p.namespace.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The cgroup path of the pod `given` (`NAME` or `NAMESPACE/NAME`), from the cgroups of the
/// processes running now: the path up to the pod's own segment.
pub fn pod_cgroup(given: &str) -> Result<String> {
    let uid = find_pod(given, &pods_in(Path::new(POD_LOG_DIR)))?;
    for path in crate::procfs::running_cgroups() {
        if pod_uid(&path).as_deref() != Some(uid.as_str()) {
            continue;
        }
        let mut end = 0;
        for seg in path.split('/').skip(1) {
            end += 1 + seg.len();
            if segment_uid(seg).is_some() {
                return Ok(path[..end].to_owned());
            }
        }
    }
    bail!("pod {given}: no running process is in it")
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b5a7c2e-1f3d-4e6a-9b8c-7d6e5f4a3b2c";

    #[test]
    fn pod_uids_from_both_cgroup_drivers() {
        let id = "4f0a6b3c2d1e".repeat(5) + "abcd";
        for path in [
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
                UID.replace('-', "_")
            ),
            format!("/kubepods.slice/kubepods-pod{}.slice/crio-{id}.scope", UID.replace('-', "_")),
            format!("/kubepods/besteffort/pod{UID}/{id}"),
            format!("/kubepods/pod{UID}/{id}"),
        ] {
            assert_eq!(pod_uid(&path).as_deref(), Some(UID), "{path}");
        }
        assert_eq!(pod_uid("/system.slice/docker-abc.scope"), None);
        // Not a UID after `pod`, or not in the kubepods hierarchy.
        assert_eq!(pod_uid("/kubepods/besteffort/podnotauid/x"), None);
        assert_eq!(pod_uid(&format!("/user.slice/pod{UID}")), None);
    }

    #[test]
    fn pods_from_the_kubelets_log_directories() {
        let dir = std::env::temp_dir().join(format!("ebtop-pods-{}", std::process::id()));
        let other = "11111111-2222-3333-4444-555555555555";
        for d in [
            format!("default_web-7d9f-abcde_{UID}"),
            format!("kube-system_web-7d9f-abcde_{other}"),
            "not-a-pod".to_owned(),
            "a_b_c".to_owned(),
        ] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let pods = pods_in(&dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(pods.len(), 2, "{pods:?}");
        assert_eq!(
            pods[UID],
            Pod {
                namespace: "default".into(),
                name: "web-7d9f-abcde".into()
            }
        );
        assert_eq!(find_pod("default/web-7d9f-abcde", &pods).unwrap(), UID);
        assert_eq!(
            find_pod("kube-system/web-7d9f-abcde", &pods).unwrap(),
            other
        );
        let e = find_pod("web-7d9f-abcde", &pods).unwrap_err().to_string();
        assert!(
            e.contains("several namespaces (default, kube-system)"),
            "{e}"
        );
        let e = find_pod("nope", &pods).unwrap_err().to_string();
        assert!(e.contains("not found"), "{e}");
    }
}
