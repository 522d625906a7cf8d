#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The demonstration kind of docs/design.md ("Adding a kind"), kept out of the product as a
//! patch: it still applies to the tree, and it touches only the places a kind lives in, the
//! files derived from the kind registry, and tests.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const PATCH: &str = "tests/adding_a_kind/boot-script.patch";

/// Where a new kind may be written, as path prefixes (a trailing `/` takes a whole folder).
const A_KINDS_PLACES: &[&str] = &[
    // 1. the API type
    "src/api/lib.rs",
    // 2. the controller
    "src/controller/kinds/mod.rs",
    "src/controller/kinds/registry/mod.rs",
    // 3. the cloud calls
    "src/cloud/model/",
    "src/cloud/client/",
    "src/cloud/routes.rs",
    // 4. the simulator engine
    "src/simulator/engine/",
    "src/simulator/handlers/",
    "src/simulator/openapi.rs",
    // derived from the registry, regenerated
    "crds/",
    "charts/gpucloud-operator/templates/crds.yaml",
    "charts/gpucloud-operator/templates/_kinds.tpl",
    "deploy/kustomize/crds/",
    "deploy/kustomize/rbac.yaml",
    "deploy/kustomize/tenant-roles.yaml",
    "deploy/kustomize/deletion-protection.yaml",
    "deploy/argocd/argocd-cm.yaml",
    "docs/crd-reference.md",
    "docs/design.md",
    "docs/cloud-api.openapi.json",
    // tests
    "src/controller/tests/",
    "tests/",
];

/// The files a patch touches, from its `diff --git a/… b/…` lines, and whether each is new.
fn touched(patch: &str) -> Vec<(String, bool)> {
    let mut files: Vec<(String, bool)> = Vec::new();
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git a/") {
            let file = rest.split(" b/").next().unwrap_or(rest);
            files.push((file.to_string(), false));
        } else if line.starts_with("new file mode")
            && let Some(last) = files.last_mut()
        {
            last.1 = true;
        }
    }
    files
}

/// Whether a kind may write `file` (`new`: the patch creates it).
fn allowed(file: &str, new: bool) -> bool {
    // The kind's own modules: a new file each in the API and controller crates.
    let own_module = |folder: &str| {
        new && file
            .strip_prefix(folder)
            .is_some_and(|name| !name.contains('/') && name.ends_with(".rs"))
    };
    own_module("src/api/")
        || own_module("src/controller/kinds/")
        || A_KINDS_PLACES.iter().any(|place| {
            if place.ends_with('/') {
                file.starts_with(place)
            } else {
                file == *place
            }
        })
}

#[test]
fn the_demonstration_kind_touches_only_a_kinds_places() {
    let patch = std::fs::read_to_string(root().join(PATCH)).unwrap();
    let files = touched(&patch);
    assert!(files.len() > 5, "{files:?}");
    let outside: Vec<&String> = files
        .iter()
        .filter(|(file, new)| !allowed(file, *new))
        .map(|(file, _)| file)
        .collect();
    assert!(
        outside.is_empty(),
        "the kind reaches beyond its places: {outside:?}"
    );
    // Among them: its API type and controller modules, and one line of the registry.
    for file in [
        "src/api/boot_script.rs",
        "src/controller/kinds/boot_script.rs",
        "src/controller/kinds/registry/mod.rs",
    ] {
        assert!(
            files.iter().any(|(f, _)| f == file),
            "{file} missing from {files:?}"
        );
    }
}

#[test]
fn the_demonstration_kind_still_applies() {
    let output = Command::new("git")
        .args(["apply", "--check", PATCH])
        .current_dir(root())
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "{PATCH} no longer applies (regenerate it as docs/design.md \"Adding a kind\" says): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn a_file_outside_a_kinds_places_is_refused() {
    // The shared machinery, even edited alongside a new kind.
    for file in [
        "src/controller/operator/run.rs",
        "src/controller/accounts/orphans.rs",
        "src/controller/flow/reconcile.rs",
        "src/dev/table.rs",
        "charts/gpucloud-operator/templates/_helpers.tpl",
    ] {
        assert!(!allowed(file, false), "{file}");
    }
    // A kind's own module is a new file; an existing one is another kind's.
    assert!(allowed("src/controller/kinds/boot_script.rs", true));
    assert!(!allowed("src/controller/kinds/volume.rs", false));
}
