//! The OpenAPI 3 document of the API as the simulator implements it: paths and methods from
//! the route table, bodies from hand-written schema fragments that mirror
//! `gpucloud_cloud::model` and the handlers. Served at `/openapi.json` and checked in as
//! `docs/cloud-api.openapi.json` (a test fails when they differ).

use gpucloud_cloud::routes::{Method, Operation, Source};
use serde_json::{Map, Value, json};

fn r(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn string() -> Value {
    json!({ "type": "string" })
}

/// A string the service refuses when empty (a region, a GPU type, an id it looks up).
fn non_empty() -> Value {
    json!({ "type": "string", "minLength": 1 })
}

fn integer() -> Value {
    json!({ "type": "integer", "minimum": 0 })
}

fn number() -> Value {
    json!({ "type": "number" })
}

fn boolean() -> Value {
    json!({ "type": "boolean" })
}

fn array(items: Value) -> Value {
    json!({ "type": "array", "items": items })
}

/// An inline schema that also admits `null` (not for `$ref`s: OpenAPI 3.0 cannot make a
/// referenced enum nullable, so those are written inline).
fn nullable(mut schema: Value) -> Value {
    schema["nullable"] = true.into();
    schema
}

fn enumeration(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

fn object(required: &[&str], properties: Value) -> Value {
    let mut schema = json!({ "type": "object", "properties": properties });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

/// A response body: the envelope plus the operation's own fields.
fn enveloped(properties: Value) -> Value {
    json!({ "allOf": [r("Envelope"), { "type": "object", "properties": properties }] })
}

fn list_of(key: &str, item: Value) -> Value {
    enveloped(json!({ key: array(item), "total_count": integer() }))
}

fn rule_schema(with_id: bool) -> Value {
    let mut properties = json!({
        "direction": r("Direction"),
        "protocol": r("Protocol"),
        "ethertype": r("Ethertype"),
        "remote_ip_prefix": { "type": "string", "minLength": 1, "description": "CIDR matching the ethertype" },
        "port_range_min": { "type": "integer", "minimum": 1, "maximum": 65535, "nullable": true },
        "port_range_max": { "type": "integer", "minimum": 1, "maximum": 65535, "nullable": true },
    });
    if with_id {
        properties["id"] = string();
        object(&[], properties)
    } else {
        object(
            &["direction", "protocol", "ethertype", "remote_ip_prefix"],
            properties,
        )
    }
}

fn name_schema() -> Value {
    json!({ "type": "string", "minLength": 1, "maxLength": 63, "pattern": "^[A-Za-z0-9._-]+$" })
}

fn schemas() -> Value {
    json!({
        "Envelope": object(&["success", "message", "request_id"], json!({
            "success": boolean(),
            "message": string(),
            "request_id": { "type": "string", "pattern": "^req_[0-9a-f]{24}$" },
            "tier": r("Tier"),
            "timestamp": { "type": "string", "format": "date-time" },
            "code": string(),
        })),
        "Error": object(&["success", "message", "code", "request_id"], json!({
            "success": { "type": "boolean", "enum": [false] },
            "message": string(),
            "code": enumeration(&[
                "VALIDATION_ERROR", "INVALID_API_KEY", "INSUFFICIENT_CREDIT", "TIER_NOT_SUPPORTED",
                "NOT_FOUND", "ROUTE_NOT_FOUND", "METHOD_NOT_ALLOWED", "INVALID_STATE",
                "DUPLICATE_NAME", "CONFLICT", "PAYLOAD_TOO_LARGE", "RATE_LIMITED", "INTERNAL_ERROR",
            ]),
            "request_id": string(),
        })),
        "Tier": enumeration(&["legacy", "advanced"]),
        "InstanceStatus": enumeration(&[
            "CREATING", "ACTIVE", "STOPPING", "SHUTOFF", "STARTING", "REBOOTING", "HIBERNATING",
            "HIBERNATED", "DELETING", "ERROR",
        ]),
        "VmStatus": enumeration(&["PENDING", "BOOTING", "RUNNING", "STOPPED", "HIBERNATED", "TRANSITIONING"]),
        "Direction": enumeration(&["ingress", "egress"]),
        "Protocol": enumeration(&["tcp", "udp", "icmp", "any"]),
        "Ethertype": enumeration(&["IPv4", "IPv6"]),
        "Billing": object(&[], json!({ "hourly_rate": number(), "currency": string() })),
        "InstanceSpecs": object(&[], json!({
            "gpu_type": string(), "gpu_count": integer(), "ram_gb": integer(),
            "vcpus": integer(), "storage_gb": integer(),
        })),
        "SecurityRule": rule_schema(true),
        "NewRule": rule_schema(false),
        "Instance": object(&[], json!({
            "instance_id": string(),
            "vm_name": string(),
            "ip_address": nullable(string()),
            "ip_status": enumeration(&["assigned", "unassigned"]),
            "billing": r("Billing"),
            "specs": r("InstanceSpecs"),
            "status": r("InstanceStatus"),
            "boot_source": enumeration(&["image", "custom_image", "snapshot"]),
            "created_at": { "type": "string", "format": "date-time" },
            "region": string(),
            "tier": r("Tier"),
            "vm_status": r("VmStatus"),
            "image_id": nullable(string()),
            "public_ip_enabled": boolean(),
            "security_rules": array(r("SecurityRule")),
            "ssh_key_ids": array(string()),
            "startup_script_id": nullable(string()),
            "volume_ids": array(string()),
            "snapshot_id": nullable(string()),
        })),
        "Volume": object(&[], json!({
            "id": string(), "name": string(), "size": integer(), "region": string(),
            "tier": r("Tier"), "volume_type": enumeration(&["NVMe", "SSD"]),
            "status": enumeration(&["creating", "available", "attached"]),
            "bootable": boolean(),
            "created_at": { "type": "string", "format": "date-time" },
            "instance_id": nullable(string()),
            "vm_status": {
                "type": "string",
                "nullable": true,
                "enum": ["PENDING", "BOOTING", "RUNNING", "STOPPED", "HIBERNATED", "TRANSITIONING", null],
                "description": "power status of the instance the volume is attached to",
            },
        })),
        "VolumeBillingRecord": object(&[], json!({
            "billing_id": string(), "volume_id": string(), "volume_name": string(),
            "size_gb": integer(), "tier": enumeration(&["Legacy", "Advanced"]),
            "start_time": { "type": "string", "description": "ISO 8601 without zone suffix" },
            "end_time": { "type": "string", "description": "ISO 8601 without zone suffix" },
            "total_duration_minutes": integer(), "per_minute_rate": number(),
            "total_cost": number(), "currency": string(),
            "status": enumeration(&["creating", "available", "attached", "deleted"]),
            "description": string(),
        })),
        "VolumeBillingSummary": object(&[], json!({
            "totalMinutes": integer(), "activeCount": integer(), "averageUsage": number(),
            "totalSizeGB": integer(), "totalCost": number(),
        })),
        "Snapshot": object(&[], json!({
            "snapshot_id": string(), "name": string(), "description": string(),
            "size": integer(), "status": enumeration(&["creating", "available"]),
            "instance_id": string(), "region": string(),
            "created_at": { "type": "string", "format": "date-time" },
            "labels": array(string()), "tier": r("Tier"), "specs": r("InstanceSpecs"),
        })),
        "Image": object(&[], json!({
            "id": string(), "name": string(), "snapshot_id": string(), "region": string(),
            "size": integer(), "status": enumeration(&["creating", "available"]),
            "created_at": { "type": "string", "format": "date-time" },
        })),
        "SnapshotImageRelation": object(&[], json!({
            "snapshot_id": string(), "snapshot_name": string(), "image_ids": array(string()),
        })),
        "Firewall": object(&[], json!({
            "id": string(), "name": string(), "description": string(), "region": string(),
            "rules": array(r("SecurityRule")),
            "attachments": array(object(&[], json!({
                "vm": object(&[], json!({ "id": string(), "name": string(), "status": r("VmStatus") })),
            }))),
            "created_at": { "type": "string", "format": "date-time" },
        })),
        "SshKey": object(&[], json!({
            "id": string(), "name": string(), "public_key": string(),
            "created_at": { "type": "string", "format": "date-time" },
            "metadata": object(&[], json!({
                "fingerprint": string(), "algorithm": string(),
                "source": enumeration(&["imported", "generated"]),
            })),
        })),
        "StartupScript": object(&[], json!({
            "id": string(), "name": string(), "description": string(), "content": string(),
            "created_at": { "type": "string", "format": "date-time" },
            "updated_at": { "type": "string", "format": "date-time" },
        })),
        "InstanceBillingRecord": object(&[], json!({
            "instance_id": string(), "vm_name": string(), "gpu_type": string(),
            "gpu_count": integer(), "tier": r("Tier"), "hourly_rate": number(),
            "start_time": { "type": "string", "format": "date-time" },
            "end_time": nullable(json!({ "type": "string", "format": "date-time" })),
            "total_duration_minutes": integer(), "total_cost": number(), "currency": string(),
            "status": r("InstanceStatus"),
        })),
        "SnapshotBillingRecord": object(&[], json!({
            "snapshot_id": string(), "snapshot_name": string(), "size_gb": integer(),
            "hourly_rate": number(),
            "start_time": { "type": "string", "format": "date-time" },
            "end_time": nullable(json!({ "type": "string", "format": "date-time" })),
            "total_duration_minutes": integer(), "total_cost": number(), "currency": string(),
            "status": enumeration(&["active", "ended"]),
        })),
        "AiUsageRecord": object(&[], json!({
            "id": string(), "model": string(), "prompt_tokens": integer(),
            "completion_tokens": integer(), "total_tokens": integer(), "cost": number(),
            "currency": string(), "created_at": { "type": "string", "format": "date-time" },
        })),
        "CreateInstanceRequest": object(&["name", "region", "gpu_type", "gpu_count", "image_id"], json!({
            "name": name_schema(), "region": non_empty(), "gpu_type": non_empty(),
            "gpu_count": { "type": "integer", "minimum": 1 },
            "image_id": { "type": "string", "minLength": 1, "description": "OS image id or custom image id" },
            "tier": r("Tier"), "ssh_key_ids": array(string()),
            "startup_script": { "type": "string", "description": "inline script; exclusive with startup_script_id" },
            "startup_script_id": string(),
            "public_ip": { "type": "boolean", "default": true },
            "volume_ids": array(string()),
        })),
        "CreateVolumeRequest": object(&["name", "size", "region"], json!({
            "name": name_schema(),
            "size": { "type": "integer", "minimum": 1, "maximum": crate::engine::MAX_VOLUME_GB },
            "region": non_empty(),
            "volume_type": { "type": "string", "enum": ["NVMe", "SSD"], "default": "NVMe" },
            "tier": r("Tier"),
            "bootable": { "type": "boolean", "default": false },
        })),
    })
}

struct OperationDoc {
    summary: &'static str,
    request: Option<Value>,
    query: Vec<(&'static str, Value, &'static str)>,
    response: Value,
    /// Status codes beyond 200, 401, 429 and 500, which every operation can answer.
    errors: &'static [u16],
}

fn doc(
    summary: &'static str,
    request: Option<Value>,
    response: Value,
    errors: &'static [u16],
) -> OperationDoc {
    OperationDoc {
        summary,
        request,
        query: Vec::new(),
        response,
        errors,
    }
}

fn instance_body() -> Value {
    enveloped(json!({ "instance": r("Instance") }))
}

fn power_body() -> Value {
    enveloped(json!({ "vm_id": string(), "status": r("InstanceStatus") }))
}

fn volume_body() -> Value {
    enveloped(json!({ "volume": r("Volume") }))
}

fn deleted_body() -> Value {
    enveloped(json!({ "id": string() }))
}

fn operation_doc(op: Operation) -> OperationDoc {
    use Operation as Op;
    match op {
        Op::GetBalance => doc(
            "Get the credit balance",
            None,
            enveloped(json!({ "balance": number(), "currency": string() })),
            &[],
        ),
        Op::CreateInstance => doc(
            "Deploy a new instance (CREATING, then ACTIVE)",
            Some(r("CreateInstanceRequest")),
            instance_body(),
            &[400, 402, 409, 413],
        ),
        Op::GetPricing => doc(
            "Get pricing information",
            None,
            enveloped(json!({
                "currency": string(),
                "gpus": array(object(&[], json!({ "gpu_type": string(), "price_per_gpu_hour": number() }))),
                "storage": array(object(&[], json!({ "volume_type": string(), "price_per_gb_hour": number() }))),
                "snapshot_price_per_gb_hour": number(),
                "image_price_per_gb_hour": number(),
            })),
            &[],
        ),
        Op::QuotePricing => doc(
            "Quote the price of a configuration",
            Some(object(
                &["gpu_type", "gpu_count"],
                json!({
                    "gpu_type": non_empty(), "gpu_count": { "type": "integer", "minimum": 1 },
                    "hours": { "type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 8784, "default": 1 },
                }),
            )),
            enveloped(json!({
                "gpu_type": string(), "gpu_count": integer(), "hours": number(),
                "hourly_rate": number(), "total_cost": number(), "currency": string(),
            })),
            &[400, 413],
        ),
        Op::ListInstances => doc(
            "List instances",
            None,
            list_of("instances", r("Instance")),
            &[],
        ),
        Op::GetInstanceBilling => OperationDoc {
            query: vec![("instance_id", string(), "only this instance's record")],
            ..doc(
                "Get instance billing",
                None,
                enveloped(json!({
                    "records": array(r("InstanceBillingRecord")), "total_count": integer(),
                    "total_cost": number(), "currency": string(),
                })),
                &[400, 404],
            )
        },
        Op::ListSnapshotEligibleInstances => doc(
            "List ACTIVE instances (eligible for a snapshot)",
            None,
            list_of("instances", r("Instance")),
            &[],
        ),
        Op::GetInstance => doc("Get instance details", None, instance_body(), &[404]),
        Op::StartInstance => doc(
            "Start a SHUTOFF instance (STARTING, then ACTIVE)",
            None,
            power_body(),
            &[404, 409],
        ),
        Op::StopInstance => doc(
            "Stop an ACTIVE instance (STOPPING, then SHUTOFF)",
            None,
            power_body(),
            &[404, 409],
        ),
        Op::RebootInstance => doc(
            "Reboot an ACTIVE instance (REBOOTING, then ACTIVE)",
            None,
            power_body(),
            &[404, 409],
        ),
        Op::HibernateInstance => doc(
            "Hibernate an ACTIVE instance (HIBERNATING, then HIBERNATED)",
            None,
            power_body(),
            &[404, 409],
        ),
        Op::RestoreHibernatedInstance => doc(
            "Restore a HIBERNATED instance to ACTIVE (legacy tier only)",
            None,
            power_body(),
            &[403, 404, 409],
        ),
        Op::TogglePublicIp => doc(
            "Set public IP on or off",
            Some(object(&["enabled"], json!({ "enabled": boolean() }))),
            instance_body(),
            &[400, 404, 409, 413],
        ),
        Op::AddSecurityRule => doc(
            "Add an instance security rule",
            Some(r("NewRule")),
            enveloped(json!({ "instance_id": string(), "rule": r("SecurityRule") })),
            &[400, 404, 409, 413],
        ),
        Op::RemoveSecurityRule => doc(
            "Remove an instance security rule (legacy tier, RUNNING only)",
            None,
            enveloped(json!({ "instance_id": string(), "rule_id": string() })),
            &[403, 404, 409],
        ),
        Op::DeleteInstance => doc(
            "Delete an instance (DELETING, then gone)",
            None,
            enveloped(json!({ "instance_id": string(), "status": r("InstanceStatus") })),
            &[404],
        ),
        Op::ListInstanceFirewalls => doc(
            "Firewalls attached to an instance",
            None,
            list_of("firewalls", r("Firewall")),
            &[404],
        ),
        Op::AttachVolumes => doc(
            "Attach volumes to an instance (same region)",
            Some(object(
                &["volume_ids"],
                json!({ "volume_ids": array(string()) }),
            )),
            enveloped(json!({ "instance_id": string(), "volumes": array(r("Volume")) })),
            &[400, 404, 409, 413],
        ),
        Op::DetachVolumes => doc(
            "Detach volumes from an instance",
            Some(object(
                &["volume_ids"],
                json!({ "volume_ids": array(string()) }),
            )),
            enveloped(json!({ "instance_id": string(), "volumes": array(r("Volume")) })),
            &[400, 404, 409, 413],
        ),
        Op::ListVolumes => OperationDoc {
            query: vec![
                (
                    "bootable",
                    boolean(),
                    "only bootable (true) or non-bootable (false) volumes",
                ),
                (
                    "exclude_os_volumes",
                    boolean(),
                    "leave out the boot volumes of instances",
                ),
                ("region", string(), "region code"),
                ("tier", r("Tier"), "tier"),
            ],
            ..doc(
                "List volumes",
                None,
                enveloped(json!({
                    "volumes": array(r("Volume")),
                    "next_volume_name": string(),
                    "total_count": integer(),
                    "bootable_count": integer(),
                    "non_bootable_count": integer(),
                    "applied_filters": object(&[], json!({
                        "region": nullable(string()), "tier": nullable(string()), "bootable": nullable(boolean()),
                    })),
                    "metadata": object(&[], json!({
                        "regions_available": array(string()), "tiers_used": array(string()),
                    })),
                })),
                &[400],
            )
        },
        Op::CreateVolume => doc(
            "Create a volume (creating, then available)",
            Some(r("CreateVolumeRequest")),
            volume_body(),
            &[400, 402, 413],
        ),
        Op::GetVolumeBilling => OperationDoc {
            query: vec![
                (
                    "start_date",
                    json!({ "type": "string", "format": "date" }),
                    "YYYY-MM-DD; records that end on or after this day",
                ),
                (
                    "end_date",
                    json!({ "type": "string", "format": "date" }),
                    "YYYY-MM-DD; records that start on or before this day",
                ),
                (
                    "size",
                    json!({ "type": "integer", "minimum": 1 }),
                    "exact size in GB",
                ),
                (
                    "status",
                    enumeration(&["creating", "available", "attached", "deleted"]),
                    "volume status",
                ),
                ("tier", r("Tier"), "tier (any case)"),
                ("min_minutes", integer(), "minimum billed minutes"),
                ("max_minutes", integer(), "maximum billed minutes"),
                (
                    "min_cost",
                    json!({ "type": "number", "minimum": 0 }),
                    "minimum total cost",
                ),
                (
                    "max_cost",
                    json!({ "type": "number", "minimum": 0 }),
                    "maximum total cost",
                ),
                (
                    "page",
                    json!({ "type": "integer", "minimum": 1, "default": 1 }),
                    "1-based page",
                ),
                (
                    "limit",
                    json!({ "type": "integer", "minimum": 1, "maximum": 100, "default": 20 }),
                    "page size",
                ),
            ],
            ..doc(
                "Get volume billing, one record per volume",
                None,
                enveloped(json!({
                    "records": array(r("VolumeBillingRecord")),
                    "summary": r("VolumeBillingSummary"),
                    "total": integer(), "page": integer(), "limit": integer(),
                    "total_pages": integer(), "currency": string(),
                })),
                &[400],
            )
        },
        Op::ListVolumeTypes => doc(
            "List volume types",
            None,
            list_of(
                "volume_types",
                object(
                    &[],
                    json!({
                        "id": string(), "name": string(), "description": string(), "price_per_gb_hour": number(),
                        "currency": string(), "min_size_gb": integer(), "max_size_gb": integer(),
                    }),
                ),
            ),
            &[],
        ),
        Op::GetVolume => doc("Get volume details", None, volume_body(), &[404]),
        Op::ResizeVolume => doc(
            "Grow a volume",
            Some(object(
                &["size"],
                json!({ "size": { "type": "integer", "minimum": 1 } }),
            )),
            volume_body(),
            &[400, 404, 413],
        ),
        Op::CloneVolume => doc(
            "Clone a volume",
            Some(object(&["name"], json!({ "name": name_schema() }))),
            volume_body(),
            &[400, 402, 404, 409, 413],
        ),
        Op::DeleteVolume => doc(
            "Delete a detached volume",
            None,
            deleted_body(),
            &[404, 409],
        ),
        Op::CreateSnapshot => doc(
            "Snapshot an ACTIVE instance (creating, then available); billed at once",
            Some(object(
                &["name"],
                json!({
                    "name": name_schema(), "description": { "type": "string", "maxLength": 1024 },
                    "labels": array(name_schema()),
                }),
            )),
            enveloped(json!({ "snapshot": r("Snapshot") })),
            &[400, 402, 404, 409, 413],
        ),
        Op::ListSnapshots => doc(
            "List snapshots",
            None,
            list_of("snapshots", r("Snapshot")),
            &[],
        ),
        Op::GetSnapshotBilling => OperationDoc {
            query: vec![("snapshot_id", string(), "only this snapshot's record")],
            ..doc(
                "Get snapshot billing",
                None,
                enveloped(json!({
                    "records": array(r("SnapshotBillingRecord")), "total_count": integer(),
                    "total_cost": number(), "currency": string(),
                })),
                &[400, 404],
            )
        },
        Op::GetSnapshot => doc(
            "Get snapshot details",
            None,
            enveloped(json!({ "snapshot": r("Snapshot") })),
            &[404],
        ),
        Op::RestoreSnapshot => doc(
            "Restore an available snapshot to a new ACTIVE instance; billed at once",
            Some(object(
                &["new_vm_name"],
                json!({ "new_vm_name": name_schema() }),
            )),
            enveloped(json!({
                "data": r("Instance"),
                "snapshot": object(&[], json!({ "id": string(), "name": string() })),
            })),
            &[400, 402, 404, 409, 413],
        ),
        Op::DeleteSnapshot => doc(
            "Delete a snapshot (idempotent; removes its images)",
            None,
            enveloped(json!({ "snapshot_name": string() })),
            &[404, 409],
        ),
        Op::ListImages => doc(
            "List custom images",
            None,
            list_of("images", r("Image")),
            &[],
        ),
        Op::CreateImage => doc(
            "Create a custom image from an available snapshot",
            Some(object(
                &["snapshot_id", "name"],
                json!({ "snapshot_id": string(), "name": name_schema() }),
            )),
            enveloped(json!({ "image": r("Image") })),
            &[400, 402, 404, 409, 413],
        ),
        Op::ListSnapshotImageRelations => doc(
            "List snapshot-image relations",
            None,
            list_of("relations", r("SnapshotImageRelation")),
            &[],
        ),
        Op::GetSnapshotImageRelation => doc(
            "Get the images of a snapshot",
            None,
            enveloped(json!({ "relation": r("SnapshotImageRelation") })),
            &[404],
        ),
        Op::GetImage => doc(
            "Get image details",
            None,
            enveloped(json!({ "image": r("Image") })),
            &[404],
        ),
        Op::DeleteImage => doc("Delete a custom image", None, deleted_body(), &[404]),
        Op::ListFirewalls => doc(
            "List firewalls",
            None,
            list_of("firewalls", r("Firewall")),
            &[],
        ),
        Op::CreateFirewall => doc(
            "Create a firewall",
            Some(object(
                &["name", "region"],
                json!({
                    "name": name_schema(), "region": non_empty(),
                    "description": { "type": "string", "maxLength": 1024 },
                    "rules": array(r("NewRule")),
                }),
            )),
            enveloped(json!({ "firewall": r("Firewall") })),
            &[400, 413],
        ),
        Op::ListFirewallProtocols => doc(
            "List supported protocols",
            None,
            list_of("protocols", r("Protocol")),
            &[],
        ),
        Op::ListFirewallAttachableInstances => doc(
            "List instances a firewall can be attached to",
            None,
            list_of("instances", r("Instance")),
            &[],
        ),
        Op::GetFirewall => doc(
            "Get firewall details",
            None,
            enveloped(json!({ "firewall": r("Firewall") })),
            &[404],
        ),
        Op::DeleteFirewall => doc(
            "Delete a firewall attached to no instance",
            None,
            deleted_body(),
            &[404, 409],
        ),
        Op::AddFirewallRule => doc(
            "Add a firewall rule",
            Some(r("NewRule")),
            enveloped(json!({ "firewall_id": string(), "rule": r("SecurityRule") })),
            &[400, 404, 413],
        ),
        Op::RemoveFirewallRule => doc(
            "Remove a firewall rule",
            None,
            enveloped(json!({ "firewall_id": string(), "rule_id": string() })),
            &[404],
        ),
        Op::AttachFirewall => doc(
            "Set the firewall's attachments to exactly these instances",
            Some(object(&["vm_ids"], json!({ "vm_ids": array(string()) }))),
            enveloped(json!({ "firewall": r("Firewall") })),
            &[400, 404, 413],
        ),
        Op::ListSshKeys => doc("List SSH keys", None, list_of("ssh_keys", r("SshKey")), &[]),
        Op::CreateSshKey => doc(
            "Import a public key, or generate an ed25519 pair when public_key is omitted",
            Some(object(
                &["name"],
                json!({
                    "name": name_schema(),
                    "public_key": { "type": "string", "nullable": true, "description": "OpenSSH public key line; omitted or null generates a pair" },
                }),
            )),
            json!({ "allOf": [r("Envelope"), r("SshKey"), { "type": "object", "properties": {
            "private_key": { "type": "string", "description": "OpenSSH private key of a generated pair, returned once" },
        } }] }),
            &[400, 409, 413],
        ),
        Op::GetSshKey => doc(
            "Get an SSH key",
            None,
            enveloped(json!({ "ssh_key": r("SshKey") })),
            &[404],
        ),
        Op::DeleteSshKey => doc("Delete an SSH key", None, deleted_body(), &[404]),
        Op::ListStartupScripts => doc(
            "List startup scripts",
            None,
            list_of("scripts", r("StartupScript")),
            &[],
        ),
        Op::CreateStartupScript => doc(
            "Create a startup script",
            Some(object(
                &["name", "content"],
                json!({
                    "name": name_schema(),
                    "content": { "type": "string", "minLength": 1, "maxLength": crate::engine::MAX_SCRIPT_BYTES },
                    "description": { "type": "string", "maxLength": 1024 },
                }),
            )),
            enveloped(json!({ "script": r("StartupScript") })),
            &[400, 413],
        ),
        Op::DeleteStartupScripts => doc(
            "Delete several startup scripts (unknown ids reported)",
            Some(object(
                &["script_ids"],
                json!({ "script_ids": array(string()) }),
            )),
            enveloped(json!({
                "deleted_ids": array(string()), "not_found_ids": array(string()),
            })),
            &[400, 413],
        ),
        Op::GetStartupScript => doc(
            "Get a startup script",
            None,
            enveloped(json!({ "script": r("StartupScript") })),
            &[404],
        ),
        Op::UpdateStartupScript => doc(
            "Update a startup script",
            Some(object(
                &[],
                json!({
                    "name": name_schema(),
                    "content": { "type": "string", "minLength": 1, "maxLength": crate::engine::MAX_SCRIPT_BYTES },
                    "description": { "type": "string", "maxLength": 1024 },
                }),
            )),
            enveloped(json!({ "script": r("StartupScript") })),
            &[400, 404, 413],
        ),
        Op::DeleteStartupScript => doc("Delete a startup script", None, deleted_body(), &[404]),
        Op::GetGpuStock => doc(
            "GPU stock per region",
            None,
            list_of(
                "gpus",
                object(
                    &[],
                    json!({
                        "gpu_type": string(), "region": string(), "available": integer(),
                    }),
                ),
            ),
            &[],
        ),
        Op::GetGpuSpecs => doc(
            "GPU specifications",
            None,
            list_of(
                "gpus",
                object(
                    &[],
                    json!({
                        "gpu_type": string(), "name": string(), "gpu_memory_gb": integer(),
                        "ram_gb_per_gpu": integer(), "vcpus_per_gpu": integer(), "storage_gb_per_gpu": integer(),
                        "gpu_counts": array(integer()), "price_per_gpu_hour": number(), "currency": string(),
                    }),
                ),
            ),
            &[],
        ),
        Op::ListRegions => doc(
            "List regions",
            None,
            list_of(
                "regions",
                object(
                    &[],
                    json!({
                        "id": string(), "name": string(), "available": boolean(),
                    }),
                ),
            ),
            &[],
        ),
        Op::ListOsImages => doc(
            "List OS images",
            None,
            list_of(
                "os_images",
                object(
                    &[],
                    json!({
                        "id": string(), "name": string(), "os": string(), "version": string(), "description": string(),
                    }),
                ),
            ),
            &[],
        ),
        Op::ListAiModels => doc(
            "AI models, parameters and minimum balance",
            None,
            enveloped(json!({
                "models": array(object(&[], json!({
                    "id": string(), "name": string(), "price_per_1M_tokens": number(), "currency": string(),
                }))),
                "currency": string(),
                "minimum_balance": number(),
                "parameters": { "type": "object", "additionalProperties": object(&[], json!({
                    "description": string(),
                    "type": enumeration(&["integer", "float"]),
                    "default": nullable(number()),
                    "range": { "type": "array", "items": number(), "minItems": 2, "maxItems": 2 },
                })) },
                "authentication_type": enumeration(&["api_key"]),
                "authenticated_user": string(),
            })),
            &[],
        ),
        Op::ChatWithAi => doc(
            "Chat with an AI model; tokens are charged",
            Some(object(
                &["model", "messages"],
                json!({
                    "model": non_empty(),
                    "messages": array(object(&["role", "content"], json!({
                        "role": enumeration(&["system", "user", "assistant"]), "content": string(),
                    }))),
                    "max_tokens": { "type": "integer", "minimum": 1, "maximum": 32768 },
                    "temperature": { "type": "number", "minimum": 0, "maximum": 2 },
                    "top_p": { "type": "number", "minimum": 0, "maximum": 1 },
                    "top_k": { "type": "integer", "minimum": -1, "maximum": 200 },
                    "presence_penalty": { "type": "number", "minimum": -2, "maximum": 2 },
                    "repetition_penalty": { "type": "number", "minimum": -2, "maximum": 2 },
                }),
            )),
            enveloped(json!({
                "model": string(),
                "reply": object(&[], json!({ "role": string(), "content": string() })),
                "usage": object(&[], json!({
                    "prompt_tokens": integer(), "completion_tokens": integer(), "total_tokens": integer(),
                })),
                "cost": number(), "currency": string(),
            })),
            &[400, 402, 413],
        ),
        Op::GetAiUsageSummary => doc(
            "AI usage totals",
            None,
            enveloped(json!({ "summary": object(&[], json!({
            "total_requests": integer(), "prompt_tokens": integer(), "completion_tokens": integer(),
            "total_tokens": integer(), "total_cost": number(), "currency": string(),
            "by_model": array(object(&[], json!({
                "model": string(), "requests": integer(), "total_tokens": integer(), "total_cost": number(),
            }))),
        })) })),
            &[],
        ),
        Op::GetAiUsageHistory => doc(
            "AI usage history, newest first",
            None,
            enveloped(json!({
                "records": array(r("AiUsageRecord")), "total_count": integer(),
            })),
            &[],
        ),
    }
}

fn error_ref(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": r("Error") } },
    })
}

fn status_description(status: u16) -> &'static str {
    match status {
        400 => "invalid request (VALIDATION_ERROR, the message names the field)",
        401 => "missing or wrong X-API-Key (INVALID_API_KEY)",
        402 => "balance spent (INSUFFICIENT_CREDIT)",
        403 => "operation not available on the resource's tier (TIER_NOT_SUPPORTED)",
        404 => "unknown id (NOT_FOUND)",
        409 => {
            "wrong state (INVALID_STATE), duplicate SSH key name (DUPLICATE_NAME) or other conflict (CONFLICT)"
        }
        413 => "request body too large (PAYLOAD_TOO_LARGE)",
        429 => "rate limited (RATE_LIMITED); see Retry-After",
        _ => "injected fault (INTERNAL_ERROR)",
    }
}

/// The whole document.
pub fn document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for &op in Operation::ALL {
        let spec = operation_doc(op);
        let mut parameters: Vec<Value> = op
            .params()
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": string() }))
            .collect();
        parameters.extend(spec.query.iter().map(|(name, schema, description)| {
            json!({
                "name": name, "in": "query", "required": false,
                "description": description, "schema": schema,
            })
        }));
        let mut responses = Map::new();
        responses.insert(
            "200".into(),
            json!({
                "description": "success",
                "content": { "application/json": { "schema": spec.response } },
            }),
        );
        let mut statuses: Vec<u16> = spec.errors.to_vec();
        if !parameters.is_empty() && !statuses.contains(&400) {
            // Unknown query parameters and undecodable path segments are refused.
            statuses.push(400);
        }
        statuses.extend([401, 429, 500]);
        statuses.sort_unstable();
        statuses.dedup();
        for status in statuses {
            let mut response = error_ref(status_description(status));
            if status == 429 {
                response["headers"] = json!({
                    "Retry-After": { "description": "whole seconds", "schema": integer() },
                });
            }
            responses.insert(status.to_string(), response);
        }
        let mut operation = json!({
            "operationId": op.name(),
            "summary": spec.summary,
            "x-route-source": match op.source() { Source::Shown => "shown", Source::Assumed => "assumed" },
            "responses": responses,
        });
        if !parameters.is_empty() {
            operation["parameters"] = Value::Array(parameters);
        }
        if let Some(request) = spec.request {
            operation["requestBody"] = json!({
                "required": true,
                "content": { "application/json": { "schema": request } },
            });
        }
        let method = match op.method() {
            Method::Get => "get",
            Method::Post => "post",
            Method::Put => "put",
            Method::Delete => "delete",
        };
        let entry = paths
            .entry(op.path().to_string())
            .or_insert_with(|| json!({}));
        entry[method] = operation;
    }
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "Cloud GPU Compute Service (as simulated by gpucloud-simulator)",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Generated from the route table and the simulator's handlers; see docs/simulator.md and docs/cloud-api.md.",
        },
        "servers": [{ "url": "/" }],
        "security": [{ "ApiKey": [] }],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "ApiKey": { "type": "apiKey", "in": "header", "name": "X-API-Key" },
            },
            "schemas": schemas(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_documented_once_and_refs_resolve() {
        let document = document();
        let mut count = 0;
        for (_, item) in document["paths"].as_object().unwrap() {
            count += item.as_object().unwrap().len();
        }
        assert_eq!(count, Operation::ALL.len());
        let text = document.to_string();
        let schemas = document["components"]["schemas"].as_object().unwrap();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            assert!(schemas.contains_key(&name), "missing schema {name}");
        }
    }
}
