#!/usr/bin/env python3
# Copyright (C) 2026 The ngx_http_idempotency_module authors
# SPDX-License-Identifier: BSD-2-Clause

"""A TCP relay that can delay what it forwards (scripts/faults/, stdlib).

    relay.py LISTEN_IP:PORT UPSTREAM_IP:PORT DELAY_MS JITTER_MS

Forwards every connection to the upstream at once.  SIGUSR1 turns the
delay on: each chunk read, in either direction, is written DELAY_MS ±
JITTER_MS later (in order: a chunk never overtakes the one before);
SIGUSR2 turns it off.  A close or reset on one side closes the other.
The kernel of the development machine has no netem; this stands in for
`tc qdisc ... netem delay` on the path to MariaDB.
"""

import asyncio
import random
import signal
import sys
import time

DELAY = [0.0]


def on(*_):
    DELAY[0] = 1.0


def off(*_):
    DELAY[0] = 0.0


async def pipe(reader, writer, base, jitter, rng):
    due = 0.0
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if DELAY[0]:
                due = max(due, time.monotonic()
                          + (base + rng.uniform(-jitter, jitter)) / 1000.0)
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:  # noqa: BLE001
            pass


async def main():
    lhost, lport = sys.argv[1].rsplit(":", 1)
    uhost, uport = sys.argv[2].rsplit(":", 1)
    base, jitter = float(sys.argv[3]), float(sys.argv[4])
    rng = random.Random(3)

    async def client(reader, writer):
        try:
            ureader, uwriter = await asyncio.wait_for(
                asyncio.open_connection(uhost, int(uport)), 5)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return
        await asyncio.gather(pipe(reader, uwriter, base, jitter, rng),
                             pipe(ureader, writer, base, jitter, rng))

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, on)
    loop.add_signal_handler(signal.SIGUSR2, off)
    server = await asyncio.start_server(client, lhost, int(lport),
                                        reuse_address=True)
    print("relay: %s -> %s" % (sys.argv[1], sys.argv[2]), flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
