"""A Python publisher: sends a few events with fields and a priority.

Run (with tagwired running, after `pip install ./bindings/python`):
    python bindings/python/examples/publisher.py /demo/x
Each event carries a `count` field; `subscriber.py '/demo/**'` prints them.
"""

import sys
import time

import tagwire

tag = sys.argv[1] if len(sys.argv) > 1 else "/demo/x"
session = tagwire.Session.connect_local()
with session.declare_publisher("/examples/py-publisher") as pub:
    for i in range(5):
        pub.publish(tag, f"hello {i}", fields={"count": i}, priority=128)
        print(f"published hello {i} on {tag}", flush=True)
        time.sleep(0.2)
    session.flush()
