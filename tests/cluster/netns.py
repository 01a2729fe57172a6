"""Network namespaces for the cluster tests that need real separation.

Net(n) makes n namespaces, each joined by a veth pair to one bridge in the
root namespace, with the address 10.231.<k>.<i>/24 (k from this process
id, so two test runs do not collide), and removes all of it on close().
A node runs inside its namespace through Net.prefix(i) (`ip netns exec`,
which execs ternd in place, so the process id is still ternd's). isolate(i)
drops every packet of namespace i but loopback with an nft table of its
own (a partition); heal(i) deletes that table.

available() says whether this machine lets the tests do this (root or
CAP_NET_ADMIN, the ip and nft commands, a namespace that can be made);
callers skip with its reason when it does not.
"""
import os
import shutil
import subprocess

_TABLE = "tern_partition"


def _run(*argv, check=True, input=None):
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=30,
                          input=input)


def available():
    """(True, "") or (False, why the namespace tests cannot run here)."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, f"the {tool} command is missing (iproute2, nftables)"
    probe = f"tern-probe-{os.getpid()}"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return False, f"cannot create a network namespace: {r.stderr.strip()}"
    try:
        r = _run("ip", "netns", "exec", probe, "nft", "list", "ruleset", check=False)
        if r.returncode != 0:
            return False, f"nft does not run in a namespace: {r.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return True, ""


class Net:
    def __init__(self, n):
        tag = os.getpid() % 250 + 1
        self.bridge = f"tnbr{os.getpid() % 100000}"
        self.subnet = f"10.231.{tag}"
        self.names = [f"tern-{os.getpid()}-{i}" for i in range(n)]
        self.hosts = [f"{self.subnet}.{i + 1}" for i in range(n)]
        self._made = []
        self._bridge_made = False
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            self._bridge_made = True
            _run("ip", "addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for i, ns in enumerate(self.names):
                _run("ip", "netns", "add", ns)
                self._made.append(ns)
                host_end = f"tnv{os.getpid() % 10000}h{i}"
                ns_end = f"tnv{os.getpid() % 10000}n{i}"
                _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
                _run("ip", "link", "set", ns_end, "netns", ns)
                _run("ip", "link", "set", host_end, "master", self.bridge)
                _run("ip", "link", "set", host_end, "up")
                _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.hosts[i]}/24",
                     "dev", ns_end)
                _run("ip", "netns", "exec", ns, "ip", "link", "set", ns_end, "up")
                _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def prefix(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    def isolate(self, i):
        """Drop every packet namespace i sends or receives but loopback."""
        rules = (f"table inet {_TABLE} {{\n"
                 "  chain input { type filter hook input priority 0; policy drop;"
                 " iifname \"lo\" accept; }\n"
                 "  chain output { type filter hook output priority 0; policy drop;"
                 " oifname \"lo\" accept; }\n"
                 "}\n")
        _run("ip", "netns", "exec", self.names[i], "nft", "-f", "-", input=rules)

    def heal(self, i):
        _run("ip", "netns", "exec", self.names[i], "nft", "delete", "table", "inet", _TABLE)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        # Deleting a namespace deletes its veth end, and with it the pair.
        for ns in self._made:
            _run("ip", "netns", "del", ns, check=False)
        self._made = []
        if self._bridge_made:
            _run("ip", "link", "del", self.bridge, check=False)
            self._bridge_made = False
