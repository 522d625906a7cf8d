//! The typed client: one async method per [`Operation`], with retries, rate limiting and an
//! observer hook for telemetry.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::error::{Error, excerpt};
use crate::limiter::{RateLimit, RateLimiter};
use crate::model::*;
use crate::routes::{Method, Operation, Retry};

/// Header that carries the API key.
pub const API_KEY_HEADER: &str = "X-API-Key";

/// Largest response body the client reads; a longer one is a [`Error::Decode`].
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

// === impl ApiKey ===

/// The account's API key. It is sent only in the `X-API-Key` header (marked sensitive) and
/// never printed: `Debug` and `Display` show `ApiKey(***)`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key itself, for the few places that must send or compare it.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

// === Configuration ===

/// When and how often the client repeats a failed call on its own.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included; 1 disables retries.
    pub max_attempts: u32,
    pub backoff: Backoff,
    /// A `Retry-After` longer than this is not waited out: the error goes to the caller.
    pub max_retry_after: Duration,
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn never() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }
}

impl Default for RetryPolicy {
    /// Four attempts, backoff from 200 ms to 10 s, `Retry-After` honoured up to 60 s.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            backoff: Backoff::default(),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// Everything the client needs to reach the service.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The API root, e.g. `https://api.example.com/v1`; operation paths are appended to it.
    pub base_url: String,
    pub api_key: ApiKey,
    /// Bound on one attempt, from sending the request to the last byte of the answer.
    pub timeout: Duration,
    pub retry: RetryPolicy,
    /// Client-side limit shared by every clone; `None` sends as fast as callers ask.
    pub rate_limit: Option<RateLimit>,
}

impl ClientConfig {
    /// Defaults: 30 s timeout, [`RetryPolicy::default`], [`RateLimit::default`].
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            api_key,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            rate_limit: Some(RateLimit::default()),
        }
    }
}

// === Observer ===

/// How one attempt ended, as an observer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOutcome {
    /// HTTP status of the answer, when there was one.
    pub status: Option<u16>,
    /// [`Error::metric_label`] when the attempt failed.
    pub error: Option<&'static str>,
}

impl CallOutcome {
    pub fn is_success(&self) -> bool {
        self.error.is_none()
    }
}

/// Hook for counting calls without this crate depending on a metrics library. Methods are
/// called inline, so they should be quick.
pub trait CallObserver: Send + Sync {
    /// After every attempt, successful or not.
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration);

    /// Before sleeping `delay` ahead of attempt number `next_attempt` (1-based: the first
    /// retry is 2).
    fn on_retry(
        &self,
        _operation: Operation,
        _next_attempt: u32,
        _error: &Error,
        _delay: Duration,
    ) {
    }

    /// After waiting `waited` for a token of the client-side rate limiter.
    fn on_rate_limit_wait(&self, _operation: Operation, _waited: Duration) {}
}

/// Reports every call to each of several observers, in order.
pub struct FanOut(pub Vec<Arc<dyn CallObserver>>);

impl CallObserver for FanOut {
    fn on_call(&self, operation: Operation, outcome: &CallOutcome, elapsed: Duration) {
        for observer in &self.0 {
            observer.on_call(operation, outcome, elapsed);
        }
    }

    fn on_retry(&self, operation: Operation, next_attempt: u32, error: &Error, delay: Duration) {
        for observer in &self.0 {
            observer.on_retry(operation, next_attempt, error, delay);
        }
    }

    fn on_rate_limit_wait(&self, operation: Operation, waited: Duration) {
        for observer in &self.0 {
            observer.on_rate_limit_wait(operation, waited);
        }
    }
}

// === impl CloudClient ===

/// Client of the Cloud GPU Compute Service. Cloning is cheap; clones share the connection
/// pool and the rate limiter.
#[derive(Clone)]
pub struct CloudClient {
    inner: Arc<Inner>,
    observer: Option<Arc<dyn CallObserver>>,
}

struct Inner {
    http: reqwest::Client,
    /// Without a trailing slash, so operation paths append directly.
    base_url: String,
    api_key: ApiKey,
    api_key_header: HeaderValue,
    timeout: Duration,
    retry: RetryPolicy,
    limiter: Option<RateLimiter>,
}

impl fmt::Debug for CloudClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CloudClient")
            .field("base_url", &self.inner.base_url)
            .field("api_key", &self.inner.api_key)
            .field("timeout", &self.inner.timeout)
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

impl CloudClient {
    pub fn new(config: ClientConfig) -> Result<Self, Error> {
        let parsed = reqwest::Url::parse(&config.base_url).map_err(|err| Error::InvalidConfig {
            reason: format!("base URL {:?}: {err}", config.base_url),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "base URL {:?}: scheme must be http or https",
                    config.base_url
                ),
            });
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "base URL {:?}: must not carry a query or fragment",
                    config.base_url
                ),
            });
        }
        if config.api_key.expose_secret().is_empty() {
            return Err(Error::InvalidConfig {
                reason: "API key is empty".into(),
            });
        }
        let mut api_key_header =
            HeaderValue::from_str(config.api_key.expose_secret()).map_err(|_| {
                Error::InvalidConfig {
                    reason: "API key contains characters not allowed in an HTTP header".into(),
                }
            })?;
        api_key_header.set_sensitive(true);
        if config.timeout.is_zero() {
            return Err(Error::InvalidConfig {
                reason: "timeout must be positive".into(),
            });
        }
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(config.timeout)
            // A redirect would carry the X-API-Key header to wherever it points; the API
            // never redirects, so a 3xx is reported instead of followed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|err| Error::InvalidConfig {
                reason: format!("HTTP client: {err}"),
            })?;
        Ok(CloudClient {
            inner: Arc::new(Inner {
                http,
                base_url: config.base_url.trim_end_matches('/').to_owned(),
                api_key: config.api_key,
                api_key_header,
                timeout: config.timeout,
                retry: RetryPolicy {
                    max_attempts: config.retry.max_attempts.max(1),
                    ..config.retry
                },
                limiter: config.rate_limit.map(RateLimiter::new),
            }),
            observer: None,
        })
    }

    /// The same client reporting every call to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    // === Balance, deploy, pricing ===

    pub async fn get_balance(&self) -> Result<BalanceBody, Error> {
        self.body(Operation::GetBalance, &[], None).await
    }

    /// Deploys an instance. Never retried by the client: after a timeout the caller looks
    /// for the instance by name before creating again.
    pub async fn create_instance(
        &self,
        request: &CreateInstanceRequest,
    ) -> Result<Instance, Error> {
        let op = Operation::CreateInstance;
        let body: InstanceBody = self.send_body(op, &[], request).await?;
        Ok(body.instance)
    }

    pub async fn get_pricing(&self) -> Result<PricingBody, Error> {
        self.body(Operation::GetPricing, &[], None).await
    }

    pub async fn quote_pricing(
        &self,
        request: &PriceQuoteRequest,
    ) -> Result<PriceQuoteBody, Error> {
        self.send_body(Operation::QuotePricing, &[], request).await
    }

    // === Instances ===

    pub async fn list_instances(&self) -> Result<InstanceList, Error> {
        self.body(Operation::ListInstances, &[], None).await
    }

    pub async fn get_instance_billing(
        &self,
        query: &InstanceBillingQuery,
    ) -> Result<InstanceBillingBody, Error> {
        let op = Operation::GetInstanceBilling;
        let pairs = query_pairs(op, query)?;
        self.body(op, &[], Some(pairs)).await
    }

    pub async fn list_snapshot_eligible_instances(&self) -> Result<InstanceList, Error> {
        self.body(Operation::ListSnapshotEligibleInstances, &[], None)
            .await
    }

    pub async fn get_instance(&self, vm_id: &str) -> Result<Instance, Error> {
        let body: InstanceBody = self.body(Operation::GetInstance, &[vm_id], None).await?;
        Ok(body.instance)
    }

    pub async fn start_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.send_empty(Operation::StartInstance, &[vm_id]).await
    }

    pub async fn stop_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.send_empty(Operation::StopInstance, &[vm_id]).await
    }

    pub async fn reboot_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.send_empty(Operation::RebootInstance, &[vm_id]).await
    }

    pub async fn hibernate_instance(&self, vm_id: &str) -> Result<PowerActionBody, Error> {
        self.send_empty(Operation::HibernateInstance, &[vm_id])
            .await
    }

    /// Wakes a hibernated instance (legacy tier only).
    pub async fn restore_hibernated_instance(
        &self,
        vm_id: &str,
    ) -> Result<ApiResponse<PowerActionBody>, Error> {
        self.execute(Operation::RestoreHibernatedInstance, &[vm_id], None, None)
            .await
    }

    /// Sets the instance's public IP on or off (a repeat is harmless).
    pub async fn toggle_public_ip(&self, vm_id: &str, enabled: bool) -> Result<Instance, Error> {
        let op = Operation::TogglePublicIp;
        let body: InstanceBody = self
            .send_body(op, &[vm_id], &PublicIpRequest { enabled })
            .await?;
        Ok(body.instance)
    }

    pub async fn add_security_rule(
        &self,
        vm_id: &str,
        rule: &NewRule,
    ) -> Result<AddSecurityRuleBody, Error> {
        self.send_body(Operation::AddSecurityRule, &[vm_id], rule)
            .await
    }

    /// Removes a security rule (legacy tier only; the instance must be `RUNNING`).
    pub async fn remove_security_rule(
        &self,
        vm_id: &str,
        rule_id: &str,
    ) -> Result<ApiResponse<RemoveSecurityRuleBody>, Error> {
        self.execute(Operation::RemoveSecurityRule, &[vm_id, rule_id], None, None)
            .await
    }

    pub async fn delete_instance(&self, vm_id: &str) -> Result<DeleteInstanceBody, Error> {
        self.body(Operation::DeleteInstance, &[vm_id], None).await
    }

    pub async fn list_instance_firewalls(&self, vm_id: &str) -> Result<FirewallList, Error> {
        self.body(Operation::ListInstanceFirewalls, &[vm_id], None)
            .await
    }

    pub async fn attach_volumes(
        &self,
        vm_id: &str,
        volume_ids: &[String],
    ) -> Result<VolumeAttachmentBody, Error> {
        let request = VolumeIdsRequest {
            volume_ids: volume_ids.to_vec(),
        };
        self.send_body(Operation::AttachVolumes, &[vm_id], &request)
            .await
    }

    pub async fn detach_volumes(
        &self,
        vm_id: &str,
        volume_ids: &[String],
    ) -> Result<VolumeAttachmentBody, Error> {
        let request = VolumeIdsRequest {
            volume_ids: volume_ids.to_vec(),
        };
        self.send_body(Operation::DetachVolumes, &[vm_id], &request)
            .await
    }

    // === Volumes ===

    pub async fn list_volumes(&self, query: &VolumeListQuery) -> Result<VolumeList, Error> {
        let op = Operation::ListVolumes;
        let pairs = query_pairs(op, query)?;
        self.body(op, &[], Some(pairs)).await
    }

    /// Creates a volume. Never retried by the client (see [`Self::create_instance`]).
    pub async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<Volume, Error> {
        let body: VolumeBody = self
            .send_body(Operation::CreateVolume, &[], request)
            .await?;
        Ok(body.volume)
    }

    pub async fn get_volume_billing(
        &self,
        query: &VolumeBillingQuery,
    ) -> Result<VolumeBillingPage, Error> {
        let op = Operation::GetVolumeBilling;
        let pairs = query_pairs(op, query)?;
        self.body(op, &[], Some(pairs)).await
    }

    pub async fn list_volume_types(&self) -> Result<VolumeTypeList, Error> {
        self.body(Operation::ListVolumeTypes, &[], None).await
    }

    pub async fn get_volume(&self, volume_id: &str) -> Result<Volume, Error> {
        let body: VolumeBody = self.body(Operation::GetVolume, &[volume_id], None).await?;
        Ok(body.volume)
    }

    /// Grows a volume to `size` GB.
    pub async fn resize_volume(&self, volume_id: &str, size: u64) -> Result<Volume, Error> {
        let body: VolumeBody = self
            .send_body(
                Operation::ResizeVolume,
                &[volume_id],
                &ResizeVolumeRequest { size },
            )
            .await?;
        Ok(body.volume)
    }

    /// Clones a volume into a new one named `name`. Never retried by the client.
    pub async fn clone_volume(&self, volume_id: &str, name: &str) -> Result<Volume, Error> {
        let request = CloneVolumeRequest {
            name: name.to_owned(),
        };
        let body: VolumeBody = self
            .send_body(Operation::CloneVolume, &[volume_id], &request)
            .await?;
        Ok(body.volume)
    }

    pub async fn delete_volume(&self, volume_id: &str) -> Result<DeletedBody, Error> {
        self.body(Operation::DeleteVolume, &[volume_id], None).await
    }

    // === Snapshots ===

    /// Snapshots an `ACTIVE` instance. Never retried by the client.
    pub async fn create_snapshot(
        &self,
        vm_id: &str,
        request: &CreateSnapshotRequest,
    ) -> Result<Snapshot, Error> {
        let response: ApiResponse<SnapshotBody> = self
            .execute(
                Operation::CreateSnapshot,
                &[vm_id],
                None,
                Some(encode(Operation::CreateSnapshot, request)?),
            )
            .await?;
        let mut snapshot = response.body.snapshot;
        // The shown response carries the tier in the envelope, not in the record.
        if snapshot.tier.is_none() {
            snapshot.tier = response.tier;
        }
        Ok(snapshot)
    }

    pub async fn list_snapshots(&self) -> Result<SnapshotList, Error> {
        self.body(Operation::ListSnapshots, &[], None).await
    }

    pub async fn get_snapshot_billing(
        &self,
        query: &SnapshotBillingQuery,
    ) -> Result<SnapshotBillingBody, Error> {
        let op = Operation::GetSnapshotBilling;
        let pairs = query_pairs(op, query)?;
        self.body(op, &[], Some(pairs)).await
    }

    pub async fn get_snapshot(&self, snapshot_id: &str) -> Result<Snapshot, Error> {
        let body: SnapshotBody = self
            .body(Operation::GetSnapshot, &[snapshot_id], None)
            .await?;
        Ok(body.snapshot)
    }

    /// Creates a new instance from a snapshot; the instance is under `body.data`. Never
    /// retried by the client.
    pub async fn restore_snapshot(
        &self,
        snapshot_id: &str,
        new_vm_name: &str,
    ) -> Result<ApiResponse<RestoreSnapshotBody>, Error> {
        let op = Operation::RestoreSnapshot;
        let request = RestoreSnapshotRequest {
            new_vm_name: new_vm_name.to_owned(),
        };
        self.execute(op, &[snapshot_id], None, Some(encode(op, &request)?))
            .await
    }

    /// Deletes a snapshot; deleting one already deleted also succeeds.
    pub async fn delete_snapshot(&self, snapshot_id: &str) -> Result<DeleteSnapshotBody, Error> {
        self.body(Operation::DeleteSnapshot, &[snapshot_id], None)
            .await
    }

    // === Custom images ===

    pub async fn list_images(&self) -> Result<ImageList, Error> {
        self.body(Operation::ListImages, &[], None).await
    }

    /// Creates a custom image from an available snapshot. Never retried by the client.
    pub async fn create_image(&self, request: &CreateImageRequest) -> Result<Image, Error> {
        let body: ImageBody = self.send_body(Operation::CreateImage, &[], request).await?;
        Ok(body.image)
    }

    pub async fn list_snapshot_image_relations(&self) -> Result<RelationList, Error> {
        self.body(Operation::ListSnapshotImageRelations, &[], None)
            .await
    }

    pub async fn get_snapshot_image_relation(
        &self,
        snapshot_id: &str,
    ) -> Result<SnapshotImageRelation, Error> {
        let body: RelationBody = self
            .body(Operation::GetSnapshotImageRelation, &[snapshot_id], None)
            .await?;
        Ok(body.relation)
    }

    pub async fn get_image(&self, image_id: &str) -> Result<Image, Error> {
        let body: ImageBody = self.body(Operation::GetImage, &[image_id], None).await?;
        Ok(body.image)
    }

    pub async fn delete_image(&self, image_id: &str) -> Result<DeletedBody, Error> {
        self.body(Operation::DeleteImage, &[image_id], None).await
    }

    // === Firewalls ===

    pub async fn list_firewalls(&self) -> Result<FirewallList, Error> {
        self.body(Operation::ListFirewalls, &[], None).await
    }

    /// Creates a firewall. Never retried by the client.
    pub async fn create_firewall(
        &self,
        request: &CreateFirewallRequest,
    ) -> Result<Firewall, Error> {
        let body: FirewallBody = self
            .send_body(Operation::CreateFirewall, &[], request)
            .await?;
        Ok(body.firewall)
    }

    pub async fn list_firewall_protocols(&self) -> Result<ProtocolList, Error> {
        self.body(Operation::ListFirewallProtocols, &[], None).await
    }

    pub async fn list_firewall_attachable_instances(&self) -> Result<InstanceList, Error> {
        self.body(Operation::ListFirewallAttachableInstances, &[], None)
            .await
    }

    pub async fn get_firewall(&self, firewall_id: &str) -> Result<Firewall, Error> {
        let body: FirewallBody = self
            .body(Operation::GetFirewall, &[firewall_id], None)
            .await?;
        Ok(body.firewall)
    }

    pub async fn delete_firewall(&self, firewall_id: &str) -> Result<DeletedBody, Error> {
        self.body(Operation::DeleteFirewall, &[firewall_id], None)
            .await
    }

    pub async fn add_firewall_rule(
        &self,
        firewall_id: &str,
        rule: &NewRule,
    ) -> Result<AddFirewallRuleBody, Error> {
        self.send_body(Operation::AddFirewallRule, &[firewall_id], rule)
            .await
    }

    pub async fn remove_firewall_rule(
        &self,
        firewall_id: &str,
        rule_id: &str,
    ) -> Result<RemoveFirewallRuleBody, Error> {
        self.body(Operation::RemoveFirewallRule, &[firewall_id, rule_id], None)
            .await
    }

    /// Sets the firewall's attachments to exactly `vm_ids` (an empty list detaches all).
    pub async fn attach_firewall(
        &self,
        firewall_id: &str,
        vm_ids: &[String],
    ) -> Result<Firewall, Error> {
        let request = AttachFirewallRequest {
            vm_ids: vm_ids.to_vec(),
        };
        let body: FirewallBody = self
            .send_body(Operation::AttachFirewall, &[firewall_id], &request)
            .await?;
        Ok(body.firewall)
    }

    // === SSH keys ===

    pub async fn list_ssh_keys(&self) -> Result<SshKeyList, Error> {
        self.body(Operation::ListSshKeys, &[], None).await
    }

    /// Imports `public_key`, or generates a pair when it is `None` (the private key is in
    /// the answer, once). The answer's `code` says which happened. Never retried by the
    /// client.
    pub async fn create_ssh_key(
        &self,
        request: &CreateSshKeyRequest,
    ) -> Result<ApiResponse<SshKeyCreatedBody>, Error> {
        let op = Operation::CreateSshKey;
        self.execute(op, &[], None, Some(encode(op, request)?))
            .await
    }

    pub async fn get_ssh_key(&self, key_id: &str) -> Result<SshKey, Error> {
        let body: SshKeyBody = self.body(Operation::GetSshKey, &[key_id], None).await?;
        Ok(body.ssh_key)
    }

    pub async fn delete_ssh_key(&self, key_id: &str) -> Result<DeletedBody, Error> {
        self.body(Operation::DeleteSshKey, &[key_id], None).await
    }

    // === Startup scripts ===

    pub async fn list_startup_scripts(&self) -> Result<StartupScriptList, Error> {
        self.body(Operation::ListStartupScripts, &[], None).await
    }

    /// Creates a startup script. Never retried by the client.
    pub async fn create_startup_script(
        &self,
        request: &CreateStartupScriptRequest,
    ) -> Result<StartupScript, Error> {
        let body: StartupScriptBody = self
            .send_body(Operation::CreateStartupScript, &[], request)
            .await?;
        Ok(body.script)
    }

    /// Deletes every script in `script_ids`; ids that do not exist are reported, not refused.
    pub async fn delete_startup_scripts(
        &self,
        script_ids: &[String],
    ) -> Result<DeleteStartupScriptsBody, Error> {
        let request = DeleteStartupScriptsRequest {
            script_ids: script_ids.to_vec(),
        };
        self.send_body(Operation::DeleteStartupScripts, &[], &request)
            .await
    }

    pub async fn get_startup_script(&self, script_id: &str) -> Result<StartupScript, Error> {
        let body: StartupScriptBody = self
            .body(Operation::GetStartupScript, &[script_id], None)
            .await?;
        Ok(body.script)
    }

    pub async fn update_startup_script(
        &self,
        script_id: &str,
        request: &UpdateStartupScriptRequest,
    ) -> Result<StartupScript, Error> {
        let body: StartupScriptBody = self
            .send_body(Operation::UpdateStartupScript, &[script_id], request)
            .await?;
        Ok(body.script)
    }

    pub async fn delete_startup_script(&self, script_id: &str) -> Result<DeletedBody, Error> {
        self.body(Operation::DeleteStartupScript, &[script_id], None)
            .await
    }

    // === Catalogs ===

    pub async fn get_gpu_stock(&self) -> Result<GpuStockList, Error> {
        self.body(Operation::GetGpuStock, &[], None).await
    }

    pub async fn get_gpu_specs(&self) -> Result<GpuSpecList, Error> {
        self.body(Operation::GetGpuSpecs, &[], None).await
    }

    pub async fn list_regions(&self) -> Result<RegionList, Error> {
        self.body(Operation::ListRegions, &[], None).await
    }

    pub async fn list_os_images(&self) -> Result<OsImageList, Error> {
        self.body(Operation::ListOsImages, &[], None).await
    }

    // === AI chat ===

    pub async fn list_ai_models(&self) -> Result<AiModelsBody, Error> {
        self.body(Operation::ListAiModels, &[], None).await
    }

    /// One chat call, charged per token. Not repeated once the request may have been sent.
    pub async fn chat(&self, request: &ChatRequest) -> Result<ChatBody, Error> {
        self.send_body(Operation::ChatWithAi, &[], request).await
    }

    pub async fn get_ai_usage_summary(&self) -> Result<AiUsageSummary, Error> {
        let body: AiUsageSummaryBody = self.body(Operation::GetAiUsageSummary, &[], None).await?;
        Ok(body.summary)
    }

    pub async fn get_ai_usage_history(&self) -> Result<AiUsageHistoryBody, Error> {
        self.body(Operation::GetAiUsageHistory, &[], None).await
    }

    // === Request machinery ===

    /// A call without a request body; returns the response body.
    async fn body<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
        query: Option<Vec<(String, String)>>,
    ) -> Result<T, Error> {
        let response: ApiResponse<T> = self.execute(operation, args, query, None).await?;
        Ok(response.body)
    }

    /// A POST action without a body; returns the response body.
    async fn send_empty<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
    ) -> Result<T, Error> {
        self.body(operation, args, None).await
    }

    /// A call with a JSON request body; returns the response body.
    async fn send_body<T: DeserializeOwned, B: Serialize>(
        &self,
        operation: Operation,
        args: &[&str],
        request: &B,
    ) -> Result<T, Error> {
        let encoded = encode(operation, request)?;
        let response: ApiResponse<T> = self.execute(operation, args, None, Some(encoded)).await?;
        Ok(response.body)
    }

    /// Runs one operation: waits for a rate-limit token, sends, and repeats the attempt while
    /// the operation's retry class and the error allow it.
    async fn execute<T: DeserializeOwned>(
        &self,
        operation: Operation,
        args: &[&str],
        query: Option<Vec<(String, String)>>,
        body: Option<Vec<u8>>,
    ) -> Result<ApiResponse<T>, Error> {
        let url = self.url(operation, args, query.as_deref())?;
        let policy = &self.inner.retry;
        let mut attempt: u32 = 1;
        loop {
            if let Some(limiter) = &self.inner.limiter {
                let waited = limiter.acquire().await;
                if !waited.is_zero()
                    && let Some(observer) = &self.observer
                {
                    observer.on_rate_limit_wait(operation, waited);
                }
            }
            let started = Instant::now();
            let result = self.attempt::<T>(operation, &url, body.as_deref()).await;
            let elapsed = started.elapsed();
            let outcome = match &result {
                Ok((status, _)) => CallOutcome {
                    status: Some(*status),
                    error: None,
                },
                Err(error) => CallOutcome {
                    status: error.status(),
                    error: Some(error.metric_label()),
                },
            };
            tracing::debug!(
                operation = operation.name(),
                attempt,
                status = outcome.status,
                error = outcome.error,
                elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                "cloud call"
            );
            if let Some(observer) = &self.observer {
                observer.on_call(operation, &outcome, elapsed);
            }
            let error = match result {
                Ok((_, response)) => return Ok(response),
                Err(error) => error,
            };
            if attempt >= policy.max_attempts || !may_retry(operation.retry(), &error) {
                return Err(error);
            }
            let server_wait = error.retry_after().unwrap_or(Duration::ZERO);
            if server_wait > policy.max_retry_after {
                return Err(error);
            }
            let jitter = policy.backoff.delay(attempt - 1, &mut rand::rng());
            let delay = jitter.max(server_wait);
            tracing::debug!(
                operation = operation.name(),
                next_attempt = attempt + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "retrying cloud call"
            );
            if let Some(observer) = &self.observer {
                observer.on_retry(operation, attempt + 1, &error, delay);
            }
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    fn url(
        &self,
        operation: Operation,
        args: &[&str],
        query: Option<&[(String, String)]>,
    ) -> Result<reqwest::Url, Error> {
        // An empty id would address a different route (`/instances//` is not an instance).
        if let Some(name) = operation
            .params()
            .zip(args)
            .find_map(|(name, value)| value.is_empty().then_some(name))
        {
            return Err(Error::InvalidRequest {
                operation,
                reason: format!("path argument {name} is empty"),
            });
        }
        let path = operation
            .render(args)
            .ok_or_else(|| Error::InvalidRequest {
                operation,
                reason: format!(
                    "expected {} path argument(s), got {}",
                    operation.params().count(),
                    args.len()
                ),
            })?;
        let mut url =
            reqwest::Url::parse(&format!("{}{path}", self.inner.base_url)).map_err(|err| {
                Error::InvalidRequest {
                    operation,
                    reason: format!("URL: {err}"),
                }
            })?;
        if let Some(pairs) = query.filter(|pairs| !pairs.is_empty()) {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        Ok(url)
    }

    /// One HTTP exchange, bounded by the configured timeout. Returns the status with the
    /// decoded answer.
    async fn attempt<T: DeserializeOwned>(
        &self,
        operation: Operation,
        url: &reqwest::Url,
        body: Option<&[u8]>,
    ) -> Result<(u16, ApiResponse<T>), Error> {
        let method = match operation.method() {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Delete => reqwest::Method::DELETE,
        };
        let mut request = self
            .inner
            .http
            .request(method, url.clone())
            .header(API_KEY_HEADER, self.inner.api_key_header.clone())
            .header(ACCEPT, "application/json");
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_vec());
        }
        let exchange = async {
            let mut response = request
                .send()
                .await
                .map_err(|err| self.transport_error(operation, err))?;
            let status = response.status().as_u16();
            let retry_after = parse_retry_after(response.headers());
            if response
                .content_length()
                .is_some_and(|len| len > MAX_RESPONSE_BYTES as u64)
            {
                return Err(oversized(operation, status, &[]));
            }
            // Sized once from the announced length (checked above), not grown by doubling.
            let announced = response.content_length().unwrap_or(0) as usize;
            let mut bytes = Vec::with_capacity(announced);
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|err| self.transport_error(operation, err))?
            {
                if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    return Err(oversized(operation, status, &bytes));
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((status, retry_after, bytes))
        };
        let (status, retry_after, bytes) =
            match tokio::time::timeout(self.inner.timeout, exchange).await {
                Ok(result) => result?,
                Err(_) => {
                    return Err(Error::Timeout {
                        operation,
                        after: self.inner.timeout,
                    });
                }
            };
        if (200..300).contains(&status) {
            // An empty success answer (e.g. 204) carries nothing beyond "it worked".
            let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
                br#"{"success": true}"#.to_vec()
            } else {
                bytes
            };
            let response = ApiResponse::<T>::from_json(&bytes).map_err(|err| Error::Decode {
                operation,
                status,
                reason: self.scrub(&err.to_string()),
                excerpt: self.scrub(&excerpt(&bytes)),
            })?;
            // A success status whose body says `"success": false` did not succeed; a body
            // without the flag is taken at its status.
            if !response.success
                && serde_json::from_slice::<SuccessFlag>(&bytes)
                    .is_ok_and(|flag| flag.success == Some(false))
            {
                let body = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or_default();
                return Err(Error::UnexpectedStatus {
                    operation,
                    status,
                    code: self.scrub(&body.code),
                    message: format!("success is false: {}", self.scrub(&body.message)),
                });
            }
            Ok((status, response))
        } else {
            Err(self.status_error(operation, status, retry_after, &bytes))
        }
    }

    fn transport_error(&self, operation: Operation, err: reqwest::Error) -> Error {
        if err.is_timeout() && !err.is_connect() {
            Error::Timeout {
                operation,
                after: self.inner.timeout,
            }
        } else {
            Error::Transport {
                operation,
                connected: !err.is_connect(),
                source: err.without_url(),
            }
        }
    }

    /// Maps a non-success answer to its error, keeping the server's message and code.
    fn status_error(
        &self,
        operation: Operation,
        status: u16,
        retry_after: Option<Duration>,
        bytes: &[u8],
    ) -> Error {
        let parsed = serde_json::from_slice::<ErrorBody>(bytes).ok();
        let code = self.scrub(parsed.as_ref().map_or("", |body| body.code.as_str()));
        let message = match parsed {
            Some(body) if !body.message.is_empty() => self.scrub(&body.message),
            _ if !bytes.is_empty() => self.scrub(&excerpt(bytes)),
            _ => reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|status| status.canonical_reason())
                .unwrap_or("no message")
                .to_owned(),
        };
        match status {
            401 => Error::Unauthorized {
                operation,
                code,
                message,
            },
            402 => Error::InsufficientCredit { operation, message },
            403 => Error::Forbidden {
                operation,
                code,
                message,
            },
            404 => Error::NotFound {
                operation,
                code,
                message,
            },
            409 => Error::Conflict {
                operation,
                code,
                message,
            },
            429 => Error::RateLimited {
                operation,
                retry_after,
                message,
            },
            400 | 413 | 422 => Error::BadRequest {
                operation,
                status,
                code,
                message,
            },
            500..=599 => Error::Server {
                operation,
                status,
                message,
            },
            _ => Error::UnexpectedStatus {
                operation,
                status,
                code,
                message,
            },
        }
    }

    /// Server-supplied text with every occurrence of the API key masked, so an answer that
    /// echoes the key cannot leak it into errors or logs.
    fn scrub(&self, text: &str) -> String {
        let key = self.inner.api_key.expose_secret();
        if key.is_empty() {
            text.to_owned()
        } else {
            text.replace(key, "***")
        }
    }
}

/// Makes sure rustls has a process-wide crypto provider (ring), which reqwest needs to build a client
/// (it panics otherwise). Keeps one that is already installed.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Just the envelope's `success` flag, telling an explicit `false` from a missing flag.
#[derive(serde::Deserialize)]
struct SuccessFlag {
    #[serde(default)]
    success: Option<bool>,
}

/// Whether a failed attempt may be repeated, given what repeating the operation does.
pub fn may_retry(retry: Retry, error: &Error) -> bool {
    match retry {
        Retry::Idempotent => error.is_retryable(),
        // Repeating could act twice unless the first request never reached the server.
        Retry::Unsafe => error.never_sent(),
        // The caller looks for the resource by name before creating again.
        Retry::BilledCreate => false,
    }
}

fn oversized(operation: Operation, status: u16, bytes: &[u8]) -> Error {
    Error::Decode {
        operation,
        status,
        reason: format!("response body exceeds {MAX_RESPONSE_BYTES} bytes"),
        excerpt: excerpt(bytes),
    }
}

fn encode<B: Serialize>(operation: Operation, request: &B) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(request).map_err(|err| Error::InvalidRequest {
        operation,
        reason: format!("request body: {err}"),
    })
}

/// The query parameters of a query struct: each field that is set, as text.
fn query_pairs<Q: Serialize>(
    operation: Operation,
    query: &Q,
) -> Result<Vec<(String, String)>, Error> {
    let invalid = |reason: String| Error::InvalidRequest { operation, reason };
    let value = serde_json::to_value(query).map_err(|err| invalid(format!("query: {err}")))?;
    let serde_json::Value::Object(fields) = value else {
        return Err(invalid("query is not a set of named fields".into()));
    };
    let mut pairs = Vec::with_capacity(fields.len());
    for (name, value) in fields {
        let text = match value {
            serde_json::Value::Null => continue,
            serde_json::Value::String(text) => text,
            serde_json::Value::Bool(flag) => flag.to_string(),
            serde_json::Value::Number(number) => number.to_string(),
            other => {
                return Err(invalid(format!(
                    "query parameter {name}: {other} is not a scalar"
                )));
            }
        };
        pairs.push((name, text));
    }
    Ok(pairs)
}

/// `Retry-After` as delta-seconds (integer or decimal) or an HTTP date.
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(text)
        .ok()?;
    let until = at.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(until).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers_with_retry_after(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("3")),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(&headers_with_retry_after("Sun, 06 Nov 1994 08:49:37 GMT")),
            Some(Duration::ZERO)
        );
        let future = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let http_date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&future)
            .unwrap();
        let parsed = parse_retry_after(&headers_with_retry_after(&http_date)).unwrap();
        assert!(parsed > Duration::from_secs(100) && parsed <= Duration::from_secs(120));
        assert_eq!(parse_retry_after(&headers_with_retry_after("-1")), None);
        assert_eq!(parse_retry_after(&headers_with_retry_after("soon")), None);
        assert_eq!(parse_retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn query_pairs_skip_unset_filters() {
        let query = VolumeListQuery {
            bootable: Some(true),
            region: Some("us-east-1".into()),
            tier: Some(Tier::Legacy),
            exclude_os_volumes: None,
        };
        let mut pairs = query_pairs(Operation::ListVolumes, &query).unwrap();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                ("bootable".to_owned(), "true".to_owned()),
                ("region".to_owned(), "us-east-1".to_owned()),
                ("tier".to_owned(), "legacy".to_owned()),
            ]
        );
        let billing = VolumeBillingQuery {
            min_cost: Some(1.5),
            page: Some(2),
            ..VolumeBillingQuery::default()
        };
        let mut pairs = query_pairs(Operation::GetVolumeBilling, &billing).unwrap();
        pairs.sort();
        assert_eq!(
            pairs,
            vec![
                ("min_cost".to_owned(), "1.5".to_owned()),
                ("page".to_owned(), "2".to_owned()),
            ]
        );
    }

    #[test]
    fn retry_decisions_follow_the_operation_class() {
        let op = Operation::GetInstance;
        let server = Error::Server {
            operation: op,
            status: 503,
            message: String::new(),
        };
        let timeout = Error::Timeout {
            operation: op,
            after: Duration::from_secs(1),
        };
        let conflict = Error::Conflict {
            operation: op,
            code: "INVALID_STATE".into(),
            message: String::new(),
        };
        assert!(may_retry(Retry::Idempotent, &server));
        assert!(may_retry(Retry::Idempotent, &timeout));
        assert!(!may_retry(Retry::Idempotent, &conflict));
        assert!(!may_retry(Retry::Unsafe, &server));
        assert!(!may_retry(Retry::Unsafe, &timeout));
        assert!(!may_retry(Retry::BilledCreate, &server));
        assert!(!may_retry(Retry::BilledCreate, &timeout));
    }

    /// Controllers spawn client calls on a multi-threaded runtime.
    #[test]
    fn client_and_its_futures_are_send_and_sync() {
        fn assert_send<T: Send>(_: &T) {}
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<CloudClient>();
        let client =
            CloudClient::new(ClientConfig::new("http://127.0.0.1:1", ApiKey::new("k"))).unwrap();
        assert_send(&client.get_balance());
        assert_send(&client.list_volumes(&VolumeListQuery::default()));
        assert_send(&client.restore_snapshot("s", "n"));
    }

    #[test]
    fn api_key_is_never_printed() {
        let key = ApiKey::new("very-secret-key");
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        assert_eq!(format!("{key}"), "ApiKey(***)");
        let config = ClientConfig::new("http://127.0.0.1:1", key);
        assert!(!format!("{config:?}").contains("very-secret-key"));
        let client = CloudClient::new(config).unwrap();
        assert!(!format!("{client:?}").contains("very-secret-key"));
    }

    #[test]
    fn bad_configuration_is_refused_without_echoing_the_key() {
        let bad_key = ApiKey::new("line\nbreak-secret");
        let err = CloudClient::new(ClientConfig::new("http://127.0.0.1:1", bad_key)).unwrap_err();
        assert!(matches!(err, Error::InvalidConfig { .. }));
        assert!(!err.to_string().contains("break-secret"));
        for url in ["not a url", "ftp://host/", "http://host/?q=1"] {
            let err = CloudClient::new(ClientConfig::new(url, ApiKey::new("k"))).unwrap_err();
            assert!(matches!(err, Error::InvalidConfig { .. }), "{url}");
        }
        let empty = CloudClient::new(ClientConfig::new("http://h/", ApiKey::new(""))).unwrap_err();
        assert!(matches!(empty, Error::InvalidConfig { .. }));
    }
}
