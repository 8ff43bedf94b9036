"""Fixtures: a real tagwired started for each test that asks for one.

The daemon binary is ``$TAGWIRED``, else ``target/debug/tagwired`` of the
repository (``cargo build -p tagwire-cli`` makes it; .ci/run does). A test
that needs it fails, naming how to get it, when it is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 20.0


def tagwired_binary() -> Path:
    given = os.environ.get("TAGWIRED")
    path = Path(given) if given else REPO / "target" / "debug" / "tagwired"
    if not path.is_file():
        pytest.fail(
            f"tagwired not found at {path}: build it with `cargo build -p tagwire-cli` "
            "(or set TAGWIRED=/path/to/tagwired)",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Daemon:
    """A running tagwired: its Unix socket URL, its TCP URL and its directory."""

    unix_url: str
    tcp_url: str
    dir: Path
    process: subprocess.Popen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_daemon(config: str | None = None) -> Daemon:
    binary = tagwired_binary()
    d = Path(tempfile.mkdtemp(prefix="tagwire-py-"))
    os.chmod(d, 0o700)
    sock = d / "d.sock"
    port = free_port()
    args = [str(binary), "--unix", str(sock), "--tcp", f"127.0.0.1:{port}", "--log", "warn"]
    if config is not None:
        cfg = d / "tagwired.toml"
        cfg.write_text(config)
        args += ["--config", str(cfg)]
    env = dict(os.environ, XDG_RUNTIME_DIR=str(d))
    log = open(d / "tagwired.log", "wb")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"tagwired exited with {proc.returncode}: {(d / 'tagwired.log').read_text()}"
            )
        if sock.exists():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"tagwired did not start within {START_TIMEOUT} s")
        time.sleep(0.02)
    return Daemon(f"unix://{sock}", f"tcp://127.0.0.1:{port}", d, proc)


@pytest.fixture
def daemon():
    d = start_daemon()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)


@pytest.fixture
def session(daemon):
    import tagwire

    s = tagwire.Session.connect(daemon.unix_url)
    try:
        yield s
    finally:
        s.close()
