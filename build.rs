//! Build facts that `gpucloud-operator version` prints and the `gpucloud_build_info` metric
//! reports: the git commit (`GPUCLOUD_GIT_COMMIT` when set, as the Dockerfile passes it, else
//! `git rev-parse`, else `unknown`) and that commit's date. Both come from the commit, not
//! from the clock, so two builds of one commit report the same.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
    (output.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=GPUCLOUD_GIT_COMMIT");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        // A new commit moves the branch the HEAD names (or HEAD itself when detached).
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
        println!("cargo:rerun-if-changed={dir}/packed-refs");
    }
    let commit = std::env::var("GPUCLOUD_GIT_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let date = git(&["log", "-1", "--format=%cI", &commit]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=GPUCLOUD_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=GPUCLOUD_COMMIT_DATE={date}");
}
