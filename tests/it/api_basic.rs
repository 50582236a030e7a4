//! The real server on 127.0.0.1:0: health, readiness, tools, schemas, and request errors in the
//! one error shape (404 and 405 included).

use std::path::Path;

use crate::common::server::Served;
use serde_json::json;

fn assert_error_shape(body: &serde_json::Value, code: &str) {
    let err = &body["error"];
    assert_eq!(err["code"], code, "{body}");
    assert!(err["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
}

#[tokio::test]
async fn health_ready_and_tools() {
    let server = Served::start_dir(Path::new("tests/fixtures/good_tools")).await;
    let (s, b) = server.get_json("/healthz").await;
    assert_eq!((s, b), (200, json!({"status": "ok"})));
    let (s, b) = server.get_json("/readyz").await;
    assert_eq!(s, 200);
    assert_eq!(b["status"], "ready");
    assert_eq!(b["tools"], 3);
    assert_eq!(b["version"].as_str().unwrap().len(), 16);
    let (s, b) = server.get_json("/v1/tools").await;
    assert_eq!(s, 200);
    let tools = b["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo_text", "search_orders", "get_weather"]);
    let search = &tools[1];
    assert_eq!(search["backend"], "exec");
    assert_eq!(search["injected"], json!(["user_id"]));
    assert_eq!(search["policy"]["timeout"], 10_000);
    assert!(search["parameters"]["properties"].get("user_id").is_none());
    // The strict transforms change `search_orders` (optional `status` made required+nullable).
    let warnings = search["schema_warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w["provider"] == "openai_chat" && w["mode"] == "strict"),
        "{warnings:?}"
    );
    // Secrets never appear in the tool listing.
    assert!(!b.to_string().contains("t0ken-default"));
    server.stop().await;
}

#[tokio::test]
async fn unknown_route_and_wrong_method_use_the_error_shape() {
    let server = Served::start_dir(Path::new("tests/fixtures/good_tools")).await;
    let (s, b) = server.get_json("/nope").await;
    assert_eq!(s, 404);
    assert_error_shape(&b, "not_found");
    let (s, b) = server.post_json("/v1/tools", &json!({})).await;
    assert_eq!(s, 405);
    assert_error_shape(&b, "method_not_allowed");
    server.stop().await;
}

#[tokio::test]
async fn schemas_per_provider_and_filters() {
    let server = Served::start_dir(Path::new("tests/fixtures/good_tools")).await;
    let (s, b) = server.get_json("/v1/schemas?provider=openai").await;
    assert_eq!(s, 200);
    assert_eq!(b.as_array().unwrap().len(), 3);
    assert_eq!(b[0]["type"], "function");
    assert_eq!(b[0]["function"]["name"], "echo_text");
    let (_, b) = server.get_json("/v1/schemas?provider=gemini&tags=orders").await;
    assert_eq!(b[0]["functionDeclarations"].as_array().unwrap().len(), 1);
    assert_eq!(b[0]["functionDeclarations"][0]["name"], "search_orders");
    let (_, b) = server.get_json("/v1/schemas?provider=bedrock&tools=get_weather").await;
    assert_eq!(b[0]["toolSpec"]["name"], "get_weather");
    let (_, b) = server
        .get_json("/v1/schemas?provider=openai_responses&strict=true&tools=search_orders")
        .await;
    assert_eq!(b[0]["strict"], true);
    assert_eq!(b[0]["parameters"]["additionalProperties"], false);
    assert_eq!(b[0]["parameters"]["required"], json!(["query", "status"]));
    let (s, b) = server.get_json("/v1/schemas?provider=nope").await;
    assert_eq!(s, 422);
    assert_error_shape(&b, "unknown_provider");
    let (s, b) = server.get_json("/v1/schemas?provider=gemini&tools=missing_tool").await;
    assert_eq!(s, 422);
    assert_error_shape(&b, "unprocessable");
    let (s, b) = server.get_json("/v1/schemas").await;
    assert_eq!(s, 400);
    assert_error_shape(&b, "invalid_request");
    server.stop().await;
}
