"""Publish/subscribe through a real tagwired: round trip, iterator, callback,
fields and header values, the zero-copy payload view, embedded mode."""

from __future__ import annotations

import threading
import time

import pytest

import tagwire

WAIT = 10.0  # bound on every wait for a sample (never reached when things work)


def test_round_trip_carries_tag_payload_fields_and_header(session):
    sub = session.subscribe("/py/rt/**")
    pub = session.declare_publisher("/py/rt/pub")
    before = time.time_ns()
    pub.publish(
        "/py/rt/x",
        b"hello",
        fields={"n": 3, "ratio": 0.5, "ok": True, "who": "cam", "raw": b"\x00\x01"},
        priority=200,
        type_name="Reading",
        event_name="temp",
        virtual_time=42,
    )
    s = sub.recv(timeout=WAIT)
    assert s is not None, "no sample within the bound"
    assert s.tag == "/py/rt/x"
    assert s.payload == b"hello"
    assert s.fields == {"n": 3, "ratio": 0.5, "ok": True, "who": "cam", "raw": b"\x00\x01"}
    assert type(s.fields["ok"]) is bool and type(s.fields["n"]) is int
    assert s.publisher == "/py/rt/pub"
    assert s.seq == 1
    assert s.priority == 200
    assert s.type_name == "Reading" and s.event_name == "temp"
    assert s.virtual_time == 42
    assert s.source_time_ns >= before


def test_publish_accepts_str_bytearray_and_memoryview(session):
    sub = session.subscribe("/py/kinds")
    pub = session.declare_publisher("/py/kinds/pub")
    pub.publish("/py/kinds", "héllo")
    pub.publish("/py/kinds", bytearray(b"ba"))
    pub.publish("/py/kinds", memoryview(b"xmvx")[1:3])
    got = [sub.recv(timeout=WAIT).payload for _ in range(3)]
    assert got == ["héllo".encode(), b"ba", b"mv"]


def test_event_builder_sets_fields_priority_and_timeout(session):
    sub = session.subscribe("/py/eb")
    pub = session.declare_publisher("/py/eb/pub")
    pub.event("/py/eb", b"e").field("severity", 4).priority(7).timeout(30.0).send()
    s = sub.recv(timeout=WAIT)
    assert s.fields == {"severity": 4}
    assert s.priority == 7
    assert s.timeout_ns == 30_000_000_000


def test_subscriber_is_an_iterator_in_publish_order(session):
    sub = session.subscribe("/py/it/*")
    pub = session.declare_publisher("/py/it/pub")
    for i in range(5):
        pub.publish(f"/py/it/{i}", str(i))
    got = []
    for s in sub:
        got.append((s.tag, s.payload, s.seq))
        if len(got) == 5:
            break
    assert got == [(f"/py/it/{i}", str(i).encode(), i + 1) for i in range(5)]


def test_iteration_ends_when_the_subscriber_is_closed(session):
    sub = session.subscribe("/py/end")
    ended = threading.Event()

    def consume():
        for _ in sub:
            pass
        ended.set()

    t = threading.Thread(target=consume)
    t.start()
    sub.close()
    t.join(WAIT)
    assert ended.is_set(), "the for loop did not end after close()"
    with pytest.raises(tagwire.SessionClosed):
        sub.recv(timeout=0.1)


def test_callback_receives_each_sample_on_its_own_thread(session):
    got = []
    done = threading.Event()

    def on_sample(s: tagwire.Sample) -> None:
        got.append((s.payload, threading.current_thread() is threading.main_thread()))
        if len(got) == 3:
            done.set()

    with session.subscribe("/py/cb", on_sample):
        pub = session.declare_publisher("/py/cb/pub")
        for p in (b"a", b"b", b"c"):
            pub.publish("/py/cb", p)
        assert done.wait(WAIT), f"callback got only {got}"
    assert got == [(b"a", False), (b"b", False), (b"c", False)]


def test_callback_exception_does_not_stop_later_callbacks(session, monkeypatch):
    got = []
    done = threading.Event()
    reported = []
    monkeypatch.setattr("sys.unraisablehook", lambda u: reported.append(u.exc_value))

    def on_sample(s):
        if s.payload == b"boom":
            raise RuntimeError("callback failed")
        got.append(s.payload)
        done.set()

    sub = session.subscribe("/py/cberr", on_sample)
    pub = session.declare_publisher("/py/cberr/pub")
    pub.publish("/py/cberr", b"boom")
    pub.publish("/py/cberr", b"after")
    assert done.wait(WAIT)
    sub.close()
    assert got == [b"after"]
    assert [str(e) for e in reported] == ["callback failed"]


def test_memoryview_reads_the_payload_in_place_read_only(session):
    sub = session.subscribe("/py/mv")
    pub = session.declare_publisher("/py/mv/pub")
    payload = bytes(range(256)) * 4
    pub.publish("/py/mv", payload)
    s = sub.recv(timeout=WAIT)
    view = memoryview(s)
    assert view.readonly
    assert view.nbytes == len(s) == len(payload)
    assert view == payload
    assert s.payload_view.tobytes() == payload
    with pytest.raises(TypeError):
        view[0] = 1
    del s  # the view keeps the sample (and its bytes) alive
    assert view[:4].tobytes() == payload[:4]


def test_shared_memory_payload_is_viewed_without_a_copy(daemon):
    s = tagwire.Session.connect(daemon.unix_url, shm="require")
    sub = s.subscribe("/py/shm")
    pub = s.declare_publisher("/py/shm/pub")
    assert pub.uses_shm
    payload = b"x" * 4096
    pub.publish("/py/shm", payload)
    got = sub.recv(timeout=WAIT)
    assert got.is_in_place, f"payload not read in place: {s.shm_stats()}"
    assert memoryview(got) == payload
    assert s.shm_stats()["in_place"] >= 1


def test_embedded_session_needs_no_daemon():
    s = tagwire.Session.embedded()
    sub = s.subscribe("/emb/**")
    s.declare_publisher("/emb/pub").publish("/emb/a", b"in-process")
    got = sub.recv(timeout=WAIT)
    assert (got.tag, got.payload) == ("/emb/a", b"in-process")


def test_embedded_router_serves_several_sessions():
    router = tagwire.EmbeddedRouter.start()
    a, b = router.session(), router.session()
    sub = b.subscribe("/emb2")
    a.declare_publisher("/emb2/pub").publish("/emb2", b"across")
    assert sub.recv(timeout=WAIT).payload == b"across"


def test_session_on_a_band_publishes_and_subscribes(daemon):
    s = tagwire.Session.builder().band("high").connect(daemon.unix_url)
    assert s.band == "high"
    sub = s.subscribe("/py/band")
    s.declare_publisher("/py/band/pub").publish("/py/band", b"hi")
    assert sub.recv(timeout=WAIT).payload == b"hi"


def test_recv_with_timeout_returns_none_when_nothing_comes(session):
    sub = session.subscribe("/py/quiet")
    assert sub.recv(timeout=0.05) is None
    assert sub.try_recv() is None
