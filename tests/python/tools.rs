//! The Python tools some tests run (helm-python-sdk, kubernetes-validate, prometheus-client),
//! in the virtualenv `.ci/python-tools.sh` makes under `target/` on first use. Shared by the
//! deployment tests (`tests/deploy/mod.rs`) and the operator's metrics test
//! (`src/controller/tests/openmetrics.rs`), each including this file by path.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The virtualenv's interpreter. Without Python these checks cannot run at all, so this fails
/// the test rather than skipping it.
pub fn python(repository_root: &Path) -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let script = repository_root.join(".ci/python-tools.sh");
        let output = Command::new(&script).output().unwrap_or_else(|e| {
            panic!(
                "cannot run {}: {e}; these tests need bash and python3 (with venv and pip)",
                script.display()
            )
        });
        assert!(
            output.status.success(),
            "{} failed: these tests need python3 with the venv module and pip access to PyPI \
             (helm-python-sdk, kubernetes-validate, prometheus-client):\n{}",
            script.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let path = String::from_utf8(output.stdout).expect("a UTF-8 path");
        PathBuf::from(path.trim())
    })
}
