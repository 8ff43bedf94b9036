//! What a session asks of its router besides publishing and subscribing:
//! listings (in pages), admin requests (filters, maps, QoS, `show`), the
//! network time, pings and a round trip to wait for what was sent.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tagwire_core::connection::Reply;
use tagwire_proto::admin::{
    AdminReply, AdminRequest, FilterInfo, FilterLevel, Listing, QosChanged, Show, TimeInfo,
};

use super::Session;
use crate::error::{Error, Result};

impl Session {
    /// Asks the router for its tags, endpoints and subscriptions. The
    /// router answers in pages that fit the connection's frame size
    /// (`docs/admin.md`); this follows them and returns the whole listing,
    /// with the counters of the last page.
    pub fn list(&self) -> Result<Listing> {
        self.list_all()
    }
    fn list_all(&self) -> Result<Listing> {
        let mut all: Option<Listing> = None;
        let mut after: Option<String> = None;
        loop {
            let mut page = self.list_page(after.clone(), None)?;
            let next = page.next.take();
            all = Some(match all {
                None => page,
                Some(mut acc) => {
                    acc.connections.append(&mut page.connections);
                    acc.endpoints.append(&mut page.endpoints);
                    acc.subscriptions.append(&mut page.subscriptions);
                    acc.tags.append(&mut page.tags);
                    Listing {
                        connections: acc.connections,
                        endpoints: acc.endpoints,
                        subscriptions: acc.subscriptions,
                        tags: acc.tags,
                        multicast: acc.multicast,
                        ..page
                    }
                }
            });
            match next {
                Some(n) if after.as_ref() != Some(&n) => after = Some(n),
                Some(n) => {
                    return Err(Error::BadReply(format!(
                        "admin list reply: the cursor {n:?} does not advance"
                    )))
                }
                None => break,
            }
        }
        Ok(all.expect("the loop runs at least once and sets it"))
    }
    /// Every filter the router knows (`tagwire admin filter list`), following
    /// the router's pages like [`Session::list`].
    pub fn filter_list(&self) -> Result<Vec<FilterInfo>> {
        let mut all = Vec::new();
        let mut after: Option<u64> = None;
        loop {
            let reply = self.admin(AdminRequest::FilterList { after, limit: None })?;
            let AdminReply::FilterList(page) = reply else {
                return Err(unexpected(reply));
            };
            all.extend(page.filters);
            match page.next {
                Some(n) if after.is_none_or(|a| n > a) => after = Some(n),
                Some(n) => {
                    return Err(Error::BadReply(format!(
                        "admin filter_list reply: the cursor {n} does not advance"
                    )))
                }
                None => return Ok(all),
            }
        }
    }
    /// The offset to add to this host's clock for network time, under
    /// [`SessionBuilder::network_clock`](crate::SessionBuilder::network_clock)
    /// (0 otherwise): asked of the daemon when older than 10 s.
    pub(crate) fn network_offset(&self, now: u64) -> i64 {
        let inner = self.inner();
        if !inner.options.network_clock {
            return 0;
        }
        let at = inner.net_offset_at.load(Ordering::Relaxed);
        if at == 0 || now.saturating_sub(at) > 10_000_000_000 {
            let before = crate::clock::now_ns();
            if let Ok(t) = self.network_time() {
                let after = crate::clock::now_ns();
                // The daemon's reading stands for the middle of the request.
                let mid = before / 2 + after / 2;
                let offset = t.network_time_ns as i128 - mid as i128;
                inner.net_offset.store(offset as i64, Ordering::Relaxed);
                inner.net_offset_at.store(now.max(1), Ordering::Relaxed);
            }
        }
        inner.net_offset.load(Ordering::Relaxed)
    }
    /// The daemon's network time (its clock corrected by its offset to the
    /// network's reference daemon, docs/time.md), with the offset and its
    /// error bound. Stamp events with it to compare times across hosts.
    pub fn network_time(&self) -> Result<TimeInfo> {
        match self.admin(AdminRequest::Time)? {
            AdminReply::Time(t) => Ok(t),
            other => Err(unexpected(other)),
        }
    }
    /// Sends an admin request (`docs/admin.md`) and returns its typed
    /// reply, of the variant that answers the request's kind. A refusal is
    /// [`Error::Refused`] with the daemon's code and message (naming what
    /// was wrong).
    ///
    /// ```no_run
    /// use tagwire::admin::{AdminReply, AdminRequest};
    /// # fn main() -> tagwire::Result<()> {
    /// let session = tagwire::Session::connect_local()?;
    /// let reply = session.admin(AdminRequest::Show { target: "/viewer3".into() })?;
    /// if let AdminReply::Show(shown) = reply {
    ///     println!("{shown:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn admin(&self, request: AdminRequest) -> Result<AdminReply> {
        let op = request.op();
        let text = self.admin_text(request.to_json())?;
        AdminReply::parse(op, &text).map_err(|e| Error::BadReply(e.to_string()))
    }
    /// The escape hatch: sends `request` as it is (JSON, `docs/admin.md`)
    /// and returns the reply as JSON, for a request this library has no
    /// type for (a newer daemon's) or to test the daemon's parser.
    /// Prefer [`Session::admin`].
    pub fn admin_json(&self, request: &serde_json::Value) -> Result<serde_json::Value> {
        let text = self.admin_text(request.to_string())?;
        serde_json::from_str(&text).map_err(|e| Error::BadReply(format!("admin reply: {e}")))
    }
    /// Sends an admin request body; the reply's JSON text.
    fn admin_text(&self, body: String) -> Result<String> {
        let ((), reply) = self
            .inner()
            .request("admin request", |e| ((), e.admin(body)))?;
        match reply? {
            Reply::Admin(text) => Ok(text),
            Reply::Err(code, message) => Err(Error::Refused { code, message }),
            Reply::Ok | Reply::Pulled(_) => Err(Error::BadReply("expected an admin reply".into())),
        }
    }
    /// One page of the listing after cursor `after`.
    pub(crate) fn list_page(&self, after: Option<String>, limit: Option<usize>) -> Result<Listing> {
        match self.admin(AdminRequest::List { after, limit })? {
            AdminReply::List(page) => Ok(*page),
            other => Err(unexpected(other)),
        }
    }
    /// Attaches filter `filter` (docs/filters.md) through `endpoint` at
    /// `level` (`tagwire admin filter add`); returns its id. Channel and
    /// session levels answer once every subscription concerned has it.
    pub fn filter_add(&self, endpoint: &str, level: FilterLevel, filter: &str) -> Result<u64> {
        self.add_filter(AdminRequest::FilterAdd {
            endpoint: endpoint.to_owned(),
            level,
            filter: Some(filter.to_owned()),
            map: None,
        })
    }
    /// Attaches mapping filter `map` to each channel of subscriber
    /// `endpoint` (replacing any other); returns its id.
    pub fn map_add(&self, endpoint: &str, map: &str) -> Result<u64> {
        self.add_filter(AdminRequest::FilterAdd {
            endpoint: endpoint.to_owned(),
            level: FilterLevel::Channel,
            filter: None,
            map: Some(map.to_owned()),
        })
    }
    fn add_filter(&self, request: AdminRequest) -> Result<u64> {
        match self.admin(request)? {
            AdminReply::FilterAdded(a) => Ok(a.id),
            other => Err(unexpected(other)),
        }
    }
    /// Removes filter `id` (from [`Session::filter_add`] or
    /// [`Session::filter_list`]).
    pub fn filter_remove(&self, id: u64) -> Result<()> {
        match self.admin(AdminRequest::FilterRemove { id })? {
            AdminReply::FilterRemoved(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    /// Sets how the session and channel levels of `endpoint`'s connection
    /// combine: `"and"` (the default) or `"or"`.
    pub fn filter_op(&self, endpoint: &str, interfilter: &str) -> Result<()> {
        let request = AdminRequest::FilterOp {
            endpoint: endpoint.to_owned(),
            interfilter: interfilter.to_owned(),
        };
        match self.admin(request)? {
            AdminReply::FilterOp(_) => Ok(()),
            other => Err(unexpected(other)),
        }
    }
    /// Changes QoS at run time (`tagwire admin qos`): on `target`
    /// (`["daemon"]`, `["connection:ID"]`, `["/subscriber"]`,
    /// `["/publisher", "/subscriber"]` or `["/tag/pattern"]`) sets each
    /// `(property, value)` of `set` and clears each property of `unset`,
    /// all or nothing.
    pub fn set_qos(
        &self,
        target: &[&str],
        set: &[(&str, &str)],
        unset: &[&str],
    ) -> Result<QosChanged> {
        let request = AdminRequest::Qos {
            target: target.iter().map(|t| (*t).to_owned()).collect(),
            set: set
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            unset: unset.iter().map(|u| (*u).to_owned()).collect(),
        };
        match self.admin(request)? {
            AdminReply::Qos(q) => Ok(q),
            other => Err(unexpected(other)),
        }
    }
    /// What `tagwire admin show TARGET` shows: an endpoint's channels with
    /// their effective QoS, a tag pattern's layer and pull buffer, `links`,
    /// `link:PEER` or `reservations`.
    pub fn show(&self, target: &str) -> Result<Show> {
        let request = AdminRequest::Show {
            target: target.to_owned(),
        };
        match self.admin(request)? {
            AdminReply::Show(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }
    /// Measures one round trip to the router (a `Ping` answered by `Pong`).
    pub fn ping(&self) -> Result<Duration> {
        let start = Instant::now();
        let ((), reply) = self.inner().request("ping", |e| ((), e.ping()))?;
        match reply? {
            Reply::Ok => Ok(start.elapsed()),
            _ => Err(Error::BadReply("expected a Pong".into())),
        }
    }
    /// Returns once the router has handled everything sent before on this
    /// connection (a round trip: one connection's frames are handled in
    /// order). A lost connection counts as handled: its endpoints and
    /// subscriptions are gone with it.
    pub(crate) fn sync(&self) -> Result<()> {
        match self.ping() {
            Ok(_) | Err(Error::Disconnected | Error::Closed | Error::NotReconnected { .. }) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// A reply of another kind than the request's (which
/// [`AdminReply::parse`] rules out).
fn unexpected(reply: AdminReply) -> Error {
    Error::BadReply(format!(
        "expected another reply than the one to {}",
        reply.op()
    ))
}
