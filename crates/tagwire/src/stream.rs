//! The byte stream under a session: a TCP or Unix socket (an in-process
//! socketpair in embedded mode), used with blocking I/O.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use socket2::{Domain, SockAddr, Socket, Type};

use crate::url::ServerUrl;

/// A connected socket.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    /// Connects within `timeout`; a connect that runs out of time fails
    /// with `TimedOut` or `WouldBlock` (see `builder::is_timeout`).
    pub(crate) fn connect(url: &ServerUrl, timeout: Duration) -> std::io::Result<Stream> {
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
        }
    }

    pub(crate) fn try_clone(&self) -> std::io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            Stream::Unix(s) => s.set_read_timeout(d),
        }
    }

    /// Shuts both directions, waking a reader blocked on this socket.
    pub(crate) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
