"""A Python subscriber: prints every event on a tag pattern.

Run (with tagwired running, after `pip install ./bindings/python`):
    python bindings/python/examples/subscriber.py '/demo/**'
then, in another terminal, `tagwire pub /demo/x hi`. It prints
    /demo/x seq=1 b'hi' {}
and runs until Ctrl-C. A URL as second argument picks the daemon
(default: the local one, its Unix socket if present).
"""

import sys

import tagwire

pattern = sys.argv[1] if len(sys.argv) > 1 else "/**"
if len(sys.argv) > 2:
    session = tagwire.Session.connect(sys.argv[2])
else:
    session = tagwire.Session.connect_local()
sub = session.subscribe(pattern)
print(f"subscribed to {pattern}; Ctrl-C to stop", flush=True)
try:
    for sample in sub:
        print(sample.tag, f"seq={sample.seq}", sample.payload, sample.fields, flush=True)
except KeyboardInterrupt:
    pass
