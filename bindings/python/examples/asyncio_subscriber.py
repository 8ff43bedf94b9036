"""An asyncio subscriber: `async for` over a tagwire subscription.

Run (with tagwired running, after `pip install ./bindings/python`):
    python bindings/python/examples/asyncio_subscriber.py '/demo/**'
It prints each event's tag and payload as it comes, without blocking the
event loop (a ticker task keeps running meanwhile).
"""

import asyncio
import sys

import tagwire


async def main(pattern: str) -> None:
    session = tagwire.Session.connect_local()

    async def ticker():
        while True:
            await asyncio.sleep(5)
            print("(still waiting)", flush=True)

    tick = asyncio.create_task(ticker())
    async for sample in session.subscribe(pattern):
        print(sample.tag, sample.payload, flush=True)
    tick.cancel()


asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "/**"))
