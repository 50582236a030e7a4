//! A ConfigMap volume updated the way the kubelet does it, against the real `toolwire serve`
//! binary with its real file watcher (deploy/kubernetes/README.md relies on this for hot
//! reload). `tests/reload.rs` covers one swap in-process; this one follows the kubelet's
//! AtomicWriter order for keys that are added and removed, where a visible symlink dangles for
//! a moment (the `..data` rename lands before the stale `t.json` link is removed).
//!
//! The layout of a mounted ConfigMap:
//!
//! ```text
//! tools.d/..2026_12_03_07_00_00.000000001/t.json   the payload of one version
//! tools.d/..data -> ..2026_12_03_07_00_00.000000001
//! tools.d/t.json -> ..data/t.json                   what the server lists
//! ```
//!
//! An update writes a new timestamped dir, points a temporary `..data_tmp` symlink at it,
//! renames that over `..data` (atomic), then creates the links of new keys, removes the links
//! of deleted keys and finally the old timestamped dir.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::binary::Binary;
use serde_json::{Value, json};

/// How long a debounced reload may take to land on a loaded machine.
const SETTLE: Duration = Duration::from_secs(15);

fn tool(name: &str, says: &str) -> Value {
    json!({
        "name": name,
        "description": format!("Test tool {name}: prints a fixed word so a test can tell versions apart."),
        "parameters": {"type": "object"},
        "exec": {"command": ["echo", says]},
    })
}

/// One ConfigMap version: a new timestamped dir holding `files` (key → tools).
fn write_version(dir: &Path, stamp: &str, files: &[(&str, Vec<Value>)]) {
    let version = dir.join(stamp);
    std::fs::create_dir(&version).unwrap();
    for (key, tools) in files {
        std::fs::write(version.join(key), json!({"tools": tools}).to_string()).unwrap();
    }
}

/// The kubelet's swap: `..data_tmp` → new dir, renamed over `..data`; then the links of new
/// keys are created, the links of removed keys deleted, and the old dir removed.
fn swap(dir: &Path, old: &str, new: &str, added: &[&str], removed: &[&str]) {
    symlink(new, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for key in added {
        symlink(format!("..data/{key}"), dir.join(key)).unwrap();
    }
    for key in removed {
        std::fs::remove_file(dir.join(key)).unwrap();
    }
    std::fs::remove_dir_all(dir.join(old)).unwrap();
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn get(bin: &Binary, path: &str) -> Value {
    let resp = client().get(bin.url(path)).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200, "GET {path}");
    resp.json().await.unwrap()
}

async fn tool_names(bin: &Binary) -> Vec<String> {
    let tools = get(bin, "/v1/tools").await;
    let mut names: Vec<String> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// Waits until the server lists exactly `want` with no pending reload error.
async fn wait_for_tools(bin: &Binary, want: &[&str], what: &str) {
    let start = Instant::now();
    loop {
        let names = tool_names(bin).await;
        let ready = get(bin, "/readyz").await;
        if names == want && ready["reload"]["last_error"].is_null() {
            return;
        }
        assert!(
            start.elapsed() < SETTLE,
            "{what}: tools {names:?} (want {want:?}), readyz {ready}\nstderr:\n{}",
            bin.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn call(bin: &Binary, name: &str) -> Value {
    client()
        .post(bin.url(&format!("/v1/tools/{name}/call")))
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn kubelet_configmap_updates_reload_the_real_binary() {
    let root = tempfile::tempdir().unwrap();
    let tools = root.path().join("tools.d");
    std::fs::create_dir(&tools).unwrap();
    let config = root.path().join("toolwire.toml");
    std::fs::write(&config, "[reload]\nwatch = true\ndebounce = \"100ms\"\n").unwrap();

    // Version 1: one key, `t.json`.
    let v1 = "..2026_12_03_07_00_00.000000001";
    write_version(&tools, v1, &[("t.json", vec![tool("alpha", "one")])]);
    symlink(v1, tools.join("..data")).unwrap();
    symlink("..data/t.json", tools.join("t.json")).unwrap();
    let bin = Binary::start(&config, &tools);
    assert_eq!(tool_names(&bin).await, ["alpha"]);
    let first_version = get(&bin, "/readyz").await["version"].clone();

    // Version 2: `t.json` changes, a key `u.json` is added.
    let v2 = "..2026_12_03_07_01_00.000000002";
    write_version(
        &tools,
        v2,
        &[
            ("t.json", vec![tool("beta", "two")]),
            ("u.json", vec![tool("gamma", "three")]),
        ],
    );
    swap(&tools, v1, v2, &["u.json"], &[]);
    wait_for_tools(&bin, &["beta", "gamma"], "after the update that adds u.json").await;
    assert_ne!(get(&bin, "/readyz").await["version"], first_version);
    let res = call(&bin, "beta").await;
    assert_eq!(res["ok"], true, "{res}");
    assert!(res.to_string().contains("two"), "the new version's command ran: {res}");

    // Version 3: `t.json` is removed (its link dangles until the kubelet deletes it).
    let v3 = "..2026_12_03_07_02_00.000000003";
    write_version(&tools, v3, &[("u.json", vec![tool("gamma", "four")])]);
    swap(&tools, v2, v3, &[], &["t.json"]);
    wait_for_tools(&bin, &["gamma"], "after the update that removes t.json").await;
    let res = call(&bin, "gamma").await;
    assert_eq!(res["ok"], true, "{res}");
    assert!(res.to_string().contains("four"), "the new version's command ran: {res}");
    let ready = get(&bin, "/readyz").await;
    assert!(ready["reload"]["reloads"].as_u64().unwrap() >= 2, "{ready}");
}
