#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The demonstration kind of docs/design.md ("Adding a kind"), kept out of the product as a
//! patch. Applied to a copy of the tree (HEAD with the working changes), it compiles (every
//! target of the packages it touches), and the generators run on that copy change nothing: the
//! patch brings every file derived from the kind registry. It touches only the places a kind
//! lives in, the derived files and tests, and docs/design.md says how many.
//!
//! The copy is `target/adding-a-kind/tree`, built into `target/adding-a-kind/target`: a target
//! directory of its own, since two checkouts of one workspace in one target directory overwrite
//! each other's crates (their hashes do not depend on where they are). Only `cargo check` and
//! the generators' test binary are built there. A file of the copy is rewritten only when its
//! content changed, so a second run rebuilds only what changed in between.
//!
//! Bring the patch up to date with `scripts/update-adding-a-kind-patch.sh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const PATCH: &str = "tests/adding_a_kind/boot-script.patch";

/// Where the patched copy and its builds live, under the target directory.
const SCRATCH: &str = "target/adding-a-kind";

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
    // ...and their route table's documentation, checked against the client's files
    "docs/cloud-api.md",
    "src/cloud/tests/route_doc.rs",
    // derived from the registry and the route table, regenerated
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

/// Files a patch touches by what they are: written by hand, derived (regenerated) and tests.
fn by_role(files: &[(String, bool)]) -> (usize, usize, usize) {
    let test = |f: &str| f.starts_with("tests/") || f.contains("/tests/");
    let derived = |f: &str| !f.ends_with(".rs");
    let tests = files.iter().filter(|(f, _)| test(f)).count();
    let generated = files.iter().filter(|(f, _)| !test(f) && derived(f)).count();
    (files.len() - tests - generated, generated, tests)
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

/// docs/design.md counts the patch's files as they are.
#[test]
fn design_counts_the_files_the_demonstration_kind_touches() {
    let patch = std::fs::read_to_string(root().join(PATCH)).unwrap();
    let files = touched(&patch);
    let (by_hand, generated, tests) = by_role(&files);
    let design = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let sentence = format!(
        "`tests/adding_a_kind/boot-script.patch` touches {} files: {by_hand} written by hand, \
         {generated} regenerated and {tests} of tests",
        files.len()
    );
    let flat = design.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&sentence),
        "docs/design.md (\"Adding a kind\") should say: {sentence}"
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

/// The patched tree compiles and carries its derived files: `cargo check` of every target of
/// the packages the patch touches, then the registry's generators, which must write nothing
/// new. Prints how long each step took.
#[test]
fn the_demonstration_kind_compiles_and_brings_its_generated_files() {
    let started = Instant::now();
    let scratch = root().join(SCRATCH);
    let tree = scratch.join("tree");
    let patch = std::fs::read_to_string(root().join(PATCH)).unwrap();
    let files = touched(&patch);

    let mut wanted = source_files();
    wanted.extend(patched(&scratch.join("staging"), &files));
    let rewritten = sync(&tree, &wanted);
    let seeded = seed_target(&root().join("target/debug"), &scratch.join("target/debug"));
    let mut step = Instant::now();
    println!(
        "adding a kind: {rewritten} files of the copy rewritten, {seeded} dependency files taken \
         from target/debug, in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let packages = packages_of(&files);
    let mut check = vec!["check", "--all-targets"];
    for package in &packages {
        check.extend(["-p", package.as_str()]);
    }
    let output = cargo(&tree, &check, &[]);
    assert_success(&output, "cargo check of the patched tree");
    println!(
        "adding a kind: cargo check --all-targets -p {} in {:.1} s ({} crates checked)",
        packages.join(" -p "),
        step.elapsed().as_secs_f64(),
        built(&output, "Checking")
    );
    step = Instant::now();

    // The generators of the kind registry (docs/design.md, "Adding a kind"): with
    // UPDATE_GENERATED they write what they compare, so a stale derived file shows as a change.
    let before = snapshot(&tree);
    let output = cargo(
        &tree,
        &["test", "-p", "gpucloud-controller", "--lib", "registry"],
        &[("UPDATE_GENERATED", "1")],
    );
    assert_success(&output, "the registry's generators on the patched tree");
    let after = snapshot(&tree);
    let changed: Vec<&String> = after
        .iter()
        .filter(|(path, text)| before.get(*path) != Some(text))
        .map(|(path, _)| path)
        .chain(before.keys().filter(|path| !after.contains_key(*path)))
        .collect();
    println!(
        "adding a kind: the registry's generators in {:.1} s ({} crates compiled); {:.1} s in all",
        step.elapsed().as_secs_f64(),
        built(&output, "Compiling"),
        started.elapsed().as_secs_f64()
    );
    assert!(
        changed.is_empty(),
        "the generators change what the patch brings: {changed:?}; bring the patch up to date \
         with scripts/update-adding-a-kind-patch.sh"
    );
    // The kustomize base's CRDs are copies of crds/ (tests/deploy_chart.rs makes them).
    for (path, text) in after.iter().filter(|(path, _)| path.starts_with("crds/")) {
        let copy = format!("deploy/kustomize/{path}");
        assert!(
            after.get(&copy) == Some(text),
            "{copy} is not a copy of {path}; bring the patch up to date with \
             scripts/update-adding-a-kind-patch.sh"
        );
    }
}

/// The tree as it is: tracked files and new ones git does not ignore, by path.
fn source_files() -> BTreeMap<String, Vec<u8>> {
    let output = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .expect("git runs");
    assert_success(&output, "git ls-files");
    output
        .stdout
        .split(|byte| *byte == 0)
        .filter(|path| !path.is_empty())
        .map(|path| String::from_utf8(path.to_vec()).unwrap())
        // A tracked file deleted in the working tree is not part of it.
        .filter_map(|path| {
            let text = std::fs::read(root().join(&path)).ok()?;
            Some((path, text))
        })
        .collect()
}

/// The files the patch touches, as it leaves them: applied in `staging` to copies of the files
/// it changes.
fn patched(staging: &Path, files: &[(String, bool)]) -> BTreeMap<String, Vec<u8>> {
    if staging.exists() {
        std::fs::remove_dir_all(staging).unwrap();
    }
    for (file, new) in files {
        if !new {
            let copy = staging.join(file);
            std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
            std::fs::copy(root().join(file), copy).unwrap();
        }
    }
    // The staging folder is no repository, and git must not look for one above it (it would
    // find this checkout and apply only below the folder).
    let output = Command::new("git")
        .arg("apply")
        .arg(root().join(PATCH))
        .current_dir(staging)
        .env("GIT_CEILING_DIRECTORIES", staging.parent().unwrap())
        .output()
        .expect("git runs");
    assert_success(
        &output,
        &format!(
            "{PATCH} no longer applies (bring it up to date with scripts/update-adding-a-kind-patch.sh)"
        ),
    );
    files
        .iter()
        .map(|(file, _)| (file.clone(), std::fs::read(staging.join(file)).unwrap()))
        .collect()
}

/// Makes `tree` hold exactly `wanted`, writing only the files whose content differs (cargo
/// goes by modification times).
fn sync(tree: &Path, wanted: &BTreeMap<String, Vec<u8>>) -> usize {
    let mut rewritten = 0;
    for (path, text) in wanted {
        let file = tree.join(path);
        if std::fs::read(&file).ok().as_ref() != Some(text) {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, text).unwrap();
            rewritten += 1;
        }
    }
    for path in snapshot(tree).into_keys() {
        if !wanted.contains_key(&path) {
            std::fs::remove_file(tree.join(path)).unwrap();
        }
    }
    rewritten
}

/// Every file under `tree`, by path relative to it.
fn snapshot(tree: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut folders = vec![tree.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // What a build or a test leaves in the copy's own target/ is not the tree.
                if path != tree.join("target") {
                    folders.push(path);
                }
            } else {
                let relative = path.strip_prefix(tree).unwrap();
                let relative = relative.to_string_lossy().into_owned();
                files.insert(relative, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// Gives the scratch target directory the dependencies this checkout's `target/debug` has
/// built already (crates.io's crates, not the workspace's): the same crates with the same
/// features and profile have the same hashes there, so cargo finds them fresh instead of
/// building them again. Artifacts are hard links (they are never written again under the same
/// hash), fingerprints small copies; what the scratch directory has already is kept. Returns
/// the number of files added.
fn seed_target(from: &Path, to: &Path) -> usize {
    let workspace = |name: &str| name.starts_with("gpucloud") || name.starts_with("libgpucloud");
    let mut added = 0;
    for (folder, link) in [(".fingerprint", false), ("build", true), ("deps", true)] {
        let Ok(entries) = std::fs::read_dir(from.join(folder)) else {
            continue;
        };
        std::fs::create_dir_all(to.join(folder)).unwrap();
        for entry in entries {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            // In deps/, the libraries (lib<crate>-<hash>.*), not the test and binary
            // executables, which are the workspace's.
            if workspace(&name) || (folder == "deps" && !name.starts_with("lib")) {
                continue;
            }
            added += seed(&entry.path(), &to.join(folder).join(&name), link);
        }
    }
    added
}

/// Links (or, for `link` false, copies with its modification time) `from` to `to`, every file
/// of a folder, leaving what `to` has.
fn seed(from: &Path, to: &Path, link: bool) -> usize {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        return std::fs::read_dir(from)
            .unwrap()
            .map(|entry| {
                let entry = entry.unwrap();
                seed(&entry.path(), &to.join(entry.file_name()), link)
            })
            .sum();
    }
    if to.exists() {
        return 0;
    }
    if !(link && std::fs::hard_link(from, to).is_ok()) {
        std::fs::copy(from, to).unwrap();
        let modified = std::fs::metadata(from).unwrap().modified().unwrap();
        let copy = std::fs::File::options().write(true).open(to).unwrap();
        copy.set_modified(modified).unwrap();
    }
    1
}

/// The packages whose Rust files the patch touches, by the nearest manifest above each file.
fn packages_of(files: &[(String, bool)]) -> Vec<String> {
    let mut packages: Vec<String> = files
        .iter()
        .filter(|(file, _)| file.ends_with(".rs"))
        .map(|(file, _)| {
            let manifest = Path::new(file)
                .ancestors()
                .skip(1)
                .map(|folder| root().join(folder).join("Cargo.toml"))
                .find(|manifest| manifest.exists())
                .unwrap();
            package_name(&std::fs::read_to_string(manifest).unwrap())
        })
        .collect();
    packages.sort();
    packages.dedup();
    packages
}

/// The `name` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> String {
    manifest
        .lines()
        .skip_while(|line| line.trim() != "[package]")
        .find_map(|line| line.trim().strip_prefix("name = "))
        .map(|name| name.trim_matches('"').to_string())
        .expect("a package's manifest names it")
}

/// Cargo in the patched `tree`, building into the scratch target directory, offline and with
/// this checkout's Cargo.lock. The workspace's crates are built without debug information or
/// incremental state, which nothing here reads (the dependencies have none either way, so
/// they keep the hashes of `target/debug`'s).
fn cargo(tree: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Command::new(cargo)
        .args(args)
        .arg("--frozen")
        .current_dir(tree)
        .env("CARGO_TARGET_DIR", root().join(SCRATCH).join("target"))
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .env("CARGO_INCREMENTAL", "0")
        .envs(env.iter().copied())
        .output()
        .expect("cargo runs")
}

/// How many crates a cargo run built (its `Checking` or `Compiling` lines).
fn built(output: &Output, verb: &str) -> usize {
    String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.trim_start().starts_with(verb))
        .count()
}

fn assert_success(output: &Output, what: &str) {
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // The end of a build's output holds its errors.
        let tail: Vec<&str> = stderr.lines().rev().take(60).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        panic!(
            "{what} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            tail.join("\n")
        );
    }
}
