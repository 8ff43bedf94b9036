//! Negotiating a publisher's shared-memory region with the daemon
//! (`shm_open`): when to ask, and what the daemon's answer grants.

use tagwire_core::connection::Reply;
use tagwire_proto::admin::{AdminOp, AdminReply, AdminRequest};

use super::{Session, Target};
use crate::error::{Error, Result};
use crate::url::ServerUrl;

impl Session {
    /// Asks the daemon for a shared-memory region for publisher `name` (the
    /// daemon's start size) and waits for it; see [`Session::ask_shm`].
    pub(crate) fn open_shm(
        &self,
        name: &str,
        id: u32,
        mode: crate::shm::ShmMode,
    ) -> Result<Option<crate::shm::ShmPublisher>> {
        match self.ask_shm(name, id, mode, None)? {
            None => Ok(None),
            Some(ask) => {
                let reply = ask.wait();
                self.answer_shm(&ask, reply)
            }
        }
    }

    /// Sends the `shm_open` request for publisher `name` without waiting
    /// (so a subscription callback may publish, and grow its region):
    /// `grow: Some((max_packet, current))` asks for a region whose chunks
    /// hold `max_packet` bytes to replace region `current`. `Ok(None)`: not
    /// asked (`off`, or the daemon is not on this host under `auto`).
    pub(crate) fn ask_shm(
        &self,
        name: &str,
        id: u32,
        mode: crate::shm::ShmMode,
        grow: Option<(u64, u64)>,
    ) -> Result<Option<crate::shm::ShmAsk>> {
        if mode == crate::shm::ShmMode::Off {
            return Ok(None);
        }
        if !self.is_same_host() {
            let why = format!(
                "the daemon is reached over {} (shared memory needs its Unix socket or embedded mode)",
                self.inner().target().describe()
            );
            if mode == crate::shm::ShmMode::Auto {
                // The expected case for a remote daemon: not worth a log line.
                tracing::debug!("publisher {name}: payloads go over the socket: {why}");
                return Ok(None);
            }
            return crate::shm::refuse(name, mode, why).map(|_| None);
        }
        let body = AdminRequest::ShmOpen {
            endpoint: name.to_owned(),
            id,
            max_packet: grow.map(|(m, _)| m),
            pid: Some(std::process::id()),
        }
        .to_json();
        match self.inner().send_request(|e| ((), e.admin(body))) {
            Ok(((), _, rx)) => Ok(Some(crate::shm::ShmAsk {
                rx,
                name: name.to_owned(),
                mode,
                grow,
                epoch: self.inner().epoch(),
            })),
            Err(e) => crate::shm::refuse(name, mode, e.to_string()).map(|_| None),
        }
    }

    /// The region an `shm_open` reply grants, taken as producer. `auto`
    /// logs why not and gives `Ok(None)`; `require` fails naming it; a
    /// growth answered with the current region (the daemon makes none
    /// larger) is `Ok(None)` without a log line.
    pub(crate) fn answer_shm(
        &self,
        ask: &crate::shm::ShmAsk,
        reply: Result<Reply>,
    ) -> Result<Option<crate::shm::ShmPublisher>> {
        let refuse = |why: String| crate::shm::refuse(&ask.name, ask.mode, why);
        let region = match reply {
            Ok(Reply::Admin(text)) => match AdminReply::parse(AdminOp::ShmOpen, &text) {
                Ok(AdminReply::ShmOpened(g)) => g.region,
                Ok(other) => {
                    return refuse(format!("unexpected shm_open reply {}", other.to_json()))
                }
                Err(e) => return refuse(e.to_string()),
            },
            Ok(Reply::Err(_, message)) => return refuse(message),
            Ok(_) => return refuse("expected an admin reply to shm_open".into()),
            Err(Error::BadReply(why)) => return refuse(why),
            Err(e) => return refuse(e.to_string()),
        };
        if ask.grow.is_some_and(|(_, current)| current == region) {
            // Already as large as the daemon makes them (its fd came again).
            drop(self.inner().shm.take_grant(region));
            return Ok(None);
        }
        let Some(mapped) = self.inner().shm.take_grant(region) else {
            return refuse(format!(
                "region {region} was granted but its fd did not arrive"
            ));
        };
        match crate::shm::ShmPublisher::new(region, mapped, ask.epoch) {
            Ok(p) => {
                let replaces = ask.grow.map(|(_, current)| current);
                self.inner()
                    .shm
                    .producing(region, &p.producer.region(), replaces);
                Ok(Some(p))
            }
            Err(why) => refuse(why),
        }
    }

    /// Whether this session reaches its router on this host (a Unix socket
    /// or embedded), where shared memory can be negotiated.
    pub fn is_same_host(&self) -> bool {
        matches!(
            self.inner().target(),
            Target::Url(ServerUrl::Unix(_)) | Target::Embedded(_)
        )
    }

    /// What this session's shared-memory path did so far (see `docs/shm.md`).
    pub fn shm_stats(&self) -> crate::shm::ShmStats {
        self.inner().shm.stats()
    }
}
