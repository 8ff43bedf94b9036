//! `tagwire.Pull`: what `session.pull(tag, pull)` reads from a tag's
//! history, built by the same names as Rust's `tagwire::Pull`.

use pyo3::prelude::*;

use crate::publisher::duration;

/// What to read from a tag's history: `Pull.latest()`, `Pull.nth(n)`,
/// `Pull.seq(s)`, `Pull.seq_range(first, last)`,
/// `Pull.time_range(from_ns, to_ns)` or `Pull.since(seconds)`.
#[pyclass(frozen, module = "tagwire", name = "Pull")]
pub struct PyPull {
    pub(crate) pull: tagwire::Pull,
}

#[pymethods]
impl PyPull {
    /// The most recent event.
    #[staticmethod]
    fn latest() -> Self {
        PyPull {
            pull: tagwire::Pull::Latest,
        }
    }

    /// The n-th most recent event, 0 being the latest.
    #[staticmethod]
    fn nth(n: u32) -> Self {
        PyPull {
            pull: tagwire::Pull::Nth(n),
        }
    }

    /// The event with this (publisher's) sequence number.
    #[staticmethod]
    fn seq(seq: u64) -> Self {
        PyPull {
            pull: tagwire::Pull::Seq(seq),
        }
    }

    /// Events with sequence numbers `first..=last`.
    #[staticmethod]
    fn seq_range(first: u64, last: u64) -> Self {
        PyPull {
            pull: tagwire::Pull::SeqRange { first, last },
        }
    }

    /// Events whose source time (ns since the Unix epoch) is in `from_ns..=to_ns`.
    #[staticmethod]
    fn time_range(from_ns: u64, to_ns: u64) -> Self {
        PyPull {
            pull: tagwire::Pull::TimeRange { from_ns, to_ns },
        }
    }

    /// Events of the last `seconds`.
    #[staticmethod]
    fn since(py: Python<'_>, seconds: f64) -> PyResult<Self> {
        Ok(PyPull {
            pull: tagwire::Pull::since(duration(py, "since", seconds)?),
        })
    }

    fn __repr__(&self) -> String {
        format!("Pull({:?})", self.pull)
    }
}
