//! HTTPS for the embedded API server: a CA and a serving certificate generated at start, and
//! an accept loop that serves an axum `Router` over rustls (ring provider).
//!
//! kubectl refuses to send a bearer token over plain HTTP, and kube-rs verifies the server
//! against the kubeconfig's `certificate-authority-data`, so the server presents a leaf
//! certificate signed by a per-process CA whose PEM goes into the kubeconfig.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// How long a client may take to finish the TLS handshake before the connection is dropped,
/// so a silent peer cannot hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long open connections (for example running watches) get to finish after shutdown is
/// requested before they are cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Errors of certificate generation and HTTPS serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("generating the {what} certificate: {source}")]
    Generate {
        what: &'static str,
        #[source]
        source: rcgen::Error,
    },
    #[error("{0:?} is neither an IP address nor a DNS name the serving certificate can carry")]
    InvalidHost(String),
    #[error("the serving certificate needs at least one host name or IP address")]
    NoHosts,
    #[error("building the TLS server configuration: {0}")]
    Config(#[source] rustls::Error),
    #[error("accepting a connection: {0}")]
    Accept(#[source] std::io::Error),
}

/// The per-process CA and the serving certificate it signed.
///
/// `Debug` shows the certificates' subject names only: the private keys never leave this type
/// except into the rustls configuration.
pub struct TlsMaterial {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    serving_cert_der: CertificateDer<'static>,
    serving_key_der: Vec<u8>,
    hosts: Vec<String>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("hosts", &self.hosts)
            .field("serving_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

// === impl TlsMaterial ===

impl TlsMaterial {
    /// Generates a CA and a serving certificate valid for `hosts` (DNS names or IP addresses,
    /// e.g. `127.0.0.1`, `localhost`). Both are valid from a day ago (tolerating clock skew)
    /// for ten years.
    pub fn generate(hosts: &[String]) -> Result<Self, Error> {
        if hosts.is_empty() {
            return Err(Error::NoHosts);
        }
        if let Some(bad) = hosts.iter().find(|host| !is_valid_host(host)) {
            return Err(Error::InvalidHost(bad.clone()));
        }
        let (not_before, not_after) = validity_window();

        let ca_key =
            KeyPair::generate().map_err(|source| Error::Generate { what: "CA", source })?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())
            .map_err(|source| Error::Generate { what: "CA", source })?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name = DistinguishedName::new();
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "gpucloud-apiserver-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
        ];
        ca_params.not_before = not_before;
        ca_params.not_after = not_after;
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(|source| Error::Generate { what: "CA", source })?;
        let issuer = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate().map_err(|source| Error::Generate {
            what: "serving",
            source,
        })?;
        let mut serving_params =
            CertificateParams::new(hosts.to_vec()).map_err(|source| Error::Generate {
                what: "serving",
                source,
            })?;
        serving_params.distinguished_name = DistinguishedName::new();
        serving_params
            .distinguished_name
            .push(DnType::CommonName, "gpucloud-apiserver");
        serving_params.use_authority_key_identifier_extension = true;
        serving_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving_params.not_before = not_before;
        serving_params.not_after = not_after;
        let serving_cert = serving_params
            .signed_by(&serving_key, &issuer)
            .map_err(|source| Error::Generate {
                what: "serving",
                source,
            })?;

        Ok(Self {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().clone(),
            serving_cert_der: serving_cert.der().clone(),
            serving_key_der: serving_key.serialize_der(),
            hosts: hosts.to_vec(),
        })
    }

    /// The CA certificate in PEM, as a kubeconfig's `certificate-authority-data` carries it
    /// (base64 of this text).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA certificate in DER, for building a client trust store.
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// The names the serving certificate is valid for.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// A rustls server configuration presenting the serving certificate (and the CA, so
    /// clients see the whole chain), with the ring provider and ALPN `http/1.1`.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.serving_key_der.clone()));
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(Error::Config)?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.serving_cert_der.clone(), self.ca_der.clone()],
                key,
            )
            .map_err(Error::Config)?;
        // The router speaks HTTP/1.1 only; offering h2 would make Go clients pick it.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// An IP address, or a DNS name of letters, digits, `-` and `.` (a leading `*.` allowed).
fn is_valid_host(host: &str) -> bool {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        })
}

/// Not-before a day ago (tolerating clock skew) and not-after ten years on.
fn validity_window() -> (time::OffsetDateTime, time::OffsetDateTime) {
    let now = time::OffsetDateTime::now_utc();
    let start = now.saturating_sub(time::Duration::days(1));
    let end = now.saturating_add(time::Duration::days(3650));
    (start, end)
}

// === serving ===

/// Serves `router` over HTTPS on `listener` until `shutdown` completes.
///
/// Each connection is handshaken (bounded by a timeout) and served with HTTP/1.1 in its own
/// task. After `shutdown`, no new connections are accepted; open ones get a short grace period
/// to finish and are then cut, so long-running watches never keep the server alive.
pub async fn serve<F>(
    listener: TcpListener,
    router: axum::Router,
    config: Arc<ServerConfig>,
    shutdown: F,
) -> Result<(), Error>
where
    F: Future<Output = ()> + Send,
{
    let acceptor = TlsAcceptor::from(config);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);

    loop {
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Per-connection failures (e.g. the peer reset before accept finished, or the
                // process is briefly out of descriptors) must not stop the server.
                Err(error) if is_transient_accept_error(&error) => {
                    tracing::debug!(%error, "accept failed; continuing");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                Err(error) => return Err(Error::Accept(error)),
            },
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        // TCP_NODELAY, as Go servers (kube-apiserver among them) set it: a response's last
        // small segment is sent at once, not held back until the client acknowledges the one
        // before, which a client delays by 40 ms or more.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%peer, %error, "TCP_NODELAY not set");
        }
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%peer, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(TokioIo::new(tls), service);
            if let Err(error) = watcher.watch(connection).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }

    drop(listener);
    // Ask keep-alive connections to close after their current response; a watch still
    // streaming after the grace period is cut when the set is dropped.
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    connections.shutdown().await;
    Ok(())
}

/// Accept errors that concern one connection or a passing resource shortage, not the listener.
fn is_transient_accept_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind;
    matches!(
        error.kind(),
        ErrorKind::ConnectionAborted
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionRefused
            | ErrorKind::Interrupted
            | ErrorKind::WouldBlock
    ) || matches!(error.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::sync::oneshot;

    const VERSION_JSON: &str = r#"{"major":"1","minor":"33","gitVersion":"v1.33.0","gitCommit":"","gitTreeState":"clean","buildDate":"","goVersion":"go1.24","compiler":"gc","platform":"linux/amd64"}"#;

    struct Running {
        address: std::net::SocketAddr,
        material: TlsMaterial,
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Result<(), Error>>,
    }

    async fn start(router: axum::Router) -> Running {
        let material =
            TlsMaterial::generate(&["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let config = material.server_config().unwrap();
        let task = tokio::spawn(serve(listener, router, config, async move {
            let _ = stopped.await;
        }));
        Running {
            address,
            material,
            stop,
            task,
        }
    }

    fn client_config(trusted: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    async fn https_get(
        address: std::net::SocketAddr,
        trusted: &CertificateDer<'static>,
        path: &str,
    ) -> std::io::Result<String> {
        let connector = tokio_rustls::TlsConnector::from(client_config(trusted));
        let tcp = tokio::net::TcpStream::connect(address).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
        let mut response = String::new();
        tls.read_to_string(&mut response).await?;
        Ok(response)
    }

    #[tokio::test]
    async fn a_client_trusting_the_generated_ca_completes_the_handshake() {
        let running = start(axum::Router::new().route("/version", get(|| async { "ok" }))).await;
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            https_get(running.address, running.material.ca_der(), "/version"),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("ok"), "{response}");
        running.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), running.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_client_trusting_another_ca_is_refused() {
        let running = start(axum::Router::new().route("/version", get(|| async { "ok" }))).await;
        let stranger = TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            https_get(running.address, stranger.ca_der(), "/version"),
        )
        .await
        .unwrap();
        let error = result.unwrap_err();
        assert!(error.to_string().contains("certificate"), "{error}");
        // The server keeps serving after a failed handshake.
        let response = https_get(running.address, running.material.ca_der(), "/version")
            .await
            .unwrap();
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    }

    #[tokio::test]
    async fn kube_rs_connects_through_a_kubeconfig_with_the_embedded_ca() {
        let running = start(axum::Router::new().route(
            "/version",
            get(|| async {
                (
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    VERSION_JSON,
                )
            }),
        ))
        .await;
        let yaml = crate::kubeconfig::render(
            &format!("https://{}", running.address),
            running.material.ca_pem(),
            &[crate::kubeconfig::KubeconfigUser {
                name: "admin".to_owned(),
                token: "t0ken".to_owned(),
            }],
            "admin",
        )
        .unwrap();
        let version = crate::kubeconfig::version_seen_through(&yaml).await;
        assert_eq!(version.git_version, "v1.33.0");
    }

    #[tokio::test]
    async fn shutdown_cuts_a_response_that_never_ends() {
        let endless = get(|| async {
            // Yields nothing and never ends, like an idle watch.
            let stream = futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
            axum::body::Body::from_stream(stream)
        });
        let running = start(axum::Router::new().route("/watch", endless)).await;
        let connector = tokio_rustls::TlsConnector::from(client_config(running.material.ca_der()));
        let tcp = tokio::net::TcpStream::connect(running.address)
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = connector.connect(name, tcp).await.unwrap();
        tls.write_all(b"GET /watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), tls.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");

        running.stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), running.task)
            .await
            .expect("shutdown must not wait for the endless response")
            .unwrap()
            .unwrap();
    }

    #[test]
    fn debug_output_hides_the_private_key() {
        let material = TlsMaterial::generate(&["127.0.0.1".to_owned()]).unwrap();
        let debug = format!("{material:?}");
        assert!(debug.contains("<redacted>"));
        assert!(debug.len() < 200, "{debug}");
    }

    #[test]
    fn invalid_host_names_are_a_generation_error() {
        for bad in ["not a host", "", "-x.example", "a..b"] {
            let error = TlsMaterial::generate(&[bad.to_owned()]).unwrap_err();
            assert!(matches!(error, Error::InvalidHost(_)), "{bad:?}: {error}");
        }
        assert!(matches!(
            TlsMaterial::generate(&[]).unwrap_err(),
            Error::NoHosts
        ));
        let material =
            TlsMaterial::generate(&["::1".to_owned(), "api.gpucloud.local".to_owned()]).unwrap();
        assert_eq!(material.hosts().len(), 2);
    }
}
