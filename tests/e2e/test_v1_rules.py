#!/usr/bin/env python3
"""End-to-end tests of the /v1 rules that Narad enforces, against the real
ternd: the health endpoints' JSON bodies."""
import json
import os
import time
import unittest
import uuid

import test_v1
from daemon import Daemon
from test_v1 import PASSWORD, Base

API = {"X-Tern-Client": "tests"}
HOUR = 3600 * 1000


class Rules(Base):
    def create(self, **fields):
        name = fields.pop("name", None) or f"r{uuid.uuid4().hex[:10]}"
        body = dict({"name": name}, **fields)
        status, rec = self.send("POST", "/v1/topics", body)
        self.assertEqual(status, 201, rec)
        return name

    def send(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        status, _, out = self.request(method, path, data, ("admin", PASSWORD), API)
        return status, json.loads(out) if out else None

    def produce(self, topic, body, query=""):
        status, _, data = self.request("POST", f"/v1/topics/{topic}/produce{query}", body,
                                       ("admin", PASSWORD), API)
        self.assertEqual(status, 202, data)

    def consume(self, topic, query=""):
        status, _, data = self.request("GET", f"/v1/topics/{topic}/consume{query}", None,
                                       ("admin", PASSWORD), timeout=30)
        return status, json.loads(data) if data else None

    def next_offsets(self, topic):
        status, rec = self.admin("GET", f"/v1/topics/{topic}")
        self.assertEqual(status, 200, rec)
        return [p["next_offset"] for p in rec["partition_stats"]]

    def wait_offsets(self, topic, want):
        deadline = time.monotonic() + 20
        got = self.next_offsets(topic)
        while got != want and time.monotonic() < deadline:
            time.sleep(0.1)
            got = self.next_offsets(topic)
        self.assertEqual(got, want, topic)

    def test_health_bodies(self):
        for path, body in (("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})):
            status, headers, data = self.request("GET", path)
            self.assertEqual(status, 200, path)
            self.assertEqual(headers["Content-Type"], "application/json; charset=utf-8", path)
            self.assertEqual(json.loads(data), body, path)


if __name__ == "__main__":
    test_v1.main()
