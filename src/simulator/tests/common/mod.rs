//! Helpers shared by the raw-HTTP tests: start a simulator, send requests, read JSON.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use gpucloud_simulator::{Delays, Simulator, SimulatorConfig, SimulatorHandle};
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub mod through_client;

pub const ADMIN_TOKEN: &str = "admin-secret-token";

pub fn config() -> SimulatorConfig {
    SimulatorConfig {
        delays: Delays::instant(),
        admin_token: Some(ADMIN_TOKEN.to_string()),
        ..SimulatorConfig::default()
    }
}

pub async fn start(config: SimulatorConfig) -> Sim {
    let handle = tokio::time::timeout(
        Duration::from_secs(5),
        Simulator::start(config, "127.0.0.1:0".parse().unwrap()),
    )
    .await
    .expect("simulator start timed out")
    .expect("simulator starts");
    // reqwest is built without a TLS provider of its own; the workspace's is ring.
    gpucloud_cloud::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    Sim { handle, http }
}

pub struct Sim {
    pub handle: SimulatorHandle,
    pub http: reqwest::Client,
}

/// A response: status, headers and the body as JSON (Null when it is not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn ok(self) -> Value {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.body);
        assert_eq!(self.body["success"], true, "body: {}", self.body);
        self.body
    }

    /// Asserts an error answer in the shape of the wire decisions.
    pub fn error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        assert_eq!(self.body["success"], false, "body: {}", self.body);
        assert_eq!(self.body["code"], code, "body: {}", self.body);
        assert!(self.body["message"].as_str().is_some_and(|m| !m.is_empty()));
        assert_request_id(&self.body);
    }
}

pub fn assert_request_id(body: &Value) {
    let id = body["request_id"].as_str().expect("request_id present");
    assert!(id.starts_with("req_"), "{id}");
    assert_eq!(id.len(), 28, "{id}");
    assert!(id[4..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
}

impl Sim {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.handle.base_url(), path)
    }

    pub async fn send(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        let key = self.handle.api_key().to_string();
        self.send_with(method, path, body, |r| r.header("X-API-Key", key))
            .await
    }

    pub async fn send_with(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        decorate: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Answer {
        let mut request = self.http.request(method, self.url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = decorate(request).send().await.expect("request completes");
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body readable");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(Method::DELETE, path, None).await
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Answer {
        self.send_with(method, path, body, |r| r.bearer_auth(ADMIN_TOKEN))
            .await
    }

    /// Creates an instance and returns its id.
    pub async fn instance(&self, name: &str, tier: &str) -> String {
        let body = self
            .post(
                "/instances/",
                serde_json::json!({
                    "name": name, "region": "us-east-1", "gpu_type": "L40S", "gpu_count": 1,
                    "image_id": "ubuntu-22.04-cuda-12", "tier": tier,
                }),
            )
            .await
            .ok();
        body["instance"]["instance_id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Moves simulated time past every configured delay.
    pub fn settle(&self) {
        self.handle.advance_clock(Duration::from_secs(3600));
    }
}
