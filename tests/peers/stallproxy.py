#!/usr/bin/env python3
"""A registry proxy for tests (tests/peers/containerd.sh): forwards requests to an
upstream registry, but serves blobs of MIN_SIZE bytes or more slowly.
  MODE=stall   send the headers and the first CHUNK bytes, then nothing until the
               client goes away: a pull of such a blob never completes
  MODE=trickle send CHUNK bytes every DELAY seconds
  MODE=pass    a plain proxy
usage: stallproxy.py LISTEN_PORT UPSTREAM_URL [PIDFILE]   (env MODE, CHUNK, DELAY, MIN_SIZE)
Listens on 127.0.0.1 only; logs every request to stderr. With PIDFILE, writes its PID
there once it listens (and the path, on its command line, ties it to the peer's dir).
Adapted from the shared recipe stallproxy.py."""
import os
import select
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, UP = int(sys.argv[1]), sys.argv[2].rstrip('/')
PIDFILE = sys.argv[3] if len(sys.argv) > 3 else None
MODE = os.environ.get('MODE', 'stall')
CHUNK = int(os.environ.get('CHUNK', '1024'))
DELAY = float(os.environ.get('DELAY', '1'))
MIN_SIZE = int(os.environ.get('MIN_SIZE', '10000'))


class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        sys.stderr.write('[proxy] ' + (fmt % args) + '\n')
        sys.stderr.flush()

    def gone(self):
        """Whether the client closed its side of the connection."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable) and not self.connection.recv(1, 0x40)  # MSG_DONTWAIT

    def forward(self, head):
        headers = {k: v for k, v in self.headers.items() if k.lower() in ('accept', 'range', 'authorization')}
        request = urllib.request.Request(UP + self.path, method='HEAD' if head else 'GET', headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=30)
        except urllib.error.HTTPError as e:
            response = e
        body = b'' if head else response.read()
        self.send_response(response.status)
        for k, v in response.headers.items():
            if k.lower() not in ('transfer-encoding', 'connection', 'content-length', 'date', 'server'):
                self.send_header(k, v)
        length = response.headers.get('Content-Length', '0') if head else str(len(body))
        self.send_header('Content-Length', length)
        self.end_headers()
        if head:
            return
        slow = '/blobs/sha256:' in self.path and len(body) >= MIN_SIZE and MODE != 'pass'
        if not slow:
            self.wfile.write(body)
            return
        self.log_message('%s %s (%d bytes) for %s', MODE, self.path, len(body), self.client_address)
        try:
            self.wfile.write(body[:CHUNK])
            self.wfile.flush()
            offset = CHUNK
            while True:
                time.sleep(DELAY)
                if MODE == 'trickle':
                    if offset >= len(body):
                        return
                    self.wfile.write(body[offset:offset + CHUNK])
                    self.wfile.flush()
                    offset += CHUNK
                elif self.gone():
                    self.log_message('client went away')
                    self.close_connection = True
                    return
        except (BrokenPipeError, ConnectionResetError):
            self.log_message('client went away')
            self.close_connection = True

    def do_GET(self):
        self.forward(False)

    def do_HEAD(self):
        self.forward(True)


class Server(ThreadingHTTPServer):
    daemon_threads = True


server = Server(('127.0.0.1', PORT), Handler)
if PIDFILE:
    with open(PIDFILE + '.tmp', 'w') as f:
        f.write(f'{os.getpid()}\n')
    os.rename(PIDFILE + '.tmp', PIDFILE)
server.serve_forever()
