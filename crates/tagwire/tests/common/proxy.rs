//! A TCP proxy between a client and the daemon for fault tests (issue 25):
//! it passes bytes both ways, can swallow one direction, and cuts its
//! connections (not the processes). Used by publish_ack.rs and
//! subscriber_ack.rs (`#[path = "common/proxy.rs"] mod proxy;`).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tagwire::router::{Router, RouterConfig, RouterHandle};

/// What the proxy does with the bytes of its current connections.
pub const PASS: u8 = 0;
/// Swallows what the daemon sends (acknowledgements, deliveries).
pub const DROP_DOWN: u8 = 1;
/// Swallows what the client sends (events).
pub const DROP_UP: u8 = 2;

/// The proxy: its address, mode and open connections.
pub struct Proxy {
    addr: String,
    mode: Arc<AtomicU8>,
    conns: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
    refusing: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy to `upstream` (HOST:PORT) that passes everything.
    pub fn start(upstream: String) -> Proxy {
        Proxy::start_gated(upstream, |_| true)
    }

    /// Like [`Proxy::start`], but each client connection first goes
    /// through `gate`, which may answer it itself and refuse it (false).
    pub fn start_gated(upstream: String, gate: fn(&mut TcpStream) -> bool) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let mode = Arc::new(AtomicU8::new(PASS));
        let conns: Arc<Mutex<Vec<(TcpStream, TcpStream)>>> = Arc::default();
        let refusing: Arc<AtomicBool> = Arc::default();
        let (m, c, r) = (mode.clone(), conns.clone(), refusing.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(mut client) = client else { return };
                if r.load(Ordering::SeqCst) {
                    // Closed at once: the client is kept away.
                    continue;
                }
                if !gate(&mut client) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let clone = |s: &TcpStream| s.try_clone().expect("clone");
                c.lock()
                    .expect("conns")
                    .push((clone(&client), clone(&server)));
                let (c2, s2) = (clone(&client), clone(&server));
                let (mu, md) = (m.clone(), m.clone());
                std::thread::spawn(move || pump(client, server, mu, DROP_UP));
                std::thread::spawn(move || pump(s2, c2, md, DROP_DOWN));
            }
        });
        Proxy {
            addr,
            mode,
            conns,
            refusing,
        }
    }

    /// While `on`, new client connections are closed at once (the client
    /// stays away and keeps trying to reconnect).
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::SeqCst);
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Sets what the current connections do ([`PASS`], [`DROP_DOWN`],
    /// [`DROP_UP`]) until the next cut.
    pub fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }

    /// Cuts every connection now (what was being swallowed stays
    /// swallowed up to the cut); new ones pass everything.
    pub fn cut(&self) {
        let mut conns = self.conns.lock().expect("conns");
        for (c, s) in conns.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
        self.set(PASS);
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, mode: Arc<AtomicU8>, swallow: u8) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if mode.load(Ordering::SeqCst) == swallow {
            continue;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// The daemon's local token (the proxy's port has none of its own).
pub fn token(url: &str) -> String {
    let port: u16 = url
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("port in the router's url");
    tagwire::router::local::read_token(&tagwire::router::local::token_path(port))
        .expect("the router's local token")
}

/// A daemon-style router on a TCP port, and its URL.
pub fn router() -> (RouterHandle, String) {
    let cfg = RouterConfig {
        tcp: "127.0.0.1:0".parse().ok(),
        unix: None,
        ..RouterConfig::default()
    };
    let h = Router::start(cfg).expect("start router");
    let url = format!("tcp://{}", h.tcp_addr().expect("tcp addr"));
    (h, url)
}
