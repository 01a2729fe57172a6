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


# -- Snappy framing (just enough for tests: we send uncompressed chunks and
# decode whatever the server sends) ---------------------------------------

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _mask(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def snappy_uncompress_block(data):
    """Decode one raw Snappy block."""
    pos, length, shift = 0, 0, 0
    while True:
        b = data[pos]
        pos += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            n = tag >> 2
            if n >= 60:
                extra = n - 59
                n = int.from_bytes(data[pos:pos + extra], "little")
                pos += extra
            n += 1
            out += data[pos:pos + n]
            pos += n
            continue
        if kind == 1:
            n = ((tag >> 2) & 7) + 4
            off = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            n = (tag >> 2) + 1
            off = int.from_bytes(data[pos:pos + 2], "little")
            pos += 2
        else:
            n = (tag >> 2) + 1
            off = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        for _ in range(n):
            out.append(out[-off])
    assert len(out) == length, "snappy length mismatch"
    return bytes(out)


class SnappyStream:
    IDENT = b"\xff\x06\x00\x00sNaPpY"

    def __init__(self):
        self.pending = b""
        self.sent_ident = False

    def encode(self, data):
        out = b""
        if not self.sent_ident:
            out += self.IDENT
            self.sent_ident = True
        for i in range(0, len(data), 65536):
            chunk = data[i:i + 65536]
            payload = _mask(crc32c(chunk)).to_bytes(4, "little") + chunk
            out += b"\x01" + len(payload).to_bytes(3, "little") + payload
        return out

    def decode(self, data):
        self.pending += data
        out = b""
        while len(self.pending) >= 4:
            kind = self.pending[0]
            n = int.from_bytes(self.pending[1:4], "little")
            if len(self.pending) < 4 + n:
                break
            body = self.pending[4:4 + n]
            self.pending = self.pending[4 + n:]
            if kind == 0xFF:
                continue
            if kind == 0x00:
                chunk = snappy_uncompress_block(body[4:])
            elif kind == 0x01:
                chunk = body[4:]
            else:
                continue
            assert _mask(crc32c(chunk)) == int.from_bytes(body[:4], "little"), "bad chunk CRC"
            out += chunk
        return out


class Message:
    def __init__(self, data):
        self.timestamp, self.attempts = struct.unpack(">qH", data[:10])
        self.id = data[10:26].decode()
        self.body = data[26:]

    def __repr__(self):
        return f"Message({self.id}, attempts={self.attempts}, {self.body[:20]!r})"


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10, magic=True, rcvbuf=None):
        if rcvbuf is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:  # a small receive window, set before the connection is made
            self.sock = socket.socket()
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        self.buf = b""
        self.inflate = None
        self.deflate = None
        self.snappy = None
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
        elif self.snappy is not None:
            data = self.snappy.encode(data)
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
        elif self.snappy is not None:
            chunk = self.snappy.decode(chunk)
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

    def start_snappy(self):
        self.snappy = SnappyStream()
        rest, self.buf = self.buf, b""
        if rest:
            self.buf = self.snappy.decode(rest)

    def start_tls(self, context):
        """Wrap the socket after an IDENTIFY that negotiated tls_v1."""
        assert not self.buf, "bytes arrived before the TLS handshake"
        self.sock = context.wrap_socket(self.sock)
