//! The byte stream under a session: a TCP or Unix socket (an in-process
//! socketpair in embedded mode), or for TLS one end of a socketpair whose
//! other end a pump thread serves (see `tls.rs`); used with blocking I/O.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use socket2::{Domain, SockAddr, Socket, Type};

use crate::tls::{PumpStatus, TlsConnector};
use crate::url::ServerUrl;

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// TLS: the session's end of a pair served by a pump thread, and what
    /// the pump met (reported when the stream ends on an error).
    Tls(UnixStream, Arc<PumpStatus>),
    /// UDP: the session's end of a pair served by the datagram pumps
    /// (see `udp.rs`), and what they saw.
    Udp(UnixStream, Arc<crate::udp::UdpStatus>),
}

impl Stream {
    /// Connects within `timeout`; a connect that runs out of time fails
    /// with `TimedOut` or `WouldBlock` (see [`is_timeout`]).
    pub(crate) fn connect(
        url: &ServerUrl,
        timeout: Duration,
        band: Option<&crate::options::ClientBand>,
    ) -> std::io::Result<Stream> {
        let deadline = Instant::now() + timeout;
        match url {
            ServerUrl::Tcp(addr) => {
                let mut last = std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{addr} resolves to no address"),
                );
                for a in addr.as_str().to_socket_addrs()? {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(std::io::ErrorKind::TimedOut.into());
                    }
                    match TcpStream::connect_timeout(&a, left) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            return Ok(Stream::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            ServerUrl::Unix(path) => {
                // A blocking connect to a listener whose backlog is full
                // waits for room, at most SO_SNDTIMEO (Linux).
                let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
                socket.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
                socket.connect(&SockAddr::unix(path)?)?;
                socket.set_write_timeout(None)?;
                let s = UnixStream::from(OwnedFd::from(socket));
                crate::credentials::check_daemon(&s, url)?;
                Ok(Stream::Unix(s))
            }
            ServerUrl::Udp(addr) => {
                let (s, status) = crate::udp::connect(addr, timeout, band.cloned())?;
                Ok(Stream::Udp(s, status))
            }
            ServerUrl::Tls(_) => Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "tls:// URLs connect with Stream::connect_tls",
            )),
        }
    }

    /// Connects to a `tls://` address and completes the TLS handshake.
    pub(crate) fn connect_tls(
        connector: &TlsConnector,
        addr: &str,
        url: &str,
        timeout: Duration,
    ) -> crate::error::Result<Stream> {
        let (s, status) = connector.connect(addr, url, timeout)?;
        Ok(Stream::Tls(s, status))
    }

    pub(crate) fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            Stream::Tls(s, status) => Stream::Tls(s.try_clone()?, status.clone()),
            Stream::Udp(s, status) => Stream::Udp(s.try_clone()?, status.clone()),
        })
    }

    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) | Stream::Tls(s, _) | Stream::Udp(s, _) => s.set_read_timeout(d),
        }
    }

    /// Shuts the sending direction only: the peer reads the end of the
    /// stream, and what it still sends can be read here.
    pub(crate) fn shutdown_write(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Stream::Unix(s) | Stream::Tls(s, _) | Stream::Udp(s, _) => {
                s.shutdown(std::net::Shutdown::Write)
            }
        };
    }

    /// Shuts both directions, waking a reader blocked on this socket.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) | Stream::Tls(s, _) | Stream::Udp(s, _) => {
                s.shutdown(std::net::Shutdown::Both)
            }
        };
    }
}

impl Stream {
    /// Like `read`, keeping the fds a Unix peer passed with the bytes
    /// (SCM_RIGHTS: the daemon's shared-memory regions, `docs/shm.md`).
    pub(crate) fn read_with_fds(
        &mut self,
        buf: &mut [u8],
        fds: &mut Vec<OwnedFd>,
    ) -> std::io::Result<usize> {
        use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let Stream::Unix(s) = self else {
            return self.read(buf);
        };
        let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(16))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [std::io::IoSliceMut::new(buf)];
        let got = recvmsg(&*s, &mut iov, &mut anc, RecvFlags::CMSG_CLOEXEC)?;
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if got.flags.contains(rustix::net::ReturnFlags::CTRUNC) {
            tracing::warn!("more shared-memory fds arrived than fit; some were dropped");
        }
        Ok(got.bytes)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            // The end of a TLS stream (or a reset: the pump closed its end
            // with our bytes unread) reads as the error that ended the
            // pump, if any, so that it names the TLS failure.
            Stream::Tls(s, status) => {
                let r = s.read(buf);
                match (&r, status.error()) {
                    (Ok(0) | Err(_), Some(tls)) if !buf.is_empty() => {
                        Err(std::io::Error::other(format!("TLS: {tls}")))
                    }
                    _ => r,
                }
            }
            Stream::Udp(s, status) => {
                let r = s.read(buf);
                match (&r, status.error()) {
                    (Ok(0) | Err(_), Some(e)) if !buf.is_empty() => {
                        Err(std::io::Error::other(format!("UDP: {e}")))
                    }
                    _ => r,
                }
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s, status) => s.write(buf).map_err(|e| match status.error() {
                Some(tls) => std::io::Error::other(format!("TLS: {tls}")),
                None => e,
            }),
            Stream::Udp(s, status) => s.write(buf).map_err(|e| match status.error() {
                Some(u) => std::io::Error::other(format!("UDP: {u}")),
                None => e,
            }),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether an I/O error is a timeout (`SO_RCVTIMEO`/`SO_SNDTIMEO` report
/// `WouldBlock`, `connect_timeout` reports `TimedOut`).
pub(crate) fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Read chunk size.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// Reads into `buf`; false on end of stream.
pub(crate) fn read_some(stream: &mut Stream, buf: &mut BytesMut) -> std::io::Result<bool> {
    let start = buf.len();
    buf.resize(start + READ_CHUNK, 0);
    let n = loop {
        match stream.read(&mut buf[start..]) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    buf.truncate(start + *n.as_ref().unwrap_or(&0));
    Ok(n? > 0)
}
