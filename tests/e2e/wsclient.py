"""A small WebSocket client (RFC 6455) on the standard library, for the
end-to-end tests of the live feed: the handshake, masked client frames,
and reading the server's frames as they are on the wire."""
import base64
import hashlib
import json
import os
import socket
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC11B65"
TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


class HandshakeError(Exception):
    """The server answered the upgrade with something other than 101."""

    def __init__(self, status, headers, body):
        super().__init__(f"HTTP {status}: {body!r}")
        self.status = status
        self.headers = headers
        self.body = body

    def json(self):
        return json.loads(self.body)


class Closed(Exception):
    pass


class Message:
    """A live feed data frame: the 24-byte header, then the body."""

    def __init__(self, data):
        magic, hlen, attempts, ts, mid = struct.unpack(">4sHHqQ", data[:24])
        self.magic = magic
        self.header_len = hlen
        self.attempts = attempts
        self.timestamp_ns = ts
        self.id = mid
        self.body = data[hlen:]


def frame(opcode, payload=b"", fin=True, mask=True, rsv=0, length=None):
    """One client frame; rsv sets the reserved bits (4: RSV1), length
    overrides the declared payload length."""
    head = bytes([(0x80 if fin else 0) | rsv << 4 | opcode])
    n = len(payload) if length is None else length
    mbit = 0x80 if mask else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack(">Q", n)
    if mask:
        m = os.urandom(4)
        head += m
        payload = bytes(b ^ m[i % 4] for i, b in enumerate(payload))
    return head + payload


class WS:
    def __init__(self, port, path, protocols=("tern.live.v1",), headers=None, timeout=10,
                 key=None, version="13", host="127.0.0.1", ssl_context=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:  # wss: the same protocol over TLS
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.buf = b""
        self.key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {self.key}"]
        if version is not None:
            lines.append(f"Sec-WebSocket-Version: {version}")
        if protocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(protocols))
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        status, hdrs = self._read_head()
        self.status = status
        self.headers = hdrs
        if status != 101:
            n = int(hdrs.get("content-length", "0"))
            body = self._read_exact(n)
            self.sock.close()
            raise HandshakeError(status, hdrs, body)
        want = base64.b64encode(hashlib.sha1(self.key.encode() + GUID).digest()).decode()
        if hdrs.get("sec-websocket-accept") != want:
            raise AssertionError(f"bad Sec-WebSocket-Accept {hdrs.get('sec-websocket-accept')}")

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise Closed("connection closed")
        self.buf += chunk

    def _read_exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _read_head(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
        return status, hdrs

    def send_frame(self, opcode, payload=b"", fin=True, mask=True):
        self.sock.sendall(frame(opcode, payload, fin, mask))

    def send_text(self, text):
        self.send_frame(TEXT, text.encode())

    def send_json(self, obj):
        self.send_text(json.dumps(obj))

    def recv_frame(self):
        """The next frame as sent: (opcode, payload)."""
        b0, b1 = self._read_exact(2)
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read_exact(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read_exact(8))[0]
        if not b0 & 0x80:
            raise AssertionError("the server fragmented a message")
        return b0 & 0x0F, self._read_exact(n)

    def recv(self, answer_pings=True):
        """The next text, binary or close frame; pings are answered."""
        while True:
            op, data = self.recv_frame()
            if op == PING:
                if answer_pings:
                    self.send_frame(PONG, data)
                continue
            if op == PONG:
                continue
            return op, data

    def recv_json(self):
        op, data = self.recv()
        if op != TEXT:
            raise AssertionError(f"expected a text frame, got opcode {op}: {data[:80]!r}")
        return json.loads(data)

    def recv_message(self):
        op, data = self.recv()
        if op != BINARY:
            raise AssertionError(f"expected a binary frame, got opcode {op}: {data[:200]!r}")
        return Message(data)

    def expect_error(self, code):
        """An error control frame with code, then a Close whose reason is
        the code. Returns (error object, close status)."""
        err = self.recv_json()
        if err.get("type") != "error" or err.get("code") != code:
            raise AssertionError(f"expected error {code}, got {err}")
        op, data = self.recv()
        if op != CLOSE:
            raise AssertionError(f"expected a Close frame, got opcode {op}")
        status = struct.unpack(">H", data[:2])[0]
        if data[2:].decode() != code:
            raise AssertionError(f"Close reason {data[2:]!r}, expected {code}")
        return err, status

    def wait_closed(self):
        """Read until the server closes the TCP connection."""
        try:
            while True:
                self._fill()
                self.buf = b""
        except (Closed, ConnectionResetError):
            return

    def close_handshake(self, status=1000):
        """Send a Close and read until the server closes."""
        self.send_frame(CLOSE, struct.pack(">H", status))
        self.wait_closed()

    def close(self):
        try:
            self.send_frame(CLOSE, struct.pack(">H", 1000))
        except OSError:
            pass
        self.sock.close()
