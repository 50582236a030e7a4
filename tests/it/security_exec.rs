//! Safe by default, subprocess tools (docs/security.md §3, §4, §12, "Resource limits",
//! "Stdin envelope"): option injection into argv, zombies and survivors of background
//! children, the server's environment out of the tools' reach (non-dumpable server, tools
//! without capabilities), per-tool resource limits and the minimal stdin envelope. Through the
//! real server: in-process where that is enough, the real binary where a process of its own is
//! needed (the subreaper, the exec shim, `prctl`).

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::binary::{Binary, toolwire_bin};
use crate::common::proc_watch::{pids_with_arg, unique_marker};
use crate::common::server::Served;
use crate::common::tools::{ToolsDir, assert_error, exec_tool, execute_body, faultproc, merge, message};
use serde_json::{Value, json};

/// A tool that runs `argv` directly (no faultproc) with text output.
fn raw_tool(name: &str, argv: &[&str], extra: Value) -> Value {
    merge(
        json!({
            "name": name,
            "description": format!("Test tool {name}: runs a system program for the security tests."),
            "parameters": {"type": "object"},
            "timeout": "20s",
            "retry": {"max_attempts": 1},
            "exec": {"command": argv, "output": "text"},
        }),
        extra,
    )
}

/// A schema with one documented string parameter.
fn string_param(name: &str) -> Value {
    json!({"type": "object", "required": [name], "properties": {name: {"type": "string", "description": "What to look for."}}})
}

/// `POST /v1/tools/{name}/call` on the in-process server.
async fn call(server: &Served, name: &str, arguments: Value) -> Value {
    let (status, body) = server
        .post_json(&format!("/v1/tools/{name}/call"), &json!({"arguments": arguments}))
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// `POST /v1/tools/{name}/call` on the real binary.
async fn call_binary(client: &reqwest::Client, server: &Binary, name: &str, arguments: Value) -> Value {
    client
        .post(server.url(&format!("/v1/tools/{name}/call")))
        .json(&json!({"arguments": arguments}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A server config for the binary: replay off (the same call is sent many times on purpose).
fn binary_config(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("toolwire.toml");
    std::fs::write(&path, "[replay]\nenabled = false\n").unwrap();
    path
}

// ---------------------------------------------------------------------------------------------
// 3. option injection
// ---------------------------------------------------------------------------------------------

/// The case: `grep {pattern} file` with `-rv` made grep dump every file under the
/// server's working directory. Now refused as a model-repairable error; the program never runs.
#[tokio::test]
async fn an_option_looking_value_is_refused_where_it_leads_an_argv_element() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("file"), "hello\nan -rv line\n").unwrap();
    std::fs::write(work.path().join("secret.txt"), "TOP-SECRET-42\n").unwrap();
    let cwd = work.path().to_str().unwrap();
    let search = raw_tool(
        "search_file",
        &["grep", "{pattern}", "file"],
        json!({"parameters": string_param("pattern"), "exec": {"cwd": cwd}}),
    );
    let guarded = raw_tool(
        "search_file_guarded",
        &["grep", "--", "{pattern}", "file"],
        json!({"parameters": string_param("pattern"), "exec": {"cwd": cwd}}),
    );
    let opted_out = merge(
        exec_tool("echo_options", &["echo", "{flag}", "x{flag}"]),
        json!({"parameters": string_param("flag"), "exec": {"allow_option_values": true}}),
    );
    let state_led = exec_tool("echo_state", &["echo", "{state.mode}"]);
    let pair = merge(
        exec_tool("echo_pair", &["echo", "{first}{second}"]),
        json!({"parameters": {"properties": {"first": {"type": "string"}, "second": {"type": "string"}}}}),
    );
    let tools = ToolsDir::new(&[search, guarded, opted_out, state_led, pair]);
    let server = Served::start_dir_without_replay(tools.path()).await;

    let r = call(&server, "search_file", json!({"pattern": "-rv"})).await;
    let err = assert_error(&r, "invalid_arguments", false, 1);
    assert!(!r.to_string().contains("TOP-SECRET"), "grep ran recursively: {r}");
    let msg = message(&r);
    assert!(
        msg.contains("`pattern`") && msg.contains("starts with `-`") && msg.contains("does not start with `-`"),
        "the message tells the model what to change: {err}"
    );
    // An ordinary value still works.
    let r = call(&server, "search_file", json!({"pattern": "hello"})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["output"], json!("hello\n"));

    // After a literal `--` the value is an operand: allowed, and grep searches for it.
    let r = call(&server, "search_file_guarded", json!({"pattern": "-rv"})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["output"], json!("an -rv line\n"));

    // The explicit opt-out passes it on; a `-` in the middle of an element is never refused.
    let r = call(&server, "echo_options", json!({"flag": "-rv"})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(r["output"]["argv"], json!([faultproc(), "echo", "-rv", "x-rv"]));

    // State-led elements are covered too.
    let (status, r) = server
        .post_json(
            "/v1/tools/echo_state/call",
            &json!({"arguments": {}, "state": {"mode": "--delete"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_error(&r, "invalid_arguments", false, 1);
    assert!(message(&r).contains("`state.mode`"), "{r}");

    // An empty first placeholder does not hide the second one's leading `-`.
    let r = call(&server, "echo_pair", json!({"first": "", "second": "-x"})).await;
    assert_error(&r, "invalid_arguments", false, 1);
    assert!(message(&r).contains("`second`"), "{r}");
    let r = call(&server, "echo_pair", json!({"first": "a", "second": "-x"})).await;
    assert_eq!(r["output"]["argv"], json!([faultproc(), "echo", "a-x"]), "{r}");
    server.stop().await;
}

/// `toolwire check` warns on an argv element that starts with a placeholder and has no literal
/// `--` before it, and says so differently when the tool opted out.
#[test]
fn check_warns_on_placeholder_led_argv_elements_without_a_double_dash() {
    let tools = ToolsDir::new(&[
        raw_tool(
            "search_file",
            &["grep", "-n", "{pattern}", "file"],
            json!({"parameters": string_param("pattern")}),
        ),
        raw_tool(
            "search_file_guarded",
            &["grep", "--", "{pattern}", "file"],
            json!({"parameters": string_param("pattern")}),
        ),
        raw_tool(
            "search_file_open",
            &["grep"],
            json!({"parameters": string_param("pattern"), "exec": {"args": ["{pattern}"], "allow_option_values": true}}),
        ),
    ]);
    let out = std::process::Command::new(toolwire_bin())
        .args(["check", "--json", "--tools-dir"])
        .arg(tools.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let argv_warnings: Vec<(String, String)> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["path"].as_str().unwrap_or_default().contains(".exec."))
        .map(|d| {
            assert_eq!(d["severity"], json!("warning"), "{d}");
            (
                format!("{}:{}", d["tool"].as_str().unwrap(), d["path"].as_str().unwrap()),
                d["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let where_: Vec<&str> = argv_warnings.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(
        where_,
        [
            "search_file:tools[0].exec.command[2]",
            "search_file_open:tools[2].exec.args[0]"
        ],
        "{argv_warnings:?}"
    );
    assert!(argv_warnings[0].1.contains("\"--\""), "{argv_warnings:?}");
    assert!(argv_warnings[1].1.contains("allow_option_values"), "{argv_warnings:?}");
}

// ---------------------------------------------------------------------------------------------
// 4. zombies and survivors
// ---------------------------------------------------------------------------------------------

/// `(pid, state, ppid)` of every process whose parent is `parent`.
fn children_of(parent: u32) -> Vec<(u32, char, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            let state = f[0].chars().next().unwrap_or('?');
            out.push((pid, state, head.split_once('(').map_or("", |(_, c)| c).to_owned()));
        }
    }
    out
}

/// The case: every call of a tool that leaves a background child behind used to leave
/// one zombie child of the server, forever. 50 calls later the server has no zombie child and
/// nothing the tools started survives (a `setsid` escapee included); 16 parallel calls on top
/// all succeed.
#[test]
fn background_children_of_tools_leave_no_zombie_and_no_survivor() {
    let dir = tempfile::tempdir().unwrap();
    // A unique sleep duration marks the escapees (GNU sleep takes fractions).
    let marker = format!("29.{}", std::process::id());
    let script = format!("(sleep 1 &); (setsid sleep {marker} &); echo hi");
    let tools = tools_dir(
        dir.path(),
        &[raw_tool("leave_background", &["/bin/sh", "-c", &script], json!({}))],
    );
    let server = Binary::start(&binary_config(dir.path()), &tools);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = client();
    for i in 0..50 {
        let r = rt.block_on(call_binary(&client, &server, "leave_background", json!({})));
        assert_eq!(r["ok"], json!(true), "call {i}: {r}");
        assert_eq!(r["output"], json!("hi\n"));
    }
    // Parallel calls: sweeps run while other tool processes start and exit, and must never take
    // a running tool's exit status (its call would fail) nor kill it.
    let calls: Vec<(String, &str, Value)> = (0..16)
        .map(|i| (format!("p{i}"), "leave_background", json!({})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, n, a)| (id.as_str(), *n, a.clone())).collect();
    let resp: Value = rt.block_on(async {
        client
            .post(server.url("/v1/execute"))
            .json(&execute_body(&calls))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    });
    for r in resp["results"].as_array().unwrap() {
        assert_eq!(r["ok"], json!(true), "{resp}");
        assert_eq!(r["output"], json!("hi\n"), "{resp}");
    }
    assert_eq!(resp["results"].as_array().unwrap().len(), 16, "{resp}");
    let start = Instant::now();
    loop {
        let children = children_of(server.pid());
        let survivors = pids_with_arg(&marker);
        if children.is_empty() && survivors.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "after 50 calls and {:?}: children of the server (pid, state, name) {children:?}, surviving escapees {survivors:?}\n{}",
            start.elapsed(),
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The server is still healthy and reaps on.
    let r = rt.block_on(call_binary(&client, &server, "leave_background", json!({})));
    assert_eq!(r["ok"], json!(true), "{r}");
}

/// Tool processes get exactly the configured environment: no toolwire marker variable.
#[tokio::test]
async fn a_tool_gets_exactly_its_configured_environment() {
    let tools = ToolsDir::new(&[merge(
        exec_tool("show_env", &["echo"]),
        json!({"exec": {"env": {"ONLY": "this"}}}),
    )]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let r = call(&server, "show_env", json!({})).await;
    assert_eq!(r["ok"], json!(true), "{r}");
    assert_eq!(
        r["output"]["env"],
        json!({"ONLY": "this", "PATH": "/usr/local/bin:/usr/bin:/bin"})
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// 12. the server's environment
// ---------------------------------------------------------------------------------------------

/// Capability bits that let a process read a non-dumpable process's memory and environment.
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// The `CapXxx:` mask of a `/proc/<pid>/status` text.
/// `dir/tools.d` holding `tools` (one file), for a server binary started on it.
fn tools_dir(dir: &Path, tools: &[Value]) -> std::path::PathBuf {
    let path = dir.join("tools.d");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("t.json"), json!({ "tools": tools }).to_string()).unwrap();
    path
}

fn cap_mask(status: &str, field: &str) -> u64 {
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in {status}"));
    u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
}

/// A tool reads `/proc/$PPID/environ` (its parent is the server): with the server
/// non-dumpable and tools without capabilities, it cannot — also when the server runs as root,
/// as CI does. The test process's own privileges decide which case it covers; it says which.
#[test]
fn a_tool_cannot_read_the_server_environment() {
    const SECRET: &str = "SECRET-server-env-31337";
    let root = nix::unistd::geteuid().is_root();
    let my_caps = cap_mask(&std::fs::read_to_string("/proc/self/status").unwrap(), "CapEff:");
    eprintln!(
        "running as {} with CapEff {my_caps:#x}: the server starts with these privileges",
        if root { "root" } else { "a non-root user" }
    );
    let dir = tempfile::tempdir().unwrap();
    let tools = tools_dir(
        dir.path(),
        &[
            raw_tool(
                "read_parent_env",
                &["/bin/sh", "-c", "cat /proc/$PPID/environ"],
                json!({}),
            ),
            raw_tool(
                "read_parent_mem",
                &["/bin/sh", "-c", "head -c 64 /proc/$PPID/maps"],
                json!({}),
            ),
            raw_tool("show_status", &["cat", "/proc/self/status"], json!({})),
            raw_tool("show_parent", &["/bin/sh", "-c", "echo $PPID"], json!({})),
        ],
    );
    let server = Binary::start_with_env(&binary_config(dir.path()), &tools, &[("TOOLWIRE_TEST_SECRET", SECRET)]);
    // The secret is there to be stolen (the test process may read it: it is the parent).
    let env = std::fs::read(format!("/proc/{}/environ", server.pid()));
    if let Ok(env) = &env {
        assert!(String::from_utf8_lossy(env).contains(SECRET));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = client();

    // The tool's parent really is the server (the shim exec'd, it did not fork).
    let r = rt.block_on(call_binary(&client, &server, "show_parent", json!({})));
    assert_eq!(r["output"], json!(format!("{}\n", server.pid())), "{r}");

    for tool in ["read_parent_env", "read_parent_mem"] {
        let r = rt.block_on(call_binary(&client, &server, tool, json!({})));
        assert!(!r.to_string().contains(SECRET), "{tool} read the server's secret: {r}");
        assert_error(&r, "nonzero_exit", false, 1);
        assert!(message(&r).contains("Permission denied"), "{tool}: {r}");
    }

    let r = rt.block_on(call_binary(&client, &server, "show_status", json!({})));
    assert_eq!(r["ok"], json!(true), "{r}");
    let status = r["output"].as_str().unwrap();
    let eff = cap_mask(status, "CapEff:");
    let prm = cap_mask(status, "CapPrm:");
    for bit in [CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON] {
        assert_eq!(eff & (1 << bit), 0, "capability {bit} in the tool's CapEff {eff:#x}");
        assert_eq!(prm & (1 << bit), 0, "capability {bit} in the tool's CapPrm {prm:#x}");
    }
    if root || my_caps != 0 {
        // A privileged server: its tools run with no capability at all.
        assert_eq!((eff, prm), (0, 0), "{status}");
        assert_eq!(cap_mask(status, "CapBnd:") & (1 << CAP_SYS_PTRACE), 0, "{status}");
    }
}

/// A server without privileges (not root, no capabilities: the container image's case) has
/// nothing for the exec shim to drop, so tools without limits start directly (docs/bench.md);
/// they still cannot read the server's environment (it is non-dumpable), and tools with limits
/// still go through the shim and get them.
#[test]
fn an_unprivileged_server_runs_tools_directly_and_still_safely() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // The server may run as `nobody`: it must be able to read its config and tools.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let tools = tools_dir(
        dir.path(),
        &[
            raw_tool(
                "read_parent_env",
                &["/bin/sh", "-c", "cat /proc/$PPID/environ"],
                json!({}),
            ),
            raw_tool("show_status", &["cat", "/proc/self/status"], json!({})),
            raw_tool(
                "show_limits",
                &["/bin/sh", "-c", "ulimit -n"],
                json!({"exec": {"limits": {"open_files": 33}}}),
            ),
            raw_tool("missing", &["/nonexistent/tool"], json!({})),
        ],
    );
    let server = Binary::start_unprivileged(&binary_config(dir.path()), &tools);
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    assert_eq!(
        cap_mask(&status, "CapEff:"),
        0,
        "the server must run unprivileged: {status}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = client();

    let r = rt.block_on(call_binary(&client, &server, "show_status", json!({})));
    assert_eq!(r["ok"], json!(true), "{r}");
    let tool_status = r["output"].as_str().unwrap();
    assert_eq!(cap_mask(tool_status, "CapEff:"), 0, "{tool_status}");
    assert_eq!(cap_mask(tool_status, "CapPrm:"), 0, "{tool_status}");

    let r = rt.block_on(call_binary(&client, &server, "read_parent_env", json!({})));
    assert_error(&r, "nonzero_exit", false, 1);
    assert!(message(&r).contains("Permission denied"), "{r}");

    let r = rt.block_on(call_binary(&client, &server, "show_limits", json!({})));
    assert_eq!(r["output"], json!("33\n"), "limits still go through the shim: {r}");

    // Spawned directly, a missing program is still a spawn failure that names it.
    let r = rt.block_on(call_binary(&client, &server, "missing", json!({})));
    assert_error(&r, "spawn_failed", false, 1);
    assert!(
        message(&r).contains("/nonexistent/tool") && message(&r).contains("No such file"),
        "{r}"
    );
}

// ---------------------------------------------------------------------------------------------
// resource limits
// ---------------------------------------------------------------------------------------------

/// The soft and hard value of a `/proc/self/limits` row.
fn limit_row(limits: &str, name: &str) -> (String, String) {
    let line = limits
        .lines()
        .find(|l| l.starts_with(name))
        .unwrap_or_else(|| panic!("no {name} in {limits}"));
    let f: Vec<&str> = line[name.len()..].split_whitespace().collect();
    (f[0].to_owned(), f[1].to_owned())
}

#[test]
fn resource_limits_are_set_in_the_tool_process() {
    let dir = tempfile::tempdir().unwrap();
    let limits = json!({"exec": {"limits": {
        "address_space": "512MiB", "cpu": "7s", "open_files": 77, "processes": 4000
    }}});
    let tools = tools_dir(
        dir.path(),
        &[
            raw_tool("show_limits", &["cat", "/proc/self/limits"], limits.clone()),
            raw_tool("count_fds", &["/bin/sh", "-c", "ulimit -n"], limits),
            raw_tool(
                "spin_cpu",
                &["/bin/sh", "-c", "while :; do :; done"],
                json!({"timeout": "60s", "deadline": "60s", "exec": {"limits": {"cpu": "1s"}}}),
            ),
            raw_tool("show_default_limits", &["cat", "/proc/self/limits"], json!({})),
        ],
    );
    let server = Binary::start(&binary_config(dir.path()), &tools);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = client();

    let r = rt.block_on(call_binary(&client, &server, "show_limits", json!({})));
    assert_eq!(r["ok"], json!(true), "{r}");
    let text = r["output"].as_str().unwrap();
    let both = |v: &str| (v.to_owned(), v.to_owned());
    assert_eq!(
        limit_row(text, "Max address space"),
        both(&(512u64 << 20).to_string()),
        "{text}"
    );
    // CPU: the hard limit is one second above, so the program gets SIGXCPU before SIGKILL.
    assert_eq!(
        limit_row(text, "Max cpu time"),
        ("7".to_owned(), "8".to_owned()),
        "{text}"
    );
    assert_eq!(limit_row(text, "Max open files"), both("77"), "{text}");
    assert_eq!(limit_row(text, "Max processes"), both("4000"), "{text}");

    let r = rt.block_on(call_binary(&client, &server, "count_fds", json!({})));
    assert_eq!(r["output"], json!("77\n"), "{r}");

    // Without `exec.limits` the tool inherits the server's limits.
    let r = rt.block_on(call_binary(&client, &server, "show_default_limits", json!({})));
    let text = r["output"].as_str().unwrap();
    assert_ne!(limit_row(text, "Max cpu time").0, "7", "{text}");

    // The CPU limit ends a busy loop (SIGXCPU) long before the 60 s timeout.
    let r = rt.block_on(call_binary(&client, &server, "spin_cpu", json!({})));
    assert_error(&r, "nonzero_exit", false, 1);
    assert_eq!(r["error"]["signal"], json!("SIGXCPU"), "{r}");
}

#[test]
fn invalid_resource_limits_are_load_errors_with_their_key() {
    let tools = ToolsDir::new(&[raw_tool(
        "bad_limits",
        &["true"],
        json!({"exec": {"limits": {"address_space": "lots", "cpu": "0s", "open_files": 0, "stack": 1}}}),
    )]);
    let out = std::process::Command::new(toolwire_bin())
        .args(["check", "--json", "--tools-dir"])
        .arg(tools.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let errors: Vec<String> = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["severity"] == json!("error"))
        .map(|d| format!("{} {}", d["path"].as_str().unwrap(), d["message"].as_str().unwrap()))
        .collect();
    for key in ["address_space", "cpu", "open_files", "stack"] {
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with(&format!("tools[0].exec.limits.{key} "))),
            "{key}: {errors:?}"
        );
    }
    assert!(
        errors.iter().any(|e| e.contains("512MiB")),
        "the size error shows the format: {errors:?}"
    );
}

/// An executor built in-process has no exec shim: a tool that asks for limits fails to start
/// instead of running without them.
#[tokio::test]
async fn limits_without_the_exec_shim_fail_closed() {
    let tools = ToolsDir::new(&[merge(
        exec_tool("limited", &["echo"]),
        json!({"exec": {"limits": {"open_files": 64}}}),
    )]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let r = call(&server, "limited", json!({})).await;
    assert_error(&r, "spawn_failed", false, 1);
    assert!(message(&r).contains("exec shim"), "{r}");
    server.stop().await;
}

/// Through the shim, a program that cannot be started is still a spawn failure, not an exit
/// code.
#[test]
fn a_missing_program_is_a_spawn_failure_through_the_shim() {
    let dir = tempfile::tempdir().unwrap();
    let tools = tools_dir(
        dir.path(),
        &[raw_tool("run_missing", &["/nonexistent/program-xyz"], json!({}))],
    );
    let server = Binary::start(&binary_config(dir.path()), &tools);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(call_binary(&client(), &server, "run_missing", json!({})));
    assert_error(&r, "spawn_failed", false, 1);
    assert!(message(&r).contains("/nonexistent/program-xyz"), "{r}");
    assert!(message(&r).contains("No such file"), "{r}");
}

// ---------------------------------------------------------------------------------------------
// stdin envelope
// ---------------------------------------------------------------------------------------------

/// The envelope's `state` holds only what the tool references (its `inject` sources and
/// `{state.…}` placeholders), never the rest of the request state.
#[tokio::test]
async fn the_stdin_envelope_carries_only_the_state_the_tool_references() {
    let marker = unique_marker("state");
    let asks = merge(
        exec_tool("with_state", &["echo", "org={state.org.id}"]),
        json!({"exec": {"stdin": "json"}, "inject": {"user_id": "state.user.id"}}),
    );
    let asks_nothing = merge(
        exec_tool("without_state", &["echo"]),
        json!({"exec": {"stdin": "json"}}),
    );
    let tools = ToolsDir::new(&[asks, asks_nothing]);
    let server = Served::start_dir_without_replay(tools.path()).await;
    let state = json!({
        "user": {"id": "u-7", "token": marker},
        "org": {"id": 42, "billing": marker},
        "api_key": marker,
    });
    for (tool, expected) in [
        ("with_state", json!({"user": {"id": "u-7"}, "org": {"id": 42}})),
        ("without_state", json!({})),
    ] {
        let (status, r) = server
            .post_json(
                &format!("/v1/tools/{tool}/call"),
                &json!({"arguments": {"q": 1}, "state": state}),
            )
            .await;
        assert_eq!(status, 200);
        assert_eq!(r["ok"], json!(true), "{r}");
        assert_eq!(r["output"]["stdin"]["state"], expected, "{tool}: {r}");
        assert!(!r.to_string().contains(&marker), "{tool} got unrequested state: {r}");
    }
    server.stop().await;
}
