"""An nsqauthd stand-in for the end-to-end tests: its answer depends on
the secret (all, pub-only, short, none, deny, revocable; anything else is
a 500). revocable grants what all grants, for 1 s, until the test adds it
to revoked; from then on it grants nothing."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


class AuthServer:
    """An nsqauthd stand-in: the answer depends on the secret."""

    def __init__(self):
        self.hits = []
        self.revoked = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                u = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()}
                outer.hits.append(q)
                secret = q.get("auth_secret", "")
                if u.path != "/auth" or secret == "deny":
                    self.send_response(403)
                    self.end_headers()
                    return
                grants = {
                    "all": [{"topic": ".*", "channels": [".*"],
                             "permissions": ["publish", "subscribe"]}],
                    "pub-only": [{"topic": "^pub", "channels": [],
                                  "permissions": ["publish"]}],
                    "short": [{"topic": ".*", "channels": [".*"], "permissions": ["publish"]}],
                    "none": [],
                    "revocable": [] if secret in outer.revoked else
                    [{"topic": ".*", "channels": [".*"], "permissions": ["subscribe"]}],
                }.get(secret)
                if grants is None:
                    self.send_response(500)
                    self.end_headers()
                    return
                body = json.dumps({"ttl": 1 if secret in ("short", "revocable") else 3600,
                                   "identity": f"user-{secret}",
                                   "identity_url": "http://example.invalid/u",
                                   "authorizations": grants}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def count(self, secret):
        return sum(1 for h in self.hits if h.get("auth_secret") == secret)

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
