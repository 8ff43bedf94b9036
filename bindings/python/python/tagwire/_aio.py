"""asyncio glue for ``Subscriber``: ``async for`` and ``await recv_async()``.

No thread waits: the subscriber's queue wakes a waker that writes a byte to a
socket pair, and the running loop watches the other end with
``loop.add_reader``. Cancelling the awaiting task loses no sample (a sample
is only taken from the queue when it is returned).
"""

from __future__ import annotations

import asyncio

from ._errors import SessionClosed


async def recv_sample(sub):
    """The next sample of ``sub``; raises ``SessionClosed`` once it is closed."""
    loop = asyncio.get_running_loop()
    while True:
        sample = sub._poll()
        if sample is not None:
            return sample
        fd = sub._wake_fd()
        ready = loop.create_future()

        def wake(fut=ready):
            if not fut.done():
                fut.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


async def anext_sample(sub):
    """``__anext__``: the next sample, ``StopAsyncIteration`` at the end."""
    try:
        return await recv_sample(sub)
    except SessionClosed:
        raise StopAsyncIteration from None
