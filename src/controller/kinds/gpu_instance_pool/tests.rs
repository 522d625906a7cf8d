#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

/// A machine `name` made at second `age` (larger is newer): `r` Ready, `o` of the old
/// template, `p` protected, `d` deleting.
fn m(name: &str, age: i64, flags: &str) -> Machine {
    Machine {
        name: name.into(),
        created: Some(Timestamp::from_second(age).unwrap()),
        ready: flags.contains('r'),
        current: !flags.contains('o'),
        protected: flags.contains('p'),
        deleting: flags.contains('d'),
    }
}

fn record(creating: &[&str], deleting: &[&str]) -> Record {
    Record {
        creating: creating.iter().map(|s| s.to_string()).collect(),
        deleting: deleting.iter().map(|s| s.to_string()).collect(),
    }
}

const ROLLING: Strategy = Strategy::RollingReplace {
    max_unavailable: 1,
    max_surge: 0,
};

fn names(prefix: &str) -> impl FnMut() -> String {
    let mut n = 0;
    let prefix = prefix.to_string();
    move || {
        n += 1;
        format!("{prefix}{n}")
    }
}

struct Case {
    what: &'static str,
    replicas: usize,
    strategy: Strategy,
    machines: Vec<Machine>,
    record: Record,
    create: &'static [&'static str],
    delete: &'static [&'static str],
}

/// Each case's plan keeps exactly `replicas` machines: it creates and deletes what the case
/// says, and records both before acting.
fn check_plans(cases: impl IntoIterator<Item = Case>) {
    for case in cases {
        let plan = plan(
            case.replicas,
            case.strategy,
            &case.machines,
            &case.record,
            &mut names("new"),
        );
        assert_eq!(plan.create, case.create, "{}: create", case.what);
        assert_eq!(plan.delete, case.delete, "{}: delete", case.what);
        assert_eq!(plan.record.creating, plan.create, "{}", case.what);
        assert_eq!(plan.record.deleting, plan.delete, "{}", case.what);
    }
}

/// Scaling up: recorded creates count until listed, and a machine deleted by hand is replaced.
#[test]
fn the_plan_creates_up_to_replicas() {
    check_plans([
        Case {
            what: "scale up from nothing: names recorded and created",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![],
            record: Record::default(),
            create: &["new1", "new2", "new3"],
            delete: &[],
        },
        Case {
            what: "recorded creates not yet listed count: nothing new, created again",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r")],
            record: record(&["b", "c"], &[]),
            create: &["b", "c"],
            delete: &[],
        },
        Case {
            what: "recorded creates listed are done",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, ""), m("c", 3, "")],
            record: record(&["b", "c"], &[]),
            create: &[],
            delete: &[],
        },
        Case {
            what: "a machine deleted by hand is replaced",
            replicas: 2,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, "rd")],
            record: Record::default(),
            create: &["new1"],
            delete: &[],
        },
        Case {
            what: "a proposed name in use is never taken",
            replicas: 2,
            strategy: ROLLING,
            machines: vec![m("new1", 1, "r")],
            record: Record::default(),
            create: &["new2"],
            delete: &[],
        },
    ]);
}

/// Scaling down: which machines go first, and never a protected one.
#[test]
fn the_plan_scales_down_to_replicas() {
    check_plans([
        Case {
            what: "scale down: the not-Ready one first, then the newest",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, ""), m("c", 3, "r")],
            record: Record::default(),
            create: &[],
            delete: &["b", "c"],
        },
        Case {
            what: "scale down waits for recorded creates to be listed, and creates them",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r")],
            record: record(&["b", "c"], &[]),
            create: &["b", "c"],
            delete: &[],
        },
        Case {
            what: "once listed, they go first (not Ready, newest)",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, ""), m("c", 3, "")],
            record: record(&["b", "c"], &[]),
            create: &[],
            delete: &["c", "b"],
        },
        Case {
            what: "scale down never chooses a protected machine",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, "rp"), m("c", 3, "rp")],
            record: Record::default(),
            create: &[],
            delete: &["a"],
        },
    ]);
}

/// Recorded deletes: repeated until the machine is deleting, let go when no longer needed.
#[test]
fn the_plan_carries_out_recorded_deletes() {
    check_plans([
        Case {
            what: "a recorded delete not carried out is chosen again first",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, ""), m("b", 2, "r")],
            record: record(&[], &["b"]),
            create: &[],
            delete: &["b"],
        },
        Case {
            what: "a recorded delete not carried out is let go when replicas were raised",
            replicas: 2,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, "r")],
            record: record(&[], &["b"]),
            create: &[],
            delete: &[],
        },
        Case {
            what: "a recorded delete is repeated until the machine is deleting",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, "r")],
            record: record(&[], &["b"]),
            create: &[],
            delete: &["b"],
        },
        Case {
            what: "a recorded delete listed deleting is done, and not replaced",
            replicas: 1,
            strategy: ROLLING,
            machines: vec![m("a", 1, "r"), m("b", 2, "rd")],
            record: record(&[], &["b"]),
            create: &[],
            delete: &[],
        },
    ]);
}

/// Old-template machines: replaced by `RollingReplace` within its limits, kept by `OnDelete`.
#[test]
fn the_plan_replaces_old_machines_by_strategy() {
    check_plans([
        Case {
            what: "rolling replace: one Ready old machine at a time, its replacement at once",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro"), m("c", 3, "ro")],
            record: Record::default(),
            create: &["new1"],
            delete: &["c"],
        },
        Case {
            what: "rolling replace waits while a replacement is not Ready",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro"), m("d", 4, "")],
            record: Record::default(),
            create: &[],
            delete: &[],
        },
        Case {
            what: "rolling replace goes on once it is Ready",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro"), m("d", 4, "r")],
            record: Record::default(),
            create: &["new1"],
            delete: &["b"],
        },
        Case {
            what: "old machines not Ready go at once, whatever maxUnavailable",
            replicas: 3,
            strategy: ROLLING,
            machines: vec![m("a", 1, "o"), m("b", 2, "o"), m("c", 3, "ro")],
            record: Record::default(),
            create: &["new1", "new2"],
            delete: &["b", "a"],
        },
        Case {
            what: "surge: new machines first, old ones only once others are Ready",
            replicas: 2,
            strategy: Strategy::RollingReplace {
                max_unavailable: 0,
                max_surge: 1,
            },
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro")],
            record: Record::default(),
            create: &["new1"],
            delete: &[],
        },
        Case {
            what: "surge: a Ready replacement lets one old machine go",
            replicas: 2,
            strategy: Strategy::RollingReplace {
                max_unavailable: 0,
                max_surge: 1,
            },
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro"), m("c", 3, "r")],
            record: Record::default(),
            create: &["new1"],
            delete: &["b"],
        },
        Case {
            what: "OnDelete keeps old machines",
            replicas: 2,
            strategy: Strategy::OnDelete,
            machines: vec![m("a", 1, "ro"), m("b", 2, "ro")],
            record: Record::default(),
            create: &[],
            delete: &[],
        },
        Case {
            what: "OnDelete replaces a deleted old machine from the new template",
            replicas: 2,
            strategy: Strategy::OnDelete,
            machines: vec![m("a", 1, "ro"), m("b", 2, "rod")],
            record: Record::default(),
            create: &["new1"],
            delete: &[],
        },
    ]);
}

/// However often it is run on what it recorded, and whichever of its actions happened, the
/// plan ends with `replicas` machines: every recorded create counts until listed.
#[test]
fn replaying_a_record_never_adds_machines() {
    for replicas in 0..5 {
        for made in 0..=replicas {
            let first = plan(replicas, ROLLING, &[], &Record::default(), &mut names("x"));
            // Only `made` of the creates happened (a crash, lost responses), none listed yet.
            let again = plan(replicas, ROLLING, &[], &first.record, &mut names("y"));
            assert_eq!(again.create, first.create, "nothing new while unlisted");
            let listed: Vec<Machine> = first.create[..made].iter().map(|n| m(n, 1, "")).collect();
            let third = plan(replicas, ROLLING, &listed, &again.record, &mut names("z"));
            assert_eq!(listed.len() + third.create.len(), replicas);
            assert!(third.create.iter().all(|n| n.starts_with('x')), "{third:?}");
        }
    }
}

#[test]
fn a_protected_excess_is_reported() {
    let machines = [m("a", 1, "rp"), m("b", 2, "rp")];
    let plan = plan(1, ROLLING, &machines, &Record::default(), &mut names("n"));
    assert!(plan.delete.is_empty());
    assert_eq!(plan.protected_excess, 1);
    let outcome = outcome(1, &machines, &plan, &[]);
    assert_eq!(outcome.reason(), reason::DELETION_PROTECTED);
}

#[test]
fn the_outcome_carries_the_machines_reasons() {
    let machines = [m("a", 1, "r"), m("b", 2, "")];
    let plan = plan(2, ROLLING, &machines, &Record::default(), &mut names("n"));
    let stuck = MachineStanding {
        name: "b".into(),
        reason: "CreateRefused".into(),
        message: "no H100 in stock".into(),
        stalled: true,
    };
    let outcome = outcome(2, &machines, &plan, &[stuck]);
    assert_eq!(outcome.standing(), "stalled");
    assert_eq!(outcome.reason(), "CreateRefused");
    assert!(
        outcome.message().contains("no H100 in stock"),
        "{outcome:?}"
    );

    let ready = [m("a", 1, "r"), m("b", 2, "r")];
    let plan = super::plan(2, ROLLING, &ready, &Record::default(), &mut names("n"));
    assert_eq!(super::outcome(2, &ready, &plan, &[]).standing(), "ready");
}

fn workers() -> GpuInstancePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "gpucloud.io/v1alpha1", "kind": "GpuInstancePool",
        "metadata": {"name": "workers", "namespace": "team-a", "uid": "u1"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "workers"}},
            "template": {
                "metadata": {"labels": {"app": "workers"}},
                "spec": {"region": "us-east-1", "gpuType": "L40S", "gpuCount": 1,
                         "osImage": "ubuntu-22.04-cuda-12"}
            }
        }
    }))
    .unwrap()
}

/// A copy of `pool` whose template spec is merged with `spec`.
fn with_template_spec(pool: &GpuInstancePool, spec: serde_json::Value) -> GpuInstancePool {
    let mut value = serde_json::to_value(pool).unwrap();
    let template = value["spec"]["template"]["spec"].as_object_mut().unwrap();
    for (key, field) in spec.as_object().unwrap() {
        template.insert(key.clone(), field.clone());
    }
    serde_json::from_value(value).unwrap()
}

#[test]
fn the_immutable_fields_are_those_the_crd_keeps_from_changing() {
    let fields = immutable_fields();
    for immutable in [
        "region",
        "placement",
        "gpuType",
        "gpuCount",
        "osImage",
        "imageRef",
        "source",
        "tier",
        "sshKeyRefs",
        "startupScript",
        "connectionSecret",
        "credentialsSecretRef",
    ] {
        assert!(fields.contains(immutable), "{immutable}: {fields:?}");
    }
    for changeable in [
        "powerState",
        "lifetime",
        "schedule",
        "deletionPolicy",
        "managementPolicy",
        "publicIp",
        "securityRules",
        "maxHourlyRate",
        "finalSnapshot",
    ] {
        assert!(!fields.contains(changeable), "{changeable}: {fields:?}");
    }
}

#[test]
fn template_hashes_follow_the_immutable_fields_only() {
    let pool = workers();
    let hash = template_hash(&pool).unwrap();
    assert_eq!(hash.len(), 10);
    // Pinned: a new hash for the same template replaces every pool's machines when the
    // operator is upgraded. A field added to the spec must leave it as it is.
    assert_eq!(hash, "cq68q6bk2z");
    let mut orphaning = pool.clone();
    orphaning.spec.deletion_policy = gpucloud_api::DeletionPolicy::Orphan;
    assert_eq!(template_hash(&orphaning).unwrap(), hash);
    for changeable in [
        serde_json::json!({"powerState": "Stopped"}),
        serde_json::json!({"lifetime": {"ttl": "8h"}}),
        serde_json::json!({"publicIp": false}),
        serde_json::json!({"managementPolicy": "ObserveOnly"}),
    ] {
        let changed = with_template_spec(&pool, changeable.clone());
        assert_eq!(template_hash(&changed).unwrap(), hash, "{changeable}");
    }
    let mut relabelled = pool.clone();
    relabelled
        .spec
        .template
        .metadata
        .labels
        .insert("team".into(), "vision".into());
    assert_eq!(template_hash(&relabelled).unwrap(), hash);
    for replacing in [
        serde_json::json!({"gpuType": "H100"}),
        serde_json::json!({"osImage": "ubuntu-24.04-cuda-12"}),
        serde_json::json!({"tier": "Legacy"}),
    ] {
        let changed = with_template_spec(&pool, replacing.clone());
        assert_ne!(template_hash(&changed).unwrap(), hash, "{replacing}");
    }

    let instance = machine(&orphaning, "workers-abcde", &hash, "h");
    assert_eq!(instance.labels()[POOL_LABEL], "workers");
    assert_eq!(instance.labels()[TEMPLATE_HASH_LABEL], hash);
    assert_eq!(instance.labels()["app"], "workers");
    assert_eq!(
        instance.spec.managed.deletion_policy,
        gpucloud_api::DeletionPolicy::Orphan
    );
    let owner = &instance.owner_references()[0];
    assert_eq!(owner.uid, "u1");
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
}

#[test]
fn a_changeable_field_is_patched_onto_the_machines_in_place() {
    let pool = workers();
    let hash = template_hash(&pool).unwrap();
    let in_place = in_place_hash(&pool).unwrap();
    let made = machine(&pool, "workers-abcde", &hash, &in_place);
    assert_eq!(in_place_patch(&pool, &made, &in_place).unwrap(), None);

    let mut paused = with_template_spec(
        &pool,
        serde_json::json!({"powerState": "Stopped", "lifetime": {"ttl": "8h"}}),
    );
    paused
        .spec
        .template
        .metadata
        .labels
        .insert("team".into(), "vision".into());
    paused.spec.deletion_policy = gpucloud_api::DeletionPolicy::Orphan;
    let paused_hash = in_place_hash(&paused).unwrap();
    assert_ne!(paused_hash, in_place);
    let patch = in_place_patch(&paused, &made, &paused_hash)
        .unwrap()
        .unwrap();
    assert_eq!(
        patch["metadata"]["annotations"][IN_PLACE_HASH_ANNOTATION],
        paused_hash.as_str()
    );
    assert_eq!(patch["spec"]["powerState"], "Stopped");
    assert_eq!(patch["spec"]["lifetime"]["ttl"], "8h");
    assert_eq!(patch["spec"]["deletionPolicy"], "Orphan");
    assert_eq!(patch["metadata"]["labels"]["team"], "vision");
    assert!(
        patch["metadata"]["labels"]
            .get(TEMPLATE_HASH_LABEL)
            .is_none()
    );
    assert!(patch["spec"].get("osImage").is_none(), "{patch}");

    // Applied, nothing is left to patch; a lifetime taken out of the template is removed.
    let stopped = machine(&paused, "workers-abcde", &hash, &paused_hash);
    assert_eq!(
        in_place_patch(&paused, &stopped, &paused_hash).unwrap(),
        None
    );
    // A person's edit of one machine stands until the template changes again.
    let mut edited = stopped.clone();
    edited.spec.power_state = gpucloud_api::PowerState::Running;
    assert_eq!(
        in_place_patch(&paused, &edited, &paused_hash).unwrap(),
        None
    );
    let running_again = with_template_spec(&pool, serde_json::json!({"powerState": "Running"}));
    let again_hash = in_place_hash(&running_again).unwrap();
    let patch = in_place_patch(&running_again, &stopped, &again_hash)
        .unwrap()
        .unwrap();
    assert_eq!(patch["spec"]["lifetime"], serde_json::Value::Null);
    assert_eq!(patch["spec"]["powerState"], "Running");

    // A change the machine cannot make is left to the replacement.
    let other_image = with_template_spec(
        &pool,
        serde_json::json!({"osImage": "ubuntu-24.04-cuda-12"}),
    );
    assert_eq!(in_place_hash(&other_image).unwrap(), in_place);
    assert_eq!(
        in_place_patch(&other_image, &made, &in_place).unwrap(),
        None
    );
}

#[test]
fn a_merge_diff_reproduces_the_target() {
    let old = serde_json::json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [1]});
    let new = serde_json::json!({"b": {"c": 2, "d": 4, "f": 5}, "e": [2], "g": "x"});
    assert_eq!(
        merge_diff(&old, &new),
        serde_json::json!({"a": null, "b": {"d": 4, "f": 5}, "e": [2], "g": "x"})
    );
}

#[test]
fn a_template_that_would_adopt_is_found_before_any_machine_is_made() {
    let pool = workers();
    assert_eq!(adoption_annotation(&pool), None);
    for annotation in ADOPTION_ANNOTATIONS {
        let mut adopting = workers();
        adopting
            .spec
            .template
            .metadata
            .annotations
            .insert(annotation.to_string(), "vm-000000000001".to_string());
        assert_eq!(adoption_annotation(&adopting), Some(annotation));
    }
}
