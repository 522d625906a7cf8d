//! The cloud's records as the observer sees them, and how each kind is listed.

use crate::observer::{CloudRecord, Lister};
use gpucloud_cloud::model::{Firewall, Image, Instance, Snapshot, SshKey, Volume, VolumeListQuery};
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

// === Volumes ===

impl CloudRecord for Volume {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn state(&self) -> String {
        self.status.as_str().to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists data volumes; the boot volumes of instances belong to their instances.
pub struct Volumes;

impl Lister for Volumes {
    type Record = Volume;
    async fn list(client: CloudClient) -> Result<Vec<Volume>, CloudError> {
        let query = VolumeListQuery {
            exclude_os_volumes: Some(true),
            ..VolumeListQuery::default()
        };
        Ok(client.list_volumes(&query).await?.volumes)
    }
}

// === Snapshots ===

impl CloudRecord for Snapshot {
    fn id(&self) -> &str {
        &self.snapshot_id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn state(&self) -> String {
        self.status.as_str().to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists snapshots.
pub struct Snapshots;

impl Lister for Snapshots {
    type Record = Snapshot;
    async fn list(client: CloudClient) -> Result<Vec<Snapshot>, CloudError> {
        Ok(client.list_snapshots().await?.snapshots)
    }
}

// === Custom images ===

impl CloudRecord for Image {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn state(&self) -> String {
        self.status.as_str().to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists custom images.
pub struct Images;

impl Lister for Images {
    type Record = Image;
    async fn list(client: CloudClient) -> Result<Vec<Image>, CloudError> {
        Ok(client.list_images().await?.images)
    }
}

// === Firewalls ===

impl CloudRecord for Firewall {
    fn id(&self) -> &str {
        &self.id
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn state(&self) -> String {
        // The cloud reports no state for firewalls: a listed firewall is in force.
        "available".to_string()
    }
    fn created_at(&self) -> Option<Timestamp> {
        parse_time(&self.created_at)
    }
}

/// Lists firewalls.
pub struct Firewalls;

impl Lister for Firewalls {
    type Record = Firewall;
    async fn list(client: CloudClient) -> Result<Vec<Firewall>, CloudError> {
        Ok(client.list_firewalls().await?.firewalls)
    }
}
