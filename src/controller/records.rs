//! The cloud's records as the observer sees them, and how each kind is listed.

use crate::observer::{CloudRecord, Lister};
use gpucloud_cloud::model::{Instance, SshKey};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::jiff::Timestamp;

fn parse_time(value: &str) -> Option<Timestamp> {
    value.parse().ok()
}

// === Instances ===

impl CloudRecord for Instance {
    fn id(&self) -> &str {
        &self.instance_id
    }
    fn name(&self) -> &str {
        &self.vm_name
    }
    fn state(&self) -> String {
        self.status.as_str().to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists instances.
pub struct Instances;

impl Lister for Instances {
    type Record = Instance;
    async fn list(client: CloudClient) -> Result<Vec<Instance>, CloudError> {
        Ok(client.list_instances().await?.instances)
    }
}

// === SSH keys ===

impl CloudRecord for SshKey {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn state(&self) -> String {
        // The cloud reports no state for keys: a listed key is usable.
        "available".to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists SSH keys.
pub struct SshKeys;

impl Lister for SshKeys {
    type Record = SshKey;
    async fn list(client: CloudClient) -> Result<Vec<SshKey>, CloudError> {
        Ok(client.list_ssh_keys().await?.ssh_keys)
    }
}
