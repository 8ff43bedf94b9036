"""The exceptions tagwire raises: one hierarchy under ``TagwireError``.

A refusal by the router (``RefusedError`` and its subclasses) carries the
router's stable numeric ``code`` (docs/protocol.md, "Error codes") and its
name in ``code_name``; errors found on this side (a bad argument, no
connection) have ``code`` None. Several also derive from the built-in
exception a Python program would catch (``ConnectionError``,
``TimeoutError``, ``ValueError``).
"""

from __future__ import annotations


class TagwireError(Exception):
    """Any tagwire error.

    Attributes:
        message: what went wrong, naming the bad thing.
        code: the router's numeric error code, or None for a client-side error.
        code_name: the code's name (``"PermissionDenied"``), or None.
    """

    def __init__(self, message: str, code: int | None = None, code_name: str | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.code_name = code_name

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.message} (code {self.code} {self.code_name})"


class ConnectError(TagwireError, ConnectionError):
    """Could not connect: no daemon, TLS or handshake failure."""


class ConnectTimeout(ConnectError, TimeoutError):
    """No connection within the session's connect timeout."""


class NotConnected(TagwireError, ConnectionError):
    """The connection was lost and did not come back within ``reconnect_wait``."""


class SessionClosed(TagwireError):
    """The session, subscriber or publisher was closed."""


class RequestTimeout(TagwireError, TimeoutError):
    """No reply in time (or a request forwarded to another daemon timed out, code 23)."""


class InvalidArgument(TagwireError, ValueError):
    """An argument refused before anything was sent (URL, tag, field, band...)."""


class BadReply(TagwireError):
    """The router sent something that is not valid."""


class RefusedError(TagwireError):
    """The router refused a request; ``code`` says why."""


class PermissionDenied(RefusedError):
    """Code 20: the identity's ACL does not grant this (publish, subscribe, admin)."""


class Unauthenticated(RefusedError):
    """Code 19: no identity the router accepts (missing or wrong token)."""


class BadRequest(RefusedError, ValueError):
    """Code 14: an invalid request, e.g. an unknown QoS property or a bad value (named)."""


class InvalidFilter(RefusedError, ValueError):
    """Code 18: a filter that does not compile; the message gives the position."""


class InvalidTagError(RefusedError, ValueError):
    """Codes 6 and 7: an invalid tag or pattern."""


class DuplicateEndpoint(RefusedError):
    """Code 8: the endpoint name is already registered."""


class UnknownEndpoint(RefusedError):
    """Code 9: no such endpoint."""


class LimitReached(RefusedError):
    """Codes 12 and 13: a queue, table or per-connection limit was reached."""


class NoHistory(RefusedError):
    """Code 21: the tag keeps no history (its ``history`` QoS is 0)."""


class UnknownNode(RefusedError):
    """Code 22: a pull named a node no daemon of the network has."""


class Gone(TagwireError):
    """A pull asked for events no longer held.

    Attributes:
        oldest: the oldest sequence number still held.
        newest: the newest held.
        held: how many events are held (0: none yet).
    """

    oldest: int
    newest: int
    held: int
