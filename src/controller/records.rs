//! The cloud's records as the observer sees them, and how each kind is listed.

use crate::observer::{CloudRecord, Lister};
use gpucloud_cloud::model::{Firewall, Image, Instance, Snapshot, SshKey, Volume, VolumeListQuery};
use gpucloud_cloud::{CloudClient, Error as CloudError};
use k8s_openapi::jiff::Timestamp;

/// A record's id and name fields, and its state: the record's `status` field, or a fixed
/// state for resources the cloud reports none for.
macro_rules! cloud_record {
    ($record:ty, id: $id:ident, name: $name:ident, state: status) => {
        cloud_record!(@impl $record, $id, $name, |r: &$record| r.status.as_str().to_string());
    };
    ($record:ty, id: $id:ident, name: $name:ident, state: $fixed:literal) => {
        cloud_record!(@impl $record, $id, $name, |_: &$record| $fixed.to_string());
    };
    (@impl $record:ty, $id:ident, $name:ident, $state:expr) => {
        impl CloudRecord for $record {
            fn id(&self) -> &str {
                &self.$id
            }
            fn name(&self) -> &str {
                &self.$name
            }
            fn state(&self) -> String {
                ($state)(self)
            }
            fn created_at(&self) -> Option<Timestamp> {
                parse_time(&self.created_at)
            }
        }
    };
}

fn parse_time(value: &str) -> Option<Timestamp> {
    value.parse().ok()
}

/// A read by id, with the cloud's 404 as `None`.
fn found<R>(read: Result<R, CloudError>) -> Result<Option<R>, CloudError> {
    match read {
        Ok(record) => Ok(Some(record)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

// === Instances ===

cloud_record!(Instance, id: instance_id, name: vm_name, state: status);

/// Lists instances.
pub struct Instances;

impl Lister for Instances {
    type Record = Instance;
    async fn list(client: CloudClient) -> Result<Vec<Instance>, CloudError> {
        Ok(client.list_instances().await?.instances)
    }
    async fn get(client: CloudClient, id: String) -> Result<Option<Instance>, CloudError> {
        found(client.get_instance(&id).await)
    }
}

// === SSH keys ===

// The cloud reports no state for keys: a listed key is usable.
cloud_record!(SshKey, id: id, name: name, state: "available");

/// Lists SSH keys.
pub struct SshKeys;

impl Lister for SshKeys {
    type Record = SshKey;
    async fn list(client: CloudClient) -> Result<Vec<SshKey>, CloudError> {
        Ok(client.list_ssh_keys().await?.ssh_keys)
    }
    async fn get(client: CloudClient, id: String) -> Result<Option<SshKey>, CloudError> {
        found(client.get_ssh_key(&id).await)
    }
}

// === Volumes ===

cloud_record!(Volume, id: id, name: name, state: status);

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
    async fn get(client: CloudClient, id: String) -> Result<Option<Volume>, CloudError> {
        found(client.get_volume(&id).await)
    }
}

// === Snapshots ===

cloud_record!(Snapshot, id: snapshot_id, name: name, state: status);

/// Lists snapshots.
pub struct Snapshots;

impl Lister for Snapshots {
    type Record = Snapshot;
    async fn list(client: CloudClient) -> Result<Vec<Snapshot>, CloudError> {
        Ok(client.list_snapshots().await?.snapshots)
    }
    async fn get(client: CloudClient, id: String) -> Result<Option<Snapshot>, CloudError> {
        found(client.get_snapshot(&id).await)
    }
}

// === Custom images ===

cloud_record!(Image, id: id, name: name, state: status);

/// Lists custom images.
pub struct Images;

impl Lister for Images {
    type Record = Image;
    async fn list(client: CloudClient) -> Result<Vec<Image>, CloudError> {
        Ok(client.list_images().await?.images)
    }
    async fn get(client: CloudClient, id: String) -> Result<Option<Image>, CloudError> {
        found(client.get_image(&id).await)
    }
}

// === Firewalls ===

// The cloud reports no state for firewalls: a listed firewall is in force.
cloud_record!(Firewall, id: id, name: name, state: "available");

/// Lists firewalls.
pub struct Firewalls;

impl Lister for Firewalls {
    type Record = Firewall;
    async fn list(client: CloudClient) -> Result<Vec<Firewall>, CloudError> {
        Ok(client.list_firewalls().await?.firewalls)
    }
    async fn get(client: CloudClient, id: String) -> Result<Option<Firewall>, CloudError> {
        found(client.get_firewall(&id).await)
    }
}
