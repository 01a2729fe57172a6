#!/usr/bin/env python3
"""End-to-end tests of one access model across the doors, against the real
ternd: a topic with an owner (made through /v1) is refused to anonymous
NSQ TCP clients (E_UNAUTHORIZED), to anonymous callers of nsqd's HTTP
endpoints (401, 403 with the wrong grant, nothing published, delivered or
deleted), hidden from their listings, and refused to the open live feed;
an NSQ-made topic stays fully open; with tern's users serving NSQ AUTH,
the identity's grants decide on every topic."""
import argparse
import base64
import http.client
import json
import os
import sys
import time
import unittest
import uuid

import daemon as daemon_mod
import test_nsq_doors as doors
from nsqwire import FRAME_ERROR, FRAME_RESPONSE
from wsclient import WS, HandshakeError

PASSWORD = doors.PASSWORD


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ADMIN = basic("admin", PASSWORD)
ALICE = basic("alice", "alice-pw")  # produce and consume on sec*
BOB = basic("bob", "bob-pw")  # consume on other* only
JSON = {"Content-Type": "application/json"}


def fresh(prefix):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


class Base(doors.Base):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for user, pw, grants in (
                ("alice", "alice-pw", [{"action": "produce", "patterns": ["sec*"]},
                                       {"action": "consume", "patterns": ["sec*"]}]),
                ("bob", "bob-pw", [{"action": "consume", "patterns": ["other*"]}])):
            st, _, body = cls.request("POST", "/v1/users",
                                      json.dumps({"username": user, "password": pw,
                                                  "grants": grants}).encode(),
                                      dict(ADMIN, **JSON))
            assert st == 201, body

    def owned_topic(self, extra=None):
        """A topic admin made through /v1, holding one message."""
        t = fresh("sec")
        st, _, body = self.request("POST", "/v1/topics",
                                   json.dumps(dict({"name": t}, **(extra or {}))).encode(),
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 201, body)
        c = http.client.HTTPConnection("127.0.0.1", self.http, timeout=30)
        c.request("POST", f"/v1/topics/{t}/produce", b'{"n":1}', dict(ADMIN, **JSON))
        r = c.getresponse()
        self.assertEqual((r.status, r.reason), (202, "Accepted"), r.read())
        c.close()
        return t

    def linked_topics(self):
        """An owned topic (holding one message), a child of it, and the
        name of the link's channel on the parent."""
        t = self.owned_topic()
        kid = fresh("seckid")
        st, _, body = self.request("POST", "/v1/topics",
                                   json.dumps({"name": kid, "parent": t}).encode(),
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 201, body)
        st, _, body = self.request("GET", f"/v1/topics/{t}", headers=ADMIN)
        return t, kid, [c for c in json.loads(body)["channels"] if c.startswith("fanout.")][0]

    def next_offset(self, t):
        st, _, body = self.request("GET", f"/v1/topics/{t}", headers=ADMIN)
        self.assertEqual(st, 200, body)
        return sum(p["next_offset"] for p in json.loads(body)["partition_stats"])

    def still_has_its_message(self, t):
        st, _, body = self.request("GET", f"/v1/topics/{t}/consume?wait=5s", headers=ADMIN)
        self.assertEqual(st, 200, body)
        self.assertEqual(json.loads(body)["payload"], {"n": 1})

    def both_on_the_channel(self, t):
        """t's two messages (one left in flight by a consumer that ended)
        are consumed from its channel ch again."""
        for _ in range(2):
            st, _, body = self.request("GET", f"/v1/topics/{t}/consume?channel=ch&wait=5s",
                                       headers=ADMIN)
            self.assertEqual(st, 200, body)

    def refused(self, frame, code="E_UNAUTHORIZED"):
        kind, data = frame
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertTrue(data.startswith(code.encode()), data)


class OpenDoors(Base):
    """No NSQ auth configured (the default)."""

    def test_tcp_refuses_anonymous_clients_on_an_owned_topic(self):
        t = self.owned_topic()
        before = self.next_offset(t)
        c = self.conn()
        self.refused(c.sub(t, "default"))
        for send in (lambda c: c.pub(t, b"x"), lambda c: c.mpub(t, [b"x", b"y"]),
                     lambda c: c.dpub(t, 10, b"x")):
            c = self.conn()
            kind, data = send(c)
            self.refused((kind, data))
            self.assertIn(b"protected", data)
        self.assertEqual(self.next_offset(t), before)  # nothing published
        self.still_has_its_message(t)  # nothing taken off the channel
        # Its dead-letter topic belongs to the same owner.
        c = self.conn()
        self.refused(c.sub(f"{t}.default.DLQ", "x"))

    def test_http_refuses_anonymous_callers_and_the_wrong_grant(self):
        t = self.owned_topic()
        before = self.next_offset(t)
        for path in (f"/pub?topic={t}", f"/mpub?topic={t}", f"/topic/delete?topic={t}",
                     f"/topic/empty?topic={t}", f"/topic/pause?topic={t}",
                     f"/channel/empty?topic={t}&channel=default",
                     f"/channel/delete?topic={t}&channel=default",
                     f"/channel/create?topic={t}&channel=sneaky"):
            data = b"x" if "pub" in path else None
            st, h, body = self.request("POST", path, data)
            self.assertEqual((st, json.loads(body)), (401, {"message": "AUTH_REQUIRED"}), path)
            self.assertIn("Basic", h.get("www-authenticate", ""))
            st, _, body = self.request("POST", path, data, BOB)
            self.assertEqual((st, json.loads(body)), (403, {"message": "FORBIDDEN"}), path)
        st, _, body = self.request("POST", f"/pub?topic={t}", b"x", basic("alice", "wrong"))
        self.assertEqual((st, json.loads(body)), (401, {"message": "AUTH_FAILED"}))
        self.assertEqual(self.next_offset(t), before)
        self.still_has_its_message(t)
        # Not listed to anonymous callers.
        st, _, body = self.request("GET", "/stats?format=json")
        self.assertNotIn(t, [x["topic_name"] for x in json.loads(body)["topics"]])
        self.assertNotIn(t.encode(), self.request("GET", "/stats")[2])
        self.assertNotIn(t, json.loads(self.request("GET", "/topics")[2])["topics"])
        self.assertEqual(self.request("GET", f"/lookup?topic={t}")[0], 404)
        self.assertEqual(json.loads(self.request("GET", f"/channels?topic={t}")[2]),
                         {"channels": []})
        node = json.loads(self.request("GET", "/nodes")[2])["producers"][0]
        self.assertNotIn(t, node["topics"])
        # Listed to those who may see it.
        st, _, body = self.request("GET", "/stats?format=json", headers=ALICE)
        self.assertIn(t, [x["topic_name"] for x in json.loads(body)["topics"]])
        self.assertIn(t, json.loads(self.request("GET", "/topics", headers=ADMIN)[2])["topics"])

    def test_the_right_grant_and_ownership_go_through(self):
        t = self.owned_topic()
        before = self.next_offset(t)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b'{"n":2}', ALICE)[0], 200)
        self.assertEqual(self.next_offset(t), before + 1)
        st, _, _ = self.request("POST", f"/channel/pause?topic={t}&channel=default", None, ALICE)
        self.assertEqual(st, 200)
        self.assertEqual(self.request("POST", f"/channel/unpause?topic={t}&channel=default",
                                      None, ALICE)[0], 200)
        # The topic itself is the owner's (or an admin's).
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}", None, ALICE)[0], 403)
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}", None, ADMIN)[0], 200)
        self.assertEqual(self.request("GET", f"/v1/topics/{t}", headers=ADMIN)[0], 404)

    def test_an_nsq_topic_stays_open(self):
        t = fresh("open")
        c = self.conn()
        r = c.identified
        self.assertFalse(r["auth_required"])
        self.assertEqual(c.pub(t, b"m"), (FRAME_RESPONSE, b"OK"))
        s = self.conn()
        self.assertEqual(s.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        s.rdy(1)
        self.assertEqual(s.read_message().body, b"m")
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"m2")[0], 200)
        st, _, body = self.request("GET", "/stats?format=json")
        self.assertIn(t, [x["topic_name"] for x in json.loads(body)["topics"]])
        self.assertEqual(self.request("POST", f"/channel/empty?topic={t}&channel=ch")[0], 200)
        s.close()
        self.assertEqual(self.request("POST", f"/topic/delete?topic={t}")[0], 200)


    def test_an_admin_adopts_an_nsq_topic_and_gives_it_back(self):
        t = fresh("secadopt")
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"m")[0], 200)
        patch = lambda body, who: self.request("PATCH", f"/v1/topics/{t}", json.dumps(body).encode(),
                                               dict(who, **JSON))
        # Only an admin may, and only to a user that exists.
        self.assertEqual(patch({"owner": "alice"}, ALICE)[0], 403)
        st, _, body = patch({"owner": "nobody"}, ADMIN)
        self.assertEqual(st, 400, body)
        st, _, body = patch({"owner": "alice"}, ADMIN)
        self.assertEqual((st, json.loads(body)["owner"]), (200, "alice"))
        c = self.conn()
        self.refused(c.pub(t, b"x"))
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"m")[0], 401)
        # Its owner may now do what an owner does.
        self.assertEqual(self.request("POST", f"/topic/pause?topic={t}", None, ALICE)[0], 200)
        self.assertEqual(self.request("POST", f"/topic/unpause?topic={t}", None, ALICE)[0], 200)
        # Given back, it is open again.
        self.assertEqual(patch({"owner": ""}, ADMIN)[0], 200)
        c = self.conn()
        self.assertEqual(c.pub(t, b"x"), (FRAME_RESPONSE, b"OK"))


    def test_producers_name_only_topics_the_caller_is_shown(self):
        # A producer's pub_counts in /stats name a topic an admin adopted
        # after the anonymous publishes only to whom may see it, and a
        # producer of protected topics alone is not listed to the others
        # (nsqd keeps every producer: its topics are all open).
        t, o, tag = fresh("secpubs"), fresh("openpubs"), fresh("c")
        both = self.conn(client_id=f"both-{tag}")
        self.assertEqual(both.pub(t, b"m"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(both.pub(o, b"m"), (FRAME_RESPONSE, b"OK"))
        only = self.conn(client_id=f"only-{tag}")
        self.assertEqual(only.pub(t, b"m"), (FRAME_RESPONSE, b"OK"))
        sub = self.conn(client_id=f"sub-{tag}")
        self.assertEqual(sub.pub(t, b"m"), (FRAME_RESPONSE, b"OK"))
        self.assertEqual(sub.sub(o, "ch"), (FRAME_RESPONSE, b"OK"))

        def producers(who):
            st, _, body = self.request("GET", "/stats?format=json", headers=who)
            self.assertEqual(st, 200, body)
            st = json.loads(body)
            found = {p["client_id"]: sorted(c["topic"] for c in p.get("pub_counts", []))
                     for p in st["producers"] or [] if p["client_id"].endswith(tag)}
            subs = {c["client_id"]: sorted(x["topic"] for x in c.get("pub_counts", []))
                    for x_t in st["topics"] if x_t["topic_name"] == o
                    for ch in x_t["channels"] for c in ch["clients"]
                    if c["client_id"].endswith(tag)}
            return found, subs

        self.assertEqual(producers({}), ({f"both-{tag}": [o, t], f"only-{tag}": [t],
                                          f"sub-{tag}": [t]}, {f"sub-{tag}": [t]}))
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", json.dumps({"owner": "alice"}).encode(),
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.assertEqual(producers({}), ({f"both-{tag}": [o]}, {f"sub-{tag}": []}))
        self.assertEqual(producers(BOB), ({f"both-{tag}": [o]}, {f"sub-{tag}": []}))
        for who in (ALICE, ADMIN):
            self.assertEqual(producers(who), ({f"both-{tag}": [o, t], f"only-{tag}": [t],
                                               f"sub-{tag}": [t]}, {f"sub-{tag}": [t]}))
        st, _, body = self.request("GET", f"/stats?format=json&topic={o}")
        self.assertNotIn(t, body.decode())
        self.assertNotIn(t.encode(), self.request("GET", "/stats")[2])
        for c in (both, only, sub):
            c.close()

    def test_a_child_links_channel_is_no_clients(self):
        # The channel that copies a parent's messages into its child
        # (fanout.<epoch>) belongs to the link: no door lets a client, an
        # admin included, take, settle, pause, empty, delete or make one,
        # so every message acknowledged to the parent reaches the child.
        t, kid, link = self.linked_topics()
        reserved = {"error": f"invalid argument: channel {link} belongs to the link of a child "
                             "topic (fanout. and 16 hex digits name no client's channel)"}
        for who in (ALICE, ADMIN):
            for method, path, data in (
                    ("GET", f"/v1/topics/{t}/consume?channel={link}", None),
                    ("POST", f"/v1/topics/{t}/ack?channel={link}&receipt_handle=0:1:1", None),
                    ("POST", f"/v1/topics/{t}/ack/batch?channel={link}", b'["0:1:1"]')):
                st, _, body = self.request(method, path, data,
                                           dict(who, **{"X-Tern-Client": "t"}))
                self.assertEqual((st, json.loads(body)), (400, reserved), path)
            for op in ("pause", "empty", "delete", "create", "unpause"):
                st, _, body = self.request("POST", f"/channel/{op}?topic={t}&channel={link}",
                                           None, who)
                self.assertEqual(st, 400, (op, body))
                self.assertEqual(json.loads(body), {"message": "INVALID_ARG_CHANNEL",
                                                    "error": reserved["error"][18:]}, op)
        # The link still copies: a message published now reaches the child.
        c = http.client.HTTPConnection("127.0.0.1", self.http, timeout=30)
        c.request("POST", f"/v1/topics/{t}/produce", b'{"n":2}', dict(ADMIN, **JSON))
        self.assertEqual(c.getresponse().status, 202)
        c.close()
        st, _, body = self.request("GET", f"/v1/topics/{kid}/consume?wait=5s", headers=ADMIN)
        self.assertEqual((st, json.loads(body)["payload"]), (200, {"n": 2}), body)


    def test_a_topic_given_an_owner_ends_its_anonymous_consumers(self):
        # A consumer SUB'd while the topic was open ends with
        # E_UNAUTHORIZED before its next message once the topic has an
        # owner (SUB would be refused then); its messages in flight go
        # back to the channel.
        t = fresh("open")
        c = self.conn()
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(10)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"open")[0], 200)
        self.assertEqual(c.read_message().body, b"open")  # left in flight
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", b'{"owner":"admin"}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"owned", ADMIN)[0], 200)
        kind, data = c.read_frame()
        self.refused((kind, data))
        self.assertIn(b"protected", data)
        self.assertTrue(c.expect_closed())
        self.both_on_the_channel(t)


class OpenFeed(Base):
    ARGS = ("--websocket-enabled",)

    def test_the_live_feed_refuses_an_owned_topic(self):
        t = self.owned_topic({"delivery_mode": "ttl_discard", "ttl_ms": 60000})
        with self.assertRaises(HandshakeError) as e:
            WS(self.http, f"/v1/ws/topics/{t}")
        self.assertEqual(e.exception.status, 403)
        self.assertIn("E_UNAUTHORIZED", json.dumps(e.exception.json()))


class UsersServeAuth(Base):
    ARGS = ("--nsq-auth-users",)

    def test_grants_decide_on_every_topic(self):
        t = self.owned_topic()
        c = self.conn(feature_negotiation=True)
        r = c.identified
        self.assertTrue(r["auth_required"])
        # Without AUTH first, nothing goes.
        self.refused(c.pub(t, b"x"), "E_AUTH_FIRST")
        c = self.conn(feature_negotiation=True)
        c.cmd("AUTH", b"alice:alice-pw")
        kind, data = c.read_frame()
        self.assertEqual(kind, FRAME_RESPONSE, data)
        self.assertEqual(json.loads(data)["identity"], "alice")
        self.assertEqual(c.pub(t, b"x"), (FRAME_RESPONSE, b"OK"))
        # An unowned topic outside alice's grants is refused too.
        self.refused(c.pub(fresh("open"), b"x"))
        # The topic's owner (here the root user) has it.
        c = self.conn(feature_negotiation=True)
        c.cmd("AUTH", f"admin:{PASSWORD}".encode())
        kind, data = c.read_frame()
        self.assertEqual(kind, FRAME_RESPONSE, data)
        self.assertEqual(c.sub(t, "default"), (FRAME_RESPONSE, b"OK"))
        # nsqd's HTTP endpoints need credentials for every topic.
        o = fresh("open")
        st, _, body = self.request("POST", f"/pub?topic={o}", b"m")
        self.assertEqual((st, json.loads(body)), (401, {"message": "AUTH_REQUIRED"}))
        self.assertEqual(self.request("POST", f"/pub?topic={o}", b"m", ADMIN)[0], 200)
        self.assertEqual(self.request("POST", f"/pub?topic={o}", b"m", ALICE)[0], 403)

    def test_a_child_links_channel_is_no_subscribers(self):
        # SUB to a link's channel is refused by name, whatever the grants.
        t, kid, link = self.linked_topics()
        c = self.conn(feature_negotiation=True)
        c.cmd("AUTH", b"alice:alice-pw")
        self.assertEqual(c.read_frame()[0], FRAME_RESPONSE)
        kind, data = c.sub(t, link)
        self.assertEqual(kind, FRAME_ERROR, data)
        self.assertEqual(data, f"E_BAD_CHANNEL SUB channel name {link} belongs to the link of a "
                               "child topic".encode())

    def revocable_consumer(self, grants=None, owner=False):
        """A fresh user, a topic admin made (holding one message, or the
        user's when owner), and that user's subscription to it holding
        the message in flight: (user, topic, connection)."""
        user, t = fresh("carol"), self.owned_topic()
        st, _, body = self.request("POST", "/v1/users", json.dumps(
            {"username": user, "password": "carol-pw",
             "grants": grants if grants is not None else
             [{"action": "consume", "patterns": [t]}]}).encode(), dict(ADMIN, **JSON))
        self.assertEqual(st, 201, body)
        if owner:
            st, _, body = self.request("PATCH", f"/v1/topics/{t}",
                                       json.dumps({"owner": user}).encode(), dict(ADMIN, **JSON))
            self.assertEqual(st, 200, body)
        c = self.conn(feature_negotiation=True)
        c.cmd("AUTH", f"{user}:carol-pw".encode())
        self.assertEqual(c.read_frame()[0], FRAME_RESPONSE)
        self.assertEqual(c.sub(t, "ch"), (FRAME_RESPONSE, b"OK"))
        c.rdy(10)
        self.assertEqual(c.read_message().body, b'{"n":1}')  # left in flight
        return user, t, c

    def ended_before_its_next_message(self, t, c, code="E_UNAUTHORIZED"):
        """After an access change: t's next message does not reach c, which
        ends with code well inside the grants' 60 s, and both messages
        are the channel's again."""
        start = time.monotonic()
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"after", ADMIN)[0], 200)
        c.sock.settimeout(10)
        kind, data = c.read_frame()
        self.refused((kind, data), code)
        self.assertLess(time.monotonic() - start, 10)
        self.assertTrue(c.expect_closed())
        self.both_on_the_channel(t)
        return data

    def test_a_revoked_grant_ends_the_subscription_at_once(self):
        # A grant change reaches an open subscription before its next
        # message, not when its 60 s grants expire.
        user, t, c = self.revocable_consumer()
        st, _, body = self.request("PUT", f"/v1/users/{user}/grants", json.dumps(
            {"grants": [{"action": "consume", "patterns": ["other*"]}]}).encode(), dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        data = self.ended_before_its_next_message(t, c)
        self.assertIn(b"no longer permit it", data)

    def test_a_deleted_user_ends_the_subscription_at_once(self):
        user, t, c = self.revocable_consumer()
        st, _, body = self.request("DELETE", f"/v1/users/{user}", headers=ADMIN)
        self.assertIn(st, (200, 204), body)
        self.ended_before_its_next_message(t, c, "E_AUTH_FAILED")

    def test_a_topic_given_another_owner_ends_the_old_owners_subscription(self):
        user, t, c = self.revocable_consumer(grants=[], owner=True)
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", b'{"owner":"admin"}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.ended_before_its_next_message(t, c)

    def test_an_unrelated_change_keeps_the_subscription(self):
        # Another topic made rechecks the grants, which still permit it.
        user, t, c = self.revocable_consumer()
        self.owned_topic()
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"still", ADMIN)[0], 200)
        self.assertEqual(c.read_message().body, b"still")

    def test_config_changes_take_an_admin(self):
        # nsqd's PUT /config/:opt changes the node for every topic: an
        # admin's, as a topic's management is its owner's or an admin's.
        st, _, body = self.request("PUT", "/config/log_level", b"info")
        self.assertEqual((st, json.loads(body)), (401, {"message": "AUTH_REQUIRED"}))
        st, _, body = self.request("PUT", "/config/nsqlookupd_tcp_addresses", b"[]", ALICE)
        self.assertEqual((st, json.loads(body)), (403, {"message": "FORBIDDEN"}))
        self.assertEqual(self.request("PUT", "/config/log_level", b"info", ADMIN)[:1], (200,))
        self.assertEqual(self.request("PUT", "/config/nsqlookupd_tcp_addresses", b"[]", ADMIN)[0],
                         200)
        # Reading stays open, as /info does.
        self.assertEqual(self.request("GET", "/config/log_level")[0], 200)


class UsersServeTheFeed(Base):
    ARGS = ("--nsq-auth-users", "--websocket-enabled")

    def test_a_revoked_grant_ends_the_feed_at_once(self):
        # A grant change reaches an open feed before its next message.
        t = self.owned_topic({"delivery_mode": "ttl_discard", "ttl_ms": 60000})
        user = fresh("dave")
        st, _, body = self.request("POST", "/v1/users", json.dumps(
            {"username": user, "password": "dave-pw",
             "grants": [{"action": "consume", "patterns": [t]}]}).encode(), dict(ADMIN, **JSON))
        self.assertEqual(st, 201, body)
        w = WS(self.http, f"/v1/ws/topics/{t}",
               headers={"Authorization": f"Bearer {user}:dave-pw"})
        self.assertEqual(w.recv_json()["type"], "ready")
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"granted", ADMIN)[0], 200)
        self.assertEqual(w.recv_message().body, b"granted")
        st, _, body = self.request("PUT", f"/v1/users/{user}/grants", json.dumps(
            {"grants": [{"action": "consume", "patterns": ["other*"]}]}).encode(), dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        start = time.monotonic()
        self.assertEqual(self.request("POST", f"/pub?topic={t}", b"revoked", ADMIN)[0], 200)
        w.sock.settimeout(10)
        _, status = w.expect_error("E_UNAUTHORIZED")
        self.assertEqual(status, 1008)
        self.assertLess(time.monotonic() - start, 10)
        w.wait_closed()


class DeadLetterOwners(Base):
    """A dead-letter topic belongs to its parent topic's owner: no one
    else makes it or publishes to it, and no dead letter moves into one
    that someone else owns."""
    ARGS = ("--nsq-auth-users",)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # mallory may make and produce to sec* topics, consume none.
        st, _, body = cls.request("POST", "/v1/users", json.dumps({
            "username": "mallory", "password": "mallory-pw",
            "grants": [{"action": "create", "patterns": ["sec*"]},
                       {"action": "produce", "patterns": ["sec*"]}]}).encode(),
            dict(ADMIN, **JSON))
        assert st == 201, body

    MALLORY = basic("mallory", "mallory-pw")

    def mallory_conn(self):
        c = self.conn(feature_negotiation=True)
        c.cmd("AUTH", b"mallory:mallory-pw")
        kind, data = c.read_frame()
        self.assertEqual(kind, FRAME_RESPONSE, data)
        return c

    def create(self, name, who, extra=None):
        return self.request("POST", "/v1/topics",
                            json.dumps(dict({"name": name}, **(extra or {}))).encode(),
                            dict(who, **JSON))

    def dead_letter_once(self, t):
        """Deliver t's one message on channel default, release it, and
        consume again: past max_attempts 1, it is not delivered."""
        st, _, body = self.request("GET", f"/v1/topics/{t}/consume?wait=5s", headers=ADMIN)
        self.assertEqual(st, 200, body)
        m = json.loads(body)
        self.assertEqual(m["attempts"], 1, m)
        st, _, body = self.request(
            "POST", f"/v1/topics/{t}/ack?extend=0&receipt_handle={m['receipt_handle']}",
            headers=dict(ADMIN, **{"X-Tern-Client": "t"}))
        self.assertEqual(st, 204, body)
        st, _, body = self.request("GET", f"/v1/topics/{t}/consume?wait=2s", headers=ADMIN)
        self.assertEqual(st, 204, body)

    def dead_letter_arrives(self, dlq, parent=None, timeout=30):
        """The dead letter in dlq; with parent, consumes from it meanwhile
        (a move is tried when a delivery finds the message due)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if parent is not None:
                st, _, body = self.request("GET", f"/v1/topics/{parent}/consume?wait=1s",
                                           headers=ADMIN)
                self.assertEqual(st, 204, body)
            st, _, body = self.request("GET", f"/v1/topics/{dlq}/consume?wait=1s",
                                       headers=ADMIN)
            if st == 200:
                return json.loads(body)
            time.sleep(0.1)
        self.fail(f"no dead letter reached {dlq}")

    def test_only_the_parents_owner_makes_or_feeds_its_dead_letter_topic(self):
        t = self.owned_topic({"max_attempts": 1})
        dlq = f"{t}.default.DLQ"
        st, _, body = self.create(dlq, self.MALLORY)
        self.assertEqual(st, 403, body)
        self.assertIn(f"{dlq} is a dead-letter topic of topic {t}", json.loads(body)["error"])
        # Not through the NSQ doors either, which make topics.
        kind, data = self.mallory_conn().pub(dlq, b"forged")
        self.refused((kind, data))
        self.assertIn(b"dead-letter topic of topic", data)
        st, _, body = self.request("POST", f"/pub?topic={dlq}", b"forged", self.MALLORY)
        self.assertEqual((st, json.loads(body)), (403, {"message": "FORBIDDEN"}))
        st, _, body = self.request("POST", f"/topic/create?topic={dlq}", None, self.MALLORY)
        self.assertEqual((st, json.loads(body)), (403, {"message": "FORBIDDEN"}))
        # The topic the broker makes for the dead letter is the parent's owner's.
        self.dead_letter_once(t)
        self.assertEqual(self.dead_letter_arrives(dlq)["payload"], {"n": 1})
        st, _, body = self.request("GET", f"/v1/topics/{dlq}", headers=ADMIN)
        self.assertEqual((st, json.loads(body).get("owner")), (200, "admin"), body)
        self.refused(self.mallory_conn().sub(dlq, "peek"))
        st, _, body = self.request("POST", f"/v1/topics/{dlq}/produce", b'{"forged":1}',
                                   dict(self.MALLORY, **JSON))
        self.assertEqual(st, 403, body)
        self.assertIn("only that topic's owner or an admin", json.loads(body)["error"])
        # The parent's owner makes and feeds it, and an admin makes it for them.
        t2 = fresh("sec")
        self.assertEqual(self.create(t2, self.MALLORY)[0], 201)
        st, _, body = self.create(f"{t2}.default.DLQ", ADMIN)
        self.assertEqual((st, json.loads(body).get("owner")), (201, "mallory"), body)
        st, _, body = self.create(f"{t2}.other.DLQ", self.MALLORY)
        self.assertEqual((st, json.loads(body).get("owner")), (201, "mallory"), body)
        self.assertEqual(self.mallory_conn().pub(f"{t2}.default.DLQ", b"m"),
                         (FRAME_RESPONSE, b"OK"))
        self.assertEqual(self.request("POST", f"/pub?topic={t2}.other.DLQ", b"m", self.MALLORY)[0],
                         200)

    def test_no_dead_letter_moves_into_a_topic_someone_else_owns(self):
        # mallory makes the dead-letter topic before its parent exists.
        t = fresh("sec")
        dlq = f"{t}.default.DLQ"
        st, _, body = self.create(dlq, self.MALLORY)
        self.assertEqual(st, 201, body)
        st, _, body = self.create(t, ADMIN, {"max_attempts": 1})
        self.assertEqual(st, 201, body)
        st, _, body = self.request("POST", f"/v1/topics/{t}/produce", b'{"n":1}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 202, body)
        self.dead_letter_once(t)
        line = self.d.wait_for(f"dead letters of {t}/default stay on their channel", timeout=10)
        self.assertIn(f"{dlq} is owned by mallory, not by the owner of {t} (admin)", line)
        self.assertIn(f'PATCH /v1/topics/{dlq} {{"owner": "admin"}}', line)
        self.assertEqual(self.next_offset(dlq), 0)  # nothing moved
        st, _, body = self.request("GET", f"/v1/topics/{t}/consume?wait=1s", headers=ADMIN)
        self.assertEqual(st, 204, body)  # and nothing delivered again
        # The operator gives it the parent's owner: the move goes on.
        st, _, body = self.request("PATCH", f"/v1/topics/{dlq}", b'{"owner":"admin"}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.dead_letter_arrives(dlq, t)["payload"], {"n": 1})


    def test_a_long_topics_hashed_dead_letter_topic_is_its_owners(self):
        # A topic name past 243 characters makes its dead-letter topic's
        # name `<its first 200>.<hash>.DLQ` (queue/channel.c): that topic is
        # its parent's owner's all the same, not open to everyone.
        t = fresh("sec") + "x" * 235  # 248: `<t>.default.DLQ` would pass 255
        st, _, body = self.create(t, ADMIN, {"max_attempts": 1})
        self.assertEqual(st, 201, body)
        st, _, body = self.request("POST", f"/v1/topics/{t}/produce", b'{"n":1}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 202, body)
        h = 2166136261
        for b in t.encode() + b"\0" + b"default":
            h = ((h ^ b) * 16777619) & 0xFFFFFFFF
        dlq = f"{t[:200]}.{h:08x}.DLQ"
        self.dead_letter_once(t)
        self.assertEqual(self.dead_letter_arrives(dlq)["payload"], {"n": 1})
        st, _, body = self.request("GET", f"/v1/topics/{dlq}", headers=ADMIN)
        self.assertEqual((st, json.loads(body).get("owner")), (200, "admin"), body)
        # Nor does anyone else make one of that form for it.
        st, _, body = self.create(f"{t[:200]}.0badcafe.DLQ", self.MALLORY)
        self.assertEqual(st, 403, body)

    def make_user(self, name, grants):
        st, _, body = self.request("POST", "/v1/users", json.dumps({
            "username": name, "password": name + "-pw", "grants": grants}).encode(),
            dict(ADMIN, **JSON))
        self.assertEqual(st, 201, body)
        return basic(name, name + "-pw")

    def owner_of(self, t):
        st, _, body = self.request("GET", f"/v1/topics/{t}", headers=ADMIN)
        self.assertEqual(st, 200, body)
        return json.loads(body).get("owner")

    def test_a_deleted_users_topics_pass_to_no_one_made_again_under_the_name(self):
        # A user's topics (its dead-letter topics too) go to the root user
        # when the user is deleted: a user made later under the same name
        # gets no owner's rights on them.
        grants = [{"action": "create", "patterns": ["sec*"]},
                  {"action": "produce", "patterns": ["sec*"]}]
        who = fresh("ursula")
        u = self.make_user(who, grants)
        t = fresh("sec")
        self.assertEqual(self.create(t, u)[0], 201)
        self.assertEqual(self.create(f"{t}.default.DLQ", u)[0], 201)
        self.assertEqual(self.owner_of(t), who)
        st, _, body = self.request("DELETE", f"/v1/users/{who}", headers=ADMIN)
        self.assertEqual(st, 204, body)
        u2 = self.make_user(who, grants)
        st, _, body = self.request("DELETE", f"/v1/topics/{t}", headers=u2)
        self.assertEqual(st, 403, body)
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", b'{"retention_ms":0}',
                                   dict(u2, **JSON))
        self.assertEqual(st, 403, body)
        self.assertEqual(self.owner_of(t), "admin")
        self.assertEqual(self.owner_of(f"{t}.default.DLQ"), "admin")
        st, _, body = self.request("POST", f"/v1/topics/{t}/produce", b'{"n":1}', dict(u2, **JSON))
        self.assertEqual(st, 202, body)  # its grants still count
        st, _, body = self.request("POST", f"/v1/topics/{t}.default.DLQ/produce", b'{"n":1}',
                                   dict(u2, **JSON))
        self.assertEqual(st, 403, body)

    def test_the_dead_letter_topics_follow_their_parents_new_owner(self):
        t = fresh("sec")
        dlq = f"{t}.default.DLQ"
        st, _, body = self.create(t, ADMIN, {"max_attempts": 1})
        self.assertEqual(st, 201, body)
        self.assertEqual(self.create(dlq, ADMIN)[0], 201)
        self.assertEqual(self.create(f"{t}.x.y.DLQ", ADMIN)[0], 201)
        # One that is not the parent's old owner's stays as it is.
        other = fresh("sec")
        self.assertEqual(self.create(other, self.MALLORY)[0], 201)
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", b'{"owner":"mallory"}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.assertEqual(self.owner_of(dlq), "mallory")
        self.assertEqual(self.owner_of(f"{t}.x.y.DLQ"), "mallory")
        self.assertEqual(self.owner_of(other), "mallory")
        # Dead letters keep moving, into the topic the new owner has.
        st, _, body = self.request("POST", f"/v1/topics/{t}/produce", b'{"n":1}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 202, body)
        self.dead_letter_once(t)
        self.assertEqual(self.dead_letter_arrives(dlq, t)["payload"], {"n": 1})
        # Given back to no one: they follow again.
        st, _, body = self.request("PATCH", f"/v1/topics/{t}", b'{"owner":""}',
                                   dict(ADMIN, **JSON))
        self.assertEqual(st, 200, body)
        self.assertIsNone(self.owner_of(dlq))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ternd", required=True)
    args, rest = ap.parse_known_args()
    daemon_mod.TERND = os.path.abspath(args.ternd)
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
