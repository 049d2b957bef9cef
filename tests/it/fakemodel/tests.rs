//! The fake model's own checks: its script, its defaults and its faults.

use super::*;

/// `(event, data)` of every event in an SSE body.
fn parse_sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            assert_eq!(data["type"], name.as_str(), "{block}");
            (name, data)
        })
        .collect()
}

#[test]
fn fakemodel_plays_its_script_then_the_default() {
    let model = FakeModel::start();
    let url = format!("{}/responses", model.base_url());
    // (status, content type, body) of one request offering `tools`.
    let post = |tools: Value| {
        let body = json!({"model": "m", "tools": tools, "input": [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call_output", "call_id": "call_0", "output": "out"},
        ]});
        let resp = match ureq::post(&url).send_json(body) {
            Ok(resp) => resp,
            Err(ureq::Error::Status(_, resp)) => resp,
            Err(e) => panic!("fakemodel: {e}"),
        };
        let status = resp.status();
        let content_type = resp.content_type().to_owned();
        (status, content_type, resp.into_string().unwrap())
    };
    let events_of = |tools: Value| {
        let (status, content_type, body) = post(tools);
        assert_eq!((status, content_type.as_str()), (200, "text/event-stream"));
        parse_sse(&body)
    };
    model.push(Step::Reply(vec![
        Item::Message {
            text: "héllo wörld".into(),
            chunks: 3,
        },
        Item::shell("echo hi"),
        Item::mcp("gitea", "create_comment", json!({"body": "x"})),
    ]));
    model.push(Step::function_call("update_plan", json!({"plan": []})));
    model.push(Step::mcp("gitea", "get_issue", json!({"index": 1})));
    model.push(Step::apply_patch("*** Begin Patch\n*** End Patch\n"));
    model.push(Step::http_error(503).delayed(Duration::from_millis(50)));
    model.push(Step::failed("boom"));
    model.push(Step::message("slow").delayed(Duration::from_millis(200)));
    model.set_default(Step::message("default"));

    let events = events_of(json!([{"type": "function", "name": "shell_command"}]));
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"response.created"));
    assert_eq!(names.last(), Some(&"response.completed"));
    let resp_id = &events[0].1["response"]["id"];
    assert_eq!(&events.last().unwrap().1["response"]["id"], resp_id);
    assert!(events.last().unwrap().1["response"]["usage"]["total_tokens"].is_u64());
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas.len(), 3);
    assert_eq!(deltas.concat(), "héllo wörld");
    let done: Vec<&Value> = events
        .iter()
        .filter(|(n, _)| n == "response.output_item.done")
        .map(|(_, d)| &d["item"])
        .collect();
    assert_eq!(done.len(), 3);
    assert_eq!(done[0]["content"][0]["text"], "héllo wörld");
    assert_eq!(done[1]["name"], "shell_command");
    assert_eq!(done[1]["arguments"], r#"{"command":"echo hi"}"#);
    assert_eq!(done[2]["namespace"], "mcp__gitea");
    assert_eq!(done[2]["name"], "create_comment");

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["name"], "update_plan");
    assert!(events[1].1["item"].get("namespace").is_none());

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["namespace"], "mcp__gitea");
    assert_eq!(events[1].1["item"]["arguments"], r#"{"index":1}"#);

    let events = events_of(json!([]));
    assert_eq!(events[1].1["item"]["type"], "custom_tool_call");
    assert_eq!(
        events[1].1["item"]["input"],
        "*** Begin Patch\n*** End Patch\n"
    );

    let started = std::time::Instant::now();
    let (status, _, body) = post(json!([]));
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["error"]["type"], "server_error");

    let events = events_of(json!([]));
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["response.created", "response.failed"]);
    assert_eq!(events[1].1["response"]["error"]["message"], "boom");

    let started = std::time::Instant::now();
    let events = events_of(json!([]));
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(events.len(), 5);

    let events = events_of(json!([]));
    assert_eq!(events[3].1["item"]["content"][0]["text"], "default");

    let requests = model.wait_for_requests(8, Duration::from_secs(1));
    assert_eq!(requests.len(), 8);
    assert_eq!(user_texts(&requests[0]), ["hi"]);
    assert_eq!(tool_names(&requests[0]), ["shell_command"]);
    assert_eq!(
        tool_outputs(&requests[0]),
        [("call_0".to_owned(), json!("out"))]
    );
}

#[test]
fn fakemodel_hang_sends_created_then_nothing() {
    let model = FakeModel::start();
    model.set_default(Step::hang());
    let agent = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_millis(300))
        .build();
    let resp = agent
        .post(&format!("{}/responses", model.base_url()))
        .send_json(json!({"input": []}))
        .unwrap();
    let mut reader = std::io::BufReader::new(resp.into_reader());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut reader, &mut first).unwrap();
    assert_eq!(first, "event: response.created\n");
    let mut rest = String::new();
    let err = std::io::Read::read_to_string(&mut reader, &mut rest).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(!rest.contains("response.completed"), "{rest}");
}
