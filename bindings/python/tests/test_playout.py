"""The client-side time-differential service (`subscribe(..., playout=...)`):
events handed over in source-time order, its counters, and a bad value (refused before anything is sent)."""

from __future__ import annotations

import time

import pytest

import tagwire

WAIT = 10.0  # bound on every wait for a sample (never reached when things work)


def test_playout_hands_events_over_in_source_time_order(session):
    # A 1 s playout delay holds all three events (published at once, out of
    # source-time order) until their due times, so they leave sorted.
    sub = session.subscribe("/py/tds", playout="tds:1s")
    pub = session.declare_publisher("/py/tds/pub")
    base = time.time_ns()
    for offset_ms, payload in [(20, b"c"), (0, b"a"), (10, b"b")]:
        pub.publish("/py/tds", payload, source_time_ns=base + offset_ms * 1_000_000)
    got = []
    for _ in range(3):
        s = sub.recv(timeout=WAIT)
        assert s is not None, "no sample within the bound"
        got.append(s.payload)
    assert got == [b"a", b"b", b"c"]
    stats = sub.playout_stats
    assert stats is not None
    assert stats["released"] == 3
    assert stats["held"] == 0


def test_a_subscription_without_playout_has_no_playout_stats(session):
    sub = session.subscribe("/py/tds/none")
    assert sub.playout_stats is None


def test_a_bad_playout_value_raises_invalid_argument_naming_it(session):
    with pytest.raises(tagwire.InvalidArgument, match="playout"):
        session.subscribe("/py/tds/bad", playout="tds:soon")
