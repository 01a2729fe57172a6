"""Changing a topic's replication factor online (issue 23's promise, made
with the moves of issue 24; docs/cluster.md "Partition moves",
docs/replication.md "Moving a factor-1 partition"): `PATCH /v1/topics/{t}`
`{"replication_factor": N}` (admins only, `min_insync_replicas` may come
with it), answered 200 with the topic; then the metastore leader moves
every partition (one PART_MOVE each, listed in GET /v1/cluster/moves)
until it has N replicas: raising appends the least loaded members (the
preferred leader stays first), lowering drops replicas from the end of
the list, never the first. Under the replication suite's load
(test_replication.py: /v1 and NSQ producers and consumers on every node)
and its ledger checker (lost, phantom, conflict, hole, diverged and
resurrected-FIN all 0), as test_moves_f1.py; `rn` (NSQ-made) keeps the
cluster's default factor, 3, and min-insync-replicas is 2.

  test_raise_then_lose_a_node  rv made at factor 1 (three partitions, one
                          per node) raised to 3 under the load: every
                          partition ends with 3 replicas, all in the ISR,
                          its owner still first, min_insync_replicas 2
                          (the server's, clamped to 3); one move per
                          partition, each done, from its owner to the
                          three; then the node that owned rv/0 is
                          SIGKILLed: every partition goes on taking
                          produces and delivering through the other two;
                          the node comes back and the ledger is clean;
  test_lower              rv at factor 3 lowered to 2 (`PATCH`) and then to
                          1 (`ternctl topics alter --replication-factor`)
                          under the load: every partition keeps the first
                          replicas of its list, its preferred leader leads,
                          min_insync_replicas reads 2, then 1 (the
                          topic's and each partition's), and every
                          partition takes produces at each factor;
  test_refusals           other fields with the factor (400), a factor
                          outside 1..5 (400), more than the members alive
                          (409 naming both counts), a factor-1 topic raised
                          while a partition's owner is dead (409 naming
                          it), min_insync_replicas outside 1..N (400), a
                          topic owner who is not an admin (403), a
                          partition PATCH of other than the factor's count
                          of members (400), ternctl's refusals; none of
                          them changes the topic;
  test_growth_while_a_member_is_dead  rv (factor 3) grown to four
                          partitions while a member is dead: the new one
                          gets two replicas, and its third once the member
                          is back, under the load.

Run: python3 tests/cluster/test_factor_change.py --ternd build/ternd --ternctl build/ternctl
         [FactorChange.test_...]
"""
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
import test_moves as tm  # noqa: E402
import test_moves_f1 as f1  # noqa: E402
import test_replication as tr  # noqa: E402
from harness import wait_until  # noqa: E402

V1 = tr.V1
# test_moves_f1 makes every topic factor 1 by default; here only rv starts
# at factor 1 (when a case asks), rn takes the suite's default, 3, and
# min-insync-replicas is the suite's 2 (what a raise from 1 takes).
tr.REPL_ARGS = ["--default-replication-factor=3", "--min-insync-replicas=2",
                f"--member-session-timeout={int(tr.SESSION)}s"]
OPS, OPS_PW = "ops", "ops-pw-1"


class FactorChange(f1.MovesF1):
    start_factor = 1  # rv's factor at creation; a case sets it before cluster()

    def topics(self, partitions):
        if self.start_factor == 1:
            super().topics(partitions)  # rv at factor 1, one partition per node
        else:
            tr.Replication.topics(self, partitions)  # rv at factor 3, min_insync 2

    # helpers

    def at_factor(self, n, topic=V1, exclude=()):
        """topic's partitions once each has n replicas, all in its ISR, and
        a leader; else None."""
        ps = self.info(topic, exclude)
        if not ps:
            return None
        ok = all(p.leader and len(p.replicas) == n and sorted(p.isr) == sorted(p.replicas)
                 for p in ps)
        return ps if ok else None

    def topic(self, node, topic=V1):
        status, body = node.request("GET", f"/v1/topics/{topic}")
        self.assertEqual(status, 200, body)
        return body

    def set_factor(self, node, n, extra=None, topic=V1):
        """PATCH the factor (and extra fields): the 200 answer, checked to
        show the topic as GET does, at factor n."""
        body = {"replication_factor": n, **(extra or {})}
        status, answer = node.request("PATCH", f"/v1/topics/{topic}", body, timeout=30)
        self.assertEqual(status, 200, (body, answer))
        self.assertEqual(answer.get("replication_factor"), n, answer)
        self.assertEqual(answer.get("name"), topic, answer)
        tr.log(f"PATCH {topic} {body}: {status} replication_factor "
               f"{answer.get('replication_factor')} min_insync_replicas "
               f"{answer.get('min_insync_replicas')}")
        self.history.fault(f"{topic} replication_factor -> {n}")
        got = self.topic(node, topic)
        self.assertEqual(got["replication_factor"], n, got)
        self.assertEqual(got["min_insync_replicas"], answer["min_insync_replicas"], got)
        return answer

    def reach(self, n, min_insync):
        """rv's partitions once each has n replicas, all in its ISR, and
        shows min_insync (the topic's, capped by its replicas: a raised
        partition takes it at its move's completion)."""
        ps = wait_until(f"every partition of {V1} with {n} replicas, all in its ISR",
                        lambda: self.at_factor(n), 180, 0.5)
        tr.log(f"{V1} at factor {n}: {ps}")
        wait_until(f"every partition of {V1} with min_insync_replicas {min_insync}",
                   lambda: self.min_insyncs() == [min_insync] * len(ps), 60)
        return ps

    def min_insyncs(self):
        node = self.up_node()
        return [p.get("min_insync_replicas") for p in self.topic(node).get("partition_stats", [])]

    def served(self, since, why, parts=3):
        """Every partition of rv takes produces (10 acknowledged since
        since): its min_insync_replicas is no more than the replicas it
        has in its ISR."""
        for p in range(parts):
            wait_until(f"10 produces to {V1}/{p} acknowledged {why}",
                       lambda: self.acked_on(p, since) >= 10, 90)

    def moves_of(self, topic=V1):
        return [m for m in self.moves() if m["topic"] == topic]

    def refused(self, node, path, body, status, words, auth=True, headers=None, method="PATCH"):
        got, answer = node.request(method, path, body, auth=auth, headers=headers, timeout=30)
        self.assertEqual(got, status, (path, body, answer))
        err = answer.get("error", "") if isinstance(answer, dict) else str(answer)
        tr.log(f"{method} {path} {body}: {got} {err}")
        for w in words if isinstance(words, (list, tuple)) else [words]:
            if isinstance(w, re.Pattern):
                self.assertRegex(err, w, (path, body, answer))
            else:
                self.assertIn(w, err, (path, body, answer))
        return err

    def member_status(self, node, mid):
        status, body = node.request("GET", "/v1/cluster/members")
        if status != 200 or not isinstance(body, dict):
            return None
        return next((m["status"] for m in body["members"] if m["id"] == str(mid)), None)

    def ternctl(self, *args):
        n = self.up_node()
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(HOME=self.c.dir, TERN_URL=f"http://{n.api_address}",
                   TERN_PASSWORD=harness.PASSWORD)
        r = subprocess.run([tm.TERNCTL, *args], capture_output=True, text=True, env=env,
                           timeout=120)
        tr.log(f"ternctl {' '.join(args)}: {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    def delivered_on(self, p, since):
        with self.history.lock:
            return sum(1 for d in self.history.deliveries
                       if d[0] >= since and d[1] == V1 and d[3] == p)

    # cases

    def test_raise_then_lose_a_node(self):
        self.start_factor = 1
        self.cluster(n=3)
        self.load.start()
        self.flowing(150)
        before = self.info(V1)
        owners = [p.leader for p in before]
        self.assertEqual([p.replicas for p in before], [[o] for o in owners], before)
        self.assertEqual(sorted(owners), sorted(str(n.id) for n in self.c.nodes), before)
        meta = self.c.find_leader()
        answer = self.set_factor(meta, 3)
        # Raised from 1 without min_insync_replicas: the server's (2),
        # clamped to 3.
        self.assertEqual(answer["min_insync_replicas"], 2, answer)
        ps = self.reach(3, 2)
        for p, owner in zip(ps, owners):
            # The owner stays the preferred leader (first); the members
            # appended are the others (three nodes: all of them).
            self.assertEqual(p.replicas[0], owner, p)
            self.assertEqual(sorted(p.replicas), sorted(str(n.id) for n in self.c.nodes), p)

        # One move per partition, from its owner to its three replicas,
        # each done (every node lists the metastore's state).
        def all_done():
            ms = self.moves_of()
            return ms if len(ms) == 3 and all(m["state"] == "done" for m in ms) else None
        ms = wait_until(f"the moves of {V1} listed done", all_done, 60, 0.5)
        for m in ms:
            tr.log(f"move {m['id']} of {V1}/{m['partition']}: {m['from']} -> {m['to']} "
                   f"{m['state']}")
        self.assertEqual(sorted(m["partition"] for m in ms), [0, 1, 2], ms)
        for m in ms:
            p = m["partition"]
            self.assertEqual(m["from"], [owners[p]], m)
            self.assertEqual(m["to"], ps[p].replicas, m)
            self.assertIsNone(m["error"], m)
        self.flowing(60)
        self.lose(self.node(owners[0]))
        self.flowing(60)
        self.finish()

    def lose(self, victim):
        """victim (the node that owned rv/0 at the start) dies: the other
        two serve every partition (min_insync 2 of 3), taking produces and
        delivering; then it comes back into every ISR."""
        self.kill(victim, f"the first owner of {V1}/0, after the raise")
        t = time.monotonic()
        wait_until(f"every partition of {V1} led by a node other than {victim.id}",
                   lambda: (lambda ps: ps and all(p.leader and p.leader != str(victim.id)
                                                  for p in ps))(
                       self.info(V1, exclude=(victim.id,))), tr.SESSION + 30, 0.2)
        self.served(t, f"while node {victim.id} is down")
        for p in range(3):
            wait_until(f"5 messages of {V1}/{p} delivered while node {victim.id} is down",
                       lambda: self.delivered_on(p, t) >= 5, 90)
        self.restart(victim)
        wait_until(f"every partition of {V1} with its 3 replicas in its ISR again",
                   lambda: self.at_factor(3), 120, 0.5)

    def test_lower(self):
        self.start_factor = 3
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        before = [p.replicas for p in self.info(V1)]
        self.assertTrue(all(len(r) == 3 for r in before), before)
        meta = self.c.find_leader()
        # 3 -> 2: min_insync_replicas kept (min(2, 2)); the last of each
        # list dropped.
        answer = self.set_factor(meta, 2)
        self.assertEqual(answer["min_insync_replicas"], 2, answer)
        ps = self.reach(2, 2)
        for p, was in zip(ps, before):
            self.assertEqual(p.replicas, was[:2], p)
        self.served(time.monotonic(), "at factor 2")
        # 2 -> 1 through ternctl: min_insync_replicas becomes min(2, 1).
        r = self.ternctl("topics", "alter", V1, "--replication-factor", "1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.history.fault(f"{V1} replication_factor -> 1 (ternctl)")
        got = self.topic(meta)
        self.assertEqual((got["replication_factor"], got["min_insync_replicas"]), (1, 1), got)
        ps = self.reach(1, 1)
        for p, was in zip(ps, before):
            self.assertEqual((p.replicas, p.leader), ([was[0]], was[0]), p)
        # With one replica each, min_insync 1: every partition takes produces.
        self.served(time.monotonic(), "at factor 1")
        ms = wait_until(f"the moves of {V1} listed done",
                        lambda: (lambda x: x if x and all(m["state"] == "done" for m in x)
                                 else None)(self.moves_of()), 60, 0.5)
        self.assertEqual(len(ms), 6, ms)  # one per partition and step
        self.flowing(60)
        self.finish()

    def test_growth_while_a_member_is_dead(self):
        """A partition made by a growth while a member is dead gets fewer
        replicas than the factor; the metastore leader gives it the
        missing one once the member is back (the count follows the topic
        whatever made it differ)."""
        self.start_factor = 3
        self.cluster(n=3)
        self.load.start()
        self.flowing(100)
        meta = self.c.find_leader()
        victim = next(n for n in self.c.nodes if n is not meta)
        self.kill(victim, "before rv grows")
        wait_until(f"member {victim.id} dead",
                   lambda: self.member_status(meta, victim.id) == "dead", 60)
        status, body = meta.request("PATCH", f"/v1/topics/{V1}", {"partitions": 4}, timeout=30)
        self.assertEqual(status, 200, body)
        self.history.fault(f"{V1} grown to 4 partitions while node {victim.id} is dead")
        ps = wait_until(f"{V1}/3 led", lambda: (lambda x: x if x and len(x) == 4 and x[3].leader
                                                 else None)(self.info(V1)), 60)
        tr.log(f"{V1}/3 made while node {victim.id} is dead: {ps[3]} replicas {ps[3].replicas}")
        self.assertEqual(len(ps[3].replicas), 2, ps[3].replicas)
        self.assertNotIn(str(victim.id), ps[3].replicas)
        self.load.v1_parts.append(3)  # the producers take the new partition too
        self.flowing(40)
        self.restart(victim)
        ps = wait_until(f"every partition of {V1}, the new one included, with 3 replicas in "
                        "its ISR", lambda: (lambda x: x if x and len(x) == 4 else None)(
                            self.at_factor(3)), 120, 0.5)
        self.assertIn(str(victim.id), ps[3].replicas, ps[3].replicas)
        ms = wait_until(f"the move of {V1}/3 listed done",
                        lambda: [m for m in self.moves_of() if m["partition"] == 3 and
                                 m["state"] == "done"], 60, 0.5)
        tr.log(f"move of {V1}/3: {ms}")
        self.assertEqual(ms[0]["to"], ps[3].replicas, ms)
        self.flowing(60)
        self.finish()

    def test_refusals(self):
        self.start_factor = 3
        self.cluster(n=3)
        meta = self.c.find_leader()
        status, body = meta.request("POST", "/v1/topics", {"name": "f1", "partitions": 3,
                                                            "replication_factor": 1})
        self.assertEqual(status, 201, body)
        owners = wait_until("every partition of f1 owned",
                            lambda: (lambda ps: [p.leader for p in ps]
                                     if ps and all(p.leader for p in ps) else None)(
                                         self.info("f1")), 60)
        path = f"/v1/topics/{V1}"
        # Another field with the factor (min_insync_replicas alone may come).
        alone = ("invalid argument: replication_factor is changed on its own "
                 "(min_insync_replicas may come with it)")
        for extra in ({"retention_ms": 3600000}, {"partitions": 4}, {"owner": "admin"},
                      {"visibility_timeout_ms": 20000}):
            self.refused(meta, path, {"replication_factor": 2, **extra}, 400, alone)
        # The factor outside 1..5.
        for n in (0, 6, -1):
            self.refused(meta, path, {"replication_factor": n}, 400, "replication_factor")
        # More than the alive, non-draining members (three).
        self.refused(meta, path, {"replication_factor": 4}, 409,
                     [re.compile(r"\b4\b"), re.compile(r"\b3\b")])
        self.refused(meta, path, {"replication_factor": 5}, 409,
                     [re.compile(r"\b5\b"), re.compile(r"\b3\b")])
        # min_insync_replicas outside 1..N.
        for m in (0, 3):
            self.refused(meta, path, {"replication_factor": 2, "min_insync_replicas": m}, 400,
                         "min_insync_replicas")
        self.refused(meta, "/v1/topics/f1", {"replication_factor": 3, "min_insync_replicas": 4},
                     400, "min_insync_replicas")
        # A partition PATCH names exactly the factor's count of members.
        ps = self.info(V1)
        self.refused(meta, f"{path}/partitions/0", {"replicas": ps[0].replicas[:2]}, 400,
                     "a partition of a topic of replication factor 3 is moved to exactly 3 "
                     "members")
        spare = next(str(n.id) for n in self.c.nodes if str(n.id) != owners[0])
        self.refused(meta, "/v1/topics/f1/partitions/0", {"replicas": [owners[0], spare]}, 400,
                     "a partition of a topic of replication factor 1 is moved to exactly one "
                     "member")
        # ternctl: its own range check, and the server's refusal shown.
        r = self.ternctl("topics", "alter", V1, "--replication-factor", "6")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("--replication-factor 6: expected an integer from 1 to 5", r.stderr)
        r = self.ternctl("topics", "alter", V1, "--replication-factor", "2", "--retention", "2h")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("replication_factor is changed on its own", r.stderr)
        # A topic owner who is not an admin may change the topic, not its
        # factor.
        if not self.c.security:
            tr.log("security off: the 403 of a non-admin user is not checked")
        else:
            status, body = meta.request("POST", "/v1/users", {
                "username": OPS, "password": OPS_PW,
                "grants": [{"action": "consume", "patterns": ["*"]}]})
            self.assertEqual(status, 201, body)
            status, body = meta.request("PATCH", "/v1/topics/f1", {"owner": OPS})
            self.assertEqual(status, 200, body)
            wait_until(f"user {OPS} and f1's owner on every node",
                       lambda: all(n.request("GET", f"/v1/users/{OPS}")[0] == 200 and
                                   self.topic(n, "f1").get("owner") == OPS
                                   for n in self.c.nodes), 30)
            ops = {"Authorization": harness.basic(OPS, OPS_PW)}
            status, body = meta.request("PATCH", "/v1/topics/f1", {"retention_ms": 7200000},
                                        auth=False, headers=ops)
            self.assertEqual(status, 200, body)  # its owner may change the topic
            self.refused(meta, "/v1/topics/f1", {"replication_factor": 2}, 403, "admin",
                         auth=False, headers=ops)
        # Raising a factor-1 topic while a partition's owner is dead: 409
        # naming it (a member other than the metastore leader, so that the
        # control plane stays up); with two members alive, 3 is more than
        # them.
        meta = self.c.find_leader()
        p, dead = next((i, o) for i, o in enumerate(owners) if o != str(meta.id))
        victim = self.node(dead)
        victim.kill()
        wait_until(f"member {dead} dead", lambda: self.member_status(meta, dead) == "dead", 60)
        err = self.refused(meta, "/v1/topics/f1", {"replication_factor": 2}, 409,
                           re.compile(rf"member {dead}\b"))
        tr.log(f"f1 raised with the owner of f1/{p} dead: {err}")
        self.refused(meta, "/v1/topics/f1", {"replication_factor": 3}, 409,
                     [re.compile(r"\b3\b"), re.compile(r"\b2\b")])
        # None of the refusals changed anything.
        for topic, factor, min_insync in ((V1, 3, 2), ("f1", 1, 1)):
            got = self.topic(meta, topic)
            self.assertEqual((got["replication_factor"], got["min_insync_replicas"]),
                             (factor, min_insync), got)
        self.assertEqual([m for m in self.moves(meta) if m["topic"] in (V1, "f1")], [])
        self.assertTrue(all(len(p.replicas) == 3 for p in self.info(V1)))


for _name in dir(f1.MovesF1):
    if _name.startswith("test") and _name not in vars(FactorChange):
        setattr(FactorChange, _name, None)


if __name__ == "__main__":
    harness.main(options=(("--ternctl", {"required": True}),), configure=tm.configure)
