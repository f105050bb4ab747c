#!/usr/bin/env python3
"""The AWS peers of one test process: moto servers forked from one warm process, and
tests/peers/aws-seed.py's calls run in it.

A moto_server started cold spends about 3 s of CPU importing moto and loading its EC2
backend, and each aws-seed.py run about 0.5 s importing boto3: over the suite, more CPU
than any other peer. This process does both once, then forks one moto server per
AwsPeer (each with its own state: a fresh moto after one DescribeInstances, as a cold
start and its warm-up call leave it) and runs each seed call in-process.

Requests, one JSON object per line on stdin; one JSON answer per line on stdout:

    {"op": "moto", "stderr": PATH}   -> {"port": P, "pid": PID}   a new moto server on
                                        127.0.0.1:P, its stderr (request log) in PATH
    {"op": "stop", "pid": PID}       -> {"clean": BOOL}   SIGTERM, SIGKILL after 5 s; clean
                                        when it exited on SIGTERM
    {"op": "seed", "argv": [...]}    -> {"out": JSON} or {"error": "ERROR ..."}   one
                                        aws-seed.py command line

It prints {"ready": true} once warm. At the end of stdin (its test process exited, or
was killed) it kills every moto server it forked and exits; each server also dies with
it (PR_SET_PDEATHSIG), so none outlives the test process.
"""
import ctypes
import importlib.util
import json
import os
import signal
import sys
import time

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server
from werkzeug.test import Client

PR_SET_PDEATHSIG = 1
GRACE_S = 5.0
WARM_UP = "Action=DescribeInstances&Version=2016-11-15"
SIGV4_FOR_MOTO = ("AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, "
                  "SignedHeaders=host, Signature=0")


def load_seed():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "aws-seed.py")
    spec = importlib.util.spec_from_file_location("aws_seed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def warm_app():
    app = DomainDispatcherApplication(create_backend_app)
    answer = Client(app).post("/", data=WARM_UP, headers={
        "Content-Type": "application/x-www-form-urlencoded", "Authorization": SIGV4_FOR_MOTO})
    if answer.status_code != 200:
        raise SystemExit(f"aws-zygote: moto's warm-up DescribeInstances answered {answer.status_code}")
    return app


def fork_moto(app, stderr_path):
    """A moto server in a child process; returns (port, pid) once it listens."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(err, 2)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            server = make_server("127.0.0.1", 0, app, threaded=True)
            os.write(write_end, str(server.server_port).encode())
            os.close(write_end)
            server.serve_forever()
        finally:
            os._exit(1)
    os.close(write_end)
    port = os.read(read_end, 16)
    os.close(read_end)
    if not port:
        stop(pid)
        raise RuntimeError(f"the forked moto server exited before it listened (see {stderr_path})")
    return int(port), pid


def stop(pid):
    """SIGTERM, then SIGKILL after GRACE_S; True when it exited on SIGTERM."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def answer(message):
    sys.stdout.write(json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


def main():
    seed = load_seed()
    app = warm_app()
    children = set()
    answer({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        try:
            if op == "moto":
                port, pid = fork_moto(app, request["stderr"])
                children.add(pid)
                answer({"port": port, "pid": pid})
            elif op == "stop":
                pid = request["pid"]
                if pid not in children:
                    answer({"error": f"{pid} is not a moto server of this process"})
                    continue
                children.discard(pid)
                answer({"clean": stop(pid)})
            elif op == "seed":
                try:
                    answer({"out": seed.run(request["argv"])})
                except seed.SeedError as e:
                    answer({"error": str(e)})
                except SystemExit as e:
                    answer({"error": f"ERROR - usage: aws-seed.py {request['argv']}: exit {e.code}"})
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as e:  # the test sees it; the next request still works
            answer({"error": f"ERROR - {type(e).__name__}: {e}"})
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


if __name__ == "__main__":
    main()
