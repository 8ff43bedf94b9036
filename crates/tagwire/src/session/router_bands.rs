//! The router's bands, as a listing gave them (see `bands`).

/// The router's bands as its listing gives them.
pub(super) struct RouterBands {
    pub(super) lanes: Vec<tagwire_router::LaneEntry>,
    pub(super) default_band: String,
}
