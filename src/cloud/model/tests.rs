//! Wire-format checks of the models: leniency, envelopes, field spellings.

use super::*;
use serde_json::json;

#[test]
fn string_enums_keep_unknown_values() {
    let status: InstanceStatus = serde_json::from_value(json!("MIGRATING")).unwrap();
    assert_eq!(status, InstanceStatus::Other("MIGRATING".into()));
    assert_eq!(serde_json::to_value(&status).unwrap(), json!("MIGRATING"));
    let known: VmStatus = serde_json::from_value(json!("RUNNING")).unwrap();
    assert_eq!(known, VmStatus::Running);
    assert!(known.is_known());
    for tier in Tier::KNOWN {
        assert_eq!(Tier::from_wire(tier.as_str()), *tier);
    }
}

#[test]
fn envelope_flattens_the_body_and_tolerates_unknown_and_missing_fields() {
    let wire = json!({
        "success": true,
        "message": "restored",
        "request_id": "req_0123456789abcdef01234567",
        "timestamp": "2025-01-01T00:00:00Z",
        "tier": "legacy",
        "future_field": {"x": 1},
        "data": {
            "instance_id": "vm-1", "vm_name": "a", "ip_address": "203.0.113.7",
            "ip_status": "assigned",
            "billing": {"hourly_rate": 2.5, "currency": "USD"},
            "specs": {"gpu_type": "A100-80G", "gpu_count": 1, "ram_gb": 64, "vcpus": 8,
                      "storage_gb": 500},
            "status": "ACTIVE", "boot_source": "snapshot",
            "created_at": "2025-01-01T00:00:00Z"
        },
        "snapshot": {"id": "snap-1", "name": "s"}
    });
    let decoded: ApiResponse<RestoreSnapshotBody> = serde_json::from_value(wire.clone()).unwrap();
    let bytes = serde_json::to_vec(&wire).unwrap();
    assert_eq!(ApiResponse::from_json(&bytes).unwrap(), decoded);
    assert!(decoded.success);
    assert_eq!(decoded.tier, Some(Tier::Legacy));
    assert_eq!(decoded.body.data.status, InstanceStatus::Active);
    assert_eq!(decoded.body.data.boot_source, BootSource::Snapshot);
    assert_eq!(decoded.body.data.specs.gpu_type, "A100-80G");
    assert!(decoded.body.data.security_rules.is_empty());
    assert_eq!(decoded.body.snapshot.id, "snap-1");

    let encoded = serde_json::to_value(&decoded).unwrap();
    assert_eq!(encoded["data"]["instance_id"], "vm-1");
    assert_eq!(encoded["snapshot"]["name"], "s");
    assert!(encoded.get("code").is_none());
}

#[test]
fn ssh_key_create_has_key_fields_at_top_level_and_hides_private_key() {
    let body = SshKeyCreatedBody {
        key: SshKey {
            id: "key-1".into(),
            name: "k".into(),
            public_key: "ssh-ed25519 AAAA".into(),
            ..SshKey::default()
        },
        private_key: Some(PrivateKeyPem::new("-----BEGIN OPENSSH PRIVATE KEY-----")),
    };
    let response =
        ApiResponse::ok("generated", "req_1", body).with_code(success_code::SSH_KEY_GENERATED);
    let encoded = serde_json::to_value(&response).unwrap();
    assert_eq!(encoded["id"], "key-1");
    assert_eq!(encoded["code"], "SSH_KEY_GENERATED");
    assert_eq!(
        encoded["private_key"],
        "-----BEGIN OPENSSH PRIVATE KEY-----"
    );
    assert!(!format!("{response:?}").contains("BEGIN OPENSSH"));
    let decoded: ApiResponse<SshKeyCreatedBody> = serde_json::from_value(encoded).unwrap();
    assert_eq!(decoded.body.key.name, "k");
    assert!(decoded.body.private_key.is_some());
}

#[test]
fn volume_billing_summary_uses_the_documented_camel_case() {
    let encoded = serde_json::to_value(VolumeBillingSummary::default()).unwrap();
    for key in [
        "totalMinutes",
        "activeCount",
        "averageUsage",
        "totalSizeGB",
        "totalCost",
    ] {
        assert!(encoded.get(key).is_some(), "{key}");
    }
    let model = serde_json::to_value(AiModel::default()).unwrap();
    assert!(model.get("price_per_1M_tokens").is_some());
}

/// Every response body decodes from an envelope that carries nothing else, and from one
/// with fields this version does not know.
#[test]
fn every_response_body_tolerates_missing_and_unknown_fields() {
    fn check<T: serde::de::DeserializeOwned>(name: &str) {
        for wire in [
            json!({}),
            json!({"success": true, "message": "ok", "request_id": "req_1",
                   "added_in_a_later_version": [1, 2, 3]}),
        ] {
            if let Err(err) = serde_json::from_value::<ApiResponse<T>>(wire.clone()) {
                panic!("{name}: {err}");
            }
            let bytes = serde_json::to_vec(&wire).unwrap();
            if let Err(err) = ApiResponse::<T>::from_json(&bytes) {
                panic!("{name} through from_json: {err}");
            }
        }
    }
    macro_rules! check_all {
        ($($body:ty),+ $(,)?) => { $( check::<$body>(stringify!($body)); )+ };
    }
    check_all!(
        Empty,
        InstanceBody,
        InstanceList,
        PowerActionBody,
        DeleteInstanceBody,
        AddSecurityRuleBody,
        RemoveSecurityRuleBody,
        InstanceBillingBody,
        VolumeList,
        VolumeBody,
        VolumeAttachmentBody,
        VolumeTypeList,
        VolumeBillingPage,
        SnapshotBody,
        SnapshotList,
        RestoreSnapshotBody,
        DeleteSnapshotBody,
        SnapshotBillingBody,
        ImageBody,
        ImageList,
        RelationBody,
        RelationList,
        FirewallBody,
        FirewallList,
        AddFirewallRuleBody,
        RemoveFirewallRuleBody,
        ProtocolList,
        SshKeyCreatedBody,
        SshKeyBody,
        SshKeyList,
        StartupScriptBody,
        StartupScriptList,
        DeleteStartupScriptsBody,
        DeletedBody,
        GpuStockList,
        GpuSpecList,
        RegionList,
        OsImageList,
        PricingBody,
        PriceQuoteBody,
        BalanceBody,
        AiModelsBody,
        ChatBody,
        AiUsageSummaryBody,
        AiUsageHistoryBody,
    );
    let error: ErrorBody = serde_json::from_value(json!({"detail": "x"})).unwrap();
    assert_eq!(error, ErrorBody::default());
}

#[test]
fn request_bodies_keep_required_fields_required() {
    let missing = serde_json::from_value::<RestoreSnapshotRequest>(json!({}));
    assert!(missing.unwrap_err().to_string().contains("new_vm_name"));
    let optional_left_out = serde_json::to_value(CreateSshKeyRequest {
        name: "k".into(),
        public_key: None,
    })
    .unwrap();
    assert_eq!(optional_left_out, json!({"name": "k"}));
}
