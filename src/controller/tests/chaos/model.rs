//! What the world holds: its teams and accounts, the objects the harness asked for and their
//! wanted specs, the resources made before the operator started, and the rules that keep a
//! random change from asking for something no operator could do.

use crate::support::NAMESPACE;
use crate::tenant::TENANT;
use gpucloud_simulator::{AccountSnapshot, Caller};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The second team with objects of its own: all of them on the second account.
pub const TEAM_C: &str = "team-c";
/// team-a's Secret holding its key to the second account.
pub const SECOND_ACCOUNT_SECRET: &str = "second-account";
/// team-c's Secret holding its key to the second account.
pub const TEAM_C_SECRET: &str = "cloud-credentials";

/// The simulator's accounts: the first (default credentials: team-a, and the tenant with a key
/// of its own) and the second (team-a through its Secret `second-account`, and team-c).
pub const ACCOUNTS: usize = 2;

/// Who made a call, from the key it carried: each team has its own key to each account it
/// uses, and the harness one of its own (`None` here).
pub fn team_of(caller: Caller) -> Option<&'static str> {
    match (caller.account, caller.key) {
        (_, 0) => Some(NAMESPACE),
        (0, 1) => Some(TENANT),
        (1, 1) => Some(TEAM_C),
        _ => None,
    }
}

/// The place of the harness's own key in each account's list.
pub const HARNESS_KEY: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    SshKey,
    Instance,
    Volume,
    Firewall,
    Snapshot,
    Image,
}

impl Kind {
    /// The kinds made from nothing but a spec; the tenant's hostile objects are of these.
    pub const BASIC: [Kind; 4] = [Kind::SshKey, Kind::Instance, Kind::Volume, Kind::Firewall];
    /// The kinds the tenant makes.
    pub const BASIC_AND_SNAPSHOT: [Kind; 5] = [
        Kind::SshKey,
        Kind::Instance,
        Kind::Volume,
        Kind::Firewall,
        Kind::Snapshot,
    ];
    pub const ALL: [Kind; 6] = [
        Kind::SshKey,
        Kind::Instance,
        Kind::Volume,
        Kind::Firewall,
        Kind::Snapshot,
        Kind::Image,
    ];

    pub fn prefix(self) -> &'static str {
        match self {
            Kind::SshKey => "key",
            Kind::Instance => "vm",
            Kind::Volume => "vol",
            Kind::Firewall => "fw",
            Kind::Snapshot => "snap",
            Kind::Image => "img",
        }
    }
}

pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::SshKey => "SshKey",
        Kind::Instance => "GpuInstance",
        Kind::Volume => "Volume",
        Kind::Firewall => "Firewall",
        Kind::Snapshot => "Snapshot",
        Kind::Image => "Image",
    }
}

/// `(id, cloud name)` of every resource of `kind` in an account.
pub fn cloud_ids(state: &AccountSnapshot, kind: Kind) -> Vec<(String, String)> {
    match kind {
        Kind::Instance => state
            .instances
            .iter()
            .map(|i| (i.instance_id.clone(), i.vm_name.clone()))
            .collect(),
        Kind::Volume => state
            .volumes
            .iter()
            .map(|v| (v.id.clone(), v.name.clone()))
            .collect(),
        Kind::Firewall => state
            .firewalls
            .iter()
            .map(|f| (f.id.clone(), f.name.clone()))
            .collect(),
        Kind::SshKey => state
            .ssh_keys
            .iter()
            .map(|k| (k.id.clone(), k.name.clone()))
            .collect(),
        Kind::Snapshot => state
            .snapshots
            .iter()
            .map(|s| (s.snapshot_id.clone(), s.name.clone()))
            .collect(),
        Kind::Image => state
            .images
            .iter()
            .map(|i| (i.id.clone(), i.name.clone()))
            .collect(),
    }
}

/// The start of every cloud name the operator gives an object of `namespace`.
pub fn team_mark(namespace: &str) -> String {
    format!("gco-{namespace}-")
}

/// Where an object lives and which account its credentials reach. An object refers only to
/// objects of its own group: another account's resources are not there to attach or copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Group {
    pub namespace: &'static str,
    pub account: usize,
}

impl Group {
    pub const TEAM_A: Group = Group {
        namespace: NAMESPACE,
        account: 0,
    };
    pub const TEAM_A_SECOND: Group = Group {
        namespace: NAMESPACE,
        account: 1,
    };
    pub const TEAM_C: Group = Group {
        namespace: TEAM_C,
        account: 1,
    };
    pub const ALL: [Group; 3] = [Group::TEAM_A, Group::TEAM_A_SECOND, Group::TEAM_C];

    /// The Secret its objects name in `spec.credentialsSecretRef` (none: the default).
    pub fn secret(self) -> Option<&'static str> {
        match (self.namespace, self.account) {
            (NAMESPACE, 0) => None,
            (NAMESPACE, _) => Some(SECOND_ACCOUNT_SECRET),
            _ => Some(TEAM_C_SECRET),
        }
    }
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@account{}", self.namespace, self.account)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What the operator may do with an object's resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Created (or adopted), changed and deleted with the object.
    Manage,
    /// `deletionPolicy: Orphan`: managed, and left in the cloud when the object goes.
    Orphan,
    /// `managementPolicy: ObserveOnly`: an adopted resource that is never changed.
    ObserveOnly,
}

/// An object the harness created and has not deleted, with what it asked for.
#[derive(Clone, Debug)]
pub struct Wanted {
    pub kind: Kind,
    pub group: Group,
    pub spec: Value,
    pub uid: String,
    /// The resource the harness made beforehand and this object adopted, by id.
    pub adopted: Option<String>,
    pub policy: Policy,
    /// An Image whose Snapshot was deleted: the cloud removed the image with its snapshot, so
    /// the Image must say so (`Stalled`, `SourceDeleted`) and own nothing.
    pub source_deleted: bool,
}

impl Wanted {
    /// The objects this one needs, by name in its namespace: to be created from (a snapshot's
    /// machine, a clone's volume, a restore's snapshot, an image's snapshot) or to be attached
    /// to (a volume's and a firewall's machines).
    pub fn references(&self) -> Vec<String> {
        let name = |value: &Value| value.as_str().map(str::to_string);
        let spec = &self.spec;
        let mut names = Vec::new();
        names.extend(name(&spec["instanceRef"]["name"]));
        names.extend(name(&spec["source"]["volumeRef"]["name"]));
        names.extend(name(&spec["source"]["snapshotRef"]["name"]));
        names.extend(name(&spec["snapshotRef"]["name"]));
        if let Some(refs) = spec["instanceRefs"].as_array() {
            names.extend(refs.iter().filter_map(|r| name(&r["name"])));
        }
        names
    }

    /// Whether other objects may refer to this one: resources left behind on purpose
    /// (`Orphan`) or never changed (`ObserveOnly`) are kept out of every relation, so what
    /// stays in the cloud after them is theirs alone.
    pub fn referable(&self) -> bool {
        self.policy == Policy::Manage && !self.source_deleted
    }
}

/// The objects that exist (as far as the harness asked) and their wanted specs.
#[derive(Default)]
pub struct Model {
    pub live: BTreeMap<ObjectKey, Wanted>,
}

impl Model {
    /// Live objects of `kind` in `group` others may refer to.
    pub fn referable(&self, group: Group, kind: Kind) -> Vec<ObjectKey> {
        self.live
            .iter()
            .filter(|(_, w)| w.kind == kind && w.group == group && w.referable())
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Live objects that refer to `key`.
    pub fn referrers(&self, key: &ObjectKey) -> Vec<ObjectKey> {
        self.live
            .iter()
            .filter(|(other, w)| {
                other.namespace == key.namespace && w.references().contains(&key.name)
            })
            .map(|(other, _)| other.clone())
            .collect()
    }

    /// `keys` and, transitively, every live object referring to one of them: a set that can
    /// be deleted at once without leaving a live object waiting for a deleted one.
    pub fn closed_under_referrers(&self, keys: Vec<ObjectKey>) -> BTreeSet<ObjectKey> {
        let mut closed: BTreeSet<ObjectKey> = BTreeSet::new();
        let mut pending = keys;
        while let Some(key) = pending.pop() {
            if closed.insert(key.clone()) {
                pending.extend(self.referrers(&key));
            }
        }
        closed
    }
}

/// A resource the harness made in the first account before the operator started, for a
/// team-a object to adopt through the `gpucloud.io/external-id` annotation.
#[derive(Clone, Debug)]
pub struct Preset {
    pub kind: Kind,
    pub id: String,
    /// How every object adopting it manages it (the same for the whole run).
    pub role: Policy,
    /// The object adopting it now.
    pub adopter: Option<ObjectKey>,
    /// The object that adopted it last: until that one is gone (its finalizer released) the
    /// preset is still its own, and another adopter would be refused (`AlreadyOwned`).
    pub released_by: Option<ObjectKey>,
    /// Whether an object recorded it: a `Manage` adopter then deletes it with itself.
    pub recorded: bool,
    /// Gone from the cloud (deleted with its `Manage` adopter).
    pub deleted: bool,
    /// The resource as made, without what time alone changes: an `ObserveOnly` one must stay so.
    pub view: Value,
}

/// A GpuInstance with `deletionPolicy: Snapshot` the harness deleted.
#[derive(Clone, Debug)]
pub struct FinalSnapshotOf {
    pub object: ObjectKey,
    pub account: usize,
    /// The machine it had recorded when the harness listed it before deleting it: exactly one
    /// final snapshot of it must be left. (One recorded later has at most one.)
    pub machine: Option<String>,
}

/// The final snapshots in an account (their description says so): id, source machine, status.
pub fn final_snapshots(
    state: &AccountSnapshot,
) -> Vec<(String, String, gpucloud_cloud::model::SnapshotStatus)> {
    state
        .snapshots
        .iter()
        .filter(|s| {
            s.description.starts_with(
                gpucloud_controller::kinds::gpu_instance::final_snapshot::DESCRIPTION_PREFIX,
            )
        })
        .map(|s| {
            (
                s.snapshot_id.clone(),
                s.instance_id.clone(),
                s.status.clone(),
            )
        })
        .collect()
}

/// A resource an object with `deletionPolicy: Orphan` leaves behind when it is deleted.
#[derive(Clone, Debug)]
pub struct Kept {
    pub object: ObjectKey,
    pub kind: Kind,
    pub account: usize,
    /// The cloud name the object's creates carry.
    pub cloud_name: String,
    /// The id it recorded before it was deleted: that resource must still be there.
    pub id: Option<String>,
}
