"""tagwire: Python bindings of the tagwire real-time publish/subscribe middleware.

The names are the Rust client library's (``tagwire::Session`` is
``tagwire.Session``), so docs/python.md and the Rust docs read alike::

    import tagwire

    session = tagwire.Session.connect("tcp://127.0.0.1:7700")
    sub = session.subscribe("/demo/**")
    pub = session.declare_publisher("/py/pub")
    pub.publish("/demo/x", b"hi", fields={"severity": 3}, priority=2)
    sample = next(sub)
    print(sample.tag, sample.payload, sample.fields)

Errors are ``TagwireError`` subclasses; a server refusal carries the stable
numeric ``code`` of docs/protocol.md (``PermissionDenied``: 20, ...).
"""

from ._errors import (
    BadReply,
    BadRequest,
    ConnectError,
    ConnectTimeout,
    DuplicateEndpoint,
    Gone,
    InvalidArgument,
    InvalidFilter,
    InvalidTagError,
    LimitReached,
    NoHistory,
    NotConnected,
    PermissionDenied,
    RefusedError,
    RequestTimeout,
    SessionClosed,
    TagwireError,
    Unauthenticated,
    UnknownEndpoint,
    UnknownNode,
)
from ._tagwire import (
    CallbackSubscription,
    EmbeddedRouter,
    EventBuilder,
    Publisher,
    Pull,
    Sample,
    Session,
    SessionBuilder,
    Subscriber,
)

__all__ = [
    "BadReply",
    "BadRequest",
    "CallbackSubscription",
    "ConnectError",
    "ConnectTimeout",
    "DuplicateEndpoint",
    "EmbeddedRouter",
    "EventBuilder",
    "Gone",
    "InvalidArgument",
    "InvalidFilter",
    "InvalidTagError",
    "LimitReached",
    "NoHistory",
    "NotConnected",
    "PermissionDenied",
    "Publisher",
    "Pull",
    "RefusedError",
    "RequestTimeout",
    "Sample",
    "Session",
    "SessionBuilder",
    "SessionClosed",
    "Subscriber",
    "TagwireError",
    "Unauthenticated",
    "UnknownEndpoint",
    "UnknownNode",
]
