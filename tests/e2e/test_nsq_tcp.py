#!/usr/bin/env python3
"""tern's NSQ TCP door against nsqd 1.3.0's source (nsqd/protocol_v2.go,
client_v2.go, channel.go at v1.3.0), case by case where the two differed.

nsqd cannot run here, so each expected answer is the one nsqd's source
gives; the comment on each test names the lines it follows. The raw
protocol throughout (nsqwire), a real ternd on loopback per class.

Run: python3 test_nsq_tcp.py --ternd build/ternd
"""

import socket
import ssl
import time

from authserver import AuthServer
from nsqwire import FRAME_ERROR, FRAME_MESSAGE, FRAME_RESPONSE, Conn
from test_nsq import Base, TLSBase, client_context, fresh, main


class Identify(TLSBase):
    """IDENTIFY: nsqd returns "OK" and negotiates nothing unless this
    IDENTIFY's feature_negotiation is true; tls_v1, snappy, deflate and
    feature_negotiation are this IDENTIFY's, not carried over."""

    def test_without_feature_negotiation_nothing_is_upgraded(self):
        # protocol_v2.go IDENTIFY: `if !identifyData.FeatureNegotiation
        # { return okBytes, nil }` comes before the TLS and compression
        # upgrades and before the snappy-and-deflate check.
        c = Conn(self.port)
        self.conns.append(c)
        c.cmd("IDENTIFY", b'{"tls_v1": true, "snappy": true, "deflate": true}')
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(c.pub(fresh(), b"plain"), (FRAME_RESPONSE, b"OK"))

    def test_a_second_identify_negotiates_afresh(self):
        # A second IDENTIFY before SUB is allowed; without
        # feature_negotiation it is answered "OK", and with it the answer
        # says what this one asked for (tls_v1 false here): TLS is not
        # started again.
        c, _ = self.tls_conn()
        c.cmd("IDENTIFY", b'{"msg_timeout": 5000}')
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"OK"))
        r = c.identify(msg_timeout=6000)
        self.assertEqual((r["tls_v1"], r["msg_timeout"]), (False, 6000))
        self.assertEqual(c.pub(fresh(), b"still tls"), (FRAME_RESPONSE, b"OK"))


class IdentifyJSON(Base):
    def identify_error(self, body):
        c = Conn(self.port)
        self.conns.append(c)
        c.cmd("IDENTIFY", body)
        frame = c.read_frame()
        self.assertTrue(c.expect_closed())
        return frame

    def test_keys_match_ignoring_case(self):
        # nsqd decodes IDENTIFY with Go's encoding/json, which matches a
        # key to a struct field ignoring case.
        self.assertEqual(self.identify_error(b'{"Heartbeat_Interval": 100}'),
                         (FRAME_ERROR, b"E_BAD_BODY IDENTIFY heartbeat interval (100) is invalid"))
        c = self.conn(MSG_TIMEOUT=5000)
        self.assertEqual(c.identify(Feature_Negotiation=True)["msg_timeout"], 5000)

    def test_sample_rate_is_an_int32(self):
        # identifyDataV2.SampleRate is an int32: a larger number does not
        # decode.
        self.assertEqual(self.identify_error(b'{"sample_rate": 4294967296}'),
                         (FRAME_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body"))


class TLSRequired(TLSBase):
    EXTRA = ("--tls-required=true",)

    def test_commands_before_tls_are_e_invalid(self):
        # enforceTLSPolicy: every command but IDENTIFY, NOP included, is
        # "E_INVALID cannot <CMD> in current state (TLS required)"; fatal.
        # An unknown command too: the TLS check comes before the command's.
        for line, body in ((f"PUB {fresh()}", b"x"), ("NOP", None), ("RDY 1", None),
                           ("BOGUS x", None)):
            c = self.conn()
            c.cmd(line, body)
            name = line.split()[0]
            self.assertEqual(c.read_frame(),
                             (FRAME_ERROR,
                              f"E_INVALID cannot {name} in current state (TLS required)".encode()))
            self.assertTrue(c.expect_closed())


class States(Base):
    """nsqd checks a command's state before its arguments."""

    ARGS = ("--max-msg-timeout=2s",)

    def closes_with(self, c, line, text, body=None):
        c.cmd(line, body)
        self.assertEqual(c.read_frame(), (FRAME_ERROR, text.encode()))
        self.assertTrue(c.expect_closed())

    def test_state_before_arguments(self):
        # RDY, FIN, REQ, TOUCH, CLS before SUB; SUB, IDENTIFY, AUTH after.
        self.closes_with(self.conn(), "RDY x", "E_INVALID cannot RDY in current state")
        self.closes_with(self.conn(), "FIN", "E_INVALID cannot FIN in current state")
        self.closes_with(self.conn(), "REQ 12", "E_INVALID cannot REQ in current state")
        self.closes_with(self.conn(), "TOUCH", "E_INVALID cannot TOUCH in current state")
        c = self.consumer(fresh(), "ch", rdy=0)
        self.closes_with(c, "SUB bad/topic ch", "E_INVALID cannot SUB in current state")
        c = self.consumer(fresh(), "ch", rdy=0)
        self.closes_with(c, "IDENTIFY", "E_INVALID cannot IDENTIFY in current state", b"")
        c = self.consumer(fresh(), "ch", rdy=0)
        self.closes_with(c, "AUTH", "E_INVALID cannot AUTH in current state", b"")

    def test_rdy_after_cls_is_ignored(self):
        # RDY in stateClosing returns before parsing its count.
        t = fresh()
        c = self.consumer(t, "ch", rdy=0)
        c.cmd("CLS")
        self.assertEqual(c.read_frame(), (FRAME_RESPONSE, b"CLOSE_WAIT"))
        c.cmd("RDY 999999")
        self.assertEqual(c.pub(t, b"x"), (FRAME_RESPONSE, b"OK"))

    def test_auth_with_parameters(self):
        # "AUTH invalid number of parameters" before the body is looked at
        # or AUTH's being disabled.
        self.closes_with(self.conn(), "AUTH x", "E_INVALID AUTH invalid number of parameters",
                         b"secret")

    def test_touch_stops_at_max_msg_timeout(self):
        # channel.go TouchMessage: a TOUCH never moves the timeout past
        # delivery + --max-msg-timeout (2 s here).
        t = fresh()
        self.conn().pub(t, b"x")
        c = self.consumer(t, "ch", rdy=5, msg_timeout=1000)
        m = c.read_message()
        start = time.monotonic()
        c.sock.settimeout(0.3)
        again = None
        while time.monotonic() - start < 6 and again is None:
            c.touch(m.id)
            try:
                while True:
                    kind, data = c.read_frame()
                    if kind == FRAME_MESSAGE:
                        again = data
                        break
            except socket.timeout:
                pass
        c.sock.settimeout(10)
        elapsed = time.monotonic() - start
        self.assertIsNotNone(again, "touched past --max-msg-timeout, never redelivered")
        self.assertGreater(elapsed, 1.8)
        self.assertLess(elapsed, 3.5)


class AuthStates(Base):
    @classmethod
    def setUpClass(cls):
        cls.auth = AuthServer()
        cls.ARGS = (f"--auth-http-address=127.0.0.1:{cls.auth.port}",)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.auth.close()

    def test_sub_state_before_auth(self):
        # SUB checks its state and heartbeats before CheckAuth.
        c = self.conn(heartbeat_interval=-1)
        c.cmd(f"SUB {fresh()} ch")
        self.assertEqual(c.read_frame(),
                         (FRAME_ERROR, b"E_INVALID cannot SUB with heartbeats disabled"))
        self.assertTrue(c.expect_closed())

    def test_mpub_auth_before_body(self):
        # MPUB calls CheckAuth before it reads its body (PUB and DPUB
        # after): an MPUB before AUTH is E_AUTH_FIRST whatever its body.
        c = self.conn()
        c.cmd(f"MPUB {fresh()}", b"\0\0\0\0")
        self.assertEqual(c.read_frame(), (FRAME_ERROR, b"E_AUTH_FIRST AUTH required before MPUB"))
        self.assertTrue(c.expect_closed())


if __name__ == "__main__":
    main()
