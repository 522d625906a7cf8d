#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The release artifacts `scripts/release.sh` makes from this checkout, as CI makes them: the
//! chart packaged at the crate's version with its repository index, the image's build command,
//! the SBOM and the checksums; the packaged chart (not the directory) rendered and accepted by
//! the embedded API server; and what `helm upgrade` and `helm uninstall` do to the CRDs the
//! chart templates.

mod deploy;

use deploy::{RELEASE, RELEASE_NAMESPACE, chart_dir, render_chart, repository_root};
use gpucloud_apiserver::{ApiServer, ApiServerConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition,
};
use kube::Api;
use kube::api::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A fresh folder of this test's own under Cargo's scratch directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("release-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `scripts/release.sh` on `chart`, writing into `dist`.
fn release(chart: &Path, dist: &Path) -> Output {
    // The python-tools virtualenv, made (and checked) once, as the other deployment tests do.
    deploy::python();
    Command::new(repository_root().join("scripts/release.sh"))
        .env("CHART", chart)
        .env("DIST", dist)
        .output()
        .unwrap()
}

/// The package `scripts/release.sh` makes of this checkout's chart, in `dist`.
fn package(dist: &Path) -> PathBuf {
    let output = release(&chart_dir(), dist);
    assert!(
        output.status.success(),
        "scripts/release.sh: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    dist.join(format!("gpucloud-operator-{VERSION}.tgz"))
}

fn sha256(path: &Path) -> String {
    let output = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()[..64].to_string()
}

#[test]
fn the_release_script_packages_the_chart_at_the_crate_version() {
    let dist = scratch("package");
    let archive = package(&dist);
    assert!(archive.is_file(), "{}", archive.display());

    let rendered = render_chart(&archive, &json!({}));
    assert_eq!(rendered.metadata["version"], VERSION);
    assert_eq!(rendered.metadata["appVersion"], VERSION);
    assert_eq!(rendered.metadata["kubeVersion"], ">=1.31.0-0");
    let findings = rendered.lint_findings(1);
    assert!(findings.is_empty(), "helm lint --strict: {findings:#?}");
    // The icon is docs/icon.svg itself.
    let encoded = Command::new("base64")
        .arg("--wrap=0")
        .arg(repository_root().join("docs/icon.svg"))
        .output()
        .unwrap();
    assert_eq!(
        rendered.metadata["icon"],
        format!(
            "data:image/svg+xml;base64,{}",
            String::from_utf8(encoded.stdout).unwrap()
        ),
        "Chart.yaml's icon is docs/icon.svg"
    );

    let index: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(dist.join("index.yaml")).unwrap()).unwrap();
    let entries = index["entries"]["gpucloud-operator"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{index}");
    assert_eq!(entries[0]["version"], VERSION);
    assert_eq!(entries[0]["appVersion"], VERSION);
    assert_eq!(
        entries[0]["urls"],
        json!([format!("gpucloud-operator-{VERSION}.tgz")])
    );
    assert_eq!(entries[0]["digest"], sha256(&archive));
}

/// The SBOM lists the crates the production binary links, each pinned as Cargo.lock pins it,
/// without the sandbox's; the checksums file covers every artifact and verifies; two runs on
/// one commit write the same SBOM.
#[test]
fn the_release_script_writes_the_sbom_and_checksums() {
    let dist = scratch("sbom");
    package(&dist);
    let sbom_path = dist.join("gpucloud-operator.cdx.json");
    let text = std::fs::read_to_string(&sbom_path).unwrap();
    let sbom: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["specVersion"], "1.5");
    assert_eq!(sbom["metadata"]["component"]["name"], "gpucloud-operator");
    assert_eq!(sbom["metadata"]["component"]["version"], VERSION);
    let components = sbom["components"].as_array().unwrap();
    let component = |name: &str| components.iter().find(|c| c["name"] == name);
    let lock = std::fs::read_to_string(repository_root().join("Cargo.lock")).unwrap();
    for name in ["kube", "tokio", "rustls", "prometheus-client"] {
        let crate_ = component(name).unwrap_or_else(|| panic!("{name} not in the SBOM"));
        let version = crate_["version"].as_str().unwrap();
        assert_eq!(crate_["purl"], format!("pkg:cargo/{name}@{version}"));
        let checksum = crate_["hashes"][0]["content"].as_str().unwrap();
        let pinned = format!(
            "name = \"{name}\"\nversion = \"{version}\"\nsource = \"registry+https://github.com/rust-lang/crates.io-index\"\nchecksum = \"{checksum}\""
        );
        assert!(
            lock.contains(&pinned),
            "{name} {version}: {checksum} is not Cargo.lock's"
        );
        assert!(crate_["licenses"][0]["expression"].is_string(), "{name}");
    }
    assert!(component("gpucloud-controller").is_some());
    for sandbox in [
        "gpucloud-apiserver",
        "gpucloud-simulator",
        "gpucloud-dev",
        "mlua",
    ] {
        assert!(
            component(sandbox).is_none(),
            "{sandbox} is not in the image"
        );
    }
    let dependencies = sbom["dependencies"].as_array().unwrap();
    let root = dependencies
        .iter()
        .find(|d| d["ref"] == format!("pkg:cargo/gpucloud-operator@{VERSION}"))
        .unwrap();
    assert!(
        root["dependsOn"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d.as_str().unwrap().starts_with("pkg:cargo/tokio@"))
    );

    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let named: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        named,
        [
            format!("gpucloud-operator-{VERSION}.tgz").as_str(),
            "index.yaml",
            "docker-build.sh",
            "gpucloud-operator.cdx.json"
        ]
    );
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&dist)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    assert_eq!(sums.lines().nth(3).unwrap()[..64], sha256(&sbom_path));

    let again = scratch("sbom-again");
    package(&again);
    assert_eq!(
        std::fs::read_to_string(again.join("gpucloud-operator.cdx.json")).unwrap(),
        text,
        "the SBOM is reproducible"
    );
}

/// The Dockerfile's base images are build arguments, named by tag (no digest that could not
/// be checked), and `scripts/release.sh` passes on a pinned `name:tag@sha256:...` when given.
#[test]
fn base_images_are_build_arguments_a_digest_can_pin() {
    let dockerfile = std::fs::read_to_string(repository_root().join("Dockerfile")).unwrap();
    let bases: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .map(|from| from.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(bases.len(), 4, "{bases:?}");
    let defaults: Vec<(&str, &str)> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ARG ")?.split_once('='))
        .collect();
    for base in &bases {
        let name = base
            .strip_prefix("${")
            .and_then(|b| b.strip_suffix('}'))
            .unwrap_or_else(|| panic!("FROM {base}: not a build argument"));
        let (_, default) = defaults
            .iter()
            .find(|(n, _)| *n == name)
            .unwrap_or_else(|| panic!("no ARG {name} with a default"));
        assert!(
            default.contains(':') && !default.contains("@sha256:"),
            "ARG {name}={default}: a tag, not an unchecked digest"
        );
    }

    let dist = scratch("pinned");
    let pinned = format!(
        "gcr.io/distroless/cc-debian12:nonroot@sha256:{}",
        "0".repeat(64)
    );
    deploy::python();
    let output = Command::new(repository_root().join("scripts/release.sh"))
        .env("DIST", &dist)
        .env("RUNTIME_IMAGE", &pinned)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let script = std::fs::read_to_string(dist.join("docker-build.sh")).unwrap();
    assert!(
        script.contains(&format!("--build-arg RUNTIME_IMAGE={pinned} ")),
        "{script}"
    );
    assert!(!script.contains("BUILD_IMAGE="), "{script}");
}

/// The build command names exactly the Dockerfile's build arguments, with this checkout's
/// version and commit, and the image's OCI labels come from them.
#[test]
fn the_release_script_writes_the_image_build_command() {
    let dist = scratch("docker");
    package(&dist);
    let script = std::fs::read_to_string(dist.join("docker-build.sh")).unwrap();
    let command = script.lines().last().unwrap();
    assert!(command.starts_with("docker build "), "{command}");
    let build_args: Vec<(&str, &str)> = command
        .split(" --build-arg ")
        .skip(1)
        .map(|a| {
            a.split_whitespace()
                .next()
                .unwrap()
                .split_once('=')
                .unwrap()
        })
        .collect();
    let arg = |name: &str| {
        build_args
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("no --build-arg {name}: {command}"))
    };
    assert_eq!(arg("VERSION"), VERSION);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(repository_root())
        .output()
        .unwrap();
    assert_eq!(
        arg("GIT_COMMIT"),
        String::from_utf8_lossy(&head.stdout).trim()
    );
    assert!(
        arg("BUILD_DATE").ends_with('Z') && arg("BUILD_DATE").len() == 20,
        "{command}"
    );
    assert!(command.ends_with(&format!(" -t gpucloud-operator:{VERSION} .")));

    let dockerfile = std::fs::read_to_string(repository_root().join("Dockerfile")).unwrap();
    let declared: Vec<&str> = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("ARG "))
        .map(|a| a.split('=').next().unwrap())
        .collect();
    for (name, _) in &build_args {
        assert!(declared.contains(name), "the Dockerfile has no ARG {name}");
    }
    for (label, from) in [
        ("version", "VERSION"),
        ("revision", "GIT_COMMIT"),
        ("created", "BUILD_DATE"),
        ("source", "SOURCE_URL"),
    ] {
        assert!(
            dockerfile.contains(&format!("org.opencontainers.image.{label}=\"${{{from}}}\"")),
            "the image's {label} label is the build argument {from}"
        );
    }
    for label in ["title", "licenses"] {
        assert!(
            dockerfile.contains(&format!("org.opencontainers.image.{label}=")),
            "{label}"
        );
    }
}

#[test]
fn the_release_script_refuses_a_chart_at_another_version() {
    let dir = scratch("mismatch");
    let chart = dir.join("gpucloud-operator");
    copy_chart(&chart);
    let chart_yaml = chart.join("Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml).unwrap();
    std::fs::write(
        &chart_yaml,
        text.replace(&format!("\nversion: {VERSION}\n"), "\nversion: 9.9.9\n"),
    )
    .unwrap();
    let dist = dir.join("dist");
    let output = release(&chart, &dist);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "has version '9.9.9'; both must be the operator crate's version {VERSION}"
        )),
        "{stderr}"
    );
    assert!(!dist.join("index.yaml").exists());
}

/// A copy of the chart's directory at `destination`.
fn copy_chart(destination: &Path) {
    let status = Command::new("cp")
        .arg("-r")
        .arg(chart_dir())
        .arg(destination)
        .status()
        .unwrap();
    assert!(status.success());
}

/// What the packaged chart renders, the API server takes: a server-side dry run of the CRDs
/// and every object, which stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_packaged_chart_passes_a_server_side_dry_run() {
    let archive = package(&scratch("dry-run"));
    let rendered = render_chart(&archive, &json!({}));
    assert_eq!(rendered.crd_objects().len(), every_crd());
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.kube_client().await.unwrap();
    deploy::create_namespaces(&client, &[RELEASE_NAMESPACE]).await;
    deploy::dry_run_all(&client, &rendered.crd_objects()).await;
    deploy::dry_run_all(&client, &rendered.objects()).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(
        crds.list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "a dry run stores nothing"
    );
    server.shutdown().await;
}

/// The next release's chart: this chart with the Firewall CRD changed (one more printer column,
/// a description holding `{{`, which the template must print, not run), templated by the kind
/// registry as the real one is.
fn chart_with_a_changed_crd(destination: &Path) -> PathBuf {
    copy_chart(destination);
    let mut crds = gpucloud_controller::kinds::registry::crds();
    let firewall = crds
        .iter_mut()
        .find(|c| c.spec.names.kind == "Firewall")
        .unwrap();
    let version = &mut firewall.spec.versions[0];
    version
        .additional_printer_columns
        .get_or_insert_with(Vec::new)
        .push(CustomResourceColumnDefinition {
            name: "Description".into(),
            type_: "string".into(),
            json_path: ".spec.description".into(),
            ..Default::default()
        });
    let schema = version.schema.as_mut().unwrap();
    schema.open_api_v3_schema.as_mut().unwrap().description =
        Some("A firewall. {{ .Values.nothing }} stays as written.".into());
    std::fs::write(
        destination.join("templates/crds.yaml"),
        gpucloud_controller::kinds::registry::chart_crds_template(&crds).unwrap(),
    )
    .unwrap();
    destination.to_path_buf()
}

/// The packaged chart through real Helm (helm-python-sdk's Helm library) against the embedded
/// API server: install; upgrade to a chart whose CRD changed, which changes the server's CRD
/// (Helm never upgrades a chart's `crds/`, so they are templates); uninstall, which keeps the
/// CRDs (`crds.keep`) and with them the objects of their kinds; install again over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_updates_the_crds_and_uninstall_keeps_them() {
    let dir = scratch("helm");
    let archive = package(&dir.join("dist"));
    let next = chart_with_a_changed_crd(&dir.join("gpucloud-operator"));
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.kube_client().await.unwrap();
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let helm = |action: &'static str, chart: PathBuf| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || deploy::helm(&kubeconfig, action, &chart, &json!({})))
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let firewall_crd = || async { crds.get("firewalls.gpucloud.io").await.unwrap() };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), RELEASE_NAMESPACE);

    let installed = helm("install", archive.clone()).await.unwrap();
    assert_eq!(installed["status"], "deployed", "{installed}");
    assert_eq!(installed["revision"], 1);
    assert_eq!(
        crds.list(&Default::default()).await.unwrap().items.len(),
        every_crd()
    );
    let crd = firewall_crd().await;
    assert_eq!(
        crd.metadata.annotations.as_ref().unwrap()["helm.sh/resource-policy"],
        "keep"
    );
    let columns = |crd: &CustomResourceDefinition| -> Vec<String> {
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect()
    };
    assert!(!columns(&crd).contains(&"Description".to_string()));
    deployments.get(RELEASE).await.unwrap();
    let mut firewall = deploy::yaml_documents(
        &std::fs::read_to_string(repository_root().join("examples/quickstart/firewall.yaml"))
            .unwrap(),
    )
    .remove(0);
    firewall["metadata"]["namespace"] = json!("default");
    deploy::apply_all(&client, std::slice::from_ref(&firewall)).await;

    let upgraded = helm("upgrade", next).await.unwrap();
    assert_eq!(upgraded["status"], "deployed", "{upgraded}");
    assert_eq!(upgraded["revision"], 2);
    let crd = firewall_crd().await;
    assert!(
        columns(&crd).contains(&"Description".to_string()),
        "{crd:?}"
    );
    let schema = crd.spec.versions[0].schema.clone().unwrap();
    assert_eq!(
        schema.open_api_v3_schema.unwrap().description.as_deref(),
        Some("A firewall. {{ .Values.nothing }} stays as written.")
    );

    let uninstalled = helm("uninstall", PathBuf::new()).await.unwrap();
    assert!(
        uninstalled["info"]
            .as_str()
            .unwrap()
            .contains("kept due to the resource policy"),
        "{uninstalled}"
    );
    assert!(deployments.get_opt(RELEASE).await.unwrap().is_none());
    assert_eq!(
        crds.list(&Default::default()).await.unwrap().items.len(),
        every_crd()
    );
    let resource = kube::discovery::ApiResource::from_gvk(&GroupVersionKind::gvk(
        "gpucloud.io",
        "v1alpha1",
        "Firewall",
    ));
    let firewalls: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    firewalls
        .get(firewall["metadata"]["name"].as_str().unwrap())
        .await
        .unwrap();

    // Installing again takes the kept CRDs over (they still name this release).
    let reinstalled = helm("install", archive).await.unwrap();
    assert_eq!(reinstalled["status"], "deployed", "{reinstalled}");
    assert!(!columns(&firewall_crd().await).contains(&"Description".to_string()));
    server.shutdown().await;
}

/// How many CRDs the operator has: one per kind of the registry.
fn every_crd() -> usize {
    gpucloud_controller::kinds::registry::crds().len()
}
