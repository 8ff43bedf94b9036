"""``async for`` and ``await recv_async()`` on a Subscriber (asyncio)."""

from __future__ import annotations

import asyncio
import threading

import tagwire

WAIT = 10.0


def test_async_for_receives_samples_published_later(session):
    sub = session.subscribe("/py/aio/*")
    pub = session.declare_publisher("/py/aio/pub")

    async def main():
        async def produce():
            # Published while the consumer is already awaiting.
            await asyncio.sleep(0.05)
            for i in range(3):
                pub.publish(f"/py/aio/{i}", str(i))

        producer = asyncio.create_task(produce())
        got = []
        async for s in sub:
            got.append(s.payload)
            if len(got) == 3:
                break
        await producer
        return got

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == [b"0", b"1", b"2"]


def test_recv_async_wakes_on_a_publish_from_another_thread(session):
    sub = session.subscribe("/py/aio/thread")
    pub = session.declare_publisher("/py/aio/thread/pub")

    async def main():
        threading.Timer(0.05, pub.publish, args=("/py/aio/thread", b"t")).start()
        return await sub.recv_async()

    s = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert s.payload == b"t"


def test_async_waiting_lets_other_tasks_run(session):
    sub = session.subscribe("/py/aio/free")
    pub = session.declare_publisher("/py/aio/free/pub")

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(5):
                ticks += 1
                await asyncio.sleep(0)
            pub.publish("/py/aio/free", b"done")

        t = asyncio.create_task(ticker())
        s = await sub.recv_async()
        await t
        return ticks, s.payload

    # The other task ran to its end while recv_async waited: the loop was free.
    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == (5, b"done")


def test_cancelled_wait_loses_no_sample(session):
    sub = session.subscribe("/py/aio/cancel")
    pub = session.declare_publisher("/py/aio/cancel/pub")

    async def main():
        waiter = asyncio.create_task(sub.recv_async())
        await asyncio.sleep(0.02)
        waiter.cancel()
        try:
            await waiter
        except asyncio.CancelledError:
            pass
        pub.publish("/py/aio/cancel", b"kept")
        return await sub.recv_async()

    assert asyncio.run(asyncio.wait_for(main(), WAIT)).payload == b"kept"


def test_async_for_ends_when_the_subscriber_is_closed(session):
    sub = session.subscribe("/py/aio/close")

    async def main():
        async def closer():
            await asyncio.sleep(0.05)
            sub.close()

        c = asyncio.create_task(closer())
        n = 0
        async for _ in sub:
            n += 1
        await c
        return n

    assert asyncio.run(asyncio.wait_for(main(), WAIT)) == 0


def test_recv_async_raises_session_closed_after_close(session):
    sub = session.subscribe("/py/aio/closed")
    sub.close()

    async def main():
        try:
            await sub.recv_async()
        except tagwire.SessionClosed:
            return "closed"
        return "no error"

    assert asyncio.run(main()) == "closed"
