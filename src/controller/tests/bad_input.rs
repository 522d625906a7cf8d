#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Bad input, table-driven: invalid objects applied with the operator running, through kube-rs
//! and through the real `kubectl`, to the embedded API server. Each is refused at admission
//! with a message naming the field. What only the cloud's catalog can tell (an unknown GPU type
//! or region) ends `Stalled` with a message naming the field and the known values, after a
//! bounded number of cloud calls and no retries; no stock waits (`NoCapacity`) without calls
//! of its own. Afterwards a valid object still becomes `Ready`: the operator kept serving.

use crate::support;

use gpucloud_api::*;
use gpucloud_simulator::SimulatorConfig;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, ValidationDirective,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::*;

/// One refused input.
struct Case {
    label: &'static str,
    kind: &'static str,
    /// The whole object without `metadata`, or the spec when `whole` is false.
    body: Value,
    whole: bool,
    /// An accepted spec the object is created with first; `body` is then merged into it.
    update_of: Option<Value>,
    /// A name of its own (names are what the case is about).
    name: Option<String>,
    /// What the refusal must name.
    field: &'static str,
}

fn spec(label: &'static str, kind: &'static str, spec: Value, field: &'static str) -> Case {
    Case {
        label,
        kind,
        body: spec,
        whole: false,
        update_of: None,
        name: None,
        field,
    }
}

impl Case {
    fn update_of(mut self, base: Value) -> Case {
        self.update_of = Some(base);
        self
    }
    fn named(mut self, name: String) -> Case {
        self.name = Some(name);
        self
    }
    fn whole(mut self) -> Case {
        self.whole = true;
        self
    }
}

fn vm() -> Value {
    json!({"region": "us-east-1", "gpuType": "L40S", "osImage": "ubuntu-22.04-cuda-12"})
}

fn with(mut base: Value, changes: Value) -> Value {
    merge(&mut base, &changes);
    base
}

/// JSON merge patch (RFC 7396).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else {
                    merge(target.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn rule(changes: Value) -> Value {
    with(
        json!({"direction": "Ingress", "protocol": "tcp", "etherType": "IPv4",
            "remoteIpPrefix": "203.0.113.0/24", "portRangeMin": 22, "portRangeMax": 22}),
        changes,
    )
}

fn firewall_with(rule_changes: Value) -> Value {
    json!({"region": "us-east-1", "rules": [rule(rule_changes)]})
}

fn legacy_vm_with(rule_changes: Value) -> Value {
    with(
        vm(),
        json!({"tier": "Legacy", "securityRules": [rule(rule_changes)]}),
    )
}

fn cases() -> Vec<Case> {
    [
        lifetime_cases(),
        gpu_instance_size_and_place_cases(),
        gpu_instance_spec_cases(),
        gpu_instance_reference_cases(),
        gpu_instance_change_and_name_cases(),
        volume_cases(),
        firewall_cases(),
        ssh_key_cases(),
        snapshot_and_image_cases(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// GpuInstance lifetimes: `spec.lifetime`.
fn lifetime_cases() -> Vec<Case> {
    vec![
        spec(
            "lifetime ttl negative",
            "GpuInstance",
            with(vm(), json!({"lifetime": {"ttl": "-1h"}})),
            "spec.lifetime.ttl",
        ),
        spec(
            "lifetime ttl not a duration",
            "GpuInstance",
            with(vm(), json!({"lifetime": {"ttl": "2 days"}})),
            "spec.lifetime.ttl",
        ),
        spec(
            "lifetime with both ttl and expiresAt",
            "GpuInstance",
            with(
                vm(),
                json!({"lifetime": {"ttl": "2h", "expiresAt": "2026-12-01T18:00:00Z"}}),
            ),
            "spec.lifetime",
        ),
        spec(
            "lifetime expiresAt not a time",
            "GpuInstance",
            with(vm(), json!({"lifetime": {"expiresAt": "tomorrow"}})),
            "spec.lifetime.expiresAt",
        ),
        spec(
            "lifetime onExpiry unknown",
            "GpuInstance",
            with(
                vm(),
                json!({"lifetime": {"ttl": "2h", "onExpiry": "Explode"}}),
            ),
            "spec.lifetime.onExpiry",
        ),
        spec(
            "lifetime Delete with deletionPolicy Orphan",
            "GpuInstance",
            with(
                vm(),
                json!({"deletionPolicy": "Orphan", "lifetime": {"ttl": "2h", "onExpiry": "Delete"}}),
            ),
            "spec.lifetime.onExpiry",
        ),
        spec(
            "schedule time not a time",
            "GpuInstance",
            with(
                vm(),
                json!({"schedule": {"timeZone": "UTC", "windows": [{"days": ["Mon"], "from": "8am", "to": "20:00"}]}}),
            ),
            "spec.schedule.windows[0].from",
        ),
        spec(
            "schedule window ending before it starts",
            "GpuInstance",
            with(
                vm(),
                json!({"schedule": {"timeZone": "UTC", "windows": [{"days": ["Mon"], "from": "20:00", "to": "08:00"}]}}),
            ),
            "spec.schedule.windows[0].to",
        ),
        spec(
            "schedule day unknown",
            "GpuInstance",
            with(
                vm(),
                json!({"schedule": {"timeZone": "UTC", "windows": [{"days": ["Someday"], "from": "08:00", "to": "20:00"}]}}),
            ),
            "spec.schedule.windows[0].days[0]",
        ),
    ]
}

/// GpuInstance: how many GPUs of which type, where.
fn gpu_instance_size_and_place_cases() -> Vec<Case> {
    vec![
        spec(
            "gpuCount of the wrong type",
            "GpuInstance",
            with(vm(), json!({"gpuCount": "two"})),
            "gpuCount",
        ),
        spec(
            "gpuCount zero",
            "GpuInstance",
            with(vm(), json!({"gpuCount": 0})),
            "gpuCount",
        ),
        spec(
            "gpuCount negative",
            "GpuInstance",
            with(vm(), json!({"gpuCount": -1})),
            "gpuCount",
        ),
        spec(
            "gpuCount above 16",
            "GpuInstance",
            with(vm(), json!({"gpuCount": 17})),
            "gpuCount",
        ),
        spec(
            "region empty",
            "GpuInstance",
            with(vm(), json!({"region": ""})),
            "region",
        ),
        spec(
            "region missing",
            "GpuInstance",
            with(vm(), json!({"region": null})),
            "region",
        ),
        spec(
            "gpuType empty",
            "GpuInstance",
            with(vm(), json!({"gpuType": ""})),
            "gpuType",
        ),
        spec(
            "gpuType missing",
            "GpuInstance",
            with(vm(), json!({"gpuType": null})),
            "gpuType",
        ),
    ]
}

/// GpuInstance: boot source, security rules, power state and price limit.
fn gpu_instance_spec_cases() -> Vec<Case> {
    vec![
        spec(
            "two boot sources",
            "GpuInstance",
            with(vm(), json!({"imageRef": {"name": "img"}})),
            "osImage",
        ),
        spec(
            "no boot source",
            "GpuInstance",
            with(vm(), json!({"osImage": null})),
            "osImage",
        ),
        spec(
            "restore with a gpuType",
            "GpuInstance",
            with(
                vm(),
                json!({"osImage": null, "source": {"snapshotRef": {"name": "s"}}}),
            ),
            "gpuType",
        ),
        spec(
            "securityRules on the Advanced tier",
            "GpuInstance",
            with(vm(), json!({"securityRules": [rule(json!({}))]})),
            "securityRules",
        ),
        spec(
            "inverted port range in a security rule",
            "GpuInstance",
            legacy_vm_with(json!({"portRangeMin": 443, "portRangeMax": 22})),
            "portRangeMin",
        ),
        spec(
            "bad CIDR in a security rule",
            "GpuInstance",
            legacy_vm_with(json!({"remoteIpPrefix": "10.0.0.300/8"})),
            "remoteIpPrefix",
        ),
        spec(
            "unknown powerState",
            "GpuInstance",
            with(vm(), json!({"powerState": "Sleeping"})),
            "powerState",
        ),
        spec(
            "maxHourlyRate zero",
            "GpuInstance",
            with(vm(), json!({"maxHourlyRate": 0})),
            "maxHourlyRate",
        ),
        spec(
            "maxHourlyRate of the wrong type",
            "GpuInstance",
            with(vm(), json!({"maxHourlyRate": "cheap"})),
            "maxHourlyRate",
        ),
    ]
}

/// GpuInstance: references to other objects and Secrets, and the startup script.
fn gpu_instance_reference_cases() -> Vec<Case> {
    vec![
        spec(
            "sshKeyRefs not a list",
            "GpuInstance",
            with(vm(), json!({"sshKeyRefs": "dev-key"})),
            "sshKeyRefs",
        ),
        spec(
            "SshKey of another namespace",
            "GpuInstance",
            with(
                vm(),
                json!({"sshKeyRefs": [{"name": "dev-key", "namespace": "other"}]}),
            ),
            "sshKeyRefs[0].namespace",
        ),
        spec(
            "Image named by namespace/name",
            "GpuInstance",
            with(
                vm(),
                json!({"osImage": null, "imageRef": {"name": "other/img"}}),
            ),
            "imageRef.name",
        ),
        spec(
            "credentials Secret of another namespace",
            "GpuInstance",
            with(
                vm(),
                json!({"credentialsSecretRef": {"name": "creds", "namespace": "gpucloud-system"}}),
            ),
            "credentialsSecretRef.namespace",
        ),
        spec(
            "credentials Secret named by namespace/name",
            "GpuInstance",
            with(
                vm(),
                json!({"credentialsSecretRef": {"name": "gpucloud-system/gpucloud-credentials"}}),
            ),
            "credentialsSecretRef.name",
        ),
        spec(
            "startup script both inline and from a ConfigMap",
            "GpuInstance",
            with(
                vm(),
                json!({"startupScript": {"inline": "echo hi", "configMapRef": {"name": "s", "key": "k"}}}),
            ),
            "inline",
        ),
        spec(
            "startup script over the cloud's request size",
            "GpuInstance",
            with(
                vm(),
                json!({"startupScript": {"inline": "#".repeat(65_536)}}),
            ),
            "startupScript.inline",
        ),
    ]
}

/// GpuInstance: changes the cloud cannot make, immutable fields, names.
fn gpu_instance_change_and_name_cases() -> Vec<Case> {
    vec![
        spec(
            "Hibernated on the Advanced tier, which cannot wake it",
            "GpuInstance",
            with(vm(), json!({"powerState": "Hibernated"})),
            "powerState",
        ),
        spec(
            "Hibernated later on the Advanced tier",
            "GpuInstance",
            json!({"powerState": "Hibernated"}),
            "powerState",
        )
        .update_of(vm()),
        spec(
            "an SSH key added to a machine the cloud cannot add it to",
            "GpuInstance",
            json!({"sshKeyRefs": [{"name": "late-key"}]}),
            "sshKeyRefs",
        )
        .update_of(vm()),
        spec(
            "a startup script edited after the first boot",
            "GpuInstance",
            json!({"startupScript": {"inline": "echo two"}}),
            "startupScript",
        )
        .update_of(with(vm(), json!({"startupScript": {"inline": "echo one"}}))),
        spec(
            "unknown deletionPolicy",
            "GpuInstance",
            with(vm(), json!({"deletionPolicy": "Keep"})),
            "deletionPolicy",
        ),
        spec(
            "empty connectionSecret",
            "GpuInstance",
            with(vm(), json!({"connectionSecret": ""})),
            "connectionSecret",
        ),
        spec("empty spec", "GpuInstance", json!({}), "spec.region"),
        spec("no spec at all", "GpuInstance", json!({}), "spec").whole(),
        spec(
            "name longer than a machine name may be",
            "GpuInstance",
            vm(),
            "metadata.name",
        )
        .named("m".repeat(64)),
        spec("absurdly long name", "GpuInstance", vm(), "metadata.name").named("x".repeat(300)),
        spec("unicode name", "GpuInstance", vm(), "metadata.name").named("trän-1".into()),
        spec(
            "region changed",
            "GpuInstance",
            json!({"region": "eu-west-1"}),
            "region",
        )
        .update_of(vm()),
        spec(
            "gpuType changed",
            "GpuInstance",
            json!({"gpuType": "H100-80G"}),
            "gpuType",
        )
        .update_of(vm()),
        spec(
            "gpuCount changed",
            "GpuInstance",
            json!({"gpuCount": 2}),
            "gpuCount",
        )
        .update_of(vm()),
        spec(
            "credentials Secret named after creation",
            "GpuInstance",
            json!({"credentialsSecretRef": {"name": "deploy-key"}}),
            "credentialsSecretRef is immutable",
        )
        .update_of(vm()),
        spec(
            // Set after creation (a changed value is refused the same way, see cel_rules.rs);
            // the bases of the two paths cannot share one connection Secret, which only the
            // first to be created may own.
            "connectionSecret set after creation",
            "GpuInstance",
            json!({"connectionSecret": "deploy-key"}),
            "connectionSecret is immutable",
        )
        .update_of(vm()),
    ]
}

/// Volume.
fn volume_cases() -> Vec<Case> {
    let volume = json!({"region": "us-east-1", "sizeGb": 10});
    vec![
        spec(
            "sizeGb negative",
            "Volume",
            with(volume.clone(), json!({"sizeGb": -5})),
            "sizeGb",
        ),
        spec(
            "sizeGb zero",
            "Volume",
            with(volume.clone(), json!({"sizeGb": 0})),
            "sizeGb",
        ),
        spec(
            "sizeGb with a unit",
            "Volume",
            with(volume.clone(), json!({"sizeGb": "10Gi"})),
            "sizeGb",
        ),
        spec(
            "sizeGb absurd",
            "Volume",
            with(volume.clone(), json!({"sizeGb": 1_000_000})),
            "sizeGb",
        ),
        spec(
            "GpuInstance reference without a name",
            "Volume",
            with(volume.clone(), json!({"instanceRef": {"name": ""}})),
            "instanceRef.name",
        ),
        spec("volume shrunk", "Volume", json!({"sizeGb": 5}), "sizeGb").update_of(volume.clone()),
        spec(
            "volumeType changed",
            "Volume",
            json!({"volumeType": "SSD"}),
            "volumeType",
        )
        .update_of(with(volume.clone(), json!({"volumeType": "NVMe"}))),
    ]
}

/// Firewall.
fn firewall_cases() -> Vec<Case> {
    vec![
        spec(
            "CIDR with an octet past 255",
            "Firewall",
            firewall_with(json!({"remoteIpPrefix": "300.1.2.3/24"})),
            "remoteIpPrefix",
        ),
        spec(
            "address without a prefix length",
            "Firewall",
            firewall_with(json!({"remoteIpPrefix": "10.0.0.1"})),
            "remoteIpPrefix",
        ),
        spec(
            "IPv6 CIDR on an IPv4 rule",
            "Firewall",
            firewall_with(json!({"remoteIpPrefix": "2001:db8::/32"})),
            "remoteIpPrefix",
        ),
        spec(
            "inverted port range",
            "Firewall",
            firewall_with(json!({"portRangeMin": 443, "portRangeMax": 22})),
            "portRangeMin",
        ),
        spec(
            "port past 65535",
            "Firewall",
            firewall_with(json!({"portRangeMin": 22, "portRangeMax": 70000})),
            "portRangeMax",
        ),
        spec(
            "ports on icmp",
            "Firewall",
            firewall_with(json!({"protocol": "icmp"})),
            "portRangeMin",
        ),
        spec(
            "one port of a range",
            "Firewall",
            firewall_with(json!({"portRangeMax": null})),
            "portRangeMax",
        ),
        spec(
            "protocol with symbols",
            "Firewall",
            firewall_with(json!({"protocol": "TCP!"})),
            "protocol",
        ),
        spec(
            "unknown direction",
            "Firewall",
            firewall_with(json!({"direction": "Sideways"})),
            "direction",
        ),
        spec(
            "description too long",
            "Firewall",
            json!({"region": "us-east-1", "description": "d".repeat(2000)}),
            "description",
        ),
        spec(
            "firewall description changed",
            "Firewall",
            json!({"description": "other"}),
            "description",
        )
        .update_of(json!({"region": "us-east-1", "description": "first"})),
        spec(
            "firewall region changed",
            "Firewall",
            json!({"region": "eu-west-1"}),
            "region",
        )
        .update_of(json!({"region": "us-east-1"})),
        spec(
            "credentials Secret changed",
            "Firewall",
            json!({"credentialsSecretRef": {"name": "deploy-key"}}),
            "credentialsSecretRef is immutable",
        )
        .update_of(json!({"region": "us-east-1", "credentialsSecretRef": {"name": "team-key"}})),
    ]
}

/// SshKey.
fn ssh_key_cases() -> Vec<Case> {
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me@laptop";
    vec![
        spec(
            "publicKey not a key",
            "SshKey",
            json!({"publicKey": "not a key"}),
            "publicKey",
        ),
        spec(
            "publicKey with a bad body",
            "SshKey",
            json!({"publicKey": "ssh-ed25519 !!!!"}),
            "publicKey",
        ),
        spec(
            "publicKey empty",
            "SshKey",
            json!({"publicKey": ""}),
            "publicKey",
        ),
        spec(
            "privateKeySecret with an imported key",
            "SshKey",
            json!({"publicKey": key, "privateKeySecret": "k"}),
            "privateKeySecret",
        ),
        spec(
            "publicKey changed",
            "SshKey",
            json!({"publicKey": key.replace("me@laptop", "other@host").replace("IOMq", "IOMr")}),
            "publicKey",
        )
        .update_of(json!({"publicKey": key})),
        spec(
            "privateKeySecret changed",
            "SshKey",
            json!({"privateKeySecret": "deploy-key"}),
            "privateKeySecret is immutable",
        )
        .update_of(json!({"privateKeySecret": "own-key"})),
        spec(
            "credentials Secret removed",
            "SshKey",
            json!({"credentialsSecretRef": null}),
            "credentialsSecretRef is immutable",
        )
        .update_of(json!({"publicKey": key, "credentialsSecretRef": {"name": "team-key"}})),
    ]
}

/// Snapshot and Image.
fn snapshot_and_image_cases() -> Vec<Case> {
    vec![
        spec(
            "two sources",
            "Snapshot",
            json!({"instanceRef": {"name": "a"}, "instanceId": "vm-1"}),
            "instanceRef",
        ),
        spec(
            "too many labels",
            "Snapshot",
            json!({"instanceId": "vm-1", "labels": (0..33).map(|i| format!("l{i}")).collect::<Vec<_>>()}),
            "labels",
        ),
        spec(
            "empty label",
            "Snapshot",
            json!({"instanceId": "vm-1", "labels": [""]}),
            "labels",
        ),
        spec(
            "description changed",
            "Snapshot",
            json!({"description": "other"}),
            "description",
        )
        .update_of(json!({"instanceId": "vm-1", "description": "first"})),
        // Image
        spec("no snapshot", "Image", json!({}), "snapshotRef"),
        spec(
            "snapshot changed",
            "Image",
            json!({"snapshotRef": {"name": "other"}}),
            "snapshotRef",
        )
        .update_of(json!({"snapshotRef": {"name": "s"}})),
    ]
}

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("gpucloud.io", "v1alpha1", kind))
}

fn manifest(case: &Case, name: &str, body: &Value) -> Value {
    let mut object = json!({
        "apiVersion": "gpucloud.io/v1alpha1",
        "kind": case.kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
    });
    if case.whole {
        merge(&mut object, body);
    } else {
        object["spec"] = body.clone();
    }
    object
}

/// A create with unknown fields refused (as kubectl asks): kube-rs's `PostParams` cannot say
/// so, a server-side apply can.
async fn create_strict(
    api: &Api<DynamicObject>,
    name: &str,
    object: &DynamicObject,
) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some("bad-input-test".into()),
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Apply(object))
        .await
        .map(drop)
}

/// Applies the case through kube-rs and returns the refusal's message.
async fn refusal_through_kube(env: &Env, case: &Case, name: &str) -> Result<String, String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), NAMESPACE, &resource(case.kind));
    let result = match &case.update_of {
        None => {
            let object: DynamicObject =
                serde_json::from_value(manifest(case, name, &case.body)).unwrap();
            create_strict(&api, name, &object).await
        }
        Some(base) => {
            let object: DynamicObject = serde_json::from_value(manifest(case, name, base)).unwrap();
            create_strict(&api, name, &object)
                .await
                .unwrap_or_else(|e| panic!("{}: the base object was refused: {e}", case.label));
            let params = PatchParams {
                field_validation: Some(ValidationDirective::Strict),
                ..PatchParams::default()
            };
            api.patch(
                name,
                &params,
                &Patch::Merge(json!({"spec": case.body.clone()})),
            )
            .await
            .map(drop)
        }
    };
    match result {
        Ok(()) => Err(format!("{}: accepted through kube-rs", case.label)),
        Err(kube::Error::Api(status)) if status.code == 422 || status.code == 400 => {
            Ok(status.message)
        }
        Err(other) => Err(format!("{}: kube-rs: {other}", case.label)),
    }
}

/// `kubectl` against the environment's API server.
struct Kubectl {
    binary: PathBuf,
    home: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(env: &Env) -> Kubectl {
        let binary = ["/usr/bin/kubectl", "/usr/local/bin/kubectl"]
            .into_iter()
            .map(PathBuf::from)
            .chain(
                std::env::var_os("PATH")
                    .map(|p| std::env::split_paths(&p).map(|d| d.join("kubectl")).collect::<Vec<_>>())
                    .unwrap_or_default(),
            )
            .find(|p| p.exists())
            .expect("kubectl not found on PATH: this test drives the real kubectl (.ci/run installs it)");
        let home = std::env::temp_dir().join(format!("gpucloud-bad-input-{}", std::process::id()));
        std::fs::create_dir_all(&home).unwrap();
        let kubeconfig = home.join("kubeconfig");
        env.apiserver.write_kubeconfig(&kubeconfig).unwrap();
        Kubectl {
            binary,
            home,
            kubeconfig,
        }
    }

    /// `kubectl apply -f -` of `manifest`: (success, stderr).
    async fn apply(&self, manifest: &Value) -> (bool, String) {
        let binary = self.binary.clone();
        let home = self.home.clone();
        let kubeconfig = self.kubeconfig.clone();
        let input = manifest.to_string();
        tokio::task::spawn_blocking(move || apply_blocking(&binary, &home, &kubeconfig, &input))
            .await
            .unwrap()
    }
}

impl Drop for Kubectl {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

fn apply_blocking(binary: &Path, home: &Path, kubeconfig: &Path, input: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(binary)
        .args(["apply", "--request-timeout=20s", "-f", "-"])
        .env_clear()
        .env("HOME", home)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", home.join("cache"))
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn refusal_through_kubectl(
    kubectl: &Kubectl,
    case: &Case,
    name: &str,
) -> Result<String, String> {
    if let Some(base) = &case.update_of {
        let (ok, stderr) = kubectl.apply(&manifest(case, name, base)).await;
        assert!(
            ok,
            "{}: kubectl: the base object was refused: {stderr}",
            case.label
        );
    }
    let body = match &case.update_of {
        Some(base) => with(base.clone(), case.body.clone()),
        None => case.body.clone(),
    };
    let (ok, stderr) = kubectl.apply(&manifest(case, name, &body)).await;
    if ok {
        return Err(format!("{}: accepted through kubectl", case.label));
    }
    Ok(stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_objects_are_refused_at_admission_naming_the_field() {
    let env = Env::start().await;
    let kubectl = Kubectl::new(&env);
    let cases = cases();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let creates_before = env.calls("CreateInstance") + env.calls("CreateVolume");
    let mut failures = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let through_kube = case.name.clone().unwrap_or(format!("k{index}"));
        let through_kubectl = case.name.clone().unwrap_or(format!("c{index}"));
        match refusal_through_kube(&env, case, &through_kube).await {
            Ok(message) if message.contains(case.field) => {}
            Ok(message) => failures.push(format!(
                "{} (kube-rs): {message:?} does not name {}",
                case.label, case.field
            )),
            Err(failure) => failures.push(failure),
        }
        match refusal_through_kubectl(&kubectl, case, &through_kubectl).await {
            Ok(message) if message.contains(case.field) => {}
            Ok(message) => failures.push(format!(
                "{} (kubectl): {message:?} does not name {}",
                case.label, case.field
            )),
            Err(failure) => failures.push(failure),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!(
        "{} bad inputs refused through kube-rs and kubectl",
        cases.len()
    );

    // Only the bases of the update cases reached the operator; no refused object made a call.
    let bases = cases
        .iter()
        .filter(|c| c.update_of.is_some() && matches!(c.kind, "GpuInstance" | "Volume"))
        .count() as u64;
    // Each base exists twice (kube-rs and kubectl); give the operator time to create them.
    let expected = 2 * bases;
    eventually(60, "the update cases' base objects created", || async {
        (env.calls("CreateInstance") + env.calls("CreateVolume") - creates_before >= expected)
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.calls("CreateInstance") + env.calls("CreateVolume") - creates_before,
        expected,
        "a refused object reached the cloud"
    );

    // The operator kept serving.
    create::<GpuInstance>(&env, &object("after-the-table", vm())).await;
    ready::<GpuInstance>(&env, "after-the-table").await;
}

/// What only the cloud's catalog knows ends `Stalled` naming the field, with no retries; no
/// stock waits without calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_only_the_cloud_knows_ends_stalled_without_a_retry_storm() {
    let mut env = Env::without_operator(SimulatorConfig {
        // Four GPUs of each type per region: eight is out of stock.
        gpu_capacity_per_region: 4,
        ..SimulatorConfig::default()
    })
    .await;
    env.start_operator(test_config(&env.simulator));
    let cases = [
        (
            "unknown-gpu",
            with(vm(), json!({"gpuType": "Z9000-1TB"})),
            "InvalidSpec",
            "unknown GPU type",
        ),
        (
            "unknown-region",
            with(vm(), json!({"region": "mars-1"})),
            "InvalidSpec",
            "mars-1",
        ),
    ];
    for (name, spec, _, _) in &cases {
        create::<GpuInstance>(&env, &object(name, spec.clone())).await;
    }
    // Out of stock waits for stock (the catalog says so before any create), without a call.
    create::<GpuInstance>(
        &env,
        &object("no-stock", with(vm(), json!({"gpuCount": 8}))),
    )
    .await;
    let waiting: GpuInstance =
        support::condition(&env, "no-stock", "Ready", "False", "NoCapacity").await;
    assert!(
        support::ready_message(&waiting).contains("L40S x8 in us-east-1: out of stock (4 free)"),
        "{}",
        support::ready_message(&waiting)
    );
    for (name, _, reason, cloud_says) in &cases {
        let stalled: GpuInstance = eventually(60, &format!("{name} Stalled"), || async {
            let object = env.api::<GpuInstance>().get(name).await.ok()?;
            let stalled = object.cloud_status().condition("Stalled")?.status == "True";
            stalled.then_some(object)
        })
        .await;
        let condition = stalled.cloud_status().condition("Stalled").unwrap().clone();
        assert!(
            condition.message.contains(cloud_says),
            "{name}: {:?}",
            condition.message
        );
        assert_eq!(&condition.reason, reason, "{name}");
        assert!(stalled.cloud_status().external_id.is_none());
    }
    let creates = env.calls("CreateInstance");
    assert!(
        creates <= cases.len() as u64,
        "{creates} create calls for {} objects",
        cases.len()
    );
    // Past several transition and resync intervals: no call but the observers' lists (one
    // per kind and interval, whatever the number of objects) and the account's balance and
    // billing reads (once per resync interval, 2 s here, for `gpucloud_account_balance` and
    // `gpucloud_spend`) is made, none is repeated.
    let before = env.simulator.call_counts();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = env.simulator.call_counts();
    let mut repeated = Vec::new();
    for (operation, count) in &after {
        let new = count - before.get(operation).copied().unwrap_or(0);
        let periodic = operation.starts_with("List")
            || (support::ACCOUNT_READS.contains(&operation.as_str())
                || support::CATALOG_READS.contains(&operation.as_str()))
                && new <= 3;
        if new > 0 && !periodic {
            repeated.push(format!("{operation} x{new}"));
        }
    }
    assert!(
        repeated.is_empty(),
        "calls while every object is Stalled: {repeated:?}"
    );
    let lists = after.get("ListInstances").copied().unwrap_or(0)
        - before.get("ListInstances").copied().unwrap_or(0);
    // At most one list per fast interval (150 ms): the observer's cadence, not retries.
    assert!(lists <= 40, "{lists} instance lists in 5 s");
    assert_eq!(env.simulator.state().instances.len(), 0);

    // The operator still serves the other objects.
    create::<GpuInstance>(&env, &object("fine", vm())).await;
    ready::<GpuInstance>(&env, "fine").await;
    env.stop_operator().await;
}
