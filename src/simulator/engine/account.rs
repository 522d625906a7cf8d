//! SSH keys, startup scripts, catalogs and pricing, and the AI chat with its usage.

use gpucloud_cloud::model;
use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey};

use super::{ApiResult, Engine, SimTime, format_time, validate_name};
use crate::catalog;
use crate::error::ApiError;

/// Largest startup script, in bytes.
pub const MAX_SCRIPT_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct SshKeyRecord {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    pub algorithm: String,
    pub generated: bool,
    pub created_at: SimTime,
    pub deleted_at: Option<SimTime>,
}

impl SshKeyRecord {
    pub fn view(&self) -> model::SshKey {
        let mut metadata = serde_json::Map::new();
        metadata.insert("fingerprint".into(), self.fingerprint.clone().into());
        metadata.insert("algorithm".into(), self.algorithm.clone().into());
        metadata.insert(
            "source".into(),
            if self.generated {
                "generated"
            } else {
                "imported"
            }
            .into(),
        );
        model::SshKey {
            id: self.id.clone(),
            name: self.name.clone(),
            public_key: self.public_key.clone(),
            created_at: format_time(self.created_at),
            metadata,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Script {
    pub id: String,
    pub name: String,
    pub description: String,
    pub content: String,
    pub created_at: SimTime,
    pub updated_at: SimTime,
    pub deleted_at: Option<SimTime>,
}

impl Script {
    pub fn view(&self) -> model::StartupScript {
        model::StartupScript {
            id: self.id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            content: self.content.clone(),
            created_at: format_time(self.created_at),
            updated_at: format_time(self.updated_at),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AiUsage {
    pub id: String,
    pub model: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost: f64,
    pub created_at: SimTime,
}

impl AiUsage {
    pub fn view(&self) -> model::AiUsageRecord {
        model::AiUsageRecord {
            id: self.id.clone(),
            model: self.model.clone(),
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            cost: self.cost,
            currency: catalog::CURRENCY.to_string(),
            created_at: format_time(self.created_at),
        }
    }
}

/// A created SSH key and, for a generated pair, its private key (returned once).
#[derive(Debug)]
pub struct CreatedSshKey {
    pub key: model::SshKey,
    pub private_key: Option<model::PrivateKeyPem>,
}

// === impl Engine: SSH keys ===

impl Engine {
    /// Imports `public_key`, or generates an ed25519 pair when it is absent. Names are unique.
    pub fn create_ssh_key(
        &mut self,
        request: &model::CreateSshKeyRequest,
        now: SimTime,
    ) -> ApiResult<CreatedSshKey> {
        validate_name("name", &request.name)?;
        if self
            .ssh_keys
            .values()
            .any(|k| k.deleted_at.is_none() && k.name == request.name)
        {
            return Err(ApiError::DuplicateName {
                message: format!("an SSH key named {:?} already exists", request.name),
            });
        }
        let (public, private_key) = match &request.public_key {
            Some(text) => {
                let public = PublicKey::from_openssh(text.trim()).map_err(|_| {
                    ApiError::validation(
                        "public_key: not an OpenSSH public key (expected e.g. \"ssh-ed25519 AAAA... comment\")",
                    )
                })?;
                (public, None)
            }
            None => {
                let mut private =
                    PrivateKey::random(&mut ssh_key::rand_core::OsRng, ssh_key::Algorithm::Ed25519)
                        .map_err(|_| ApiError::Internal {
                            message: "key generation failed".to_string(),
                        })?;
                private.set_comment(request.name.as_str());
                let pem = private
                    .to_openssh(LineEnding::LF)
                    .map_err(|_| ApiError::Internal {
                        message: "key encoding failed".to_string(),
                    })?;
                let pem = model::PrivateKeyPem::new(pem.as_str());
                (private.public_key().clone(), Some(pem))
            }
        };
        let public_key = public.to_openssh().map_err(|_| ApiError::Internal {
            message: "key encoding failed".to_string(),
        })?;
        let id = self.new_id("key");
        let record = SshKeyRecord {
            id: id.clone(),
            name: request.name.clone(),
            public_key,
            fingerprint: public.fingerprint(HashAlg::Sha256).to_string(),
            algorithm: public.algorithm().as_str().to_string(),
            generated: private_key.is_some(),
            created_at: now,
            deleted_at: None,
        };
        let key = record.view();
        self.ssh_keys.insert(id, record);
        Ok(CreatedSshKey { key, private_key })
    }

    fn live_ssh_key(&self, id: &str) -> ApiResult<&SshKeyRecord> {
        self.ssh_keys
            .get(id)
            .filter(|k| k.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("SSH key", id))
    }

    pub fn get_ssh_key(&self, id: &str) -> ApiResult<model::SshKey> {
        Ok(self.live_ssh_key(id)?.view())
    }

    pub fn list_ssh_keys(&self, now: SimTime) -> Vec<model::SshKey> {
        self.ssh_keys
            .values()
            .filter(|k| self.listed(k.created_at, k.deleted_at, now))
            .map(SshKeyRecord::view)
            .collect()
    }

    pub fn delete_ssh_key(&mut self, id: &str, now: SimTime) -> ApiResult<model::DeletedBody> {
        self.live_ssh_key(id)?;
        if let Some(key) = self.ssh_keys.get_mut(id) {
            key.deleted_at = Some(now);
        }
        Ok(model::DeletedBody { id: id.to_string() })
    }
}

// === impl Engine: startup scripts ===

fn validate_script_content(content: &str) -> ApiResult<()> {
    if content.is_empty() {
        return Err(ApiError::validation("content: must not be empty"));
    }
    if content.len() > MAX_SCRIPT_BYTES {
        return Err(ApiError::validation(format!(
            "content: at most {MAX_SCRIPT_BYTES} bytes allowed"
        )));
    }
    Ok(())
}

fn validate_description(description: &str) -> ApiResult<()> {
    if description.chars().count() > 1024 {
        return Err(ApiError::validation(
            "description: at most 1024 characters allowed",
        ));
    }
    Ok(())
}

impl Engine {
    pub fn create_script(
        &mut self,
        request: &model::CreateStartupScriptRequest,
        now: SimTime,
    ) -> ApiResult<model::StartupScript> {
        validate_name("name", &request.name)?;
        validate_script_content(&request.content)?;
        validate_description(&request.description)?;
        let id = self.new_id("script");
        let script = Script {
            id: id.clone(),
            name: request.name.clone(),
            description: request.description.clone(),
            content: request.content.clone(),
            created_at: now,
            updated_at: now,
            deleted_at: None,
        };
        let view = script.view();
        self.scripts.insert(id, script);
        Ok(view)
    }

    fn live_script_mut(&mut self, id: &str) -> ApiResult<&mut Script> {
        self.scripts
            .get_mut(id)
            .filter(|s| s.deleted_at.is_none())
            .ok_or_else(|| ApiError::not_found("startup script", id))
    }

    pub fn get_script(&mut self, id: &str) -> ApiResult<model::StartupScript> {
        Ok(self.live_script_mut(id)?.view())
    }

    pub fn list_scripts(&self, now: SimTime) -> Vec<model::StartupScript> {
        self.scripts
            .values()
            .filter(|s| self.listed(s.created_at, s.deleted_at, now))
            .map(Script::view)
            .collect()
    }

    pub fn update_script(
        &mut self,
        id: &str,
        request: &model::UpdateStartupScriptRequest,
        now: SimTime,
    ) -> ApiResult<model::StartupScript> {
        if let Some(name) = &request.name {
            validate_name("name", name)?;
        }
        if let Some(content) = &request.content {
            validate_script_content(content)?;
        }
        if let Some(description) = &request.description {
            validate_description(description)?;
        }
        let script = self.live_script_mut(id)?;
        if let Some(name) = &request.name {
            script.name = name.clone();
        }
        if let Some(content) = &request.content {
            script.content = content.clone();
        }
        if let Some(description) = &request.description {
            script.description = description.clone();
        }
        script.updated_at = now;
        Ok(script.view())
    }

    pub fn delete_script(&mut self, id: &str, now: SimTime) -> ApiResult<model::DeletedBody> {
        let script = self.live_script_mut(id)?;
        script.deleted_at = Some(now);
        Ok(model::DeletedBody { id: id.to_string() })
    }

    /// Deletes the scripts that exist and reports the others; never fails on unknown ids.
    pub fn delete_scripts(
        &mut self,
        ids: &[String],
        now: SimTime,
    ) -> model::DeleteStartupScriptsBody {
        let mut body = model::DeleteStartupScriptsBody::default();
        for id in ids {
            match self.delete_script(id, now) {
                Ok(_) => body.deleted_ids.push(id.clone()),
                Err(_) => body.not_found_ids.push(id.clone()),
            }
        }
        body
    }
}

// === impl Engine: catalogs, pricing, balance ===

impl Engine {
    pub fn gpu_stock(&mut self, now: SimTime) -> Vec<model::GpuStock> {
        self.settle(now);
        catalog::REGIONS
            .iter()
            .flat_map(|(region, _)| catalog::GPU_TYPES.iter().map(move |gpu| (*region, gpu.id)))
            .map(|(region, gpu)| model::GpuStock {
                gpu_type: gpu.to_string(),
                region: region.to_string(),
                available: self.gpu_available(gpu, region, now),
            })
            .collect()
    }

    pub fn gpu_specs(&self) -> Vec<model::GpuSpec> {
        catalog::GPU_TYPES
            .iter()
            .map(|gpu| model::GpuSpec {
                gpu_type: gpu.id.to_string(),
                name: gpu.name.to_string(),
                gpu_memory_gb: gpu.memory_gb,
                ram_gb_per_gpu: gpu.ram_gb_per_gpu,
                vcpus_per_gpu: gpu.vcpus_per_gpu,
                storage_gb_per_gpu: gpu.storage_gb_per_gpu,
                gpu_counts: gpu.gpu_counts(),
                price_per_gpu_hour: self.gpu_price(gpu),
                currency: catalog::CURRENCY.to_string(),
            })
            .collect()
    }

    pub fn regions() -> Vec<model::Region> {
        catalog::REGIONS
            .iter()
            .map(|(id, name)| model::Region {
                id: id.to_string(),
                name: name.to_string(),
                available: true,
            })
            .collect()
    }

    pub fn os_images() -> Vec<model::OsImage> {
        catalog::OS_IMAGES
            .iter()
            .map(|(id, name)| {
                let mut parts = id.splitn(3, '-');
                let os = parts.next().unwrap_or_default();
                let version = parts.next().unwrap_or_default();
                model::OsImage {
                    id: id.to_string(),
                    name: name.to_string(),
                    os: os.to_string(),
                    version: version.to_string(),
                    description: name.to_string(),
                }
            })
            .collect()
    }

    pub fn volume_types() -> Vec<model::VolumeType> {
        catalog::VOLUME_TYPES
            .iter()
            .map(|(id, price, description)| model::VolumeType {
                id: id.to_string(),
                name: id.to_string(),
                description: description.to_string(),
                price_per_gb_hour: *price,
                currency: catalog::CURRENCY.to_string(),
                min_size_gb: 1,
                max_size_gb: super::volumes::MAX_VOLUME_GB,
            })
            .collect()
    }

    pub fn protocols() -> Vec<model::Protocol> {
        catalog::PROTOCOLS
            .iter()
            .map(|p| model::Protocol::from_wire(p))
            .collect()
    }

    pub fn pricing(&self) -> model::PricingBody {
        model::PricingBody {
            currency: catalog::CURRENCY.to_string(),
            gpus: catalog::GPU_TYPES
                .iter()
                .map(|gpu| model::GpuPrice {
                    gpu_type: gpu.id.to_string(),
                    price_per_gpu_hour: self.gpu_price(gpu),
                })
                .collect(),
            storage: catalog::VOLUME_TYPES
                .iter()
                .map(|(id, price, _)| model::StoragePrice {
                    volume_type: id.to_string(),
                    price_per_gb_hour: *price,
                })
                .collect(),
            snapshot_price_per_gb_hour: catalog::SNAPSHOT_PRICE_PER_GB_HOUR,
            image_price_per_gb_hour: catalog::IMAGE_PRICE_PER_GB_HOUR,
        }
    }

    pub fn quote(&self, request: &model::PriceQuoteRequest) -> ApiResult<model::PriceQuoteBody> {
        let gpu = catalog::gpu_type(&request.gpu_type).ok_or_else(|| {
            ApiError::validation(format!("gpu_type: unknown GPU type {:?}", request.gpu_type))
        })?;
        gpu.check_count(request.gpu_count)
            .map_err(ApiError::validation)?;
        let hours = request.hours.unwrap_or(1.0);
        if !(hours.is_finite() && hours > 0.0 && hours <= 24.0 * 366.0) {
            return Err(ApiError::validation(
                "hours: must be a positive number of at most one year",
            ));
        }
        let hourly_rate = self.gpu_price(gpu) * f64::from(request.gpu_count);
        Ok(model::PriceQuoteBody {
            gpu_type: gpu.id.to_string(),
            gpu_count: request.gpu_count,
            hours,
            hourly_rate,
            total_cost: hourly_rate * hours,
            currency: catalog::CURRENCY.to_string(),
        })
    }
}

// === impl Engine: AI chat ===

/// Checks every chat parameter against the models listing's ranges.
fn validate_chat_parameters(request: &model::ChatRequest) -> ApiResult<()> {
    let given: [(&str, Option<f64>); 6] = [
        ("max_tokens", request.max_tokens.map(|v| v as f64)),
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("top_k", request.top_k.map(|v| v as f64)),
        ("presence_penalty", request.presence_penalty),
        ("repetition_penalty", request.repetition_penalty),
    ];
    for (name, value) in given {
        let Some(value) = value else { continue };
        let Some(parameter) = catalog::AI_PARAMETERS.iter().find(|p| p.name == name) else {
            continue;
        };
        if !value.is_finite() || value < parameter.min || value > parameter.max {
            return Err(ApiError::validation(format!(
                "{name}: {value} is outside the allowed range {} to {}",
                parameter.min, parameter.max
            )));
        }
    }
    Ok(())
}

/// Rough token count: one token per four characters, at least one per message.
fn count_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

impl Engine {
    pub fn ai_models(authenticated_user: &str) -> model::AiModelsBody {
        model::AiModelsBody {
            models: catalog::AI_MODELS
                .iter()
                .map(|(id, name, price)| model::AiModel {
                    id: id.to_string(),
                    name: name.to_string(),
                    price_per_million_tokens: *price,
                    currency: catalog::CURRENCY.to_string(),
                })
                .collect(),
            currency: catalog::CURRENCY.to_string(),
            minimum_balance: catalog::AI_MINIMUM_BALANCE,
            parameters: catalog::AI_PARAMETERS
                .iter()
                .map(|p| {
                    (
                        p.name.to_string(),
                        model::AiParameter {
                            description: p.description.to_string(),
                            value_type: p.kind.as_str().to_string(),
                            default: p.default,
                            range: [p.min, p.max],
                        },
                    )
                })
                .collect(),
            authentication_type: "api_key".to_string(),
            authenticated_user: authenticated_user.to_string(),
        }
    }

    /// Answers with a deterministic reply, charges the tokens at the model's price and
    /// records the usage.
    pub fn chat(
        &mut self,
        request: &model::ChatRequest,
        now: SimTime,
    ) -> ApiResult<model::ChatBody> {
        let (model_id, _, price) = catalog::ai_model(&request.model).ok_or_else(|| {
            ApiError::validation(format!("model: unknown model {:?}", request.model))
        })?;
        if request.messages.is_empty() {
            return Err(ApiError::validation(
                "messages: at least one message is required",
            ));
        }
        for message in &request.messages {
            if !matches!(message.role.as_str(), "system" | "user" | "assistant") {
                return Err(ApiError::validation(format!(
                    "messages: role {:?} is not one of system, user, assistant",
                    message.role
                )));
            }
        }
        validate_chat_parameters(request)?;
        self.settle(now);
        let balance = self.balance(now);
        if balance < catalog::AI_MINIMUM_BALANCE {
            return Err(ApiError::InsufficientCredit {
                message: format!(
                    "insufficient credit: balance {balance:.2} is below the minimum of {:.2} {} for AI chat",
                    catalog::AI_MINIMUM_BALANCE,
                    catalog::CURRENCY
                ),
            });
        }
        let prompt_tokens: u64 = request
            .messages
            .iter()
            .map(|m| count_tokens(&m.content))
            .sum();
        let last = request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| m.content.as_str())
            .unwrap_or_default();
        let mut reply = format!("Simulated reply from {model_id} to: {last}");
        let max_tokens = request
            .max_tokens
            .and_then(|m| u64::try_from(m).ok())
            .unwrap_or(u64::MAX);
        if count_tokens(&reply) > max_tokens {
            let keep = usize::try_from(max_tokens.saturating_mul(4)).unwrap_or(usize::MAX);
            reply = reply.chars().take(keep).collect();
        }
        let completion_tokens = count_tokens(&reply).min(max_tokens);
        let total = prompt_tokens + completion_tokens;
        let cost = total as f64 * price / 1_000_000.0;
        self.charge(cost);
        let id = self.new_id("chat");
        self.ai_usage.push(AiUsage {
            id,
            model: model_id.to_string(),
            prompt_tokens,
            completion_tokens,
            cost,
            created_at: now,
        });
        Ok(model::ChatBody {
            model: model_id.to_string(),
            reply: model::ChatMessage {
                role: "assistant".to_string(),
                content: reply,
            },
            usage: model::TokenUsage {
                prompt_tokens,
                completion_tokens,
                total_tokens: total,
            },
            cost,
            currency: catalog::CURRENCY.to_string(),
        })
    }

    pub fn ai_usage_summary(&self) -> model::AiUsageSummary {
        let mut summary = model::AiUsageSummary {
            currency: catalog::CURRENCY.to_string(),
            ..model::AiUsageSummary::default()
        };
        for usage in &self.ai_usage {
            summary.total_requests += 1;
            summary.prompt_tokens += usage.prompt_tokens;
            summary.completion_tokens += usage.completion_tokens;
            summary.total_tokens += usage.prompt_tokens + usage.completion_tokens;
            summary.total_cost += usage.cost;
            match summary.by_model.iter_mut().find(|m| m.model == usage.model) {
                Some(entry) => {
                    entry.requests += 1;
                    entry.total_tokens += usage.prompt_tokens + usage.completion_tokens;
                    entry.total_cost += usage.cost;
                }
                None => summary.by_model.push(model::AiModelUsage {
                    model: usage.model.clone(),
                    requests: 1,
                    total_tokens: usage.prompt_tokens + usage.completion_tokens,
                    total_cost: usage.cost,
                }),
            }
        }
        summary
    }

    /// Newest first.
    pub fn ai_usage_history(&self) -> Vec<model::AiUsageRecord> {
        self.ai_usage.iter().rev().map(AiUsage::view).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn import(name: &str, key: Option<&str>) -> model::CreateSshKeyRequest {
        model::CreateSshKeyRequest {
            name: name.to_string(),
            public_key: key.map(str::to_string),
        }
    }

    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGb2Tn+1ELHMxMM+y8aO3O8f2Hn1WNA6T6Q0eG5QY3f1 user@host";

    #[test]
    fn ssh_keys_import_generate_and_refuse_duplicates() {
        let mut engine = engine();
        let imported = engine
            .create_ssh_key(&import("laptop", Some(ED25519)), secs(0))
            .unwrap();
        assert!(imported.private_key.is_none());
        assert!(imported.key.public_key.starts_with("ssh-ed25519 AAAA"));
        assert_eq!(imported.key.metadata["source"], "imported");
        assert!(
            imported.key.metadata["fingerprint"]
                .as_str()
                .unwrap()
                .starts_with("SHA256:")
        );

        let err = engine
            .create_ssh_key(&import("laptop", Some(ED25519)), secs(1))
            .unwrap_err();
        assert_eq!(err.code(), "DUPLICATE_NAME");
        assert_eq!(err.status(), 409);

        let err = engine
            .create_ssh_key(&import("bad", Some("ssh-ed25519 not-base64!")), secs(1))
            .unwrap_err();
        assert!(err.to_string().starts_with("public_key:"));

        let generated = engine
            .create_ssh_key(&import("gen", None), secs(2))
            .unwrap();
        let pem = generated.private_key.unwrap();
        let private = PrivateKey::from_openssh(pem.expose()).unwrap();
        assert_eq!(
            private.public_key().to_openssh().unwrap(),
            generated.key.public_key
        );
        // The private key is never stored.
        let stored = format!("{:?}", engine.ssh_keys);
        assert!(!stored.contains("PRIVATE KEY"));
        assert_eq!(engine.list_ssh_keys(secs(3)).len(), 2);

        // A deleted key's name can be used again.
        engine.delete_ssh_key(&imported.key.id, secs(4)).unwrap();
        assert!(
            engine
                .create_ssh_key(&import("laptop", Some(ED25519)), secs(5))
                .is_ok()
        );
    }

    fn chat_request(model: &str) -> model::ChatRequest {
        model::ChatRequest {
            model: model.to_string(),
            messages: vec![model::ChatMessage {
                role: "user".to_string(),
                content: "hello there, how are you".to_string(),
            }],
            ..model::ChatRequest::default()
        }
    }

    #[test]
    fn chat_validates_ranges_charges_and_records_usage() {
        let mut engine = engine();
        let models = Engine::ai_models("user");
        assert_eq!(models.parameters["max_tokens"].range, [1.0, 32768.0]);
        assert_eq!(models.parameters["top_k"].default, Some(-1.0));
        assert_eq!(models.parameters["top_p"].default, None);
        assert_eq!(models.parameters["repetition_penalty"].range, [-2.0, 2.0]);

        for (field, request) in [
            (
                "temperature",
                model::ChatRequest {
                    temperature: Some(2.5),
                    ..chat_request("mistral-7b-instruct")
                },
            ),
            (
                "max_tokens",
                model::ChatRequest {
                    max_tokens: Some(0),
                    ..chat_request("mistral-7b-instruct")
                },
            ),
            (
                "top_k",
                model::ChatRequest {
                    top_k: Some(201),
                    ..chat_request("mistral-7b-instruct")
                },
            ),
            (
                "top_p",
                model::ChatRequest {
                    top_p: Some(-0.1),
                    ..chat_request("mistral-7b-instruct")
                },
            ),
            (
                "presence_penalty",
                model::ChatRequest {
                    presence_penalty: Some(-2.1),
                    ..chat_request("mistral-7b-instruct")
                },
            ),
            ("model", chat_request("gpt-99")),
        ] {
            let err = engine.chat(&request, secs(0)).unwrap_err();
            assert_eq!(err.code(), "VALIDATION_ERROR");
            assert!(err.to_string().starts_with(field), "{err}");
        }

        let before = engine.balance(secs(0));
        let answer = engine
            .chat(&chat_request("llama-3.1-70b-instruct"), secs(0))
            .unwrap();
        assert_eq!(
            answer.usage.total_tokens,
            answer.usage.prompt_tokens + answer.usage.completion_tokens
        );
        let expected = answer.usage.total_tokens as f64 * 0.90 / 1e6;
        assert!((answer.cost - expected).abs() < 1e-12);
        assert!((before - engine.balance(secs(0)) - expected).abs() < 1e-12);
        let summary = engine.ai_usage_summary();
        assert_eq!(summary.total_requests, 1);
        assert_eq!(summary.by_model[0].model, "llama-3.1-70b-instruct");
        assert_eq!(engine.ai_usage_history().len(), 1);

        let limited = model::ChatRequest {
            max_tokens: Some(2),
            ..chat_request("mistral-7b-instruct")
        };
        assert_eq!(
            engine
                .chat(&limited, secs(0))
                .unwrap()
                .usage
                .completion_tokens,
            2
        );

        engine.set_balance(0.5, secs(1));
        let err = engine
            .chat(&chat_request("mistral-7b-instruct"), secs(1))
            .unwrap_err();
        assert_eq!(err.code(), "INSUFFICIENT_CREDIT");
        assert_eq!(err.status(), 402);
    }

    #[test]
    fn scripts_create_update_and_delete_many() {
        let mut engine = engine();
        let script = engine
            .create_script(
                &model::CreateStartupScriptRequest {
                    name: "init".to_string(),
                    content: "#!/bin/sh\necho hi".to_string(),
                    description: String::new(),
                },
                secs(0),
            )
            .unwrap();
        let updated = engine
            .update_script(
                &script.id,
                &model::UpdateStartupScriptRequest {
                    content: Some("echo bye".to_string()),
                    ..Default::default()
                },
                secs(5),
            )
            .unwrap();
        assert_eq!(updated.content, "echo bye");
        assert_eq!(updated.name, "init");
        assert_ne!(updated.updated_at, updated.created_at);
        let body = engine.delete_scripts(&[script.id.clone(), "script-x".to_string()], secs(6));
        assert_eq!(body.deleted_ids, vec![script.id.clone()]);
        assert_eq!(body.not_found_ids, vec!["script-x".to_string()]);
        assert_eq!(
            engine.get_script(&script.id).unwrap_err().code(),
            "NOT_FOUND"
        );
    }

    #[test]
    fn stock_reflects_instances_and_quote_prices() {
        let mut engine = engine();
        assert!(engine.gpu_stock(secs(0)).iter().all(|s| s.available == 16));
        let quote = engine
            .quote(&model::PriceQuoteRequest {
                gpu_type: "H100-80G".to_string(),
                gpu_count: 2,
                hours: Some(10.0),
            })
            .unwrap();
        assert!((quote.total_cost - 59.8).abs() < 1e-9);
        assert!(
            engine
                .quote(&model::PriceQuoteRequest {
                    gpu_type: "H100-80G".to_string(),
                    gpu_count: 2,
                    hours: Some(-1.0),
                })
                .unwrap_err()
                .to_string()
                .starts_with("hours:")
        );
    }
}
