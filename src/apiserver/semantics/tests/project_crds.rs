//! The project's own CRDs (crds/*.yaml) compile, default, prune and validate as the apiserver
//! would treat them. Expected messages follow the apiserver's wording (see src/schema/tests.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use gpucloud_apiserver_semantics::schema::{FieldError, Schema};
use serde_json::{Value, json};

fn crd_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../crds")
}

fn load(name: &str) -> Value {
    let text = std::fs::read_to_string(crd_dir().join(name)).expect("CRD file");
    serde_saphyr::from_str(&text).expect("CRD YAML")
}

fn schema_of(crd: &Value) -> Schema {
    let raw = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    Schema::compile(raw).unwrap_or_else(|error| panic!("{}: {error}", crd["metadata"]["name"]))
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(FieldError::to_message).collect()
}

/// Every version schema of every CRD in crds/, as (file name, openAPIV3Schema).
fn project_schemas() -> Vec<(String, Value)> {
    let mut schemas = Vec::new();
    for entry in std::fs::read_dir(crd_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for version in crd["spec"]["versions"].as_array().unwrap() {
            schemas.push((name.clone(), version["schema"]["openAPIV3Schema"].clone()));
        }
    }
    schemas
}

#[test]
fn every_project_crd_compiles() {
    let schemas = project_schemas();
    for (name, raw) in &schemas {
        if let Err(error) = Schema::compile(raw) {
            panic!("{name}: {error}");
        }
    }
    assert!(
        schemas.len() >= 9,
        "expected the nine project CRDs, found {}",
        schemas.len()
    );
}

/// kube-apiserver sizes a string, list or map without a declared bound by its request limit when
/// it estimates a rule's cost: every one a rule reads is bounded, so the estimate reflects what
/// the field can hold and the CRDs install on a real cluster.
#[test]
fn every_field_a_rule_reads_is_bounded() {
    let mut unbounded = Vec::new();
    for (name, raw) in project_schemas() {
        let reads =
            Schema::unbounded_rule_reads(&raw).unwrap_or_else(|error| panic!("{name}: {error}"));
        unbounded.extend(reads.into_iter().map(|read| format!("{name}: {read}")));
    }
    assert!(
        unbounded.is_empty(),
        "unbounded reads:\n{}",
        unbounded.join("\n")
    );
}

fn firewall(rules: Value) -> Value {
    json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "Firewall",
        "metadata": {"name": "fw", "namespace": "default"},
        "spec": {"region": "eu-1", "rules": rules, "bogus": 1}
    })
}

#[test]
fn firewall_rules_are_defaulted_pruned_and_validated() {
    let schema = schema_of(&load("firewalls.gpucloud.io.yaml"));
    let mut object = firewall(json!([
        {"protocol": "tcp", "portRangeMin": 22, "portRangeMax": 22, "remoteIpPrefix": "203.0.113.0/24"},
        {"protocol": "tcp", "portRangeMin": 90, "portRangeMax": 80, "remoteIpPrefix": "not-a-cidr"},
        {"protocol": "udp", "portRangeMin": 1, "portRangeMax": 70000, "remoteIpPrefix": "fd00::/8"}
    ]));
    assert_eq!(schema.prune(&mut object), vec!["spec.bogus"]);
    schema.apply_defaults(&mut object);
    assert_eq!(object["spec"]["rules"][0]["direction"], json!("Ingress"));
    assert_eq!(object["spec"]["rules"][0]["etherType"], json!("IPv4"));
    assert_eq!(object["spec"]["deletionPolicy"], json!("Delete"));

    // A bound violation does not block the rules (only type errors do), as in the apiserver.
    let found = messages(&schema.validate(&object, None));
    assert_eq!(
        found,
        vec![
            "spec.rules[2].portRangeMax: Invalid value: 70000: spec.rules[2].portRangeMax in body should be less than or equal to 65535",
            "spec.rules[1].portRangeMin: Invalid value: \"object\": portRangeMin must not exceed portRangeMax",
            "spec.rules[1].remoteIpPrefix: Invalid value: \"string\": remoteIpPrefix must be a CIDR such as 203.0.113.0/24",
            "spec.rules[2].remoteIpPrefix: Invalid value: \"object\": remoteIpPrefix must be of the rule's etherType",
        ]
    );

    object["spec"]["rules"][2]["portRangeMax"] = json!(7000);
    let found = messages(&schema.validate(&object, None));
    assert_eq!(
        found,
        vec![
            "spec.rules[1].portRangeMin: Invalid value: \"object\": portRangeMin must not exceed portRangeMax",
            "spec.rules[1].remoteIpPrefix: Invalid value: \"string\": remoteIpPrefix must be a CIDR such as 203.0.113.0/24",
            "spec.rules[2].remoteIpPrefix: Invalid value: \"object\": remoteIpPrefix must be of the rule's etherType",
        ]
    );
}

#[test]
fn firewall_region_is_immutable_on_update_only() {
    let schema = schema_of(&load("firewalls.gpucloud.io.yaml"));
    let mut old = firewall(json!([]));
    schema.prune(&mut old);
    schema.apply_defaults(&mut old);
    assert!(schema.validate(&old, None).is_empty());
    let mut moved = old.clone();
    moved["spec"]["region"] = json!("us-2");
    assert!(schema.validate(&moved, None).is_empty());
    assert_eq!(
        messages(&schema.validate(&moved, Some(&old))),
        vec!["spec.region: Invalid value: \"object\": region is immutable"]
    );
}

fn gpu_instance(spec: Value) -> Value {
    json!({"apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstance",
           "metadata": {"name": "train-1", "namespace": "default"}, "spec": spec})
}

#[test]
fn gpu_instance_rules_hold_after_defaulting() {
    let schema = schema_of(&load("gpuinstances.gpucloud.io.yaml"));
    let mut valid = gpu_instance(
        json!({"region": "eu-1", "gpuType": "H100", "gpuCount": 1, "osImage": "ubuntu-22.04"}),
    );
    schema.prune(&mut valid);
    schema.apply_defaults(&mut valid);
    assert_eq!(valid["spec"]["tier"], json!("Advanced"));
    assert_eq!(
        messages(&schema.validate(&valid, None)),
        Vec::<String>::new()
    );

    let mut neither = gpu_instance(json!({"region": "eu-1", "gpuType": "H100"}));
    schema.apply_defaults(&mut neither);
    assert_eq!(
        messages(&schema.validate(&neither, None)),
        vec![
            "spec: Invalid value: \"object\": exactly one of osImage, imageRef and source must be set"
        ]
    );

    let mut long_name = valid.clone();
    long_name["metadata"]["name"] = json!("x".repeat(64));
    assert_eq!(
        messages(&schema.validate(&long_name, None)),
        vec![
            "<nil>: Invalid value: \"object\": metadata.name must be at most 63 characters for a GpuInstance"
        ]
    );
}

#[test]
fn validation_is_fast_enough_for_a_busy_server() {
    // A watch-heavy controller test writes thousands of objects; validation must stay cheap.
    let schema = schema_of(&load("firewalls.gpucloud.io.yaml"));
    let mut object = firewall(json!([
        {"protocol": "tcp", "portRangeMin": 22, "portRangeMax": 22, "remoteIpPrefix": "203.0.113.0/24"}
    ]));
    schema.prune(&mut object);
    schema.apply_defaults(&mut object);
    let started = std::time::Instant::now();
    for _ in 0..200 {
        assert!(schema.validate(&object, Some(&object)).is_empty());
        assert!(schema.validate(&object, None).is_empty());
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < std::time::Duration::from_secs(10),
        "400 validations took {elapsed:?}"
    );
}

#[test]
fn root_rules_see_only_name_and_generate_name_of_metadata() {
    let schema = Schema::compile(&json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata == oldSelf.metadata", "message": "name is fixed"}],
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}
    }))
    .unwrap();
    let old = json!({"metadata": {"name": "a", "resourceVersion": "1", "labels": {"x": "1"}}, "spec": {"size": 1}});
    let new = json!({"metadata": {"name": "a", "resourceVersion": "2", "labels": {"x": "2"}}, "spec": {"size": 2}});
    assert!(schema.validate(&new, Some(&old)).is_empty());
    let renamed = json!({"metadata": {"name": "b"}, "spec": {"size": 2}});
    assert_eq!(
        messages(&schema.validate(&renamed, Some(&old))),
        vec!["<nil>: Invalid value: \"object\": name is fixed"]
    );
}

fn pool(template_spec: Value, strategy: Value) -> Value {
    json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": "workers", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "workers"}},
            "template": {"metadata": {"labels": {"app": "workers"}}, "spec": template_spec},
            "strategy": strategy
        }
    })
}

/// A pool's template may not adopt: every machine would claim the one resource it names.
#[test]
fn pool_templates_may_not_carry_adoption_annotations() {
    let schema = schema_of(&load("gpuinstancepools.gpucloud.io.yaml"));
    let machine = json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                         "osImage": "ubuntu-22.04-cuda-12"});
    for annotation in ["gpucloud.io/external-id", "gpucloud.io/create-intent"] {
        let mut adopting = pool(machine.clone(), json!({"type": "RollingReplace"}));
        adopting["spec"]["template"]["metadata"]["annotations"] =
            json!({annotation: "vm-000000000001", "team": "a"});
        schema.apply_defaults(&mut adopting);
        assert_eq!(
            messages(&schema.validate(&adopting, None)),
            vec![
                "spec.template.metadata.annotations: Invalid value: \"object\": template.metadata.annotations may not carry gpucloud.io/external-id or gpucloud.io/create-intent: a pool's machines are created, never adopted"
            ],
            "{annotation}"
        );
    }
    let mut plain = pool(machine, json!({"type": "RollingReplace"}));
    plain["spec"]["template"]["metadata"]["annotations"] = json!({"team": "a"});
    schema.apply_defaults(&mut plain);
    assert!(schema.validate(&plain, None).is_empty());
}

/// A pool's template may change what a GpuInstance may not (its machines are replaced), keeps
/// a GpuInstance's other rules, and must select its own machines.
#[test]
fn pool_templates_change_freely_and_select_their_machines() {
    let schema = schema_of(&load("gpuinstancepools.gpucloud.io.yaml"));
    let machine = json!({"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                         "osImage": "ubuntu-22.04-cuda-12"});
    let mut old = pool(machine.clone(), json!({"type": "RollingReplace"}));
    schema.apply_defaults(&mut old);
    assert_eq!(old["spec"]["strategy"]["type"], "RollingReplace");
    assert!(schema.validate(&old, None).is_empty());

    let mut changed = old.clone();
    changed["spec"]["template"]["spec"]["gpuType"] = json!("H100-80G");
    changed["spec"]["template"]["spec"]["region"] = json!("eu-west-1");
    assert_eq!(
        messages(&schema.validate(&changed, Some(&old))),
        Vec::<String>::new()
    );

    let mut two_sources = old.clone();
    two_sources["spec"]["template"]["spec"]["imageRef"] = json!({"name": "img"});
    let found = messages(&schema.validate(&two_sources, None)).join("\n");
    assert!(
        found.contains("exactly one of osImage, imageRef and source"),
        "{found}"
    );

    let mut foreign = old.clone();
    foreign["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    let found = messages(&schema.validate(&foreign, None)).join("\n");
    assert!(
        found.contains("selector.matchLabels must be among template.metadata.labels"),
        "{found}"
    );
    let found = messages(&schema.validate(&foreign, Some(&old))).join("\n");
    assert!(found.contains("selector is immutable"), "{found}");

    let mut stuck = pool(
        machine,
        json!({"type": "RollingReplace", "rollingReplace": {"maxUnavailable": 0, "maxSurge": 0}}),
    );
    schema.apply_defaults(&mut stuck);
    let found = messages(&schema.validate(&stuck, None)).join("\n");
    assert!(
        found.contains("maxUnavailable and maxSurge cannot both be 0"),
        "{found}"
    );
}
