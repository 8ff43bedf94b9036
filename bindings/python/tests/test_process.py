"""Whole Python processes: the example subscriber as a user runs it (prints
what is published, stops on Ctrl-C), and an interpreter that exits with a
callback subscription still open."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import tagwire

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
WAIT = 20.0


def test_example_subscriber_prints_events_and_stops_on_ctrl_c(daemon):
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "subscriber.py"), "/demo/**", daemon.unix_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("subscribed to /demo/**")
        s = tagwire.Session.connect(daemon.unix_url)
        pub = s.declare_publisher("/py/example/pub")
        # The subscription is made before the line above is printed.
        pub.publish("/demo/x", b"hi")
        line = proc.stdout.readline()
        assert line == "/demo/x seq=1 b'hi' {}\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_interpreter_exits_with_a_callback_subscription_open(daemon):
    script = f"""
import tagwire, threading
s = tagwire.Session.connect({daemon.unix_url!r})
got = threading.Event()
cb = s.subscribe("/py/exit", lambda sample: got.set())
s.declare_publisher("/py/exit/pub").publish("/py/exit", b"x")
assert got.wait(10)
print("ok", flush=True)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "ok\n"
