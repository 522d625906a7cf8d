//! The production build (`--no-default-features`, what the Dockerfile builds) links the
//! operator alone: none of the sandbox's stand-ins (embedded API server, cloud simulator,
//! sandbox) is in its dependency tree. The API server's semantics library (schemas, CEL rules,
//! admission policies; pure, no server) is: `plan` validates manifests with it.

use std::collections::BTreeSet;
use std::process::Command;

const STAND_INS: [&str; 3] = ["gpucloud-apiserver", "gpucloud-simulator", "gpucloud-dev"];

/// The names of the packages the operator binary links (normal and build dependencies), with
/// `extra` arguments to `cargo tree`.
fn linked_packages(extra: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "tree",
            "--manifest-path",
            manifest,
            "-p",
            "gpucloud-operator",
        ])
        .args([
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--offline",
            "--locked",
        ])
        .args(extra)
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_production_build_links_no_stand_in() {
    let production = linked_packages(&["--no-default-features"]);
    for linked in ["gpucloud-controller", "gpucloud-apiserver-semantics"] {
        assert!(
            production.contains(linked),
            "{linked} is linked: {production:?}"
        );
    }
    for stand_in in STAND_INS {
        assert!(
            !production.contains(stand_in),
            "{stand_in} is linked into the production build"
        );
    }
}

#[test]
fn the_default_build_has_the_sandbox() {
    let default = linked_packages(&[]);
    for stand_in in STAND_INS {
        assert!(
            default.contains(stand_in),
            "{stand_in} is missing: {default:?}"
        );
    }
}
