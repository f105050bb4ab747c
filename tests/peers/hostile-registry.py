#!/usr/bin/env python3
"""A hostile OCI registry on loopback, for tests/e2e/hostile_peers.rs.

Usage: hostile-registry.py PORT COMPONENT.wasm REQUEST_LOG

Repositories (any tag) and how each answers a manifest GET:
  tend/good      a valid wasm artifact of COMPONENT (its blobs served too)
  tend/big       200 with 512 MiB of JSON, generated while sent, no
                 Content-Length (the client must stop reading itself)
  tend/noisy     404 with an 8 MiB body full of newlines, escape sequences
                 and a forged log line
  tend/redirect  307 to http://169.254.169.254/latest/meta-data/ (the cloud
                 metadata endpoint: must be refused before any connection)
  tend/realm     401 with a Bearer challenge whose realm is link-local
  tend/internal  307 to http://127.0.0.2:PORT/internal/secret: another
                 origin on loopback (allowed: the registry is on loopback),
                 served by this script's second listener with a 404 whose
                 body (INTERNAL-SECRET) must never be echoed
  tend/shape     200 with a manifest whose config media type is 1 MiB long
  tend/authed    like tend/good, but only with the Bearer token that
                 /token (the challenge's realm, on this origin) gives for
                 Basic tend:s3cret and the scope repository:tend/authed:pull
Every request is appended to REQUEST_LOG as one JSON line (method, path,
headers with lowercased names, status, bytes of body sent), so the test can count what the client asked
and how much of an answer it took.
"""

import hashlib
import json
import socketserver
import sys
import base64
import urllib.parse
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT = int(sys.argv[1])
COMPONENT = open(sys.argv[2], "rb").read()
LOG = sys.argv[3]

CONFIG = b"{}"
BIG = 512 << 20
NOISY = 8 << 20


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


MANIFEST = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.wasm.config.v0+json",
            "digest": digest(CONFIG),
            "size": len(CONFIG),
        },
        "layers": [
            {
                "mediaType": "application/wasm",
                "digest": digest(COMPONENT),
                "size": len(COMPONENT),
            }
        ],
    }
).encode()
TOKEN = "pull-token-for-tend"
BLOBS = {digest(CONFIG): CONFIG, digest(COMPONENT): COMPONENT}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self, sent, status):
        with open(LOG, "a") as f:
            f.write(
                json.dumps(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "sent": sent,
                        "status": status,
                    }
                )
                + "\n"
            )

    def answer(self, status, body, headers=()):
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
            sent = len(body)
        except OSError:
            sent = -1
        self.record(sent, status)

    def do_GET(self):
        parts = self.path.split("?")[0].split("/")
        if self.path.startswith("/token?"):
            return self.token()
        if self.path.startswith("/internal/"):
            return self.answer(404, b"INTERNAL-SECRET of a service behind the registry")
        if self.path == "/v2/":
            return self.answer(200, b"{}")
        if len(parts) < 6 or parts[1] != "v2":
            return self.answer(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}')
        repository, kind = parts[3], parts[4]
        if repository == "authed" and self.headers.get("Authorization") != "Bearer " + TOKEN:
            realm = f'Bearer realm="http://127.0.0.1:{PORT}/token",service="hostile"'
            return self.answer(401, b"{}", [("WWW-Authenticate", realm)])
        if repository in ("good", "authed"):
            if kind == "manifests":
                return self.answer(
                    200,
                    MANIFEST,
                    [("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
                )
            blob = BLOBS.get(parts[5])
            return self.answer(200, blob) if blob else self.answer(404, b"{}")
        if repository == "big":
            return self.stream_big()
        if repository == "noisy":
            line = b"unknown\n2026-01-01T00:00:00Z  INFO tend: FORGED line \x1b[2J\x1b]0;owned\x07\r\n"
            body = (line * (NOISY // len(line) + 1))[:NOISY]
            return self.answer(404, body)
        if repository == "redirect":
            return self.answer(
                307,
                b"see the metadata",
                [("Location", "http://169.254.169.254/latest/meta-data/iam/")],
            )
        if repository == "realm":
            return self.answer(
                401,
                b"{}",
                [
                    (
                        "WWW-Authenticate",
                        'Bearer realm="http://169.254.169.254/latest/api/token",service="x"',
                    )
                ],
            )
        if repository == "internal":
            return self.answer(
                307,
                b"{}",
                [("Location", f"http://127.0.0.2:{PORT}/internal/secret")],
            )
        if repository == "shape":
            manifest = json.loads(MANIFEST)
            manifest["config"]["mediaType"] = "m\n" * (1 << 19)
            return self.answer(200, json.dumps(manifest).encode())
        return self.answer(404, b"{}")

    def token(self):
        query = urllib.parse.parse_qs(self.path.split("?", 1)[1])
        basic = "Basic " + base64.b64encode(b"tend:s3cret").decode()
        if (
            self.headers.get("Authorization") != basic
            or query.get("scope") != ["repository:tend/authed:pull"]
            or query.get("service") != ["hostile"]
        ):
            return self.answer(401, b'{"details": "bad credentials or scope"}')
        return self.answer(200, json.dumps({"token": TOKEN}).encode())

    def stream_big(self):
        """512 MiB of one JSON string, generated while sent; no length, the
        connection closes at the end."""
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        chunk = b"x" * (1 << 20)
        sent = 0
        try:
            self.wfile.write(b'{"schemaVersion": 2, "pad": "')
            while sent < BIG:
                self.wfile.write(chunk)
                sent += len(chunk)
            self.wfile.write(b'"}')
        except OSError:
            pass
        self.record(sent, 200)


class Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


# The second origin a redirect leads to (127.0.0.0/8 is all loopback).
threading.Thread(
    target=Server(("127.0.0.2", PORT), Handler).serve_forever, daemon=True
).start()
Server(("127.0.0.1", PORT), Handler).serve_forever()
