//! The invariants of a run, checked against the simulator's own records: its accounts as
//! they stand and its ledger of every call that acted, with the key that made it.

use crate::model::{
    ACCOUNTS, Group, Kind, ObjectKey, Policy, TEAM_C, Wanted, cloud_ids, final_snapshots,
    kind_name, team_mark, team_of,
};
use crate::support::{NAMESPACE, OPERATOR_NAMESPACE};
use crate::tenant::TENANT;
use crate::world::{CONVERGE_SECONDS, EXPLAIN_WITHIN, Run, all_objects, conditions};
use gpucloud_api::{Firewall, GpuInstance, Image, Snapshot, SshKey, Volume, condition_type};
use gpucloud_controller::flow::conditions::reason;
use gpucloud_controller::flow::kind::Watched;
use gpucloud_simulator::AccountSnapshot;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::time::Instant;

impl Run {
    /// Waits until every object is `Ready` and matches its spec in its own account, with
    /// exactly one cloud resource each (an Image whose snapshot was deleted: `Stalled` with
    /// `SourceDeleted` and none); every late create carried out and its duplicate reported and
    /// gone; an object not `Ready` must say why.
    pub(crate) async fn converge(&mut self) -> Result<(), String> {
        let lifted = Instant::now();
        let deadline = lifted + Duration::from_secs(CONVERGE_SECONDS);
        // Cloud calls near the end, to tell an operator still acting on a stale view from one
        // that stopped reconciling.
        let watch_calls_from = deadline - Duration::from_secs(10);
        let mut calls_before: Option<BTreeMap<String, u64>> = None;
        loop {
            if calls_before.is_none() && Instant::now() > watch_calls_from {
                calls_before = Some(self.env.simulator.call_counts());
            }
            let mut problems = self.convergence_problems().await;
            if problems.is_empty() {
                // The teams are done; the tenant's objects must be refused (or gone).
                problems = self.tenant.problems(&self.env).await?;
            }
            if problems.is_empty() {
                self.tenant.sample(&self.env).await?;
                self.note(format!("converged in {:?}", lifted.elapsed()));
                self.stats.converge_ms += lifted.elapsed().as_millis() as u64;
                return Ok(());
            }
            if lifted.elapsed() > EXPLAIN_WITHIN
                && let Some(stuck) = problems.iter().find(|p| p.contains("no condition"))
            {
                return Err(format!("stuck without a condition explaining why: {stuck}"));
            }
            if Instant::now() > deadline {
                let before = calls_before.unwrap_or_default();
                let recent: Vec<String> = self
                    .env
                    .simulator
                    .call_counts()
                    .into_iter()
                    .filter_map(|(operation, count)| {
                        let new =
                            count.saturating_sub(before.get(&operation).copied().unwrap_or(0));
                        (new > 0).then(|| format!("{operation} {new}"))
                    })
                    .collect();
                return Err(format!(
                    "not converged {CONVERGE_SECONDS}s after the faults were lifted:\n  {}\n  cloud calls in the last 10 s: {}",
                    problems.join("\n  "),
                    if recent.is_empty() {
                        "none".to_string()
                    } else {
                        recent.join(", ")
                    }
                ));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn convergence_problems(&mut self) -> Vec<String> {
        let counts = self.env.simulator.fault_counts();
        if counts.late_acts > counts.late_acts_done {
            return vec!["a late create is still held by the cloud".to_string()];
        }
        let states: Vec<AccountSnapshot> = (0..ACCOUNTS).map(|a| self.account(a)).collect();
        // Serialized once per account, and only when an object is stuck.
        let accounts: Vec<std::cell::OnceCell<Value>> =
            (0..ACCOUNTS).map(|_| std::cell::OnceCell::new()).collect();
        let objects = match all_objects(&self.env).await {
            Ok(objects) => objects,
            Err(error) => return vec![format!("listing objects: {error}")],
        };
        // Objects the harness deleted must be gone (their finalizers released).
        let mut problems = self.deleted_but_present(&objects);
        let mut ids: BTreeMap<ObjectKey, String> = BTreeMap::new();
        for (key, wanted) in &self.model.live {
            let Some(seen) = objects.get(key) else {
                problems.push(format!("{key}: missing from the API server"));
                continue;
            };
            let status = &seen.status;
            if let Some(id) = &status.external_id {
                ids.insert(key.clone(), id.clone());
            }
            if wanted.source_deleted {
                problems.extend(source_deleted_problem(key, status));
                continue;
            }
            // An observed machine other than its spec asks for (power state, public IP, rules)
            // is not as specified, and says so (`NotApplied`): settled there, and only when the
            // cloud does differ.
            if let Some(differs) = observed_power_differs(wanted, status, &states) {
                let not_applied = status
                    .condition(condition_type::STALLED)
                    .is_some_and(|c| c.status == "True" && c.reason == reason::NOT_APPLIED);
                if differs != not_applied {
                    problems.push(format!(
                        "GpuInstance {key}: ObserveOnly, its spec {} the cloud's machine, yet {}",
                        if differs { "differing from" } else { "as" },
                        conditions(status).join("; ")
                    ));
                }
                if differs {
                    continue;
                }
            }
            if !status.is_ready(seen.meta.generation) {
                problems.push(not_ready_problem(key, wanted, seen, &states, &accounts));
            }
        }
        if !problems.is_empty() {
            return problems;
        }
        problems.extend(self.one_resource_each(&states, &ids));
        if !problems.is_empty() {
            return problems;
        }
        problems.extend(self.specs_hold(&states, &ids));
        if !problems.is_empty() {
            return problems;
        }
        match self.duplicate_reported().await {
            Ok(Some(problem)) => return vec![problem],
            Ok(None) => {}
            Err(error) => return vec![error],
        }
        for (key, id) in &ids {
            if let Some(preset) = self.presets.iter_mut().find(|p| &p.id == id) {
                preset.recorded |= preset.adopter.as_ref() == Some(key);
            }
        }
        Vec::new()
    }

    /// The objects the harness deleted that are still there (their finalizers not released).
    fn deleted_but_present(
        &self,
        objects: &BTreeMap<ObjectKey, crate::world::Seen>,
    ) -> Vec<String> {
        objects
            .iter()
            .filter(|(key, _)| !self.model.live.contains_key(*key))
            .map(|(key, seen)| {
                format!(
                    "{} {key}: deleted but still present (finalizers {:?}; {})",
                    kind_name(seen.kind),
                    seen.meta.finalizers,
                    conditions(&seen.status).join("; ")
                )
            })
            .collect()
    }

    /// Exactly one cloud resource per object, in the object's own account, and nothing else
    /// carrying a team's mark there but what an `Orphan` object left behind (the tenant's own
    /// resources are checked once deleted).
    fn one_resource_each(
        &self,
        states: &[AccountSnapshot],
        ids: &BTreeMap<ObjectKey, String>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for group in Group::ALL {
            let state = &states[group.account];
            let mark = team_mark(group.namespace);
            // Left on purpose by deleted `deletionPolicy: Snapshot` machines (checked once
            // everything is deleted).
            let finals: Vec<String> = final_snapshots(state)
                .into_iter()
                .map(|(id, _, _)| id)
                .collect();
            for kind in Kind::ALL {
                let wanted: Vec<&ObjectKey> = self
                    .model
                    .live
                    .iter()
                    .filter(|(_, w)| {
                        w.group == group
                            && w.kind == kind
                            && w.adopted.is_none()
                            && !w.source_deleted
                    })
                    .map(|(key, _)| key)
                    .collect();
                let resources: Vec<(String, String)> = cloud_ids(state, kind)
                    .into_iter()
                    .filter(|(id, name)| {
                        name.starts_with(&mark)
                            && !name.ends_with("-boot")
                            && !self.is_kept(id, name)
                            && !finals.contains(id)
                    })
                    .collect();
                if resources.len() != wanted.len() {
                    problems.push(format!(
                        "{} in {group}: {} objects but {} operator resources in the cloud: {resources:?}",
                        kind_name(kind),
                        wanted.len(),
                        resources.len(),
                    ));
                }
                for key in wanted {
                    let Some(id) = ids.get(key) else {
                        problems.push(format!("{key}: Ready without a cloud id"));
                        continue;
                    };
                    if !resources.iter().any(|(rid, _)| rid == id) {
                        problems.push(format!(
                            "{key}: its cloud resource {id} is not in account {} under its mark",
                            group.account
                        ));
                    }
                }
            }
        }
        // An adopted object records the preset it names.
        for (key, wanted) in &self.model.live {
            if let Some(preset) = &wanted.adopted
                && ids.get(key) != Some(preset)
            {
                problems.push(format!(
                    "{key}: adopted {preset} but records {:?}",
                    ids.get(key)
                ));
            }
        }
        problems
    }

    /// Whether a resource is one an `Orphan` object left behind on purpose.
    fn is_kept(&self, id: &str, name: &str) -> bool {
        self.kept
            .iter()
            .any(|k| k.cloud_name == name || k.id.as_deref() == Some(id))
    }

    /// Every object's resource matches its spec (an observed one: stays as it was made).
    fn specs_hold(
        &self,
        states: &[AccountSnapshot],
        ids: &BTreeMap<ObjectKey, String>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        for (key, wanted) in &self.model.live {
            if wanted.policy == Policy::ObserveOnly || wanted.source_deleted {
                continue;
            }
            let state = &states[wanted.group.account];
            let id = &ids[key];
            let spec = &wanted.spec;
            let check = SpecCheck {
                key,
                spec,
                state,
                id,
                ids,
            };
            problems.extend(match wanted.kind {
                Kind::Instance => check.instance(),
                Kind::Volume => check.volume(),
                Kind::Firewall => check.firewall(),
                Kind::Snapshot => check.snapshot(),
                Kind::Image => check.image(),
                Kind::SshKey => continue,
            });
        }
        problems
    }

    /// A late create that made a second resource under its object's cloud name must have been
    /// reported on the object (`DuplicateFound`).
    async fn duplicate_reported(&mut self) -> Result<Option<String>, String> {
        let Some(late) = &self.late else {
            return Ok(None);
        };
        let creates = self
            .env
            .simulator
            .ledger()
            .iter()
            .filter(|e| {
                e.created.is_some()
                    && e.name
                        .as_deref()
                        .is_some_and(|n| n.starts_with(&late.prefix))
            })
            .count();
        if creates < 2 {
            return Ok(None);
        }
        let events: Api<Event> = Api::namespaced(self.env.client.clone(), &late.key.namespace);
        let events = events
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing events: {e}"))?;
        let reported = events.items.iter().any(|event| {
            event.reason.as_deref() == Some("DuplicateFound")
                && event.involved_object.name.as_deref() == Some(late.key.name.as_str())
        });
        if !reported {
            return Ok(Some(format!(
                "{}: {creates} resources were created under its name (a late create), and no DuplicateFound event says so",
                late.key
            )));
        }
        self.stats.duplicates_reported += 1;
        self.stats.late_duplicates += creates as u64 - 1;
        Ok(None)
    }

    pub(crate) fn check_foreign(&self, before: &[Value]) -> Result<(), String> {
        for (account, before) in before.iter().enumerate() {
            let now = self.view_of(account, "foreign-");
            if &now != before {
                return Err(format!(
                    "foreign resources of account {account} were touched:\n  before {before}\n  after  {now}"
                ));
            }
        }
        Ok(())
    }

    /// Presets only observed are exactly as they were made.
    pub(crate) fn check_presets(&self) -> Result<(), String> {
        for (index, preset) in self.presets.iter().enumerate() {
            if preset.role != Policy::ObserveOnly {
                continue;
            }
            let now = self.preset_view(index);
            if now.as_ref() != Some(&preset.view) {
                return Err(format!(
                    "touched: the observed {} {} changed:\n  made  {}\n  now   {now:?}",
                    kind_name(preset.kind),
                    preset.id,
                    preset.view
                ));
            }
        }
        Ok(())
    }

    /// Neither an API key nor a private key in any object (statuses and condition messages
    /// included) or any event; and no Rust Debug dump of an API error (`Status { .. }`,
    /// `ApiError`), which a person could not read, in either.
    pub(crate) async fn check_secrets_in_objects_and_events(&mut self) -> Result<(), String> {
        let mut texts = Vec::new();
        texts.extend(list_json::<SshKey>(&self.env).await?);
        texts.extend(list_json::<GpuInstance>(&self.env).await?);
        texts.extend(list_json::<Volume>(&self.env).await?);
        texts.extend(list_json::<Firewall>(&self.env).await?);
        texts.extend(list_json::<Snapshot>(&self.env).await?);
        texts.extend(list_json::<Image>(&self.env).await?);
        let events: Api<Event> = Api::all(self.env.client.clone());
        let events = events
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing events: {e}"))?;
        self.stats.events += events.items.len() as u64;
        for event in &events.items {
            texts.push(serde_json::to_string(event).unwrap_or_default());
        }
        let mut markers: Vec<&str> = self.keys.iter().flatten().map(String::as_str).collect();
        markers.push("PRIVATE KEY");
        for text in &texts {
            for dump in ["Status {", "ApiError"] {
                if text.contains(dump) {
                    return Err(format!(
                        "a Debug dump ({dump:?}) in an object or event: {text}"
                    ));
                }
            }
        }
        for text in texts {
            for marker in &markers {
                if text.contains(marker) {
                    return Err(format!(
                        "a secret ({:?} marker) in an object or event: {text}",
                        if marker.contains("PRIVATE") {
                            marker
                        } else {
                            "an API key"
                        }
                    ));
                }
            }
        }
        Ok(())
    }

    /// Once everything is deleted: nothing with a team's mark in either account but what
    /// `Orphan` objects left (each still there if it recorded it), observed and orphaned
    /// presets still there, managed ones gone, no call of one team's key naming another's
    /// resource; then the harness removes what was kept and each account's spend is back to
    /// its foreign resources' alone.
    pub(crate) async fn check_nothing_left(
        &mut self,
        foreign: &[Value],
        baseline_drain: &[f64],
    ) -> Result<(), String> {
        let LeftOnPurpose {
            kept: kept_found,
            finals: finals_found,
        } = self.left_on_purpose()?;
        self.check_kept_and_presets_left(&kept_found)?;
        self.check_presets()?;
        self.check_foreign(foreign)?;
        self.check_ledger()?;
        self.stats.kept_after_delete += kept_found.len() as u64;
        self.stats.final_snapshots += finals_found.len() as u64;

        // The harness removes what was left on purpose, then billing must stop.
        self.remove_left_on_purpose(kept_found, finals_found)
            .await?;
        self.env.simulator.advance_clock(Duration::from_secs(60));
        for account in 0..ACCOUNTS {
            let state = self.account(account);
            for kind in Kind::ALL {
                let left: Vec<(String, String)> = cloud_ids(&state, kind)
                    .into_iter()
                    .filter(|(_, name)| !name.starts_with("foreign-") && !name.ends_with("-boot"))
                    .collect();
                if !left.is_empty() {
                    return Err(format!(
                        "left in account {account} after the kept resources were removed: {} {left:?}",
                        kind_name(kind)
                    ));
                }
            }
        }
        let drain = self.hourly_drain();
        for account in 0..ACCOUNTS {
            if (drain[account] - baseline_drain[account]).abs() > 0.001 {
                return Err(format!(
                    "billing did not stop in account {account}: {:.6}/h spent, the foreign resources alone spend {:.6}/h",
                    drain[account], baseline_drain[account]
                ));
            }
        }
        Ok(())
    }

    /// What carries the operator's mark once every object is deleted, which must be only what
    /// was left on purpose: the resources of `Orphan` objects and the final snapshots.
    /// Anything else is a leak.
    fn left_on_purpose(&self) -> Result<LeftOnPurpose, String> {
        let mut leaks: Vec<String> = Vec::new();
        let mut kept_found: Vec<Kept> = Vec::new();
        let mut finals_found: Vec<(usize, String)> = Vec::new();
        for account in 0..ACCOUNTS {
            let state = self.account(account);
            let finals = self.check_final_snapshots(account, &state)?;
            for kind in Kind::ALL {
                for (id, name) in cloud_ids(&state, kind) {
                    if !name.starts_with("gco-") || name.ends_with("-boot") {
                        continue;
                    }
                    if kind == Kind::Snapshot && finals.contains(&id) {
                        finals_found.push((account, id));
                        continue;
                    }
                    let kept = self.kept.iter().any(|k| {
                        k.account == account
                            && k.kind == kind
                            && (k.cloud_name == name || k.id.as_deref() == Some(id.as_str()))
                    });
                    if kept {
                        kept_found.push((account, kind, id));
                    } else {
                        leaks.push(format!(
                            "{} {id} {name} in account {account}",
                            kind_name(kind)
                        ));
                    }
                }
            }
        }
        if !leaks.is_empty() {
            return Err(format!("leaked after deleting every object: {leaks:?}"));
        }
        Ok(LeftOnPurpose {
            kept: kept_found,
            finals: finals_found,
        })
    }

    /// Each `Orphan` object's recorded resource is still there; adopted presets managed by a
    /// deleted object are gone, those orphaned or observed are not.
    fn check_kept_and_presets_left(&self, kept_found: &[Kept]) -> Result<(), String> {
        for kept in &self.kept {
            if let Some(id) = &kept.id
                && !kept_found
                    .iter()
                    .any(|(a, k, found)| *a == kept.account && *k == kept.kind && found == id)
            {
                return Err(format!(
                    "{} {}: deletionPolicy Orphan, yet its resource {id} is gone from account {}",
                    kind_name(kept.kind),
                    kept.object,
                    kept.account
                ));
            }
        }
        for (index, preset) in self.presets.iter().enumerate() {
            let there = self.preset_view(index).is_some();
            match preset.role {
                Policy::Manage if preset.recorded && there => {
                    return Err(format!(
                        "leaked after deleting every object: the adopted {} {} outlived its managing object",
                        kind_name(preset.kind),
                        preset.id
                    ));
                }
                Policy::Orphan | Policy::ObserveOnly if !there => {
                    return Err(format!(
                        "the {} {} adopted with {:?} was deleted",
                        kind_name(preset.kind),
                        preset.id,
                        preset.role
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The harness deletes what was left on purpose: the kept resources, the final snapshots,
    /// and the presets still there.
    async fn remove_left_on_purpose(
        &self,
        kept_found: Vec<Kept>,
        finals_found: Vec<(usize, String)>,
    ) -> Result<(), String> {
        let mut removals: Vec<(usize, Kind, String)> = kept_found;
        removals.extend(
            finals_found
                .into_iter()
                .map(|(account, id)| (account, Kind::Snapshot, id)),
        );
        for (index, preset) in self.presets.iter().enumerate() {
            if self.preset_view(index).is_some() {
                removals.push((0, preset.kind, preset.id.clone()));
            }
        }
        for (account, kind, id) in removals {
            let cloud = &self.harness[account];
            let removed = match kind {
                Kind::Instance => cloud.delete_instance(&id).await.map(drop),
                Kind::Volume => cloud.delete_volume(&id).await.map(drop),
                Kind::Firewall => cloud.delete_firewall(&id).await.map(drop),
                Kind::SshKey => cloud.delete_ssh_key(&id).await.map(drop),
                Kind::Snapshot => cloud.delete_snapshot(&id).await.map(drop),
                Kind::Image => cloud.delete_image(&id).await.map(drop),
            };
            removed.map_err(|e| format!("removing the kept {} {id}: {e}", kind_name(kind)))?;
        }
        Ok(())
    }

    /// The final snapshots of an account once every object is deleted: one per machine, each
    /// available, none of a machine still there, and exactly one of every machine a deleted
    /// `deletionPolicy: Snapshot` GpuInstance had recorded. Returns their ids.
    fn check_final_snapshots(
        &self,
        account: usize,
        state: &AccountSnapshot,
    ) -> Result<Vec<String>, String> {
        let finals = final_snapshots(state);
        let mut machines: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (id, machine, status) in &finals {
            machines.entry(machine).or_default().push(id);
            if *status != gpucloud_cloud::model::SnapshotStatus::Available {
                return Err(format!(
                    "the final snapshot {id} of {machine} in account {account} is {status}"
                ));
            }
            if state.instances.iter().any(|i| &i.instance_id == machine) {
                return Err(format!(
                    "{machine} has a final snapshot {id} in account {account} but is still there"
                ));
            }
        }
        if let Some((machine, ids)) = machines.iter().find(|(_, ids)| ids.len() > 1) {
            return Err(format!(
                "duplicate final snapshots of {machine} in account {account}: {ids:?}"
            ));
        }
        for deleted in self.final_snapshots.iter().filter(|f| f.account == account) {
            if let Some(machine) = &deleted.machine
                && !machines.contains_key(machine.as_str())
            {
                return Err(format!(
                    "GpuInstance {} (deletionPolicy Snapshot) recorded {machine}, yet no final snapshot of it is in account {account}",
                    deleted.object
                ));
            }
        }
        Ok(finals.into_iter().map(|(id, _, _)| id).collect())
    }

    /// From the simulator's ledger: every call a team's key made named only that team's
    /// resources (created with a key of the team's, or a preset it adopts to manage), in the
    /// account the key opens; nothing named a foreign or an observed resource; every create
    /// gave the team's mark.
    fn check_ledger(&mut self) -> Result<(), String> {
        let ledger = self.env.simulator.ledger();
        // Who may name each known resource: the team whose key created it, or none.
        let mut owners: BTreeMap<String, (usize, Option<&'static str>)> = BTreeMap::new();
        for entry in &ledger {
            if let Some(created) = &entry.created {
                owners.insert(
                    created.clone(),
                    (entry.caller.account, team_of(entry.caller)),
                );
            }
        }
        for preset in &self.presets {
            let team = (preset.role != Policy::ObserveOnly).then_some(NAMESPACE);
            owners.insert(preset.id.clone(), (0, team));
        }
        let mut violations = Vec::new();
        let mut checked = 0;
        for entry in &ledger {
            let Some(team) = team_of(entry.caller) else {
                continue;
            };
            checked += 1;
            if entry.created.is_some()
                && let Some(name) = &entry.name
                && !name.starts_with(&team_mark(team))
            {
                violations.push(format!(
                    "{team}'s key created {name:?} ({})",
                    entry.operation
                ));
            }
            for id in &entry.named {
                let Some((account, owner)) = owners.get(id) else {
                    continue;
                };
                if *owner != Some(team) || *account != entry.caller.account {
                    let whose = match owner {
                        Some(owner) => format!("{owner}'s"),
                        None => "a foreign or observed".to_string(),
                    };
                    violations.push(format!(
                        "{team}'s key (account {}) called {} naming {whose} {id} of account {account}",
                        entry.caller.account, entry.operation
                    ));
                }
            }
        }
        self.stats.ledger_calls += checked;
        if violations.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "touched: a team's calls named resources not its own: {violations:?}"
            ))
        }
    }
}

async fn list_json<K>(env: &crate::support::Env) -> Result<Vec<String>, String>
where
    K: Watched + serde::Serialize,
{
    let mut texts = Vec::new();
    for namespace in [NAMESPACE, TEAM_C, TENANT, OPERATOR_NAMESPACE] {
        let api: Api<K> = Api::namespaced(env.client.clone(), namespace);
        let list = api
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing: {e}"))?;
        texts.extend(
            list.items
                .iter()
                .map(|o| serde_json::to_string(o).unwrap_or_default()),
        );
    }
    Ok(texts)
}

/// Why an Image whose snapshot was deleted is not as it should be: `Stalled` with
/// `SourceDeleted`.
fn source_deleted_problem(key: &ObjectKey, status: &gpucloud_api::CloudStatus) -> Option<String> {
    let stalled = status
        .condition(condition_type::STALLED)
        .is_some_and(|c| c.status == "True" && c.reason == reason::SOURCE_DELETED);
    (!stalled).then(|| {
        format!(
            "Image {key}: its snapshot was deleted, but it is not Stalled with {}: {}",
            reason::SOURCE_DELETED,
            conditions(status).join("; ")
        )
    })
}

/// An object not `Ready`: its conditions, whether any explains why, and what the cloud holds
/// under its recorded id (`accounts` serializes each account's state once, when first needed).
fn not_ready_problem(
    key: &ObjectKey,
    wanted: &Wanted,
    seen: &crate::world::Seen,
    states: &[AccountSnapshot],
    accounts: &[std::cell::OnceCell<Value>],
) -> String {
    let status = &seen.status;
    let explained = status
        .conditions
        .iter()
        .any(|c| c.type_ != "Ready" && c.status == "True" && !c.message.is_empty())
        || status
            .condition("Ready")
            .is_some_and(|c| !c.message.is_empty());
    // What the cloud holds under the recorded id, to tell a stale view of the
    // operator's from a cloud that keeps undoing its calls.
    let account = wanted.group.account;
    let in_cloud = status
        .external_id
        .as_deref()
        .map(|id| {
            let json = accounts[account]
                .get_or_init(|| serde_json::to_value(&states[account]).unwrap_or_default());
            format!("; the cloud's record: {}", cloud_record(json, id))
        })
        .unwrap_or_default();
    format!(
        "{} {key}: not Ready (generation {:?}, observed {:?}; {}){}{in_cloud}",
        kind_name(wanted.kind),
        seen.meta.generation,
        status.observed_generation,
        conditions(status).join("; "),
        if explained { "" } else { " - no condition" }
    )
}

/// A resource left on purpose once every object is deleted: account, kind and id.
type Kept = (usize, Kind, String);

/// What carries the operator's mark once every object is deleted, all of it left on purpose.
struct LeftOnPurpose {
    /// The resources of `Orphan` objects.
    kept: Vec<Kept>,
    /// The final snapshots: account and id.
    finals: Vec<(usize, String)>,
}

/// One object's resource in the cloud, checked against its spec.
struct SpecCheck<'a> {
    key: &'a ObjectKey,
    spec: &'a Value,
    /// The account the object's resource is in.
    state: &'a AccountSnapshot,
    /// The resource's cloud id.
    id: &'a str,
    /// Every object's cloud id.
    ids: &'a BTreeMap<ObjectKey, String>,
}

impl SpecCheck<'_> {
    /// The cloud id of the object of `name` in the checked object's namespace.
    fn id_in(&self, name: Option<&str>) -> Option<String> {
        name.and_then(|name| {
            self.ids
                .get(&ObjectKey::new(&self.key.namespace, name))
                .cloned()
        })
    }

    /// A machine's power state and restore source in the cloud, against its spec.
    fn instance(&self) -> Vec<String> {
        let (key, spec, state, id) = (self.key, self.spec, self.state, self.id);
        let mut problems = Vec::new();
        let Some(instance) = state.instances.iter().find(|i| i.instance_id == id) else {
            return problems;
        };
        let status = serde_json::to_value(&instance.status).unwrap_or_default();
        let wanted_status = if spec["powerState"] == "Stopped" {
            "SHUTOFF"
        } else {
            "ACTIVE"
        };
        if status.as_str() != Some(wanted_status) {
            problems.push(format!(
                "{key}: cloud status {status}, wanted {wanted_status}"
            ));
        }
        let source = spec["source"]["snapshotRef"]["name"].as_str();
        if let Some(snapshot) = self.id_in(source)
            && instance.snapshot_id.as_ref() != Some(&snapshot)
        {
            problems.push(format!(
                "{key}: restored from {:?} in the cloud, wanted {snapshot}",
                instance.snapshot_id
            ));
        }
        problems
    }

    /// A volume's size and attachment in the cloud, against its spec.
    fn volume(&self) -> Vec<String> {
        let (key, spec, state, id) = (self.key, self.spec, self.state, self.id);
        let mut problems = Vec::new();
        let Some(volume) = state.volumes.iter().find(|v| v.id == id) else {
            return problems;
        };
        if Some(volume.size as i64) != spec["sizeGb"].as_i64() {
            problems.push(format!(
                "{key}: size {} in the cloud, spec {}",
                volume.size, spec["sizeGb"]
            ));
        }
        let target = self.id_in(spec["instanceRef"]["name"].as_str());
        if volume.instance_id != target {
            problems.push(format!(
                "{key}: attached to {:?} in the cloud, wanted {target:?}",
                volume.instance_id
            ));
        }
        problems
    }

    /// A firewall's rules and attachments in the cloud, against its spec.
    fn firewall(&self) -> Vec<String> {
        let (key, spec, state, id) = (self.key, self.spec, self.state, self.id);
        let mut problems = Vec::new();
        let Some(firewall) = state.firewalls.iter().find(|f| f.id == id) else {
            return problems;
        };
        let rules = spec["rules"].as_array().map_or(0, Vec::len);
        if firewall.rules.len() != rules {
            problems.push(format!(
                "{key}: {} rules in the cloud, spec {rules}",
                firewall.rules.len()
            ));
        }
        let attached: BTreeSet<String> = firewall
            .attachments
            .iter()
            .map(|a| a.vm.id.clone())
            .collect();
        let targets: BTreeSet<String> = spec["instanceRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| self.id_in(r["name"].as_str()))
            .collect();
        if attached != targets {
            problems.push(format!(
                "{key}: attached to {attached:?}, wanted {targets:?}"
            ));
        }
        problems
    }

    /// A snapshot's machine in the cloud, against its spec.
    fn snapshot(&self) -> Vec<String> {
        let found = self
            .state
            .snapshots
            .iter()
            .find(|s| s.snapshot_id == self.id);
        self.made_from(
            found.map(|s| s.instance_id.as_str()),
            "instanceRef",
            "a snapshot of",
        )
    }

    /// An image's snapshot in the cloud, against its spec.
    fn image(&self) -> Vec<String> {
        let found = self.state.images.iter().find(|i| i.id == self.id);
        self.made_from(
            found.map(|i| i.snapshot_id.as_str()),
            "snapshotRef",
            "made from",
        )
    }

    /// What the resource was made from in the cloud (`source`, when the resource is there) is
    /// what the spec's `reference` names, when that has an id; `made` says how, in the message.
    fn made_from(&self, source: Option<&str>, reference: &str, made: &str) -> Vec<String> {
        let Some(source) = source else {
            return Vec::new();
        };
        match self.id_in(self.spec[reference]["name"].as_str()) {
            Some(wanted) if source != wanted => vec![format!(
                "{}: {made} {source} in the cloud, wanted {wanted}",
                self.key
            )],
            _ => Vec::new(),
        }
    }
}

/// The record carrying `id` (any kind) in an account's JSON, or a note that there is none.
fn cloud_record(account: &Value, id: &str) -> String {
    account
        .as_object()
        .into_iter()
        .flat_map(|kinds| kinds.values())
        .filter_map(Value::as_array)
        .flatten()
        .find(|record| {
            record
                .as_object()
                .is_some_and(|fields| fields.values().any(|v| v.as_str() == Some(id)))
        })
        .map_or_else(|| "none".to_string(), Value::to_string)
}

/// For an `ObserveOnly` GpuInstance whose machine is settled in a power state: whether it
/// differs from the spec in what the spec states and the operator would change (the power
/// state, the public IP, the security rules). `None` for anything else.
fn observed_power_differs(
    wanted: &Wanted,
    status: &gpucloud_api::CloudStatus,
    states: &[AccountSnapshot],
) -> Option<bool> {
    if wanted.policy != Policy::ObserveOnly || wanted.kind != Kind::Instance {
        return None;
    }
    let id = status.external_id.as_deref()?;
    let machine = states[wanted.group.account]
        .instances
        .iter()
        .find(|i| i.instance_id == id)?;
    let settled = match machine.status.as_str() {
        "ACTIVE" => "Running",
        "SHUTOFF" => "Stopped",
        "HIBERNATED" => "Hibernated",
        _ => return None,
    };
    let asked = wanted.spec["powerState"].as_str().unwrap_or("Running");
    let public_ip = wanted.spec["publicIp"].as_bool().unwrap_or(true);
    let rule =
        |direction: &str, protocol: &str, prefix: &str, min: Option<u64>, max: Option<u64>| {
            format!("{direction}/{protocol}/{prefix}/{min:?}-{max:?}").to_lowercase()
        };
    let asked_rules: std::collections::BTreeSet<String> = wanted.spec["securityRules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            rule(
                r["direction"].as_str().unwrap_or("Ingress"),
                r["protocol"].as_str().unwrap_or_default(),
                r["remoteIpPrefix"].as_str().unwrap_or_default(),
                r["portRangeMin"].as_u64(),
                r["portRangeMax"].as_u64(),
            )
        })
        .collect();
    let found_rules: std::collections::BTreeSet<String> = machine
        .security_rules
        .iter()
        .map(|r| {
            rule(
                r.direction.as_str(),
                r.protocol.as_str(),
                &r.remote_ip_prefix,
                r.port_range_min.map(u64::from),
                r.port_range_max.map(u64::from),
            )
        })
        .collect();
    Some(asked != settled || public_ip != machine.public_ip_enabled || asked_rules != found_rules)
}
