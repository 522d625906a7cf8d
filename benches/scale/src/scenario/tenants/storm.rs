//! Fairness in a storm: `--storm-objects` new GpuInstances, spread evenly over every
//! namespace, are applied twice. First without a fault: the reference, each account timed from
//! the apply until its machines are all Ready. They are deleted, and once the cloud and the
//! API server are rid of them the same set is applied again (under other names, so that no
//! watch event of the first round can count for the second) while the first account answers
//! every call with a `429` or a `500` for `--storm-seconds`. Each other account is timed the
//! same way; their slowest time is compared with their slowest in the reference. When the
//! window ends the run's earlier fault plan is back, the storm account's machines are waited
//! for (nothing is left behind), and all of them are deleted, so that the deletion phase
//! after this one is that of the N objects alone.

use super::{Manifest, Teams, apply, machine, objects_left};
use crate::args::Args;
use crate::counters::Counters;
use crate::report::tenants::{Storm, StormAccount};
use crate::scenario::{Environment, Error, log, wait_for};
use crate::tracker::Tracker;
use std::time::{Duration, Instant};

/// The account in the storm: that of `tenant-000`.
const STORM_ACCOUNT: usize = 0;

/// The storm: every call of the storm account is answered `429` (half of them, with a
/// `Retry-After` of a second) or `500 INTERNAL_ERROR` (the rest), neither performed, so none of
/// its machines can be made while it lasts; the other accounts get no fault.
fn storm_plan() -> serde_json::Value {
    serde_json::json!({
        "error_rate": 1.0,
        "throttle_burst": {"probability": 0.5, "length": 1, "retry_after_secs": 1},
        "accounts": [STORM_ACCOUNT],
    })
}

/// One round's machines: `count` of them, named `{round}-00000` and on, taken round-robin
/// over the namespaces.
fn machines(teams: &Teams, round: &str, count: usize) -> Result<Vec<Manifest>, Error> {
    let namespaces = teams.namespaces.len().max(1);
    (0..count)
        .map(|i| {
            let namespace = &teams.namespaces[i % namespaces];
            machine(namespace, &format!("{round}-{:05}", i / namespaces))
        })
        .collect()
}

/// A round's machines by account, and when each account's were all Ready.
struct Round {
    started: Instant,
    keys: Vec<Vec<String>>,
    ready_at: Vec<Option<Instant>>,
}

impl Round {
    fn new(teams: &Teams, made: &[Manifest], started: Instant) -> Round {
        let mut keys = vec![Vec::new(); teams.accounts];
        for m in made {
            keys[teams.account_of(&m.namespace)].push(m.key());
        }
        Round {
            started,
            ready_at: vec![None; keys.len()],
            keys,
        }
    }

    /// Records the accounts whose machines are all Ready now; whether `accounts` all are.
    fn poll(&mut self, tracker: &Tracker, mut accounts: impl FnMut(usize) -> bool) -> bool {
        let mut done = true;
        for (account, (keys, ready_at)) in self.keys.iter().zip(&mut self.ready_at).enumerate() {
            if !accounts(account) {
                continue;
            }
            if ready_at.is_none() {
                *ready_at = if keys.is_empty() {
                    Some(self.started)
                } else {
                    tracker.all_ready_at(keys)
                };
            }
            done &= ready_at.is_some();
        }
        done
    }

    /// Polls until `accounts` are all Ready or `limit` has passed; whether they were.
    async fn wait(
        &mut self,
        tracker: &Tracker,
        limit: Duration,
        accounts: impl Fn(usize) -> bool,
    ) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.poll(tracker, &accounts) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Per account: the round's figures, from the calls made until every machine was Ready
    /// (`converging`) and while they were deleted (`deleting`).
    fn accounts(&self, converging: &Counters, deleting: &Counters) -> Vec<StormAccount> {
        self.keys
            .iter()
            .zip(&self.ready_at)
            .enumerate()
            .map(|(account, (keys, ready_at))| {
                let calls = converging.of_account(account);
                StormAccount {
                    machines: keys.len(),
                    seconds: ready_at
                        .map(|at| at.saturating_duration_since(self.started).as_secs_f64()),
                    calls_by_operation: calls.by_operation(),
                    created: calls.succeeded("CreateInstance"),
                    throttled: calls.with_status("429"),
                    server_errors: calls.server_errors(),
                    deleted: deleting.of_account(account).succeeded("DeleteInstance"),
                }
            })
            .collect()
    }
}

/// Deletes a round's machines and waits until no account holds more machines than
/// `instances[account]` (the N objects') and the API server holds `objects` objects at most.
async fn delete_round(
    args: &Args,
    env: &Environment,
    made: &[Manifest],
    instances: &[usize],
    objects: usize,
) -> Result<(), Error> {
    apply(env, made, None, true, args.writers).await?;
    wait_for_cloud(args, env, instances).await?;
    wait_for(
        args.phase_timeout,
        "the storm phase's machines gone from the API server",
        || async { (objects_left(env).await.ok()? <= objects).then_some(()) },
    )
    .await
}

/// Waits until no account holds more machines than `instances[account]`.
async fn wait_for_cloud(args: &Args, env: &Environment, instances: &[usize]) -> Result<(), Error> {
    wait_for(
        args.phase_timeout,
        "the cloud rid of every machine but the N objects'",
        || async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for (account, instances) in instances.iter().enumerate() {
                if env.admin.holdings_of(account).await.ok()?.instances > *instances {
                    return None;
                }
            }
            Some(())
        },
    )
    .await
}

/// Runs both rounds. `instances` holds each account's machines of the N objects, `objects`
/// all N objects.
pub async fn measure(
    args: &Args,
    env: &Environment,
    teams: &Teams,
    tracker: &Tracker,
    instances: &[usize],
    objects: usize,
) -> Result<Storm, Error> {
    let count = args.storm_size();
    let others = |account: usize| account != STORM_ACCOUNT;

    // The reference: the same machines, no fault; from a cloud that holds the N objects'
    // machines alone (those of the burst before may still be going).
    wait_for_cloud(args, env, instances).await?;
    let reference_made = machines(teams, "calm", count)?;
    log(&format!(
        "storm phase: {count} machines over {} namespaces, without a fault first",
        teams.namespaces.len()
    ));
    let before = env.admin.counters().await?;
    let started = Instant::now();
    apply(env, &reference_made, Some(tracker), false, args.writers).await?;
    let mut reference = Round::new(teams, &reference_made, started);
    if !reference.wait(tracker, args.phase_timeout, |_| true).await {
        return Err(Error::Timeout {
            what: "the storm phase's reference machines Ready".into(),
            seconds: args.phase_timeout.as_secs(),
            progress: format!("{} of {count} Ready", ready(tracker, &reference)),
        });
    }
    let converged = env.admin.counters().await?;
    delete_round(args, env, &reference_made, instances, objects).await?;
    let reference_accounts = reference.accounts(
        &converged.since(&before),
        &env.admin.counters().await?.since(&converged),
    );

    // The storm: the fault plan in force for the window, whatever the round does meanwhile.
    let previous_plan = env.admin.faults().await?;
    let plan = storm_plan();
    let before = env.admin.counters().await?;
    env.admin.set_faults(&plan).await?;
    let window = args.storm_window();
    let window_ends = Instant::now() + window;
    let clearing = {
        let admin = env.admin.clone();
        let previous_plan = previous_plan.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(window_ends.into()).await;
            admin.set_faults(&previous_plan).await
        })
    };
    log(&format!(
        "storm phase: account {STORM_ACCOUNT} in a storm of 429 and 500 answers for {} s",
        window.as_secs()
    ));
    let storm_made = machines(teams, "storm", count)?;
    let started = Instant::now();
    apply(env, &storm_made, Some(tracker), false, args.writers).await?;
    let mut storm = Round::new(teams, &storm_made, started);
    // Measured even when it takes longer than the window (the report says so).
    if !storm.wait(tracker, args.phase_timeout, others).await {
        log(&format!(
            "storm phase: the other accounts' machines were not all Ready within {} s",
            args.phase_timeout.as_secs()
        ));
    }
    clearing
        .await
        .map_err(|e| Error::Arguments(format!("clearing the storm's fault plan failed: {e}")))??;
    // The storm account's machines may wait out their backoff after the storm.
    let recovered = storm
        .wait(tracker, args.phase_timeout, |account| {
            account == STORM_ACCOUNT
        })
        .await;
    let recovered_after_s = recovered.then(|| {
        storm.ready_at[STORM_ACCOUNT]
            .unwrap_or(window_ends)
            .saturating_duration_since(window_ends)
            .as_secs_f64()
    });
    let converged = env.admin.counters().await?;
    delete_round(args, env, &storm_made, instances, objects).await?;
    let storm_accounts = storm.accounts(
        &converged.since(&before),
        &env.admin.counters().await?.since(&converged),
    );
    Ok(Storm {
        machines: count,
        storm_account: STORM_ACCOUNT,
        window_s: window.as_secs_f64(),
        fault_plan: plan,
        reference: reference_accounts,
        storm: storm_accounts,
        recovered_after_s,
    })
}

/// A round's machines Ready now.
fn ready(tracker: &Tracker, round: &Round) -> usize {
    let keys: Vec<String> = round.keys.concat();
    tracker
        .times(&keys)
        .iter()
        .filter(|(_, times)| times.ready.is_some())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rounds_machines_are_spread_evenly_over_every_namespace() {
        let teams = Teams::new(4, 2);
        let made = machines(&teams, "storm", 10).unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<String> = made.iter().map(Manifest::key).collect();
        assert_eq!(
            keys[..5],
            [
                "GpuInstance/tenant-000/storm-00000",
                "GpuInstance/tenant-001/storm-00000",
                "GpuInstance/tenant-002/storm-00000",
                "GpuInstance/tenant-003/storm-00000",
                "GpuInstance/tenant-000/storm-00001",
            ]
        );
        let round = Round::new(&teams, &made, Instant::now());
        // Namespaces 0 and 2 are account 0's: 3 + 2 machines; 1 and 3 account 1's.
        assert_eq!(
            (round.keys[0].len(), round.keys[1].len()),
            (5, 5),
            "{:?}",
            round.keys
        );
        assert!(
            made.iter()
                .all(|m| m.object.data["spec"]["sshKeyRefs"][0]["name"] == super::super::KEY)
        );
    }

    #[test]
    fn the_storm_is_a_plan_the_simulator_takes_for_its_account_alone() {
        let plan: gpucloud_simulator::FaultPlan =
            serde_json::from_value(storm_plan()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plan.validate(), Ok(()));
        assert_eq!(plan.validate_accounts(2), Ok(()));
        assert!(plan.applies_to(STORM_ACCOUNT) && !plan.applies_to(1));
        // Every call fails: a 429 or, for the rest, a 500.
        assert_eq!(plan.error_rate_for("CreateInstance"), 1.0);
        assert!(plan.throttle_burst.is_some_and(|b| b.probability > 0.0));
    }
}
