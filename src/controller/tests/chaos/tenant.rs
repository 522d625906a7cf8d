//! A hostile tenant: namespace `team-b` (not labelled for adoption) shares the first cloud
//! account with `team-a` (through a key of its own, so the simulator's ledger tells its calls
//! apart), and during the fault phase tries to take the other teams' resources (team-a's in
//! both accounts, team-c's) and the foreign ones by id: by the adoption annotation, by a
//! snapshot's `spec.instanceId`, by booting another's image or snapshot through
//! `spec.osImage`, by adopting what no object of the victims' records (a machine's boot
//! volume, a final snapshot its machine left behind), and by writing another's id (and cloud
//! name) into its own objects' status.
//! Every attempt must be refused without a hostile object ever recording another's resource
//! (a forged status aside: that record is the tenant's own write), no call the tenant's key
//! makes may name another's resource (the ledger check), and deleting the hostile objects must
//! touch nothing but the tenant's own resources.

use crate::model::{ACCOUNTS, Kind, ObjectKey, TEAM_C, cloud_ids, kind_name, team_mark};
use crate::support::{Env, NAMESPACE};
use gpucloud_api::{
    CloudStatus, EXTERNAL_ID_ANNOTATION, Firewall, GpuInstance, GpuInstancePool, Image, Managed,
    Snapshot, SshKey, Volume, condition_type,
};
use gpucloud_controller::flow::conditions::reason;
use gpucloud_controller::flow::kind::Watched;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The tenant's namespace: not labelled for adoption.
pub const TENANT: &str = "team-b";
/// The tenant's Secret, holding its own key to the first account; every object it makes names
/// it.
pub const TENANT_SECRET: &str = "own-key";
/// The namespaces whose resources the tenant goes after.
const VICTIMS: [&str; 2] = [NAMESPACE, TEAM_C];

/// What a hostile object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Of {
    /// One of the four kinds team-a has, named by the external-id annotation.
    Managed(Kind),
    /// A Snapshot naming a machine by `spec.instanceId` (and, adopting a leftover, a snapshot
    /// by the external-id annotation).
    Snapshot,
}

impl Of {
    fn kind(self) -> Kind {
        match self {
            Of::Managed(kind) => kind,
            Of::Snapshot => Kind::Snapshot,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Of::Managed(kind) => kind_name(kind),
            Of::Snapshot => "Snapshot",
        }
    }
}

/// Whose resource a hostile object names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// Not yet: an ordinary object of the tenant's, to be turned hostile later.
    None,
    /// A resource of team-a's or team-c's (recorded by one of their objects, or read from an
    /// account).
    TeamA(String),
    /// One of the foreign resources the operator did not create.
    Foreign(String),
}

impl Target {
    fn id(&self) -> Option<&str> {
        match self {
            Target::None => None,
            Target::TeamA(id) | Target::Foreign(id) => Some(id),
        }
    }
}

/// How a hostile object names its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum How {
    /// By the external-id annotation, or a snapshot's `spec.instanceId` (or not yet: a decoy).
    Spec,
    /// By `spec.osImage`: a machine booting another's image or snapshot.
    Boot,
    /// By its status: `externalId` (and sometimes `cloudName`) written through the status
    /// subresource, as whoever may write statuses can.
    Forged,
}

struct Hostile {
    of: Of,
    target: Target,
    how: How,
}

/// The tenant's counts, added to the run's.
#[derive(Default, Debug, Clone)]
pub struct TenantStats {
    pub attacks: u64,
    pub refused: u64,
    pub deleted: u64,
    pub samples: u64,
    pub forged: u64,
    pub boots: u64,
    pub pools: u64,
    pub leftovers: u64,
}

pub struct Tenant {
    rng: StdRng,
    /// Hostile objects that exist (as far as the tenant asked), by name.
    live: BTreeMap<String, Hostile>,
    /// Hostile objects deleted, which must be gone once the faults are lifted.
    deleted: BTreeMap<String, Of>,
    /// Objects whose status the tenant forged, live or being deleted: what they record is the
    /// tenant's write.
    forged: BTreeSet<String>,
    next: BTreeMap<Of, u32>,
    /// The foreign resources' ids (both accounts), by kind.
    foreign: BTreeMap<Kind, Vec<String>>,
    /// Every id the tenant must never record: team-a's (named or seen) and the foreign ones.
    not_ours: BTreeSet<String>,
    /// The id each team-a or team-c object (by uid) recorded first; it never changes while it
    /// lives.
    team_a_ids: BTreeMap<String, (String, String)>,
    pub stats: TenantStats,
}

/// Trace lines for the run, and the first broken invariant.
pub type Step = Result<Vec<String>, String>;

impl Tenant {
    /// A tenant with its own random stream, so the harness's own actions stay as they were for
    /// every seed.
    pub fn new(seed: u64) -> Tenant {
        Tenant {
            rng: StdRng::seed_from_u64(seed ^ 0x7e4a_17b0_5eed_0b0b),
            live: BTreeMap::new(),
            deleted: BTreeMap::new(),
            forged: BTreeSet::new(),
            next: BTreeMap::new(),
            foreign: BTreeMap::new(),
            not_ours: BTreeSet::new(),
            team_a_ids: BTreeMap::new(),
            stats: TenantStats::default(),
        }
    }

    /// The tenant's namespace (without the adoption label) with its credentials Secret, and
    /// the foreign resources' ids.
    pub async fn setup(
        &mut self,
        env: &Env,
        api_key: &str,
        foreign: BTreeMap<Kind, Vec<String>>,
    ) -> Result<(), String> {
        crate::support::create_namespace(&env.client, TENANT, false)
            .await
            .map_err(|e| format!("creating namespace {TENANT}: {e}"))?;
        env.put_secret(TENANT, TENANT_SECRET, api_key).await;
        for kind in Kind::BASIC {
            let ids = foreign.get(&kind).cloned().unwrap_or_default();
            if ids.is_empty() {
                return Err(format!("no foreign {}", kind_name(kind)));
            }
            self.not_ours.extend(ids.iter().cloned());
            self.foreign.insert(kind, ids);
        }
        Ok(())
    }

    /// Milliseconds to the next attack.
    pub fn pause(&mut self) -> u64 {
        self.rng.random_range(300..1000)
    }

    /// The ordinary objects the tenant still has, not (yet) hostile.
    fn decoys(&self) -> Vec<String> {
        self.live
            .iter()
            .filter(|(_, h)| h.target == Target::None)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// One attack, chosen at random; then a sample of the invariants.
    pub async fn attack(&mut self, env: &Env) -> Step {
        let mut notes = Vec::new();
        let roll = self.rng.random_range(0..100);
        let decoys = self.decoys();
        let note = match roll {
            // (a) and (e): a new object naming another's resource by annotation.
            0..30 => self.annotated(env).await?,
            // (b): an ordinary object, turned hostile by a later patch.
            30..42 => self.decoy(env).await?,
            42..50 if !decoys.is_empty() => {
                let name = decoys[self.rng.random_range(0..decoys.len())].clone();
                self.turn(env, &name).await?
            }
            // (f): an ordinary object's status pointed at another's resource.
            50..68 if !decoys.is_empty() => {
                let name = decoys[self.rng.random_range(0..decoys.len())].clone();
                self.forge(env, &name).await?
            }
            // (c): a snapshot of another's machine by id.
            42..72 => self.snapshot(env).await?,
            // (g): a machine booting another's image or snapshot.
            72..80 => self.boot(env).await?,
            // (h): a pool whose template adopts another's machine.
            80..83 => self.pool(env).await?,
            // (i): adoption of a boot volume or a final snapshot no object records.
            83..88 => self.leftover(env).await?,
            // (d): a hostile object deleted.
            _ => self.delete_one(env).await?,
        };
        notes.extend(note);
        self.sample(env).await?;
        Ok(notes)
    }

    /// Turns every ordinary object the tenant still has hostile, so each ends refused.
    pub async fn finish(&mut self, env: &Env) -> Step {
        let decoys = self.decoys();
        let mut notes = Vec::new();
        for name in decoys {
            notes.extend(self.turn(env, &name).await?);
        }
        self.sample(env).await?;
        Ok(notes)
    }

    fn new_name(&mut self, of: Of) -> String {
        // The same names as team-a's objects, in another namespace: never reused here.
        let prefix = match of {
            Of::Managed(kind) => kind.prefix(),
            Of::Snapshot => "snap",
        };
        let index = self.next.entry(of).or_insert(0);
        let name = format!("{prefix}-{index}");
        *index += 1;
        name
    }

    /// A resource of team-a's or team-c's of `kind` to name: mostly one their objects
    /// recorded (read from their status), sometimes one read from an account by its cloud
    /// name (possibly not recorded yet: a create whose answer was lost).
    async fn team_a_target(&mut self, env: &Env, kind: Kind) -> Result<Option<String>, String> {
        let mut ids: Vec<String> = if self.rng.random_bool(0.7) {
            list_everyone(env, &[kind])
                .await?
                .victims
                .into_iter()
                .filter_map(|(_, _, _, status)| status.external_id)
                .collect()
        } else {
            (0..ACCOUNTS)
                .filter_map(|account| env.simulator.account_state(account))
                .flat_map(|state| cloud_ids(&state, kind))
                .filter(|(_, name)| VICTIMS.iter().any(|v| name.starts_with(&team_mark(v))))
                .map(|(id, _)| id)
                .collect()
        };
        ids.sort();
        Ok((!ids.is_empty()).then(|| ids[self.rng.random_range(0..ids.len())].clone()))
    }

    /// Whose resource to name: a foreign one a quarter of the time (or when team-a has none).
    async fn target(&mut self, env: &Env, kind: Kind) -> Result<Target, String> {
        if self.rng.random_bool(0.75)
            && let Some(id) = self.team_a_target(env, kind).await?
        {
            self.not_ours.insert(id.clone());
            return Ok(Target::TeamA(id));
        }
        let ids = &self.foreign[&kind];
        Ok(Target::Foreign(
            ids[self.rng.random_range(0..ids.len())].clone(),
        ))
    }

    /// A spec that would harm the resource it names, were it adopted.
    fn hostile_spec(&mut self, kind: Kind) -> Value {
        let mut spec = self.harmful(kind);
        spec["credentialsSecretRef"] = json!({"name": TENANT_SECRET});
        spec
    }

    fn harmful(&mut self, kind: Kind) -> Value {
        match kind {
            Kind::SshKey => json!({}),
            Kind::Instance => {
                let power = if self.rng.random_bool(0.7) {
                    "Stopped"
                } else {
                    "Running"
                };
                json!({"region": "us-east-1", "gpuType": "L40S",
                    "osImage": "ubuntu-22.04-cuda-12", "powerState": power})
            }
            Kind::Volume => {
                json!({"region": "us-east-1", "sizeGb": self.rng.random_range(10..200)})
            }
            Kind::Firewall => {
                let rules = if self.rng.random_bool(0.7) {
                    json!([{"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
                        "remoteIpPrefix": "0.0.0.0/0", "portRangeMin": 1, "portRangeMax": 65535}])
                } else {
                    json!([])
                };
                json!({"region": "us-east-1", "rules": rules, "instanceRefs": []})
            }
            Kind::Snapshot | Kind::Image => json!({}),
        }
    }

    /// A harmful change to an existing object: the fields fixed at creation stay as they were.
    fn hostile_change(&mut self, kind: Kind) -> Value {
        let mut spec = self.hostile_spec(kind);
        if let Some(fields) = spec.as_object_mut() {
            fields.remove("region");
            fields.remove("gpuType");
            fields.remove("osImage");
            fields.remove("credentialsSecretRef");
        }
        spec
    }

    fn random_kind(&mut self) -> Kind {
        Kind::BASIC[self.rng.random_range(0..4)]
    }

    /// (a) and (e): created with the annotation naming another's resource.
    async fn annotated(&mut self, env: &Env) -> Step {
        let kind = self.random_kind();
        let target = self.target(env, kind).await?;
        let name = self.new_name(Of::Managed(kind));
        let spec = self.hostile_spec(kind);
        let id = target.id().unwrap_or_default().to_string();
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": kind_name(kind),
            "metadata": {"name": name, "namespace": TENANT,
                "annotations": {EXTERNAL_ID_ANNOTATION: id}},
            "spec": spec,
        });
        post(env, Of::Managed(kind), &object).await?;
        self.stats.attacks += 1;
        let note = format!(
            "tenant: {} {TENANT}/{name} annotated with {target:?}, spec {spec}",
            kind_name(kind)
        );
        self.live.insert(
            name,
            Hostile {
                of: Of::Managed(kind),
                target,
                how: How::Spec,
            },
        );
        Ok(vec![note])
    }

    /// (b), first half: an ordinary object of the tenant's own.
    async fn decoy(&mut self, env: &Env) -> Step {
        let kind = self.random_kind();
        let name = self.new_name(Of::Managed(kind));
        let mut spec = match kind {
            Kind::Instance => json!({"region": "us-east-1", "gpuType": "L40S",
                "osImage": "ubuntu-22.04-cuda-12", "powerState": "Running"}),
            Kind::Volume => json!({"region": "us-east-1", "sizeGb": 10}),
            Kind::Firewall => json!({"region": "us-east-1", "rules": [], "instanceRefs": []}),
            Kind::SshKey | Kind::Snapshot | Kind::Image => json!({}),
        };
        spec["credentialsSecretRef"] = json!({"name": TENANT_SECRET});
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": kind_name(kind),
            "metadata": {"name": name, "namespace": TENANT},
            "spec": spec,
        });
        post(env, Of::Managed(kind), &object).await?;
        let note = format!(
            "tenant: {} {TENANT}/{name} created, its own",
            kind_name(kind)
        );
        self.live.insert(
            name,
            Hostile {
                of: Of::Managed(kind),
                target: Target::None,
                how: How::Spec,
            },
        );
        Ok(vec![note])
    }

    /// (b), second half: the annotation added after the object exists (with a hostile spec).
    async fn turn(&mut self, env: &Env, name: &str) -> Step {
        let Some(Hostile {
            of: Of::Managed(kind),
            ..
        }) = self.live.get(name)
        else {
            return Ok(Vec::new());
        };
        let kind = *kind;
        let target = self.target(env, kind).await?;
        let id = target.id().unwrap_or_default().to_string();
        let spec = self.hostile_change(kind);
        let patch = json!({
            "metadata": {"annotations": {EXTERNAL_ID_ANNOTATION: id}},
            "spec": spec,
        });
        let result = match kind {
            Kind::SshKey => merge_patch::<SshKey>(env, name, &patch).await,
            Kind::Instance => merge_patch::<GpuInstance>(env, name, &patch).await,
            Kind::Volume => merge_patch::<Volume>(env, name, &patch).await,
            Kind::Firewall => merge_patch::<Firewall>(env, name, &patch).await,
            Kind::Snapshot | Kind::Image => return Ok(Vec::new()),
        };
        result.map_err(|e| format!("tenant: patch {TENANT}/{name}: {e}"))?;
        self.stats.attacks += 1;
        let note = format!(
            "tenant: {} {TENANT}/{name} patched to {target:?}, spec {spec}",
            kind_name(kind)
        );
        if let Some(hostile) = self.live.get_mut(name) {
            hostile.target = target;
        }
        Ok(vec![note])
    }

    /// (c): a snapshot of another's machine, named by id.
    async fn snapshot(&mut self, env: &Env) -> Step {
        let target = self.target(env, Kind::Instance).await?;
        let name = self.new_name(Of::Snapshot);
        let id = target.id().unwrap_or_default().to_string();
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "Snapshot",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"instanceId": id, "description": "a copy of someone else's disk",
                "credentialsSecretRef": {"name": TENANT_SECRET}},
        });
        post(env, Of::Snapshot, &object).await?;
        self.stats.attacks += 1;
        let note = format!("tenant: Snapshot {TENANT}/{name} of instance {target:?}");
        self.live.insert(
            name,
            Hostile {
                of: Of::Snapshot,
                target,
                how: How::Spec,
            },
        );
        Ok(vec![note])
    }

    /// (f): the status of an ordinary object of the tenant's rewritten to record another's
    /// resource (its cloud name too, half of the time), then a harmful change asked for.
    async fn forge(&mut self, env: &Env, name: &str) -> Step {
        let Some(Hostile {
            of: Of::Managed(kind),
            ..
        }) = self.live.get(name)
        else {
            return Ok(Vec::new());
        };
        let kind = *kind;
        let target = self.target(env, kind).await?;
        let id = target.id().unwrap_or_default().to_string();
        let mut status = json!({"externalId": id});
        if self.rng.random_bool(0.5)
            && let Some(cloud_name) = cloud_name_of(env, kind, &id)
        {
            status["cloudName"] = json!(cloud_name);
        }
        let forged = json!({"status": status});
        let spec = self.hostile_change(kind);
        let change = json!({"spec": spec});
        let result = match kind {
            Kind::SshKey => forge_then_patch::<SshKey>(env, name, &forged, &change).await,
            Kind::Instance => forge_then_patch::<GpuInstance>(env, name, &forged, &change).await,
            Kind::Volume => forge_then_patch::<Volume>(env, name, &forged, &change).await,
            Kind::Firewall => forge_then_patch::<Firewall>(env, name, &forged, &change).await,
            Kind::Snapshot | Kind::Image => return Ok(Vec::new()),
        };
        result.map_err(|e| format!("tenant: forging the status of {TENANT}/{name}: {e}"))?;
        self.stats.attacks += 1;
        self.stats.forged += 1;
        let note = format!(
            "tenant: {} {TENANT}/{name} status forged to {status}, spec {spec}",
            kind_name(kind)
        );
        if let Some(hostile) = self.live.get_mut(name) {
            hostile.target = target;
            hostile.how = How::Forged;
        }
        self.forged.insert(name.to_string());
        Ok(vec![note])
    }

    /// (g): a machine of the tenant's booting another team's image or snapshot by id.
    async fn boot(&mut self, env: &Env) -> Step {
        let mut sources = [Kind::Image, Kind::Snapshot];
        if self.rng.random_bool(0.5) {
            sources.reverse();
        }
        let mut found = None;
        for source in sources {
            if let Some(id) = self.team_a_target(env, source).await? {
                found = Some((source, id));
                break;
            }
        }
        let Some((source, id)) = found else {
            return Ok(Vec::new());
        };
        self.not_ours.insert(id.clone());
        let target = Target::TeamA(id.clone());
        let of = Of::Managed(Kind::Instance);
        let name = self.new_name(of);
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": "GpuInstance",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"region": "us-east-1", "gpuType": "L40S", "osImage": id,
                "powerState": "Running", "credentialsSecretRef": {"name": TENANT_SECRET}},
        });
        post(env, of, &object).await?;
        self.stats.attacks += 1;
        self.stats.boots += 1;
        let note = format!(
            "tenant: GpuInstance {TENANT}/{name} booting {} {target:?}",
            kind_name(source)
        );
        self.live.insert(
            name,
            Hostile {
                of,
                target,
                how: How::Boot,
            },
        );
        Ok(vec![note])
    }

    /// (h): a pool whose machines would all adopt another's machine: refused at admission,
    /// naming the field.
    async fn pool(&mut self, env: &Env) -> Step {
        let target = self.target(env, Kind::Instance).await?;
        let id = target.id().unwrap_or_default().to_string();
        let name = format!("pool-{}", self.stats.attacks);
        let pool: GpuInstancePool = serde_json::from_value(json!({
            "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name},
                        "annotations": {EXTERNAL_ID_ANNOTATION: id}},
                    "spec": {"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                        "osImage": "ubuntu-22.04-cuda-12",
                        "credentialsSecretRef": {"name": TENANT_SECRET}}
                }
            }
        }))
        .map_err(|e| format!("tenant: pool {name}: {e}"))?;
        let created = Api::<GpuInstancePool>::namespaced(env.client.clone(), TENANT)
            .create(&PostParams::default(), &pool)
            .await;
        self.stats.attacks += 1;
        self.stats.pools += 1;
        match created {
            Err(kube::Error::Api(status))
                if status.code == 422
                    && status.message.contains("template.metadata.annotations") =>
            {
                self.stats.refused += 1;
                Ok(vec![format!(
                    "tenant: GpuInstancePool {TENANT}/{name} adopting {target:?} refused at admission"
                )])
            }
            Err(error) => Err(format!("tenant: pool {name}: {error}")),
            Ok(_) => Err(format!(
                "tenant: GpuInstancePool {TENANT}/{name}, whose template adopts {target:?}, was accepted"
            )),
        }
    }

    /// (i): a Volume adopting a victim machine's boot volume, or a Snapshot adopting a
    /// victim's snapshot no object records any more (a final snapshot its deleted machine left
    /// behind, or one being made): resources the victims' objects do not name, so only the
    /// ownership index (machines own their boot volumes, the released record its snapshots)
    /// tells whose they are.
    async fn leftover(&mut self, env: &Env) -> Step {
        let recorded: BTreeSet<String> = list_everyone(env, &[Kind::Snapshot])
            .await?
            .victims
            .into_iter()
            .filter_map(|(_, _, _, status)| status.external_id)
            .collect();
        let victims = |name: &str| VICTIMS.iter().any(|v| name.starts_with(&team_mark(v)));
        let mut candidates: Vec<(Of, String, String)> = Vec::new();
        for state in (0..ACCOUNTS).filter_map(|account| env.simulator.account_state(account)) {
            candidates.extend(
                state
                    .volumes
                    .iter()
                    .filter(|v| v.bootable && victims(&v.name))
                    .map(|v| (Of::Managed(Kind::Volume), v.id.clone(), String::new())),
            );
            candidates.extend(
                state
                    .snapshots
                    .iter()
                    .filter(|s| victims(&s.name) && !recorded.contains(&s.snapshot_id))
                    .map(|s| (Of::Snapshot, s.snapshot_id.clone(), s.instance_id.clone())),
            );
        }
        candidates.sort();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let (of, id, machine) = candidates[self.rng.random_range(0..candidates.len())].clone();
        self.not_ours.insert(id.clone());
        let name = self.new_name(of);
        let mut spec = match of {
            Of::Snapshot => json!({"instanceId": machine}),
            Of::Managed(kind) => self.harmful(kind),
        };
        spec["credentialsSecretRef"] = json!({"name": TENANT_SECRET});
        let object = json!({
            "apiVersion": "gpucloud.io/v1alpha1",
            "kind": of.name(),
            "metadata": {"name": name, "namespace": TENANT,
                "annotations": {EXTERNAL_ID_ANNOTATION: id}},
            "spec": spec,
        });
        post(env, of, &object).await?;
        self.stats.attacks += 1;
        self.stats.leftovers += 1;
        let target = Target::TeamA(id);
        let note = format!(
            "tenant: {} {TENANT}/{name} adopting the leftover {target:?}, spec {spec}",
            of.name()
        );
        self.live.insert(
            name,
            Hostile {
                of,
                target,
                how: How::Spec,
            },
        );
        Ok(vec![note])
    }

    /// (d): a hostile object deleted (its finalizer must go, taking nothing of another's).
    async fn delete_one(&mut self, env: &Env) -> Step {
        let names: Vec<String> = self.live.keys().cloned().collect();
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let name = names[self.rng.random_range(0..names.len())].clone();
        let Some(hostile) = self.live.remove(&name) else {
            return Ok(Vec::new());
        };
        remove(env, hostile.of, &name).await?;
        self.deleted.insert(name.clone(), hostile.of);
        self.stats.deleted += 1;
        Ok(vec![format!(
            "tenant: {} {TENANT}/{name} deleted ({:?})",
            hostile.of.name(),
            hostile.target
        )])
    }

    /// Every object the tenant has, for the final delete.
    pub async fn delete_all(&mut self, env: &Env) -> Result<(), String> {
        let live: Vec<(String, Of)> = self
            .live
            .iter()
            .map(|(name, hostile)| (name.clone(), hostile.of))
            .collect();
        for (name, of) in live {
            remove(env, of, &name).await?;
            self.deleted.insert(name.clone(), of);
        }
        self.live.clear();
        Ok(())
    }

    /// The tenant's objects still in the API server, described for a stuck-finalizer report.
    pub async fn remaining(&self, env: &Env) -> Result<Vec<String>, String> {
        Ok(tenant_objects(env)
            .await?
            .into_iter()
            .map(|(of, name, _, status, meta)| {
                format!(
                    "{} {TENANT}/{name}: finalizers {:?}, conditions {:?}",
                    of.name(),
                    meta.finalizers,
                    conditions(&status)
                )
            })
            .collect())
    }

    /// Checks what must hold at every moment: no tenant object recorded a resource that is
    /// not its own (team-a's, or a foreign one), and no team-a object's recorded resource was
    /// replaced by another (it would have been if one was deleted under it).
    pub async fn sample(&mut self, env: &Env) -> Result<(), String> {
        self.stats.samples += 1;
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for state in (0..ACCOUNTS).filter_map(|account| env.simulator.account_state(account)) {
            for kind in Kind::ALL {
                for (id, name) in cloud_ids(&state, kind) {
                    if !name.starts_with(&team_mark(TENANT)) {
                        self.not_ours.insert(id.clone());
                    }
                    names.insert(id, name);
                }
            }
        }
        let listed = list_everyone(env, &Kind::ALL).await?;
        for (kind, name, uid, status) in listed.victims {
            let Some(id) = status.external_id else {
                continue;
            };
            self.not_ours.insert(id.clone());
            let (_, first) = self
                .team_a_ids
                .entry(uid)
                .or_insert_with(|| (name.clone(), id.clone()));
            if *first != id {
                return Err(format!(
                    "tenant: {} {name} recorded {first}, now {id}: its resource was replaced",
                    kind_name(kind)
                ));
            }
        }
        for (of, name, _, status, _) in listed.tenant {
            let Some(id) = status.external_id else {
                continue;
            };
            // A forged record is the tenant's own write; what the operator did with it is
            // judged by the ledger (no call named it) and by the end state.
            if self.forged.contains(&name) {
                continue;
            }
            let own = names
                .get(&id)
                .is_none_or(|cloud| cloud.starts_with(&team_mark(TENANT)));
            if self.not_ours.contains(&id) || !own {
                return Err(format!(
                    "tenant: hostile {} {TENANT}/{name} recorded {id} ({:?}), not its own",
                    of.name(),
                    names.get(&id)
                ));
            }
        }
        Ok(())
    }

    /// What keeps the tenant's objects from their end state: every live hostile object
    /// `Stalled` with a refusal (`AdoptionNotAllowed` for a foreign resource), every deleted
    /// one gone. Counts the refusals when there is nothing left to wait for.
    pub async fn problems(&mut self, env: &Env) -> Result<Vec<String>, String> {
        let objects = tenant_objects(env).await?;
        let mut problems = Vec::new();
        let mut refused = 0;
        for (of, name, _, status, meta) in &objects {
            let Some(hostile) = self.live.get(name).filter(|h| h.of == *of) else {
                if self.deleted.contains_key(name) {
                    problems.push(format!(
                        "{} {TENANT}/{name}: deleted but still present (finalizers {:?}, conditions {:?})",
                        of.name(),
                        meta.finalizers,
                        conditions(status)
                    ));
                }
                continue;
            };
            let stalled = status.condition(condition_type::STALLED);
            let wanted: &[&str] = match (hostile.how, &hostile.target) {
                // Whatever became of the resource since it was named (another's, gone,
                // another object's record), it is not this object's.
                (How::Forged, _) => &[
                    reason::CLAIM_CONFLICT,
                    reason::FOREIGN_RECORD,
                    reason::EXTERNAL_DELETED,
                ],
                (How::Boot, _) => &[reason::ALREADY_OWNED],
                (How::Spec, Target::Foreign(_)) => &[reason::ADOPTION_NOT_ALLOWED],
                (How::Spec, _) => &[reason::ALREADY_OWNED, reason::ADOPTION_NOT_ALLOWED],
            };
            // A forged record of a stateless resource deleted since is forgotten and the
            // object's own made again; a machine booting an image deleted since is refused
            // by the cloud. Either way nothing of another's was touched (the ledger check).
            let settled_otherwise = match hostile.how {
                How::Forged => is_ready(status) && owned_by_tenant(env, status),
                How::Boot => !is_ready(status) && stalled.is_some_and(|c| c.status == "True"),
                How::Spec => false,
            };
            match stalled {
                _ if settled_otherwise => refused += 1,
                Some(c) if c.status == "True" && wanted.contains(&c.reason.as_str()) => {
                    if VICTIMS.iter().any(|v| c.message.contains(v)) {
                        return Err(format!(
                            "tenant: {} {TENANT}/{name}'s refusal names the other namespace: {}",
                            of.name(),
                            c.message
                        ));
                    }
                    refused += 1;
                }
                _ => problems.push(format!(
                    "{} {TENANT}/{name}: hostile ({:?}) but not refused with {wanted:?}: {}",
                    of.name(),
                    hostile.target,
                    conditions(status).join("; ")
                )),
            }
        }
        for name in self.live.keys() {
            if !objects.iter().any(|(_, n, ..)| n == name) {
                problems.push(format!("{TENANT}/{name}: missing from the API server"));
            }
        }
        if problems.is_empty() {
            self.stats.refused += refused;
        }
        Ok(problems)
    }
}

// === Helpers ===

fn is_ready(status: &CloudStatus) -> bool {
    status
        .condition(condition_type::READY)
        .is_some_and(|c| c.status == "True")
}

/// Whether the resource `status` records carries the tenant's own cloud name.
fn owned_by_tenant(env: &Env, status: &CloudStatus) -> bool {
    let Some(id) = &status.external_id else {
        return false;
    };
    Kind::ALL
        .iter()
        .find_map(|kind| cloud_name_of(env, *kind, id))
        .is_some_and(|name| name.starts_with(&team_mark(TENANT)))
}

/// The cloud name of the resource `id` of `kind`, in whichever account holds it.
fn cloud_name_of(env: &Env, kind: Kind, id: &str) -> Option<String> {
    (0..ACCOUNTS)
        .filter_map(|account| env.simulator.account_state(account))
        .flat_map(|state| cloud_ids(&state, kind))
        .find(|(listed, _)| listed == id)
        .map(|(_, name)| name)
}

fn conditions(status: &CloudStatus) -> Vec<String> {
    status
        .conditions
        .iter()
        .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
        .collect()
}

type Row = (Of, String, String, CloudStatus, kube::api::ObjectMeta);

/// The objects of `kinds` in every namespace, each listed once: the victims' as
/// `(kind, namespace/name, uid, status)`, the tenant's as rows.
struct Listed {
    victims: Vec<(Kind, String, String, CloudStatus)>,
    tenant: Vec<Row>,
}

async fn list_everyone(env: &Env, kinds: &[Kind]) -> Result<Listed, String> {
    async fn list_of<K>(env: &Env, kind: Kind, into: &mut Listed) -> Result<(), String>
    where
        K: Watched + Managed,
    {
        let items = Api::<K>::all(env.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("tenant: listing {}: {e}", kind_name(kind)))?;
        for object in items {
            let namespace = object.namespace().unwrap_or_default();
            if namespace == TENANT {
                let of = match kind {
                    Kind::Snapshot => Of::Snapshot,
                    other => Of::Managed(other),
                };
                into.tenant.push((
                    of,
                    object.name_any(),
                    object.uid().unwrap_or_default(),
                    object.cloud_status(),
                    object.meta().clone(),
                ));
            } else if VICTIMS.contains(&namespace.as_str()) {
                into.victims.push((
                    kind,
                    format!("{namespace}/{}", object.name_any()),
                    object.uid().unwrap_or_default(),
                    object.cloud_status(),
                ));
            }
        }
        Ok(())
    }
    let mut listed = Listed {
        victims: Vec::new(),
        tenant: Vec::new(),
    };
    for kind in kinds {
        match kind {
            Kind::SshKey => list_of::<SshKey>(env, *kind, &mut listed).await?,
            Kind::Instance => list_of::<GpuInstance>(env, *kind, &mut listed).await?,
            Kind::Volume => list_of::<Volume>(env, *kind, &mut listed).await?,
            Kind::Firewall => list_of::<Firewall>(env, *kind, &mut listed).await?,
            Kind::Snapshot => list_of::<Snapshot>(env, *kind, &mut listed).await?,
            Kind::Image => list_of::<Image>(env, *kind, &mut listed).await?,
        }
    }
    Ok(listed)
}

/// Every object in the tenant's namespace, of the five kinds it uses.
async fn tenant_objects(env: &Env) -> Result<Vec<Row>, String> {
    Ok(list_everyone(env, &Kind::BASIC_AND_SNAPSHOT).await?.tenant)
}

async fn post(env: &Env, of: Of, object: &Value) -> Result<(), String> {
    crate::world::post(env, of.kind(), TENANT, object)
        .await
        .map(drop)
        .map_err(|e| format!("tenant: create {object}: {e}"))
}

async fn remove(env: &Env, of: Of, name: &str) -> Result<(), String> {
    let key = ObjectKey {
        namespace: TENANT.into(),
        name: name.into(),
    };
    crate::world::delete(env, of.kind(), &key)
        .await
        .map_err(|e| format!("tenant: {e}"))
}

/// Writes `forged` through the status subresource, then asks for `change`.
async fn forge_then_patch<K>(
    env: &Env,
    name: &str,
    forged: &Value,
    change: &Value,
) -> Result<(), kube::Error>
where
    K: Watched,
{
    let api = Api::<K>::namespaced(env.client.clone(), TENANT);
    // The API server's faults refuse some status writes with a conflict: the tenant tries
    // again, as a determined one would.
    let mut tries = 0;
    loop {
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(forged))
            .await
        {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && tries < 20 => tries += 1,
            Err(error) => return Err(error),
        }
    }
    merge_patch::<K>(env, name, change).await
}

async fn merge_patch<K>(env: &Env, name: &str, patch: &Value) -> Result<(), kube::Error>
where
    K: Watched,
{
    Api::<K>::namespaced(env.client.clone(), TENANT)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(|_| ())
}
