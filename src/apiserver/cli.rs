//! `gpucloud-operator apiserver`: runs the embedded API server standalone, writes a kubeconfig
//! for kubectl, and serves until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use gpucloud_apiserver_semantics::rbac::SYSTEM_MASTERS;

use crate::authz::AuthorizationMode;
use crate::server::{ApiServer, ApiServerConfig, DEFAULT_ADMIN_USER};

/// Command-line arguments of the standalone API server.
#[derive(clap::Args, Clone)]
pub struct Args {
    /// Address to serve HTTPS on (port 0 picks a free port).
    #[arg(
        long,
        env = "GPUCLOUD_APISERVER_LISTEN",
        default_value = "127.0.0.1:6443"
    )]
    pub listen: SocketAddr,
    /// Where to write the kubeconfig (owner-only permissions; replaced if it exists).
    #[arg(
        long,
        env = "GPUCLOUD_APISERVER_KUBECONFIG",
        default_value = "gpucloud-apiserver.kubeconfig"
    )]
    pub kubeconfig: PathBuf,
    /// Bearer token of the `admin` user; a random one is generated when absent. Prefer the
    /// environment variable: command lines are visible to other local users.
    #[arg(long, env = "GPUCLOUD_APISERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A further user, with a generated token, for a client whose requests are to be told
    /// apart from the admin's (the request counts are by user); repeatable. The kubeconfig
    /// holds a context `gpucloud-apiserver-NAME` for each.
    #[arg(long = "user", value_name = "NAME")]
    pub users: Vec<String>,
    /// How requests are authorized, as kube-apiserver's flag of the same name: `AlwaysAllow`
    /// lets every user do everything; `RBAC` enforces Roles and bindings, with `admin` in
    /// `system:masters` and the further users holding only what is bound to them.
    #[arg(
        long,
        env = "GPUCLOUD_APISERVER_AUTHORIZATION_MODE",
        value_enum,
        default_value = "AlwaysAllow"
    )]
    pub authorization_mode: AuthorizationMode,
}

impl std::fmt::Debug for Args {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Args")
            .field("listen", &self.listen)
            .field("kubeconfig", &self.kubeconfig)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("users", &self.users)
            .field("authorization_mode", &self.authorization_mode)
            .finish()
    }
}

/// Errors of the standalone server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the API server: {0}")]
    Start(#[source] crate::server::Error),
    #[error("writing the kubeconfig: {0}")]
    Kubeconfig(#[source] crate::server::Error),
    #[error("waiting for Ctrl-C: {0}")]
    Signal(#[source] std::io::Error),
    #[error("generating a token for user {user}: {reason}")]
    Token { user: String, reason: String },
}

/// Starts the server, writes the kubeconfig, prints how to use it, and serves until Ctrl-C.
pub async fn run(args: Args) -> Result<(), Error> {
    run_until(args, async { tokio::signal::ctrl_c().await }).await
}

/// [`run`] with the stop signal supplied by the caller (tests use a channel).
pub async fn run_until<F>(args: Args, stop: F) -> Result<(), Error>
where
    F: std::future::Future<Output = std::io::Result<()>>,
{
    let admin_token = match args.token {
        Some(token) => token,
        None => generated_token(DEFAULT_ADMIN_USER)?,
    };
    let mut users = vec![(admin_token, DEFAULT_ADMIN_USER.to_owned())];
    for user in &args.users {
        users.push((generated_token(user)?, user.clone()));
    }
    let mut config = ApiServerConfig {
        listen: args.listen,
        authorization: args.authorization_mode,
        ..ApiServerConfig::default()
    };
    if args.authorization_mode == AuthorizationMode::Rbac {
        config
            .groups
            .insert(users[0].0.clone(), vec![SYSTEM_MASTERS.to_owned()]);
    }
    config.users = users;
    let server = ApiServer::start(config).await.map_err(Error::Start)?;
    if let Err(error) = server.write_kubeconfig(&args.kubeconfig) {
        server.shutdown().await;
        return Err(Error::Kubeconfig(error));
    }
    println!("gpucloud API server listening on {}", server.url());
    println!("kubeconfig written to {}", args.kubeconfig.display());
    println!(
        "try: kubectl --kubeconfig {} get namespaces   (Ctrl-C stops the server)",
        args.kubeconfig.display()
    );
    let result = stop.await;
    server.shutdown().await;
    result.map_err(Error::Signal)
}

fn generated_token(user: &str) -> Result<String, Error> {
    crate::auth::generate_token().map_err(|error| Error::Token {
        user: user.to_owned(),
        reason: error.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(clap::Parser, Debug)]
    struct Command {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn arguments_parse_with_defaults_and_hide_the_token() {
        let command = Command::try_parse_from(["apiserver"]).unwrap();
        assert_eq!(command.args.listen, "127.0.0.1:6443".parse().unwrap());
        let command = Command::try_parse_from([
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig",
            "/tmp/k",
            "--token",
            "s3cret-token",
        ])
        .unwrap();
        assert_eq!(command.args.kubeconfig, PathBuf::from("/tmp/k"));
        assert!(!format!("{command:?}").contains("s3cret-token"));
        assert!(Command::try_parse_from(["apiserver", "--listen", "nowhere"]).is_err());
        assert_eq!(
            command.args.authorization_mode,
            AuthorizationMode::AlwaysAllow
        );
        let command =
            Command::try_parse_from(["apiserver", "--authorization-mode", "RBAC"]).unwrap();
        assert_eq!(command.args.authorization_mode, AuthorizationMode::Rbac);
        assert!(Command::try_parse_from(["apiserver", "--authorization-mode", "ABAC"]).is_err());
    }

    #[tokio::test]
    async fn run_writes_a_working_kubeconfig_and_stops_on_the_signal() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("kubeconfig");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let args = Args {
            listen: "127.0.0.1:0".parse().unwrap(),
            kubeconfig: path.clone(),
            token: Some("cli-test-token".to_owned()),
            users: vec!["bench-operator".to_owned()],
            authorization_mode: AuthorizationMode::Rbac,
        };
        let server = tokio::spawn(run_until(args, async move {
            let _ = stopped.await;
            Ok(())
        }));
        // The kubeconfig appears once the server is up.
        let kubeconfig = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Ok(text) = std::fs::read_to_string(&path) {
                    break text;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        assert!(kubeconfig.contains("cli-test-token"));
        // The further user has a context of its own, with a generated token.
        assert!(
            kubeconfig.contains("gpucloud-apiserver-bench-operator"),
            "{kubeconfig}"
        );
        let version = crate::kubeconfig::version_seen_through(&kubeconfig).await;
        assert_eq!(version.major, "1");

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    /// The error a start with `args` ends in.
    async fn start_error(args: Args) -> Error {
        let run = run_until(args, async { Ok(()) });
        tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap()
            .unwrap_err()
    }

    #[tokio::test]
    async fn a_busy_listen_address_is_a_clear_error() {
        let occupied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let directory = tempfile::tempdir().unwrap();
        let args = Args {
            listen: occupied.local_addr().unwrap(),
            kubeconfig: directory.path().join("kubeconfig"),
            token: None,
            users: Vec::new(),
            authorization_mode: AuthorizationMode::AlwaysAllow,
        };
        let error = start_error(args).await;
        assert!(matches!(error, Error::Start(_)), "{error}");
        assert!(error.to_string().contains("127.0.0.1"), "{error}");
        assert!(!directory.path().join("kubeconfig").exists());
    }

    #[tokio::test]
    async fn an_unwritable_kubeconfig_path_is_a_clear_error() {
        let directory = tempfile::tempdir().unwrap();
        let args = Args {
            listen: "127.0.0.1:0".parse().unwrap(),
            kubeconfig: directory.path().join("missing").join("kubeconfig"),
            token: None,
            users: Vec::new(),
            authorization_mode: AuthorizationMode::AlwaysAllow,
        };
        let error = start_error(args).await;
        assert!(matches!(error, Error::Kubeconfig(_)), "{error}");
        assert!(error.to_string().contains("missing"), "{error}");
    }
}
