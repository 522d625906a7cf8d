//! Bad requests sent raw through the kube client's connection: every one gets a Status with
//! the right code and reason, never a 500 or a hang.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::kube_support;

use gpucloud_apiserver::ApiServerConfig;
use http::header::{ACCEPT, CONTENT_TYPE};
use kube_support::*;
use serde_json::{Value, json};

/// Sends one request; returns the status code, the content type and the body.
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String, String) {
    let mut request = http::Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = bounded(client.send(request.body(kube::client::Body::from(body)).unwrap()))
        .await
        .unwrap();
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let bytes = bounded(http_body_util::BodyExt::collect(response.into_body()))
        .await
        .unwrap()
        .to_bytes();
    (
        code,
        content_type,
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

fn status(body: &str) -> Value {
    let status: Value = serde_json::from_str(body).expect("a JSON Status body");
    assert_eq!(status["kind"], "Status", "{body}");
    status
}

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

#[tokio::test]
async fn malformed_bodies_are_400_not_500() {
    let (server, client) = start().await;
    let json_type = [(CONTENT_TYPE.as_str(), "application/json")];
    for body in [&b"{not json"[..], b"[1,2]", b"", b"\xff\xfe"] {
        let (code, _, text) = raw(&client, "POST", CONFIGMAPS, &json_type, body.to_vec()).await;
        // Real: 400 BadRequest for an undecodable body (apiserver handlers/create.go).
        assert_eq!(code, 400, "{text}");
        assert_eq!(status(&text)["reason"], "BadRequest");
    }
    // Malformed YAML likewise.
    let yaml_type = [(CONTENT_TYPE.as_str(), "application/yaml")];
    let (code, _, text) = raw(&client, "POST", CONFIGMAPS, &yaml_type, b"a: [b".to_vec()).await;
    assert_eq!(code, 400, "{text}");

    // A body whose kind does not match the URL: 400, as the real decoder's check answers
    // (apiserver handlers/create.go).
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}});
    let (code, _, text) = raw(
        &client,
        "POST",
        CONFIGMAPS,
        &json_type,
        serde_json::to_vec(&wrong_kind).unwrap(),
    )
    .await;
    assert_eq!(code, 400, "{text}");

    // Bad patches: malformed JSON is 400; a JSON patch whose test fails is 422, as the real
    // server answers (apiserver handlers/patch.go, applyJSPatch).
    let created = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}});
    let (code, _, _) = raw(
        &client,
        "POST",
        CONFIGMAPS,
        &json_type,
        serde_json::to_vec(&created).unwrap(),
    )
    .await;
    assert_eq!(code, 201);
    let merge = [(CONTENT_TYPE.as_str(), "application/merge-patch+json")];
    let (code, _, text) = raw(
        &client,
        "PATCH",
        &format!("{CONFIGMAPS}/p"),
        &merge,
        b"{oops".to_vec(),
    )
    .await;
    assert_eq!(code, 400, "{text}");
    let json_patch = [(CONTENT_TYPE.as_str(), "application/json-patch+json")];
    let failing_test = br#"[{"op":"test","path":"/data/x","value":"y"}]"#.to_vec();
    let (code, _, text) = raw(
        &client,
        "PATCH",
        &format!("{CONFIGMAPS}/p"),
        &json_patch,
        failing_test,
    )
    .await;
    assert_eq!(code, 422, "{text}");
    server.shutdown().await;
}

#[tokio::test]
async fn media_types_methods_and_paths() {
    let (server, client) = start().await;
    // Real: 415 for a patch type the server does not know.
    let (code, _, text) = raw(
        &client,
        "PATCH",
        &format!("{CONFIGMAPS}/x"),
        &[(CONTENT_TYPE.as_str(), "text/plain")],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (code, status(&text)["reason"].as_str().unwrap()),
        (415, "UnsupportedMediaType")
    );

    // An object body in an unknown format: 415 listing what built-in kinds accept.
    let (code, _, text) = raw(
        &client,
        "POST",
        CONFIGMAPS,
        &[(CONTENT_TYPE.as_str(), "text/plain")],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(code, 415, "{text}");
    assert!(
        status(&text)["message"].as_str().unwrap().contains(
            "accepted media types include: application/json, application/yaml, \
             application/vnd.kubernetes.protobuf"
        ),
        "{text}"
    );

    // Real: 406 when no acceptable representation exists.
    let (code, _, text) = raw(
        &client,
        "GET",
        CONFIGMAPS,
        &[(ACCEPT.as_str(), "application/vnd.kubernetes.protobuf")],
        Vec::new(),
    )
    .await;
    assert_eq!(
        (code, status(&text)["reason"].as_str().unwrap()),
        (406, "NotAcceptable")
    );

    // Real: 405 MethodNotAllowed for a verb the path does not serve.
    let (code, _, text) = raw(
        &client,
        "POST",
        &format!("{CONFIGMAPS}/x"),
        &[],
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(
        (code, status(&text)["reason"].as_str().unwrap()),
        (405, "MethodNotAllowed")
    );

    // The status subresource only serves get, update and patch: 405 otherwise, as the real
    // server registers no other verb on /status (apiserver endpoints/installer.go).
    let (code, _, _) = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/default/status",
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(code, 405);
    assert!(
        bounded(
            kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                .get_opt("default")
        )
        .await
        .unwrap()
        .is_some()
    );

    // Real: 404 NotFound Status for a resource the server does not serve.
    let (code, _, text) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        &[],
        Vec::new(),
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        status(&text)["message"],
        "the server could not find the requested resource"
    );

    // YAML is served when it is the only accepted type.
    let (code, content_type, text) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default",
        &[(ACCEPT.as_str(), "application/yaml")],
        Vec::new(),
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, "application/yaml"));
    assert!(text.contains("kind: Namespace"), "{text}");
    server.shutdown().await;
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let config = ApiServerConfig {
        max_body_bytes: 1024,
        ..ApiServerConfig::default()
    };
    let (server, client) = start_with(config).await;
    let big = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"k": "x".repeat(4096)},
    });
    let (code, _, text) = raw(
        &client,
        "POST",
        CONFIGMAPS,
        &[(CONTENT_TYPE.as_str(), "application/json")],
        serde_json::to_vec(&big).unwrap(),
    )
    .await;
    // Real: 413 RequestEntityTooLarge (apiserver handlers limitedReadBody).
    assert_eq!(
        (code, status(&text)["reason"].as_str().unwrap()),
        (413, "RequestEntityTooLarge")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_protobuf_bodies_are_400_not_500() {
    let (server, client) = start().await;
    let protobuf = [(CONTENT_TYPE.as_str(), "application/vnd.kubernetes.protobuf")];
    // Pieces of a ConfigMap envelope: type meta `v1`/`ConfigMap`.
    let type_meta = b"\x0a\x02v1\x12\x09ConfigMap";
    let envelope = |raw: &[u8]| {
        let mut body = b"k8s\0\x0a".to_vec();
        body.push(type_meta.len() as u8);
        body.extend_from_slice(type_meta);
        body.push(0x12);
        body.push(raw.len() as u8);
        body.extend_from_slice(raw);
        body
    };
    let bodies: Vec<Vec<u8>> = vec![
        // JSON sent with the protobuf content type: no magic.
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#.to_vec(),
        b"".to_vec(),
        b"k8s\0".to_vec(),
        // A kind this server does not serve.
        b"k8s\0\x0a\x09\x0a\x02v1\x12\x03Pod".to_vec(),
        // A length-delimited field running past the end.
        envelope(b"\x0a\x7f\x0a"),
        // metadata sent as a varint.
        envelope(b"\x08\x01"),
        // An unterminated varint.
        envelope(b"\x20\xff\xff"),
    ];
    for body in bodies {
        let (code, _, text) = raw(&client, "POST", CONFIGMAPS, &protobuf, body.clone()).await;
        assert_eq!(code, 400, "{body:?}: {text}");
        assert_eq!(status(&text)["reason"], "BadRequest", "{text}");
    }
    // A valid one is created.
    let (code, _, text) = raw(
        &client,
        "POST",
        CONFIGMAPS,
        &protobuf,
        envelope(b"\x0a\x03\x0a\x01a\x12\x08\x0a\x01k\x12\x03val"),
    )
    .await;
    assert_eq!(code, 201, "{text}");
    let created: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(created["data"], json!({"k": "val"}));
    // An update (PUT) in protobuf replaces it, as client-go's typed clients send it.
    let (code, _, text) = raw(
        &client,
        "PUT",
        &format!("{CONFIGMAPS}/a"),
        &protobuf,
        envelope(b"\x0a\x03\x0a\x01a\x12\x08\x0a\x01k\x12\x03new"),
    )
    .await;
    assert_eq!(code, 200, "{text}");
    let updated: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(updated["data"], json!({"k": "new"}));
    assert_eq!(updated["metadata"]["uid"], created["metadata"]["uid"]);
    server.shutdown().await;
}
