//! The crate's one error type: bad input files, invalid models, problems
//! with no answer, limits reached and solver failures.

use std::path::PathBuf;

use crate::report::num;

/// Everything that can go wrong while loading, validating or solving a
/// placement problem. Each variant names the offending node, link, tag or
/// subscriber and carries the bad value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlaceError {
    // ----- the input file (the user's fault) -----
    /// The file is larger than the size limit; it was not read.
    #[error("topology file {path} is {size} bytes, larger than the limit of {max} bytes; refusing to read it")]
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
        /// The limit in bytes.
        max: u64,
    },
    /// The file could not be opened or read.
    #[error("cannot read topology file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML/JSON or does not match the schema.
    #[error("malformed {format} topology: {message}")]
    Malformed {
        /// `"TOML"` or `"JSON"`.
        format: &'static str,
        /// The parser's message, with line and column where it has them.
        message: String,
    },

    // ----- the model (validation) -----
    /// The topology declares no nodes.
    #[error("the topology has no nodes")]
    NoNodes,
    /// The topology declares no tags, so there is nothing to place.
    #[error("the topology has no tags: nothing to place")]
    NoTags,
    /// A node, link, tag or subscriber has an empty name.
    #[error("a {kind} has an empty name")]
    EmptyName {
        /// `"node"`, `"link"`, `"tag"` or `"subscriber"`.
        kind: &'static str,
    },
    /// Two items of one kind share a name.
    #[error("duplicate {kind} name {name:?}")]
    Duplicate {
        /// `"node"`, `"link"`, `"tag"` or `"subscriber"`.
        kind: &'static str,
        /// The repeated name.
        name: String,
    },
    /// A link, publisher or subscriber names a node that is not declared.
    #[error("{referenced_by} names unknown node {node:?}")]
    UnknownNode {
        /// Who referred to it, e.g. `link "a"` or `subscriber "s1" of tag "/v"`.
        referenced_by: String,
        /// The unknown node name.
        node: String,
    },
    /// A link joins a node to itself.
    #[error("link {link:?} connects node {node:?} to itself")]
    SelfLoop {
        /// The link.
        link: String,
        /// The node.
        node: String,
    },
    /// A link's bandwidth capacity is zero, negative or not finite.
    #[error("link {link:?} has bandwidth {value}; a capacity must be a positive finite number of bytes/s (omit it for unlimited)")]
    NonPositiveBandwidth {
        /// The link.
        link: String,
        /// The bad value.
        value: f64,
    },
    /// A node's CPU capacity is zero, negative or not finite.
    #[error("node {node:?} has CPU capacity {value}; a capacity must be a positive finite number of CPU units/s (omit it for unlimited)")]
    NonPositiveCpu {
        /// The node.
        node: String,
        /// The bad value.
        value: f64,
    },
    /// Some other number is out of range (a period, a size, a delay bound…).
    #[error("{what} is {value}; it must be {requirement}")]
    InvalidValue {
        /// Which field of which item, e.g. `period_ms of tag "/v"`.
        what: String,
        /// The bad value.
        value: f64,
        /// What it must be.
        requirement: &'static str,
    },
    /// A tag has no subscribers, so no proxy to place.
    #[error("tag {tag:?} has no subscribers")]
    NoSubscribers {
        /// The tag.
        tag: String,
    },
    /// A subscriber asks for a shorter period than the publisher produces.
    #[error("subscriber {subscriber:?} of tag {tag:?} has period {period_ms} ms, shorter than the publisher's {publisher_period_ms} ms (a proxy can only scale down: T' >= T)")]
    SubscriberFasterThanPublisher {
        /// The tag.
        tag: String,
        /// The subscriber.
        subscriber: String,
        /// The subscriber's period T'.
        period_ms: f64,
        /// The publisher's period T.
        publisher_period_ms: f64,
    },
    /// A subscriber asks for larger messages than the publisher produces.
    #[error("subscriber {subscriber:?} of tag {tag:?} asks for {message_bytes}-byte messages, more than the publisher's {publisher_message_bytes} (a proxy can only scale down)")]
    SubscriberLargerThanPublisher {
        /// The tag.
        tag: String,
        /// The subscriber.
        subscriber: String,
        /// The subscriber's scaled message size.
        message_bytes: f64,
        /// The publisher's message size.
        publisher_message_bytes: f64,
    },
    /// The graph is not connected.
    #[error("the graph is disconnected: node {node:?} cannot be reached from node {from:?}")]
    DisconnectedGraph {
        /// A node that cannot be reached.
        node: String,
        /// The node the search started from (the first declared node).
        from: String,
    },
    /// A size limit of the model was reached (see [`crate::limits`]).
    #[error("{what}: {value} exceeds the limit of {max}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The count.
        value: u64,
        /// The limit.
        max: u64,
    },

    // ----- no answer -----
    /// No node at all meets one subscriber's delay bound.
    #[error("no placement satisfies subscriber {subscriber:?}'s delay bound of {} ms (tag {tag:?}); best is node {best_node:?} with delay {} ms", num(*.bound_ms), num(*.best_delay_ms))]
    DelayBoundUnsatisfiable {
        /// The tag.
        tag: String,
        /// The subscriber.
        subscriber: String,
        /// Its bound δʳ.
        bound_ms: f64,
        /// The node giving it the smallest delay.
        best_node: String,
        /// That smallest delay.
        best_delay_ms: f64,
    },
    /// Every subscriber of a shared proxy can be served alone, but no single
    /// node serves them all within their bounds.
    #[error("no single proxy node for tag {tag:?} satisfies every subscriber's delay bound; best is node {best_node:?}, where subscriber {subscriber:?} gets {} ms against a bound of {} ms", num(*.delay_ms), num(*.bound_ms))]
    NoCommonProxyNode {
        /// The tag.
        tag: String,
        /// The node with the smallest worst violation.
        best_node: String,
        /// The subscriber most violated there.
        subscriber: String,
        /// Its delay at that node.
        delay_ms: f64,
        /// Its bound.
        bound_ms: f64,
    },
    /// Delay bounds can be met, but not together with link/node capacities.
    #[error("no placement fits the link bandwidth and node CPU limits ({binding_rows} capacity constraint(s) can bind, first: {first})")]
    CapacityInfeasible {
        /// How many capacity constraints could bind.
        binding_rows: usize,
        /// The first of them, e.g. `link "a"`.
        first: String,
    },
    /// The exhaustive search visited its limit of search nodes.
    #[error("exhaustive search stopped after {visited} search nodes (limit {limit}; {combinations:.3e} combinations in all); use --mip")]
    ExhaustiveLimit {
        /// Search nodes visited.
        visited: u64,
        /// The limit.
        limit: u64,
        /// The number of complete combinations of delay-feasible candidates.
        combinations: f64,
    },
    /// The branch and bound found no placement that fits the capacities
    /// before its time limit (and could not prove that none exists).
    #[error("no placement found within the time limit of {seconds} s (lower bound on the objective: {}); raise --time-limit", num(*.lower_bound))]
    NoPlacementInTime {
        /// The limit in seconds.
        seconds: f64,
        /// The proven lower bound.
        lower_bound: f64,
    },
    /// The time limit ran out before any placement was found (while
    /// building the problem, or before a search found one).
    #[error("the time limit of {seconds} s ran out while {stage}, before any placement was found; raise --time-limit")]
    TimeLimit {
        /// The limit in seconds.
        seconds: f64,
        /// What was being done, e.g. "evaluating candidate proxy nodes".
        stage: &'static str,
    },
    /// No candidate placement fits the capacities, but the candidates did
    /// not include every route combination (even after the second build),
    /// so this is not a proof that no placement fits.
    #[error("no placement found that fits the link bandwidth and node CPU limits among the candidates tried: {pairs} (placement unit, proxy node) pair(s) have more than {max_combos} route combinations and only some were tried, so a placement may still exist ({binding_rows} capacity constraint(s) can bind, first: {first})")]
    IncompleteSearch {
        /// (unit, node) pairs whose combinations were truncated.
        pairs: usize,
        /// The cap of the build.
        max_combos: usize,
        /// How many capacity constraints could bind.
        binding_rows: usize,
        /// The first of them.
        first: String,
    },
    /// The MIP solver failed or returned something unusable.
    #[error("the MIP solver failed: {message}")]
    Solver {
        /// The solver's message.
        message: String,
    },
    /// The MIP algorithm was requested but no solver backend is compiled in.
    #[error("--mip needs a solver backend: build tagwire-place with the `highs` (default) or `microlp` feature")]
    MipUnavailable,

    // ----- the caller -----
    /// An objective string did not parse.
    #[error("invalid objective {value:?}: expected bandwidth, cpu or mixed:W with W a finite number >= 0")]
    InvalidObjective {
        /// The string given.
        value: String,
    },
    /// Writing the result failed.
    #[error("cannot write the result: {0}")]
    Output(#[source] std::io::Error),
}
