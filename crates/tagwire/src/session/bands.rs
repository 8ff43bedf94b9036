//! Priority bands: a session's sibling sessions on the router's other
//! bands (one connection per band, served by that band's lane), and which
//! band an event's priority picks.

use std::sync::Arc;

use super::router_bands::RouterBands;
use super::{Session, Target};
use crate::error::{Error, Result};
use crate::sync::lock;
use crate::url::ServerUrl;

impl Session {
    /// The band that serves this session's connection: its own band; else
    /// the band whose listener its URL names (a band's Unix socket or
    /// port, as the router lists them); else the router's default band
    /// (the listing is asked once per session).
    pub fn band_in_use(&self) -> Result<String> {
        if let Some(b) = self.band() {
            return Ok(b.to_owned());
        }
        let bands = self.router_bands()?;
        let target = self.inner().target();
        let same_port = |ours: &str, listed: Option<&str>| {
            port_of(ours).is_some() && listed.and_then(port_of) == port_of(ours)
        };
        let serves = |l: &tagwire_router::LaneEntry| match target {
            Target::Url(ServerUrl::Unix(path)) => {
                l.unix.as_deref().map(std::path::Path::new) == Some(path.as_path())
            }
            Target::Url(ServerUrl::Tcp(a) | ServerUrl::Tls(a)) | Target::Tls(a, _) => {
                same_port(a, l.tcp.as_deref())
            }
            Target::Url(ServerUrl::Udp(a)) => same_port(a, l.udp.as_deref()),
            Target::Embedded(_) => false,
        };
        Ok(bands
            .lanes
            .iter()
            .find(|l| serves(l))
            .map_or_else(|| bands.default_band.clone(), |l| l.band.clone()))
    }

    /// A session on priority band `band` of the same router (`low`,
    /// `normal`, `high`, `critical` by default), opened on first use and
    /// shared after: its connection goes to the band's listener, so the
    /// router serves it on that band's lane; its TCP socket carries the
    /// band's DSCP both ways; and its reader thread runs with the band's
    /// scheduling, so its subscribers' callbacks run at the band's priority.
    /// Declare the endpoints that need the band on it:
    /// `session.on_band("high")?.declare_publisher("/alarm")`.
    pub fn on_band(&self, band: &str) -> Result<Session> {
        let inner = self.inner();
        if inner.options.band.as_ref().is_some_and(|b| b.name == band) {
            return Ok(self.clone());
        }
        if let Some(s) = lock(&inner.bands).get(band) {
            return Ok(s.clone());
        }
        let bands = self.router_bands()?;
        let Some(lane) = bands.lanes.iter().find(|l| l.band == band) else {
            return Err(Error::UnknownBand {
                band: band.to_owned(),
                known: bands
                    .lanes
                    .iter()
                    .map(|l| l.band.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let no_listener =
            || Error::BadReply(format!("band {band} has no listener for this transport"));
        let port = || {
            lane.tcp
                .as_deref()
                .and_then(port_of)
                .ok_or_else(no_listener)
        };
        let with_port = |hostport: &str, port: u16| match hostport.rsplit_once(':') {
            Some((host, _)) => format!("{host}:{port}"),
            None => format!("{hostport}:{port}"),
        };
        let udp_port = || {
            lane.udp
                .as_deref()
                .and_then(port_of)
                .ok_or_else(no_listener)
        };
        let target = match inner.target() {
            Target::Url(ServerUrl::Udp(a)) => {
                Target::Url(ServerUrl::Udp(with_port(a, udp_port()?)))
            }
            Target::Url(ServerUrl::Tcp(a)) => Target::Url(ServerUrl::Tcp(with_port(a, port()?))),
            Target::Url(ServerUrl::Tls(a)) => Target::Url(ServerUrl::Tls(with_port(a, port()?))),
            Target::Url(ServerUrl::Unix(_)) => Target::Url(ServerUrl::Unix(
                lane.unix
                    .clone()
                    .map(std::path::PathBuf::from)
                    .ok_or_else(no_listener)?,
            )),
            Target::Tls(a, c) => Target::Tls(with_port(a, port()?), c.clone()),
            Target::Embedded(r) => Target::Embedded(r.clone()),
        };
        let mut options = inner.options.clone();
        // The same session id: the router then lets the band connection
        // publish under this session's endpoint names.
        options.session_id = Some(lock(&inner.engine).session_id());
        options.follow_priority = false;
        options.band = Some(crate::options::ClientBand {
            name: band.to_owned(),
            dscp: lane.dscp,
            sched: lane.sched.parse().unwrap_or_default(),
            cpus: lane.cpus.parse().ok(),
        });
        let s = Session::open(target, options)?;
        lock(&inner.bands).insert(band.to_owned(), s.clone());
        Ok(s)
    }

    /// The band an event of `priority` travels on under
    /// [`SessionBuilder::follow_priority`] (`None`: this session's own
    /// connection). The router's bands split 0..=255 evenly, lowest first.
    pub(crate) fn band_for_priority(&self, priority: u8) -> Result<Option<String>> {
        let inner = self.inner();
        if !inner.options.follow_priority {
            return Ok(None);
        }
        let bands = self.router_bands()?;
        let lanes = &bands.lanes;
        if lanes.is_empty() {
            return Ok(None);
        }
        let band = lanes[priority as usize * lanes.len() / 256].band.as_str();
        // An unbanded session reached the router's default band.
        let own = inner
            .options
            .band
            .as_ref()
            .map_or(bands.default_band.as_str(), |b| b.name.as_str());
        Ok((band != own).then(|| band.to_owned()))
    }

    /// The router's bands (lanes, lowest first) and its default band, asked
    /// once per session (they are fixed while the router runs).
    pub(super) fn router_bands(&self) -> Result<Arc<RouterBands>> {
        let inner = self.inner();
        if let Some(b) = lock(&inner.router_bands).clone() {
            return Ok(b);
        }
        let page = self.list_page(None, Some(1))?;
        let b = Arc::new(RouterBands {
            lanes: page.lanes,
            default_band: page.default_band,
        });
        *lock(&inner.router_bands) = Some(b.clone());
        Ok(b)
    }

    /// The band this session's connection belongs to (`None`: the
    /// listener's default band).
    pub fn band(&self) -> Option<&str> {
        self.inner().options.band.as_ref().map(|b| b.name.as_str())
    }
}

/// The port of a listener address `HOST:PORT` (`None`: no port).
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':').and_then(|(_, p)| p.parse().ok())
}
