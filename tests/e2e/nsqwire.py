"""A small NSQ V2 client for the end-to-end tests (standard library only).

It speaks the wire format directly, so tests can send exactly the bytes
they mean, malformed ones included, and read every frame the server sends.
"""

import json
import socket
import struct
import zlib

FRAME_RESPONSE = 0
FRAME_ERROR = 1
FRAME_MESSAGE = 2


class Closed(Exception):
    pass


class Message:
    def __init__(self, data):
        self.timestamp, self.attempts = struct.unpack(">qH", data[:10])
        self.id = data[10:26].decode()
        self.body = data[26:]

    def __repr__(self):
        return f"Message({self.id}, attempts={self.attempts}, {self.body[:20]!r})"


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10, magic=True):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.inflate = None
        self.deflate = None
        if magic:
            self.sock.sendall(b"  V2")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # -- sending ----------------------------------------------------------

    def send(self, data):
        if self.deflate is not None:
            data = self.deflate.compress(data) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        self.sock.sendall(data)

    def cmd(self, line, body=None):
        data = line.encode() + b"\n"
        if body is not None:
            data += struct.pack(">I", len(body)) + body
        self.send(data)

    def identify(self, **fields):
        fields.setdefault("feature_negotiation", True)
        self.cmd("IDENTIFY", json.dumps(fields).encode())
        kind, data = self.read_frame()
        if kind != FRAME_RESPONSE:
            raise AssertionError(f"IDENTIFY failed: {data!r}")
        return json.loads(data) if data.startswith(b"{") else data

    def pub(self, topic, body):
        self.cmd(f"PUB {topic}", body)
        return self.read_response()

    def mpub(self, topic, bodies):
        payload = struct.pack(">I", len(bodies))
        for b in bodies:
            payload += struct.pack(">I", len(b)) + b
        self.cmd(f"MPUB {topic}", payload)
        return self.read_response()

    def dpub(self, topic, defer_ms, body):
        self.cmd(f"DPUB {topic} {defer_ms}", body)
        return self.read_response()

    def sub(self, topic, channel):
        self.cmd(f"SUB {topic} {channel}")
        return self.read_response()

    def rdy(self, n):
        self.cmd(f"RDY {n}")

    def fin(self, msg_id):
        self.cmd(f"FIN {msg_id}")

    def req(self, msg_id, ms):
        self.cmd(f"REQ {msg_id} {ms}")

    def touch(self, msg_id):
        self.cmd(f"TOUCH {msg_id}")

    # -- receiving ----------------------------------------------------------

    def _fill(self):
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed("connection closed by the server")
        if self.inflate is not None:
            chunk = self.inflate.decompress(chunk)
        self.buf += chunk

    def read_frame(self, skip_heartbeats=True):
        while True:
            while len(self.buf) < 4:
                self._fill()
            (size,) = struct.unpack(">I", self.buf[:4])
            while len(self.buf) < 4 + size:
                self._fill()
            kind = struct.unpack(">i", self.buf[4:8])[0]
            data = self.buf[8 : 4 + size]
            self.buf = self.buf[4 + size :]
            if skip_heartbeats and kind == FRAME_RESPONSE and data == b"_heartbeat_":
                self.cmd("NOP")
                continue
            return kind, data

    def read_response(self):
        kind, data = self.read_frame()
        if kind == FRAME_MESSAGE:
            raise AssertionError(f"expected a response, got a message {data[:40]!r}")
        return kind, data

    def read_message(self):
        kind, data = self.read_frame()
        if kind != FRAME_MESSAGE:
            raise AssertionError(f"expected a message, got {kind} {data!r}")
        return Message(data)

    def expect_closed(self, timeout=5):
        """True when the server closes the connection within timeout
        (frames before the close are skipped)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                self.read_frame()
        except Closed:
            return True
        except socket.timeout:
            return False

    def start_deflate(self, level=6):
        self.deflate = zlib.compressobj(level, zlib.DEFLATED, -15)
        self.inflate = zlib.decompressobj(-15)
        # Bytes already received after the IDENTIFY answer are compressed.
        rest, self.buf = self.buf, b""
        if rest:
            self.buf = self.inflate.decompress(rest)
