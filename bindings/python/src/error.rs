//! Client errors as Python exceptions: each [`tagwire::Error`] becomes an
//! instance of a class of `tagwire._errors` (the `TagwireError` hierarchy,
//! written in Python so it carries docs and typed attributes), with the
//! server's stable numeric `code` and its name where the server refused.

use pyo3::prelude::*;
use tagwire::{Error, ErrorCode, PullError};

/// The exception class for a server refusal with `code`: one class per
/// code a Python program is likely to handle, `RefusedError` for the rest.
fn class_of_code(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::PermissionDenied => "PermissionDenied",
        ErrorCode::Unauthenticated => "Unauthenticated",
        ErrorCode::BadRequest => "BadRequest",
        ErrorCode::InvalidFilter => "InvalidFilter",
        ErrorCode::InvalidTag | ErrorCode::InvalidPattern => "InvalidTagError",
        ErrorCode::DuplicateEndpoint => "DuplicateEndpoint",
        ErrorCode::UnknownEndpoint => "UnknownEndpoint",
        ErrorCode::LimitReached | ErrorCode::QueueFull => "LimitReached",
        ErrorCode::NoHistory => "NoHistory",
        ErrorCode::UnknownNode => "UnknownNode",
        ErrorCode::Timeout => "RequestTimeout",
        _ => "RefusedError",
    }
}

/// `PermissionDenied` for `ErrorCode::PermissionDenied`, `Other(99)` for a
/// code this version does not know.
fn code_name(code: ErrorCode) -> String {
    format!("{code:?}")
}

/// Builds `tagwire._errors.<class>(message, code, code_name)` as a `PyErr`.
fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    code: Option<ErrorCode>,
    extra: &[(&str, u64)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = py.import("tagwire._errors")?.getattr(class)?;
        let value = cls.call1((message, code.map(ErrorCode::code), code.map(code_name)))?;
        for (name, v) in extra {
            value.setattr(*name, *v)?;
        }
        Ok(PyErr::from_value(value))
    };
    build().unwrap_or_else(|e| e)
}

/// Converts a client error into the matching Python exception.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::Refused { code, .. } => class_of_code(*code),
        Error::ConnectTimeout { .. } => "ConnectTimeout",
        Error::Connect { .. } | Error::Tls { .. } | Error::Handshake { .. } => "ConnectError",
        Error::NotReconnected { .. } | Error::Disconnected => "NotConnected",
        Error::Closed => "SessionClosed",
        Error::Timeout { .. } => "RequestTimeout",
        Error::BadUrl { .. } | Error::Encode(_) | Error::Tag(_) | Error::UnknownBand { .. } => {
            "InvalidArgument"
        }
        Error::BadReply(_) => "BadReply",
        _ => "TagwireError",
    };
    match e {
        Error::Refused { code, message } => raise(py, class, message, Some(code), &[]),
        other => raise(py, class, other.to_string(), None, &[]),
    }
}

/// Converts a pull error: `Gone` carries what the history still holds.
pub(crate) fn pull_to_py(py: Python<'_>, e: PullError) -> PyErr {
    match e {
        PullError::Gone {
            oldest,
            newest,
            held,
        } => {
            let message = e.to_string();
            raise(
                py,
                "Gone",
                message,
                None,
                &[
                    ("oldest", oldest),
                    ("newest", newest),
                    ("held", u64::from(held)),
                ],
            )
        }
        PullError::NoHistory { message } => {
            raise(py, "NoHistory", message, Some(ErrorCode::NoHistory), &[])
        }
        PullError::OutOfRange { message } => {
            raise(py, "BadRequest", message, Some(ErrorCode::BadRequest), &[])
        }
        PullError::UnknownNode { message } => raise(
            py,
            "UnknownNode",
            message,
            Some(ErrorCode::UnknownNode),
            &[],
        ),
        PullError::Session(e) => to_py(py, e),
        other => raise(py, "InvalidArgument", other.to_string(), None, &[]),
    }
}

/// An `InvalidArgument` naming what was wrong with an argument given from
/// Python (checked before anything is sent).
pub(crate) fn invalid(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise(py, "InvalidArgument", message.into(), None, &[])
}
