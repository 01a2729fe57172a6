#!/usr/bin/env python3
"""Publish load on the two replicated brokers tern is compared with.

bench/cluster_bench.sh runs this against a three-node NATS JetStream
cluster (a stream of 3 replicas, file storage) and a three-node RabbitMQ
cluster (a quorum queue, publisher confirms), with the workload it runs on
tern: P producers, each with its own connection and one request in flight
at a time; a request is one message (as one /v1 produce or NSQ PUB) or
--inflight N messages written together and acknowledged together (as one
NSQ MPUB of N). It prints what tern-bench prints, so the script reads both
the same way:

    publish: N msgs acked in S s = R msgs/s, M MiB/s
    publish-ack latency (ms, per request): p50 A  p99 B  p99.9 C  max D
    errors: E

Standard library only: asyncio, with a small client for each protocol.

- NATS: the text protocol (CONNECT, SUB, PUB with a reply inbox, MSG,
  PING/PONG). JetStream answers a publish to a stream's subject on the
  reply inbox with {"stream":..,"seq":..} once the stream holds it on a
  quorum of its replicas, or {"error":..}.
- AMQP 0-9-1: the handshake (PLAIN guest/guest, which RabbitMQ allows
  from loopback), one channel in confirm mode, basic.publish with
  delivery mode 2, and basic.ack / basic.nack (multiple or not) for the
  confirms.

    peer_bench.py nats-setup --addr 127.0.0.1:P --stream S --subjects S.> --replicas 3
    peer_bench.py nats --addr 127.0.0.1:P --subject S.x [--producers --inflight --size --duration]
    peer_bench.py amqp-setup --addr 127.0.0.1:P --queue Q
    peer_bench.py amqp --addr 127.0.0.1:P --queue Q [same options]
"""
import argparse
import asyncio
import json
import os
import struct
import sys
import time


# ---------------------------------------------------------------- results


class Tally:
    def __init__(self):
        self.acked = 0
        self.errors = 0
        self.lat_ns = []
        self.first_error = None

    def error(self, why):
        self.errors += 1
        if self.first_error is None:
            self.first_error = why


def pct(sorted_ns, q):
    if not sorted_ns:
        return 0.0
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1e6


def report(t, secs, size, producers, inflight, what):
    lat = sorted(t.lat_ns)
    rate = t.acked / secs if secs > 0 else 0.0
    print(f"peer-bench: {what}: {producers} producers ({inflight} per request), {size}-byte messages")
    print(f"publish: {t.acked} msgs acked in {secs:.2f} s = {rate:.0f} msgs/s, "
          f"{rate * size / 1048576:.1f} MiB/s")
    print(f"publish-ack latency (ms, per request): p50 {pct(lat, 0.5):.3f}  p99 {pct(lat, 0.99):.3f}"
          f"  p99.9 {pct(lat, 0.999):.3f}  max {(lat[-1] / 1e6 if lat else 0):.3f}")
    print(f"errors: {t.errors}" + (f" (first: {t.first_error})" if t.first_error else ""))


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host or "127.0.0.1", int(port)


# ------------------------------------------------------------------- NATS


class Nats:
    """One NATS connection: requests with a reply inbox, answered in order
    of arrival by reply subject."""

    def __init__(self):
        self.reader = self.writer = None
        self.inbox = "_INBOX.%s" % os.urandom(8).hex()
        self.waiting = {}  # reply subject -> future
        self.next_id = 0
        self.task = None

    async def connect(self, addr):
        host, port = split_addr(addr)
        self.reader, self.writer = await asyncio.open_connection(host, port)
        line = await self.reader.readline()
        if not line.startswith(b"INFO "):
            raise RuntimeError(f"nats: expected INFO, got {line[:80]!r}")
        self.writer.write(b'CONNECT {"verbose":false,"pedantic":false,"echo":false,"headers":false}\r\n'
                          + f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())
        while True:
            line = await self.reader.readline()
            if not line:
                raise RuntimeError("nats: connection closed during CONNECT")
            if line.startswith(b"PONG"):
                break
            if line.startswith(b"-ERR"):
                raise RuntimeError(f"nats: {line.decode().strip()}")
        self.task = asyncio.ensure_future(self.read_loop())

    async def read_loop(self):
        r = self.reader
        try:
            while True:
                line = await r.readline()
                if not line:
                    break
                if line.startswith(b"MSG "):
                    parts = line.split()
                    n = int(parts[-1])
                    body = await r.readexactly(n + 2)
                    fut = self.waiting.pop(parts[1].decode(), None)
                    if fut is not None and not fut.done():
                        fut.set_result(body[:n])
                elif line.startswith(b"PING"):
                    self.writer.write(b"PONG\r\n")
                elif line.startswith(b"-ERR"):
                    self.fail(RuntimeError(f"nats: {line.decode().strip()}"))
        except (ConnectionError, asyncio.IncompleteReadError) as e:
            self.fail(e)
            return
        self.fail(RuntimeError("nats: connection closed"))

    def fail(self, exc):
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(exc)
        self.waiting.clear()

    def send(self, subject, bodies):
        """Publishes each body with its own reply subject; returns their
        futures."""
        out = []
        chunks = []
        loop = asyncio.get_running_loop()
        for body in bodies:
            self.next_id += 1
            reply = f"{self.inbox}.{self.next_id}"
            fut = loop.create_future()
            self.waiting[reply] = fut
            out.append(fut)
            chunks.append(f"PUB {subject} {reply} {len(body)}\r\n".encode())
            chunks.append(body)
            chunks.append(b"\r\n")
        self.writer.write(b"".join(chunks))
        return out

    async def request(self, subject, body, timeout):
        (fut,) = self.send(subject, [body])
        return json.loads(await asyncio.wait_for(fut, timeout))

    def close(self):
        if self.task:
            self.task.cancel()
        if self.writer:
            self.writer.close()


async def nats_setup(a):
    """Creates the stream (again until JetStream has its metadata leader),
    then waits until it has a leader and all its replicas are current."""
    deadline = time.monotonic() + a.timeout
    cfg = {"name": a.stream, "subjects": [a.subjects], "storage": "file",
           "num_replicas": a.replicas, "retention": "limits", "discard": "old"}
    last = None
    while time.monotonic() < deadline:
        c = Nats()
        try:
            await c.connect(a.addr)
            ans = await c.request(f"$JS.API.STREAM.CREATE.{a.stream}", json.dumps(cfg).encode(), 5)
            err = ans.get("error")
            if err is None or "already in use" in err.get("description", ""):
                info = await c.request(f"$JS.API.STREAM.INFO.{a.stream}", b"", 5)
                cl = info.get("cluster", {})
                replicas = cl.get("replicas", [])
                if cl.get("leader") and len(replicas) == a.replicas - 1 and \
                        all(r.get("current") for r in replicas):
                    print(f"stream {a.stream}: leader {cl['leader']}, replicas "
                          f"{[r['name'] for r in replicas]}, storage {info['config']['storage']}")
                    return 0
                last = f"stream info: {json.dumps(cl)}"
            else:
                last = f"stream create: {err}"
        except (OSError, RuntimeError, asyncio.TimeoutError, ValueError) as e:
            last = repr(e)
        finally:
            c.close()
        await asyncio.sleep(0.5)
    print(f"nats-setup: the stream is not ready after {a.timeout} s: {last}", file=sys.stderr)
    return 1


async def nats_producer(a, t, stop_at):
    c = Nats()
    try:
        await c.connect(a.addr)
    except (OSError, RuntimeError) as e:
        t.error(f"connect: {e}")
        return
    body = b"x" * a.size
    try:
        while time.monotonic() < stop_at:
            start = time.monotonic_ns()
            futs = c.send(a.subject, [body] * a.inflight)
            ok = 0
            for fut in futs:
                try:
                    ans = await asyncio.wait_for(fut, 30)
                except (asyncio.TimeoutError, OSError, RuntimeError) as e:
                    t.error(repr(e))
                    return
                if ans.startswith(b'{"stream"'):
                    ok += 1
                else:
                    t.error(ans[:120].decode(errors="replace"))
            t.lat_ns.append(time.monotonic_ns() - start)
            t.acked += ok
    finally:
        c.close()


# ------------------------------------------------------------------- AMQP

FRAME_END = b"\xce"


def shortstr(s):
    b = s.encode()
    return struct.pack("B", len(b)) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def table(d):
    out = b"".join(shortstr(k) + b"S" + longstr(v.encode()) for k, v in d.items())
    return longstr(out)


def frame(ftype, channel, payload):
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + FRAME_END


def method(channel, cls, mth, args=b""):
    return frame(1, channel, struct.pack(">HH", cls, mth) + args)


class Amqp:
    """One AMQP 0-9-1 connection with channel 1 in confirm mode."""

    def __init__(self):
        self.reader = self.writer = None
        self.frame_max = 131072
        self.next_tag = 1
        self.acked_through = 0  # every tag up to this one is settled
        self.settled = {}       # tag -> True (ack) / False (nack), above acked_through
        self.waiters = []       # (tag, future)
        self.task = None
        self.closed = None

    async def read_frame(self):
        head = await self.reader.readexactly(7)
        ftype, channel, size = struct.unpack(">BHI", head)
        payload = await self.reader.readexactly(size + 1)
        if payload[-1:] != FRAME_END:
            raise RuntimeError("amqp: bad frame end")
        return ftype, channel, payload[:-1]

    async def expect(self, cls, mth):
        while True:
            ftype, _, p = await self.read_frame()
            if ftype != 1:
                continue
            c, m = struct.unpack(">HH", p[:4])
            if (c, m) == (cls, mth):
                return p[4:]
            if (c, m) in ((10, 50), (20, 40)):
                code, = struct.unpack(">H", p[4:6])
                text = p[7:7 + p[6]].decode(errors="replace")
                raise RuntimeError(f"amqp: closed by the server: {code} {text}")
            raise RuntimeError(f"amqp: expected {cls}.{mth}, got {c}.{m}")

    async def connect(self, addr):
        host, port = split_addr(addr)
        self.reader, self.writer = await asyncio.open_connection(host, port)
        self.writer.write(b"AMQP\x00\x00\x09\x01")
        await self.expect(10, 10)  # connection.start
        self.writer.write(method(0, 10, 11, longstr(b"") + shortstr("PLAIN")
                                 + longstr(b"\0guest\0guest") + shortstr("en_US")))
        tune = await self.expect(10, 30)
        chmax, fmax, _ = struct.unpack(">HIH", tune[:8])
        if fmax:
            self.frame_max = min(self.frame_max, fmax)
        self.writer.write(method(0, 10, 31, struct.pack(">HIH", chmax or 1, self.frame_max, 0)))
        self.writer.write(method(0, 10, 40, shortstr("/") + shortstr("") + b"\0"))
        await self.expect(10, 41)
        self.writer.write(method(1, 20, 10, shortstr("")))
        await self.expect(20, 11)
        self.writer.write(method(1, 85, 10, b"\0"))  # confirm.select
        await self.expect(85, 11)

    async def declare_quorum(self, queue):
        args = table({"x-queue-type": "quorum"})
        self.writer.write(method(1, 50, 10, struct.pack(">H", 0) + shortstr(queue) + b"\x02" + args))
        ok = await self.expect(50, 11)
        return ok

    def start(self):
        self.task = asyncio.ensure_future(self.read_loop())

    async def read_loop(self):
        try:
            while True:
                ftype, _, p = await self.read_frame()
                if ftype != 1:
                    continue
                c, m = struct.unpack(">HH", p[:4])
                if (c, m) in ((60, 80), (60, 120)):  # basic.ack, basic.nack
                    tag, bits = struct.unpack(">QB", p[4:13])
                    ok = (c, m) == (60, 80)
                    if bits & 1:
                        for t in range(self.acked_through + 1, tag + 1):
                            self.settled.setdefault(t, ok)
                    else:
                        self.settled[tag] = ok
                    while self.acked_through + 1 in self.settled:
                        self.acked_through += 1
                    self.wake()
                elif (c, m) in ((10, 50), (20, 40)):
                    code, = struct.unpack(">H", p[4:6])
                    raise RuntimeError(f"amqp: closed by the server: {code} "
                                       f"{p[7:7 + p[6]].decode(errors='replace')}")
        except (ConnectionError, asyncio.IncompleteReadError, RuntimeError) as e:
            self.closed = e
            self.wake()

    def wake(self):
        keep = []
        for tag, fut in self.waiters:
            if fut.done():
                continue
            if self.closed is not None:
                fut.set_exception(self.closed)
            elif self.acked_through >= tag:
                fut.set_result(None)
            else:
                keep.append((tag, fut))
        self.waiters = keep

    def publish(self, queue, bodies):
        """Publishes the bodies; returns (first tag, last tag, future done
        once all are settled)."""
        chunks = []
        first = self.next_tag
        pub = method(1, 60, 40, struct.pack(">H", 0) + shortstr("") + shortstr(queue) + b"\0")
        for body in bodies:
            chunks.append(pub)
            # content header: class 60, weight 0, body size, flags (delivery-mode), mode 2
            chunks.append(frame(2, 1, struct.pack(">HHQHB", 60, 0, len(body), 0x1000, 2)))
            for i in range(0, len(body), self.frame_max - 8):
                chunks.append(frame(3, 1, body[i:i + self.frame_max - 8]))
            self.next_tag += 1
        last = self.next_tag - 1
        self.writer.write(b"".join(chunks))
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((last, fut))
        self.wake()
        return first, last, fut

    def take(self, first, last):
        """How many of the tags first..last were acked (not nacked)."""
        n = 0
        for t in range(first, last + 1):
            if self.settled.pop(t, False):
                n += 1
        return n

    def close(self):
        if self.task:
            self.task.cancel()
        if self.writer:
            self.writer.close()


async def amqp_setup(a):
    deadline = time.monotonic() + a.timeout
    last = None
    while time.monotonic() < deadline:
        c = Amqp()
        try:
            await c.connect(a.addr)
            await c.declare_quorum(a.queue)
            print(f"queue {a.queue}: declared, x-queue-type quorum, durable")
            return 0
        except (OSError, RuntimeError, asyncio.IncompleteReadError) as e:
            last = repr(e)
        finally:
            c.close()
        await asyncio.sleep(0.5)
    print(f"amqp-setup: cannot declare {a.queue} after {a.timeout} s: {last}", file=sys.stderr)
    return 1


async def amqp_producer(a, t, stop_at):
    c = Amqp()
    try:
        await c.connect(a.addr)
    except (OSError, RuntimeError, asyncio.IncompleteReadError) as e:
        t.error(f"connect: {e}")
        return
    c.start()
    body = b"x" * a.size
    try:
        while time.monotonic() < stop_at:
            start = time.monotonic_ns()
            first, last, fut = c.publish(a.queue, [body] * a.inflight)
            try:
                await asyncio.wait_for(fut, 30)
            except (asyncio.TimeoutError, OSError, RuntimeError) as e:
                t.error(repr(e))
                return
            ok = c.take(first, last)
            if ok < a.inflight:
                t.error(f"{a.inflight - ok} nacked")
            t.lat_ns.append(time.monotonic_ns() - start)
            t.acked += ok
    finally:
        c.close()


# ------------------------------------------------------------------- main


async def run_load(a, producer, what):
    t = Tally()
    start = time.monotonic()
    stop_at = start + a.duration
    await asyncio.gather(*(producer(a, t, stop_at) for _ in range(a.producers)))
    report(t, time.monotonic() - start, a.size, a.producers, a.inflight, what)
    return 0 if t.acked > 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("nats-setup", "nats", "amqp-setup", "amqp"):
        s = sub.add_parser(name)
        s.add_argument("--addr", required=True, help="host:port")
        if name == "nats-setup":
            s.add_argument("--stream", required=True)
            s.add_argument("--subjects", required=True)
            s.add_argument("--replicas", type=int, default=3)
        if name == "nats":
            s.add_argument("--subject", required=True)
        if name.startswith("amqp"):
            s.add_argument("--queue", required=True)
        if name.endswith("setup"):
            s.add_argument("--timeout", type=float, default=60)
        else:
            s.add_argument("--producers", type=int, default=64)
            s.add_argument("--inflight", type=int, default=1,
                           help="messages per request (written together, acknowledged together)")
            s.add_argument("--size", type=int, default=200)
            s.add_argument("--duration", type=float, default=5, help="seconds")
    a = p.parse_args()
    if a.cmd == "nats-setup":
        return asyncio.run(nats_setup(a))
    if a.cmd == "amqp-setup":
        return asyncio.run(amqp_setup(a))
    if a.cmd == "nats":
        return asyncio.run(run_load(a, nats_producer, f"NATS JetStream {a.subject} at {a.addr}"))
    return asyncio.run(run_load(a, amqp_producer, f"RabbitMQ queue {a.queue} at {a.addr}"))


if __name__ == "__main__":
    sys.exit(main())
