//! Embedded Kubernetes API server for tests and the no-cluster sandbox.
//!
//! It speaks the Kubernetes REST protocol for the built-in kinds an operator and kubectl use
//! plus any CustomResourceDefinition created in it: discovery, CRUD, list and watch with
//! resourceVersion semantics, patches and server-side apply, finalizers, garbage collection,
//! the status subresource, validation against structural schemas, over HTTPS with bearer tokens.
//!
//! Storage keeps each object's JSON bytes next to a small index (see [`store`]); a LIST
//! concatenates bytes. Background work the real control plane does in controllers (garbage
//! collection, namespace and CRD cleanup) runs in [`gc`].
//!
//! Known divergences of the resource handling from a real kube-apiserver:
//! - Watch history is sized as the real watch cache sizes its own ([`WatchHistory`]: the
//!   changes of the last 75 s up to 102,400, and at least the last 10,000), but across all
//!   resources rather than per resource. A watch from an older resourceVersion gets 200 with
//!   one ERROR event (410 Expired), as the real watch cache answers;
//!   `ApiServerHandle::compact` also ends open watches with that event. A watcher that falls
//!   more than 16,384 events behind is ended the same way.
//! - LIST is always served from the current state: `resourceVersionMatch=Exact` succeeds only
//!   for the current resourceVersion (410 otherwise); `NotOlderThan` above the current version
//!   answers 504 at once (the real server waits up to 3 s); `resourceVersion=0` ignores `limit`
//!   (as the real watch cache does). Continue tokens never expire; a continued list shows the
//!   current state after the last key and reports the first page's resourceVersion.
//! - An update (PUT) of a missing Lease or core/v1 Event is a 404; the real server creates
//!   them (`AllowCreateOnUpdate`). A uid in the body is a precondition for every kind, so both
//!   answer 409 when it fails.
//! - Objects are stored at the CRD's storage version; other versions differ only in
//!   `apiVersion` (conversion strategy `None`); webhook conversion is not supported.
//! - Field selectors: `metadata.name` and `metadata.namespace` for every kind, plus the Event
//!   fields (`involvedObject.*`, `reason`, `type`, `source`, `reportingComponent`); CRD
//!   `selectableFields` are not supported. A watch with an Event field selector does not turn
//!   a change that leaves the selection into DELETED (label selectors do).
//! - CRD conditions (`NamesAccepted`, `Established`) are set in the create response itself.
//! - The `/scale` subresource of custom resources is served (see [`handlers::scale`]) without
//!   the real server's managedFields mapping of the replicas field between the Scale and the
//!   object: a scale write is recorded as an update of the object by its manager. Server-side
//!   apply of a Scale is not supported (415). HorizontalPodAutoscalers are stored, but no
//!   controller acts on them.
//! - Built-in objects are type-checked as decoding into their Go types does (see
//!   [`builtin_types`]), but validated only for object metadata (name, labels, annotations,
//!   finalizers), with Secret `stringData` folding and Namespace phase; the kinds' other
//!   validation rules (for example Secret type-specific keys) are not applied.
//! - Protobuf request bodies are decoded for the built-in kinds (see [`protobuf`]); responses
//!   are always JSON (kubectl and client-go list JSON as a fallback in `Accept`).
//! - ValidatingAdmissionPolicy is enforced, with parameters read from the store at each
//!   request (see [`admission`]); there are no admission webhooks and no graceful deletion
//!   periods (deletion is immediate unless finalizers hold it).
//! - Authorization is off by default ([`AuthorizationMode::AlwaysAllow`]: every authenticated
//!   user may do everything and `SelfSubjectAccessReview` answers allowed). With
//!   [`AuthorizationMode::Rbac`] (see [`authz`]) every request is authorized as
//!   `--authorization-mode=RBAC` does: `system:masters` may do everything; Roles,
//!   ClusterRoles, RoleBindings and ClusterRoleBindings decide the rest, with request
//!   attributes from the URL (subresources, resourceNames, nonResourceURLs, `*/scale`-style
//!   wildcards), 403s with the apiserver's Status, the bootstrap ClusterRoles and bindings
//!   (`cluster-admin`, `admin`, `edit`, `view` and what they aggregate, discovery,
//!   `system:basic-user`, `system:public-info-viewer`), escalation prevention on role and
//!   binding writes (`escalate`, `bind`, cluster-admin for `aggregationRule`), and self access
//!   and rules reviews answered from the same rules. Not enforced or not served: impersonation,
//!   the Node, ABAC and Webhook authorizers, `SubjectAccessReview` and
//!   `LocalSubjectAccessReview`, selectors as authorization attributes, the validation of
//!   RBAC objects beyond their types (a rule without verbs, a changed `roleRef` are
//!   accepted), the bootstrap roles of nodes and controllers, and their reconciliation on
//!   restart. Token groups come from the config (and service account names); admission
//!   policies see only the groups derived from the user name.
//! - ClusterRole aggregation (`aggregationRule`) is applied synchronously after every
//!   ClusterRole write, in both modes, where the controller manager's controller trails it.

pub mod admission;
pub mod auth;
pub mod authz;
pub mod builtin;
pub mod builtin_types;
pub mod cli;
pub mod discovery;
pub mod faults;
pub mod gc;
pub mod gnostic;
pub mod handlers;
pub mod kubeconfig;
pub mod openapi;
pub mod openapi_v2;
pub mod protobuf;
pub mod registry;
pub mod selectors;
pub mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;
pub mod yaml;

pub use authz::AuthorizationMode;
/// Stack the server's threads need for evaluating CEL rules where they run.
pub use gpucloud_apiserver_semantics::schema::CEL_STACK_BYTES;
pub use registry::{PrinterColumn, Registry, ResourceInfo};
pub use server::{
    ApiServer, ApiServerConfig, ApiServerHandle, AppState, Error, RequestRecord, Settings,
};
pub use status::ApiError;
pub use store::WatchHistory;
