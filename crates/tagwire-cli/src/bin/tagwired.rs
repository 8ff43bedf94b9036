//! `tagwired` — the tagwire node daemon. With no arguments it listens on
//! `tcp://127.0.0.1:7700` and a Unix socket in `$XDG_RUNTIME_DIR` (else
//! `/tmp`); a TOML file (`--config`) changes the defaults, flags override it.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// jemalloc, with background threads that purge freed pages, so the
/// daemon's resident memory comes back down after a burst or an attack
/// (glibc's malloc keeps freed 64 KiB frame buffers resident; see
/// BENCHMARKS.md, "Abuse").
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
use tagwire::router::{config::ConfigError, Router, RouterConfig, TlsConfig};

/// The tagwire node daemon.
#[derive(Debug, Parser)]
#[command(
    name = "tagwired",
    version,
    about = "The tagwire node daemon: routes events between publishers and subscribers"
)]
struct Args {
    /// TOML configuration file (see docs/configuration.md).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// TCP listen address [default: 127.0.0.1:7700]; `--listen` is the same.
    #[arg(long, visible_alias = "listen", value_name = "ADDR")]
    tcp: Option<std::net::SocketAddr>,
    /// Unix socket path [default: $XDG_RUNTIME_DIR/tagwire/tagwire.sock, else /tmp/tagwire-UID/tagwire.sock].
    #[arg(long, value_name = "PATH")]
    unix: Option<PathBuf>,
    /// Do not listen on TCP.
    #[arg(long, conflicts_with = "tcp")]
    no_tcp: bool,
    /// Do not listen on a Unix socket.
    #[arg(long, conflicts_with = "unix")]
    no_unix: bool,
    /// Serve TLS on the TCP listener with this certificate chain (PEM);
    /// needs --tls-key. Overrides `[tls] cert`.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The TLS certificate's private key (PEM). Overrides `[tls] key`.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM): mutual TLS.
    /// Overrides `[tls] client_ca`.
    #[arg(long, value_name = "PEM")]
    tls_client_ca: Option<PathBuf>,
    /// Name reported to clients and in `tagwire list`.
    #[arg(long)]
    name: Option<String>,
    /// Keep a link with the daemon at tcp://HOST:PORT, or tls://HOST:PORT
    /// for one that serves TLS (needs --peer-tls-ca), or udp://HOST:PORT for
    /// a best-effort link in datagrams to its --udp listener (repeatable; added to
    /// `[federation] peers`). Events cross links only toward daemons whose
    /// subscribers want them.
    #[arg(long, value_name = "URL")]
    peer: Vec<String>,
    /// CA certificates (PEM) that signed the certificates of tls:// peers.
    /// Overrides `[federation.tls] ca`.
    #[arg(long, value_name = "PEM")]
    peer_tls_ca: Option<PathBuf>,
    /// Client certificate chain (PEM) to present to tls:// peers that
    /// require one; needs --peer-tls-key. Overrides `[federation.tls] cert`.
    #[arg(long, value_name = "PEM", requires_all = ["peer_tls_key", "peer_tls_ca"])]
    peer_tls_cert: Option<PathBuf>,
    /// The --peer-tls-cert's private key (PEM). Overrides `[federation.tls] key`.
    #[arg(long, value_name = "PEM", requires = "peer_tls_cert")]
    peer_tls_key: Option<PathBuf>,
    /// Cluster name: only daemons of the same cluster link. Overrides
    /// `[federation] cluster`.
    #[arg(long)]
    cluster: Option<String>,
    /// Find daemons of the same cluster on the local network (UDP multicast
    /// beacons) and link with them (`[federation] discovery = true`).
    #[arg(long, conflicts_with = "no_discovery")]
    discovery: bool,
    /// Do not look for daemons on the local network (the default).
    #[arg(long)]
    no_discovery: bool,
    /// Serve Prometheus metrics (`/metrics`) and the web dashboard (`/`)
    /// over HTTP on ADDR, e.g. 127.0.0.1:9090; requests present a token
    /// with the admin right (docs/metrics.md). Overrides `[metrics] listen`.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
    /// Join a cluster in one step: the shared secret in this file (mode 0600)
    /// sets authentication, the daemon-to-daemon ACL, the federation token
    /// and the gossip address (docs/federation.md). Overrides `[cluster]
    /// secret_file`.
    #[arg(long, value_name = "FILE")]
    cluster_secret_file: Option<PathBuf>,
    /// A daemon of the cluster to join, HOST:PORT (repeatable; added to
    /// `[cluster] join`). Needs --cluster-secret-file.
    #[arg(long, value_name = "HOST:PORT")]
    join: Vec<String>,
    /// Write a new random cluster secret to FILE (mode 0600, never
    /// overwriting) and exit; copy it to every host of the cluster.
    #[arg(long, value_name = "FILE", exclusive = true)]
    new_cluster_secret: Option<PathBuf>,
    /// Serve MQTT 3.1.1 and 5 clients on ADDR (e.g. 127.0.0.1:1883): topic
    /// a/b is tag /a/b, the password is a token. Overrides `[mqtt] listen`;
    /// see docs/mqtt.md.
    #[arg(long, value_name = "ADDR")]
    mqtt: Option<std::net::SocketAddr>,
    /// Serve `udp://` clients on ADDR (e.g. 0.0.0.0:7710): datagrams of at
    /// most `[udp] max_datagram` bytes, best effort, loss counted. Overrides
    /// `[udp] listen`; see docs/transports.md.
    #[arg(long, value_name = "ADDR")]
    udp: Option<std::net::SocketAddr>,
    /// Directory of the daemon's durable state: the store of
    /// `reliability=durable` tags (`store.redb`; docs/reliability.md).
    /// Without it (or `[store] path`) the daemon has no store, and making a
    /// tag durable is refused. Created (mode 0700) if missing.
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Log filter (tracing syntax, e.g. `info`, `tagwire_router=debug`); RUST_LOG also works.
    #[arg(long, default_value = "info")]
    log: String,
}

fn config(args: &Args) -> Result<RouterConfig, ConfigError> {
    let mut cfg = match &args.config {
        Some(path) => RouterConfig::load(path)?,
        None => RouterConfig::default(),
    };
    if let Some(a) = args.tcp {
        cfg.tcp = Some(a);
    }
    if let Some(p) = &args.unix {
        cfg.unix = Some(p.clone());
    }
    if args.no_tcp {
        cfg.tcp = None;
    }
    if args.no_unix {
        cfg.unix = None;
    }
    if let Some(a) = args.mqtt {
        cfg.mqtt.listen = Some(a);
    }
    if let Some(a) = args.udp {
        cfg.udp.listen = Some(a);
    }
    if let Some(n) = &args.name {
        cfg.name = n.clone();
    }
    cfg.federation.peers.extend(args.peer.iter().cloned());
    if let Some(ca) = &args.peer_tls_ca {
        let t = cfg
            .federation
            .tls
            .get_or_insert_with(|| tagwire::router::config::PeerTlsConfig {
                ca: ca.clone(),
                cert: None,
                key: None,
                server_name: None,
            });
        t.ca = ca.clone();
        if let (Some(cert), Some(key)) = (&args.peer_tls_cert, &args.peer_tls_key) {
            t.cert = Some(cert.clone());
            t.key = Some(key.clone());
        }
    }
    if let Some(c) = &args.cluster {
        cfg.federation.cluster = c.clone();
    }
    if args.discovery {
        cfg.federation.discovery = true;
    }
    if args.no_discovery {
        cfg.federation.discovery = false;
    }
    if let Some(a) = args.metrics {
        cfg.metrics.listen = Some(a);
    }
    if let Some(dir) = &args.state_dir {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| ConfigError::Invalid(format!("--state-dir {}: {e}", dir.display())))?;
        cfg.store.path = Some(dir.join("store.redb"));
    }
    if cfg.reservations_file.is_none() {
        // One file per daemon: named after its TCP port when it has one.
        let name = match cfg.tcp {
            Some(a) => format!("reservations-{}.json", a.port()),
            None => "reservations.json".into(),
        };
        cfg.reservations_file = Some(tagwire::router::local::runtime_dir().join(name));
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let client_ca = cfg.tls.take().and_then(|t| t.client_ca);
        cfg.tls = Some(TlsConfig {
            cert: cert.clone(),
            key: key.clone(),
            client_ca,
        });
    }
    if let Some(f) = &args.cluster_secret_file {
        cfg.cluster.secret_file = Some(f.clone());
    }
    cfg.cluster.join.extend(args.join.iter().cloned());
    if let Some(ca) = &args.tls_client_ca {
        match &mut cfg.tls {
            Some(tls) => tls.client_ca = Some(ca.clone()),
            None => {
                return Err(ConfigError::Invalid(
                    "--tls-client-ca needs TLS: give --tls-cert and --tls-key, or [tls] in the config file".into(),
                ))
            }
        }
    }
    if let Some(setup) = tagwire::router::cluster::apply(&mut cfg)? {
        tracing::info!("{setup}");
    }
    cfg.validate()?;
    Ok(cfg)
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(path) = &args.new_cluster_secret {
        return match tagwire::router::cluster::write_new_secret(path) {
            Ok(()) => {
                println!(
                    "wrote a new cluster secret to {} (mode 0600); copy it to every host of the cluster",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("tagwired: {e}");
                ExitCode::from(2)
            }
        };
    }
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| args.log.clone());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        // Colours only on a terminal: not as escape codes in a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tagwired: {e}");
            return ExitCode::from(2);
        }
    };
    let router = match Router::start(cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tagwired: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tagwired: cannot start the signal handler: {e}");
            return ExitCode::FAILURE;
        }
    };
    let signal = rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => Ok::<_, std::io::Error>("SIGTERM"),
            _ = int.recv() => Ok("SIGINT"),
        }
    });
    match signal {
        Ok(s) => tracing::info!("{s} received; shutting down"),
        Err(e) => tracing::error!("cannot wait for signals: {e}; shutting down"),
    }
    router.shutdown();
    ExitCode::SUCCESS
}
