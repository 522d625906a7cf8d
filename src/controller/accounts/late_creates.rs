//! Resources a deleted object's create made after its deletion had ended.
//!
//! A create whose answer was lost leaves no id: its object's deletion can only conclude that
//! nothing was made from the cloud's lists, once lists sent past the settle window show
//! nothing under the object's cloud name. A cloud that carries the create out later than that
//! window still makes the resource, billed, with no object left to delete it. Its name holds
//! the deleted object's uid (`naming::cloud_name`), so no other object claims it by name: for
//! a while after such a deletion, the account's lists are read for that name, at their own
//! pace, and what shows under it is deleted, unless an object has adopted it by id. A restart
//! forgets the watch; the orphan sweeper stays the backstop.

use crate::accounts::account::Account;
use crate::accounts::observer::CloudRecord;
use crate::flow::context::Context;
use crate::flow::kind::ManagedKind;
use crate::runtime::events::{EventType, event};
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many settle windows past the deletion a late resource is still looked for.
pub const WATCHED_SETTLE_WINDOWS: u32 = 10;

/// Event reason of a late resource deleted, on the deleted object it was made for.
pub const REASON_DELETED: &str = "LateResourceDeleted";

/// Watches `account`'s lists for resources named `cloud_name` for
/// [`WATCHED_SETTLE_WINDOWS`] settle windows, and deletes each one that shows up, telling
/// the deleted object `regarding` of it.
pub fn watch<K: ManagedKind>(
    cx: Arc<Context<K>>,
    account: Arc<Account>,
    cloud_name: String,
    regarding: ObjectReference,
) {
    let until = Instant::now() + cx.settings.settle_window * WATCHED_SETTLE_WINDOWS;
    // Listed while watched, though no object may use the account any more.
    let hold = cx.accounts.hold(account.id);
    tokio::spawn(async move {
        let _hold = hold;
        let observer = cx.observer(&account);
        let mut deleted: HashSet<String> = HashSet::new();
        let mut after = Instant::now();
        while Instant::now() < until {
            let listed =
                match tokio::time::timeout_at(until.into(), observer.next_list(after)).await {
                    Err(_elapsed) => return,
                    Ok(Ok(listed)) => listed,
                    Ok(Err(_failure)) => {
                        // The failure stays until the next list succeeds: wait for it.
                        tokio::time::sleep(retry_pause(&cx)).await;
                        continue;
                    }
                };
            after = Instant::now();
            for record in listed.named(&cloud_name) {
                let id = record.id().to_string();
                if deleted.contains(&id) || claimed_by_another::<K>(&cx, &id, &regarding) {
                    continue;
                }
                match K::delete(&cx, None, &account, record).await {
                    Ok(()) => {
                        tracing::warn!(
                            kind = %K::kind(&()), cloud_id = %id, %cloud_name,
                            "the cloud made a resource after its object's deletion had ended; deleted it"
                        );
                        let note = format!(
                            "deleted {id}, made by the cloud after this object's deletion had ended"
                        );
                        let told = event(EventType::Warning, REASON_DELETED, &note, "Delete");
                        cx.events.send(told, regarding.clone());
                        deleted.insert(id);
                    }
                    Err(error) => {
                        tracing::warn!(
                            kind = %K::kind(&()), cloud_id = %id, %cloud_name, %error,
                            "a resource made after its object's deletion was not deleted; trying again"
                        );
                    }
                }
            }
        }
    });
}

/// Whether an object other than the deleted one records the resource (an adoption by id):
/// then it is that object's, whatever its name says.
fn claimed_by_another<K: ManagedKind>(
    cx: &Context<K>,
    id: &str,
    deleted: &ObjectReference,
) -> bool {
    cx.ownership
        .owners::<K>(id, None)
        .iter()
        .any(|owner| Some(owner.uid.as_str()) != deleted.uid.as_deref())
}

fn retry_pause<K: ManagedKind>(cx: &Context<K>) -> Duration {
    cx.settings
        .transition_requeue
        .max(Duration::from_millis(100))
}
