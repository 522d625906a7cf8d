//! Fairness under a burst: while one namespace applies many GpuInstances at once, new objects
//! in two quiet namespaces (one of another account, one of the burst's own account) are
//! timed from their apply to their first cloud call, read from the simulator's ledger (when
//! their create acted, on its clock, which is this machine's).
//!
//! The other account's objects share nothing with the burst but the operator: their bound is
//! the 1 s. The same account's share its rate limit: the account's reconcile slots go
//! round-robin to the namespaces waiting for one (`fair_share.rs`), so a quiet namespace's
//! create waits at most for the calls already in flight, one per slot, and one more, at the
//! account's rate: its fair-share bound is (concurrency + 1) / R + L.

use super::{Manifest, Teams, machine, tracker_key};
use crate::args::Args;
use crate::report::quantile;
use crate::report::tenants::{Burst, ProbeLatencies};
use crate::scenario::{Environment, Error, kube_error, log, wait_for};
use crate::tracker::Tracker;
use futures::TryStreamExt;
use gpucloud_api::{GpuInstance, Managed};
use kube::Api;
use kube::api::{DynamicObject, PostParams};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// Time between two probes.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// The quiet namespaces probed: one of another account than the burst's, one of the burst's
/// own (when the run has them).
fn quiet_namespaces(teams: &Teams, burst: &str) -> (Option<String>, Option<String>) {
    let account = teams.account_of(burst);
    let other = teams
        .namespaces
        .iter()
        .find(|n| teams.account_of(n) != account)
        .cloned();
    let same = teams
        .namespaces
        .iter()
        .find(|n| n.as_str() != burst && teams.account_of(n) == account)
        .cloned();
    (other, same)
}

/// Applies `objects` GpuInstances in the first namespace and, once the operator is busy with
/// them, `probes` new ones in each quiet namespace; waits until all are Ready. Returns the
/// probes' latencies and every object made, for the deletion.
pub async fn measure(
    args: &Args,
    env: &Environment,
    teams: &Teams,
    tracker: &Tracker,
) -> Result<(Burst, Vec<Manifest>), Error> {
    let burst_namespace = teams.namespaces[0].clone();
    let (other, same) = quiet_namespaces(teams, &burst_namespace);
    let burst: Vec<Manifest> = (0..args.burst_size())
        .map(|i| machine(&burst_namespace, &format!("burst-{i:06}")))
        .collect::<Result<_, _>>()?;
    log(&format!(
        "burst: {} objects in {burst_namespace}; probes in {other:?} (another account) and {same:?} (the same account)",
        burst.len()
    ));
    let started = std::time::Instant::now();
    let applying = {
        let client = env.client.clone();
        let tracker = tracker.clone();
        let writers = args.writers;
        let burst: Vec<(kube::api::ApiResource, String, DynamicObject, String)> = burst
            .iter()
            .map(|m| {
                (
                    m.resource.clone(),
                    m.namespace.clone(),
                    m.object.clone(),
                    m.key(),
                )
            })
            .collect();
        tokio::spawn(async move {
            futures::stream::iter(burst.into_iter().map(Ok::<_, Error>))
                .try_for_each_concurrent(writers, |(resource, namespace, object, key)| {
                    let client = client.clone();
                    let tracker = tracker.clone();
                    async move {
                        tracker.applying(&key);
                        Api::<DynamicObject>::namespaced_with(client, &namespace, &resource)
                            .create(&PostParams::default(), &object)
                            .await
                            .map_err(kube_error(format!("creating {key}")))?;
                        Ok(())
                    }
                })
                .await
        })
    };
    // The probes start once the operator has the burst in hand: a tenth of it applied.
    let busy_at = (args.burst_size() / 10).max(1);
    wait_for(args.phase_timeout, "a tenth of the burst applied", || {
        let applied =
            tracker.objects_with_prefix(&tracker_key("GpuInstance", &burst_namespace, "burst-"));
        async move { (applied >= busy_at).then_some(()) }
    })
    .await?;
    let mut probes: Vec<(bool, Manifest, i64)> = Vec::new();
    for i in 0..args.probes {
        for (other_account, namespace) in [(true, &other), (false, &same)] {
            let Some(namespace) = namespace else {
                continue;
            };
            let probe = machine(namespace, &format!("probe-{i:03}"))?;
            let applied_ms = super::epoch_ms(SystemTime::now());
            tracker.applying(&probe.key());
            Api::<DynamicObject>::namespaced_with(
                env.client.clone(),
                &probe.namespace,
                &probe.resource,
            )
            .create(&PostParams::default(), &probe.object)
            .await
            .map_err(kube_error(format!("creating {}", probe.key())))?;
            probes.push((other_account, probe, applied_ms));
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    applying
        .await
        .map_err(|e| Error::Arguments(format!("the burst's writers failed: {e}")))??;
    let keys: Vec<String> = burst
        .iter()
        .chain(probes.iter().map(|(_, m, _)| m))
        .map(Manifest::key)
        .collect();
    wait_for(args.phase_timeout, "the burst and the probes Ready", || {
        let done = tracker.all_ready_at(&keys);
        async move { done }
    })
    .await?;
    let burst_seconds = started.elapsed().as_secs_f64();
    // When each probe's machine was created, by its cloud name.
    let created_at: HashMap<String, i64> = env
        .admin
        .ledger()
        .await?
        .into_iter()
        .filter(|entry| entry.operation == "CreateInstance")
        .filter_map(|entry| Some((entry.name?, entry.at_ms)))
        .collect();
    let mut other_ms = Vec::new();
    let mut same_ms = Vec::new();
    for (other_account, probe, applied_ms) in &probes {
        let object = Api::<GpuInstance>::namespaced(env.client.clone(), &probe.namespace)
            .get(&probe.object.metadata.name.clone().unwrap_or_default())
            .await
            .map_err(kube_error(format!("reading {}", probe.key())))?;
        let cloud_name = object.cloud_status().cloud_name.unwrap_or_default();
        let Some(created) = created_at.get(&cloud_name) else {
            return Err(Error::Arguments(format!(
                "no create of {} ({cloud_name}) in the simulator's ledger",
                probe.key()
            )));
        };
        let latency = (created - applied_ms) as f64;
        if *other_account {
            other_ms.push(latency);
        } else {
            same_ms.push(latency);
        }
    }
    let latencies = |ms: &[f64]| {
        (!ms.is_empty()).then(|| ProbeLatencies {
            count: ms.len(),
            p50_ms: quantile(ms, 0.5),
            p99_ms: quantile(ms, 0.99),
            max_ms: ms.iter().copied().fold(0.0, f64::max),
        })
    };
    let fair_share_bound_ms =
        (f64::from(args.concurrency) + 1.0) / args.rate_limit * 1000.0 + args.latency_ms as f64;
    let result = Burst {
        namespace: burst_namespace,
        objects: args.burst_size(),
        seconds: burst_seconds,
        other_account: latencies(&other_ms),
        same_account: latencies(&same_ms),
        fair_share_bound_ms,
    };
    let made = burst
        .into_iter()
        .chain(probes.into_iter().map(|(_, m, _)| m))
        .collect();
    Ok((result, made))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quiet_namespaces_are_of_another_account_and_of_the_bursts_own() {
        let teams = Teams::new(10, 2);
        assert_eq!(
            quiet_namespaces(&teams, "tenant-000"),
            (Some("tenant-001".into()), Some("tenant-002".into()))
        );
        // One namespace per account: no quiet namespace shares the burst's account.
        let teams = Teams::new(2, 2);
        assert_eq!(
            quiet_namespaces(&teams, "tenant-000"),
            (Some("tenant-001".into()), None)
        );
    }
}
