//! Size limits on input files and models. Anything above a limit is refused
//! with [`crate::PlaceError::FileTooLarge`] or
//! [`crate::PlaceError::LimitExceeded`]; nothing is truncated silently.

/// Largest topology file read (16 MiB). Larger files are refused before
/// they are read.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Most nodes in a topology.
pub const MAX_NODES: usize = 100_000;
/// Most links in a topology.
pub const MAX_LINKS: usize = 1_000_000;
/// Most tags in a topology.
pub const MAX_TAGS: usize = 10_000;
/// Most subscribers over all tags.
pub const MAX_SUBSCRIBERS: usize = 100_000;
/// Most (unit, node) evaluations one problem may need: units × nodes.
/// Bounds the precomputation time and the candidate tables.
pub const MAX_EVALUATIONS: u64 = 50_000_000;
/// Most shortest-path-tree entries: (distinct publisher and subscriber
/// nodes) × nodes. Bounds memory of the route tables.
pub const MAX_TREE_ENTRIES: u64 = 50_000_000;
/// Default limit on search nodes the exhaustive search may visit before it
/// gives up and suggests `--mip`.
pub const DEFAULT_EXHAUSTIVE_VISITS: u64 = 20_000_000;
/// Rows printed per unit by `--explain` on big topologies; the rest are
/// summarised in one line.
pub const MAX_EXPLAIN_ROWS: usize = 64;
/// Most candidate routes per leg (publisher → proxy or proxy →
/// subscriber): the default route, further (hops, latency) Pareto routes
/// and other fewest-hop routes, in that order (see `docs/placement.md`).
pub const MAX_ROUTES_PER_LEG: usize = 4;
/// Most (hops, latency) Pareto routes besides the default one per leg.
pub const MAX_PARETO_ROUTES: usize = 2;
/// How many hops beyond the graph's largest fewest-hop distance the
/// (hops, latency) frontier is searched.
pub const MAX_EXTRA_HOPS: u32 = 32;
/// Most route combinations (one route per leg) per placement unit and
/// proxy node: all of them when there are this few, otherwise the default
/// combination and then single-leg deviations.
pub const MAX_ROUTE_COMBOS: usize = 16;
/// The route-combination cap of the second build, made when no placement
/// among the first build's candidates fits the capacities and some
/// (unit, node) pair had more than [`MAX_ROUTE_COMBOS`] combinations: every
/// combination up to this many (4⁶: six legs of four routes) is a candidate.
/// Beyond it the answer says the search was incomplete instead of "no
/// placement fits".
pub const MAX_ROUTE_COMBOS_RETRY: usize = 4096;
/// Most candidates one problem may have (all units): bounds the memory of
/// the second build. Above it the build fails with
/// [`crate::PlaceError::LimitExceeded`].
pub const MAX_CANDIDATES: usize = 2_000_000;
