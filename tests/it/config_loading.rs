//! Loading tools.d from real files: every format, the short form, secrets, and every defect
//! of a broken directory reported in one run.

use std::path::Path;

use serde_json::json;
use toolwire::config::ServerConfig;
use toolwire::config::load::load_dir;
use toolwire::registry::Registry;
use toolwire::tool::{BackendSpec, StdinMode};

fn defaults() -> toolwire::config::server::ToolDefaults {
    ServerConfig::from_figment(ServerConfig::figment_without_env(None).unwrap())
        .unwrap()
        .defaults
}

fn env_none(_: &str) -> Option<String> {
    None
}

#[test]
fn loads_toml_yaml_and_json_in_file_order() {
    let reg = Registry::build(load_dir(Path::new("tests/fixtures/good_tools"), &env_none), &defaults()).unwrap();
    let names: Vec<&str> = reg.tools().iter().map(|t| t.name.as_str()).collect();
    // Files are read sorted by name: echo.json, search.yaml, weather.toml.
    assert_eq!(names, ["echo_text", "search_orders", "get_weather"]);
    assert_eq!(reg.files.len(), 3);
    assert_eq!(reg.version.len(), 16);
    let search = reg.get("search_orders").unwrap();
    assert_eq!(
        search.inject,
        vec![toolwire::tool::Injected {
            key: "user_id".to_owned(),
            path: vec!["user_id".to_owned()],
            optional: false,
        }]
    );
    assert!(matches!(&search.backend, BackendSpec::Exec(e) if e.stdin == StdinMode::Json));
    assert!(
        search.parameters["properties"].get("user_id").is_none(),
        "injected keys stay hidden"
    );
}

#[test]
fn short_form_parameters_expand_to_json_schema() {
    let reg = Registry::build(load_dir(Path::new("tests/fixtures/good_tools"), &env_none), &defaults()).unwrap();
    assert_eq!(
        reg.get("echo_text").unwrap().parameters,
        json!({"type": "object", "properties": {"text": {"type": "string", "description": "Text to echo."}}, "required": ["text"]})
    );
    assert!(reg.get("echo_text").unwrap().validator.is_valid(&json!({"text": "hi"})));
    assert!(!reg.get("echo_text").unwrap().validator.is_valid(&json!({})));
}

#[test]
fn env_and_file_secrets_are_resolved_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token.txt"), "from-file-secret\n").unwrap();
    std::fs::write(
        dir.path().join("t.toml"),
        r#"[[tools]]
name = "get_thing"
description = "Get the thing by id. Use when the user names a thing; returns its fields."
parameters = { id = { type = "string", description = "Thing id." } }
[tools.http]
url = "${env:API_BASE}/things/{id}"
headers = { Authorization = "Bearer ${file:token.txt}", X-Region = "${env:REGION:-eu}" }
"#,
    )
    .unwrap();
    let env = |name: &str| (name == "API_BASE").then(|| "http://127.0.0.1:7".to_owned());
    let reg = Registry::build(load_dir(dir.path(), &env), &defaults()).unwrap();
    let BackendSpec::Http(http) = &reg.get("get_thing").unwrap().backend else {
        panic!("http")
    };
    let args = serde_json::Map::new();
    assert_eq!(
        http.url.render(&args, &json!({}), |s| s.to_owned()),
        "http://127.0.0.1:7/things/"
    );
    let auth = http.headers.iter().find(|(k, _)| k == "Authorization").unwrap();
    assert_eq!(
        auth.1.render(&args, &json!({}), |s| s.to_owned()),
        "Bearer from-file-secret"
    );
    assert!(reg.secrets.contains(&"from-file-secret".to_owned()));
    assert!(reg.secrets.contains(&"http://127.0.0.1:7".to_owned()));
}

/// One run over a directory with a defect of every kind reports all of them, each with its file
/// and key path (line/column for syntax errors). The whole list is pinned by a snapshot.
#[test]
fn every_defect_of_a_broken_directory_is_reported_at_once() {
    let errs = Registry::build(load_dir(Path::new("tests/fixtures/bad_tools"), &env_none), &defaults()).unwrap_err();
    let lines: Vec<String> = errs.iter().filter(|d| d.is_error()).map(ToString::to_string).collect();
    let expect_fragments = [
        ("a_http.toml", "tools[0].timout", "did you mean `timeout`"),
        ("a_http.toml", "tools[0].deadline", "not a duration"),
        ("a_http.toml", "tools[0].inject.city", "model-visible parameter"),
        ("a_http.toml", "tools[0].http.url", "{country}"),
        (
            "a_http.toml",
            "tools[0].http.headers.Authorization",
            "TOOLWIRE_TEST_SURELY_UNSET_VAR",
        ),
        ("a_http.toml", "tools[1].name", "missing required key `name`"),
        ("a_http.toml", "tools[1].exec.command", "must name a program"),
        ("a_http.toml", "tools[2].name", "not a valid tool name"),
        ("a_http.toml", "tools[2]", "both `http` and `exec`"),
        ("a_http.toml", "tools[3].exec.env.KEY", "no-such-secret.txt"),
        ("b_schema.yaml", "tools[0].name", "duplicate tool name `get_weather`"),
        ("b_schema.yaml", "tools[1].parameters", "does not compile"),
        (
            "b_schema.yaml",
            "tools[2].parameters",
            "root must have `type = \"object\"`",
        ),
        ("c_nobackend.json", "tools[0]", "has no backend"),
        ("c_nobackend.json", "tools[1].retry.max_attempts", "between 1 and 5"),
        ("c_nobackend.json", "tools[1].retry.backoff", "not a duration"),
        ("c_nobackend.json", "tools[1].exec.command[1]", "{secs}"),
        ("d_broken.json", "d_broken.json:2:", "invalid JSON"),
    ];
    for (file, path, fragment) in expect_fragments {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(file) && l.contains(path) && l.contains(fragment)),
            "missing {file} {path} {fragment} in:\n{}",
            lines.join("\n")
        );
    }
    insta::assert_snapshot!("bad_tools_errors", lines.join("\n"));
}
