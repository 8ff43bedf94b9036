"""Type stubs of the tagwire Python bindings (see docs/python.md)."""

from __future__ import annotations

import os

from collections.abc import Callable, Iterator, AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, TypedDict, overload

from ._errors import (
    BadReply as BadReply,
    BadRequest as BadRequest,
    ConnectError as ConnectError,
    ConnectTimeout as ConnectTimeout,
    DuplicateEndpoint as DuplicateEndpoint,
    Gone as Gone,
    InvalidArgument as InvalidArgument,
    InvalidFilter as InvalidFilter,
    InvalidTagError as InvalidTagError,
    LimitReached as LimitReached,
    NoHistory as NoHistory,
    NotConnected as NotConnected,
    PermissionDenied as PermissionDenied,
    RefusedError as RefusedError,
    RequestTimeout as RequestTimeout,
    SessionClosed as SessionClosed,
    TagwireError as TagwireError,
    Unauthenticated as Unauthenticated,
    UnknownEndpoint as UnknownEndpoint,
    UnknownNode as UnknownNode,
)

FieldValue = int | float | bool | str | bytes
"""A filterable field's value (64-bit int, double, bool, UTF-8 str, bytes)."""

Payload = bytes | bytearray | memoryview | str
"""What can be published (anything with the buffer protocol; str as UTF-8)."""

ShmMode = Literal["auto", "require", "off"]
DiscardPolicy = Literal[
    "drop_oldest", "fifo", "drop_newest", "lifo", "priority", "deadline", "reject", "reject_new"
]

class LaneEntry(TypedDict, total=False):
    band: str
    sched: str
    sched_applied: str
    fell_back: str | None
    dscp: int
    tcp: str | None
    unix: str | None

class ConnectionInfo(TypedDict, total=False):
    id: int
    name: str
    peer: str
    identity: str
    band: str

class EndpointEntry(TypedDict, total=False):
    name: str
    kind: str
    connection: int

class SubscriptionInfo(TypedDict, total=False):
    endpoint: str
    pattern: str
    queue_depth: int
    queue_bound: int
    discard: str
    dropped: int
    delivered: int
    expired: int
    too_large: int
    scaled_out: int

class TagInfo(TypedDict, total=False):
    tag: str
    published: int
    last_publisher: str

class Listing(TypedDict, total=False):
    """The reply of ``Session.list()`` (``tagwire list``); keys as in docs/admin.md."""

    server: str
    auth: str
    lanes: list[LaneEntry]
    default_band: str
    connections: list[ConnectionInfo]
    endpoints: list[EndpointEntry]
    subscriptions: list[SubscriptionInfo]
    tags: list[TagInfo]
    untracked_publishes: int
    expired: int
    filtered_at_source: int
    deferred: int
    memory: dict[str, int]
    federation: dict[str, Any]
    history: dict[str, Any]
    shm: dict[str, int]

class QosReply(TypedDict):
    """The reply of ``Session.admin_qos``."""

    level: str
    target: list[str]
    channels: int
    dropped: int

class ShmStats(TypedDict):
    published: int
    published_socket: int
    in_place: int
    expired: int
    unreadable: int
    unsent: int

class Sample:
    """A received event. ``memoryview(sample)`` reads the payload in place."""

    @property
    def tag(self) -> str: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def payload_view(self) -> memoryview: ...
    @property
    def fields(self) -> dict[str, FieldValue]: ...
    @property
    def publisher(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def source_time_ns(self) -> int: ...
    @property
    def priority(self) -> int: ...
    @property
    def virtual_time(self) -> int | None: ...
    @property
    def start_time_ns(self) -> int | None: ...
    @property
    def timeout_ns(self) -> int | None: ...
    @property
    def stop_time_ns(self) -> int | None: ...
    @property
    def type_name(self) -> str | None: ...
    @property
    def event_name(self) -> str | None: ...
    @property
    def is_in_place(self) -> bool: ...
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

class EventBuilder:
    """An event being prepared by ``Publisher.event``; ``.send()`` publishes it."""

    def field(self, name: str, value: FieldValue) -> EventBuilder: ...
    def priority(self, p: int) -> EventBuilder: ...
    def timeout(self, seconds: float) -> EventBuilder: ...
    def stop_time(self, unix_seconds: float) -> EventBuilder: ...
    def start_time(self, unix_seconds: float) -> EventBuilder: ...
    def type_name(self, name: str) -> EventBuilder: ...
    def event_name(self, name: str) -> EventBuilder: ...
    def virtual_time(self, vt: int) -> EventBuilder: ...
    def source_time_ns(self, ns: int) -> EventBuilder: ...
    def send(self) -> None: ...

class Publisher:
    """A declared publisher endpoint."""

    @property
    def name(self) -> str: ...
    @property
    def uses_shm(self) -> bool: ...
    def set_express(self, express: bool) -> None: ...
    def publish(
        self,
        tag: str,
        payload: Payload,
        *,
        fields: Mapping[str, FieldValue] | None = None,
        priority: int | None = None,
        timeout: float | None = None,
        stop_time: float | None = None,
        start_time: float | None = None,
        type_name: str | None = None,
        event_name: str | None = None,
        virtual_time: int | None = None,
        source_time_ns: int | None = None,
    ) -> None: ...
    def event(self, tag: str, payload: Payload) -> EventBuilder: ...
    def close(self) -> None: ...
    def __enter__(self) -> Publisher: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

class Subscriber:
    """A subscription whose samples queue for Python: iterate, ``recv()``, ``async for``."""

    @property
    def pattern(self) -> str: ...
    @property
    def dropped(self) -> int: ...
    @property
    def playout_stats(self) -> dict[str, int] | None: ...
    def recv(self, timeout: float | None = None) -> Sample | None: ...
    def try_recv(self) -> Sample | None: ...
    async def recv_async(self) -> Sample: ...
    def close(self) -> None: ...
    def __iter__(self) -> Iterator[Sample]: ...
    def __next__(self) -> Sample: ...
    def __aiter__(self) -> AsyncIterator[Sample]: ...
    async def __anext__(self) -> Sample: ...
    def __enter__(self) -> Subscriber: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

class CallbackSubscription:
    """A subscription that calls a function with each sample; keep a reference to it."""

    @property
    def pattern(self) -> str: ...
    def close(self) -> None: ...
    def __enter__(self) -> CallbackSubscription: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

class Pull:
    """What ``Session.pull`` reads from a tag's history."""

    @staticmethod
    def latest() -> Pull: ...
    @staticmethod
    def nth(n: int) -> Pull: ...
    @staticmethod
    def seq(seq: int) -> Pull: ...
    @staticmethod
    def seq_range(first: int, last: int) -> Pull: ...
    @staticmethod
    def time_range(from_ns: int, to_ns: int) -> Pull: ...
    @staticmethod
    def since(seconds: float) -> Pull: ...

class SessionBuilder:
    """Settings fixed when a session opens; every setter returns the builder."""

    def __init__(self) -> None: ...
    def connect_timeout(self, seconds: float) -> SessionBuilder: ...
    def reconnect_wait(self, seconds: float) -> SessionBuilder: ...
    def token(self, token: str) -> SessionBuilder: ...
    def band(self, band: str) -> SessionBuilder: ...
    def follow_priority(self, on: bool) -> SessionBuilder: ...
    def network_clock(self, on: bool) -> SessionBuilder: ...
    def shm(self, mode: ShmMode) -> SessionBuilder: ...
    def tls(
        self,
        ca: str | os.PathLike[str] | None = None,
        cert: str | os.PathLike[str] | None = None,
        key: str | os.PathLike[str] | None = None,
        server_name: str | None = None,
    ) -> SessionBuilder: ...
    def connect(self, url: str) -> Session: ...
    def connect_local(self) -> Session: ...

class EmbeddedRouter:
    """A router inside this process, shared by the sessions it opens."""

    @staticmethod
    def start() -> EmbeddedRouter: ...
    def session(self) -> Session: ...

class Session:
    """A connection to a tagwire router."""

    @staticmethod
    def connect(
        url: str,
        *,
        token: str | None = None,
        band: str | None = None,
        shm: ShmMode | None = None,
        connect_timeout: float | None = None,
        reconnect_wait: float | None = None,
    ) -> Session: ...
    @staticmethod
    def connect_local() -> Session: ...
    @staticmethod
    def builder() -> SessionBuilder: ...
    @staticmethod
    def embedded() -> Session: ...
    @property
    def name(self) -> str: ...
    @property
    def band(self) -> str | None: ...
    @property
    def is_same_host(self) -> bool: ...
    @property
    def is_connected(self) -> bool: ...
    @property
    def reconnects(self) -> int: ...
    def on_band(self, band: str) -> Session: ...
    def declare_publisher(self, name: str, *, shm: ShmMode | None = None) -> Publisher: ...
    @overload
    def subscribe(
        self,
        pattern: str,
        callback: None = None,
        *,
        endpoint: str | None = None,
        max_queue_length: int | None = None,
        local_queue_length: int | None = None,
        discard: DiscardPolicy | None = None,
        filter: str | None = None,
        map: str | None = None,
        qos: Mapping[str, str | int | float | bool] | None = None,
        playout: str | None = None,
    ) -> Subscriber: ...
    @overload
    def subscribe(
        self,
        pattern: str,
        callback: Callable[[Sample], object],
        *,
        endpoint: str | None = None,
        max_queue_length: int | None = None,
        local_queue_length: int | None = None,
        discard: DiscardPolicy | None = None,
        filter: str | None = None,
        map: str | None = None,
        qos: Mapping[str, str | int | float | bool] | None = None,
        playout: str | None = None,
    ) -> CallbackSubscription: ...
    def pull(
        self,
        tag: str,
        pull: Pull | None = None,
        *,
        publisher: str | None = None,
        at: str | None = None,
    ) -> list[Sample]: ...
    def list(self) -> Listing: ...
    def filter_list(self) -> list[dict[str, Any]]: ...
    def admin_qos(
        self,
        target: str | Sequence[str],
        set: Mapping[str, str | int | float | bool] | None = None,
        unset: Sequence[str] | None = None,
    ) -> QosReply: ...
    def admin_show(self, target: str) -> dict[str, Any]: ...
    def admin(self, request: Mapping[str, Any]) -> Any: ...
    def network_time(self) -> dict[str, Any]: ...
    def ping(self) -> float: ...
    def flush(self) -> None: ...
    def shm_stats(self) -> ShmStats: ...
    def close(self) -> None: ...
    def __enter__(self) -> Session: ...
    def __exit__(
        self,
        ty: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
