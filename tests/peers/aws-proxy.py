#!/usr/bin/env python3
"""A project-owned proxy in front of moto_server (tests/peers/moto.sh): Tend's AWS backend
talks to EC2 through it, so tests can see every call it made and make moto misbehave the
way EC2 can, without changing moto.

    aws-proxy.py PORT UPSTREAM_URL [--state-dir DIR]

PORT 0 picks a free port. With --state-dir, the chosen port goes to DIR/port (written once
the proxy listens) and the PID to DIR/aws-proxy.pid.

Every request is forwarded to moto unchanged (method, path, query, headers but Host, body)
and moto's answer comes back unchanged, but for the faults below and where moto is more
lenient than EC2 (the proxy answers as EC2 does, without reaching moto):

  - ModifyInstanceAttribute with groups (GroupId.N) for an instance with more than one
    network interface: 400 InvalidInstanceID "There are multiple interfaces attached to
    instance '...'. Please specify an interface ID for the operation instead." (EC2 API
    Reference, ModifyInstanceAttribute: "can result in an error if the instance has more
    than one ENI ... use the ModifyNetworkInterfaceAttribute action"; the code, message and
    status are EC2's own, as EC2 users report them, e.g. hashicorp/terraform#19959); moto
    accepts it;
  - a NextToken the corrupt_next_token fault issued: 400 InvalidPaginationToken "The
    specified pagination token is not valid or is expired." (EC2 API Reference, "Error
    codes for the Amazon EC2 API": a common client error; client errors come with a
    400-series status); moto answers an unknown token with its own 500. POST /moto-api/reset is
forwarded like any other request (it empties moto). The proxy's own endpoints, /proxy/*,
are not forwarded and not logged:

  GET    /proxy/requests   the log since the last DELETE: [{"method", "path", "action",
                           "params", "status", "ts"}]; action is the EC2 Action from the
                           form body or the query (null for other requests), params the
                           whole form (EC2 query parameters are unique keys)
  DELETE /proxy/requests   empty the log
  POST   /proxy/faults     merge faults into the current ones (each key optional):
     "fail": {"action": "DescribeInstances", "status": 500, "after": 1, "times": 1,
              "code"?: "InternalError"}
         matching requests after the first `after` answer `status` with an EC2 error body
         (`times` times; -1 = always), without reaching moto;
     "corrupt_next_token": {"action": "DescribeInstances", "after": 0}
         the matching answers carrying a NextToken are counted; the one after the first
         `after` gets a NextToken moto never issued, so the next page request fails as
         EC2 fails on an unknown token (400 InvalidPaginationToken, above); once;
     "fail" with "paged": true matches only requests carrying a NextToken (a listing
         failing from its second page on: with status 500, EC2's server error);
     "max_results": {"action": "DescribeInstances", "value": 2}
         matching requests reach moto asking for pages of at most `value` items
         (EC2 may answer fewer than MaxResults with a NextToken), so a listing of a few
         instances has several pages;
     "slow": {"action": "TerminateInstances", "ms": 2000}
         matching requests are held this long before they are forwarded; with
         "until_cleared": true, until the faults are cleared (at most `ms`), so a test
         acts while a request is held however slow the machine is;
     "launch_time": {"instance": "i-...", "offset_seconds": -3600}
         DescribeInstances answers give that instance a launchTime shifted by the offset
         (EC2's clock behind or ahead of the caller's);
     "duplicate_instance": {"instance": "i-..."}
         DescribeInstances answers naming that instance name its reservation twice.
     Any fault may carry "params": {"InstanceId.1": "i-..."}: it matches only requests
     whose EC2 query parameters have these values.
     "pad": {"action": "DescribeInstances", "bytes": 78000000}
         matching successful answers get this many bytes of XML comment appended
         (a page far larger than any EC2 page), streamed without a Content-Length.
     A list of such objects is accepted for "fail", "slow", "launch_time" and
     "duplicate_instance".
  POST   /proxy/faults/clear   no faults
  GET    /proxy/faults         the current faults
"""
import argparse
import asyncio
import datetime
import os
import re
import signal
import time
import urllib.parse
import uuid

import aiohttp
from aiohttp import web

HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
              "content-encoding"}
ERROR_CODES = {400: "InvalidParameterValue", 401: "AuthFailure", 403: "UnauthorizedOperation",
               500: "InternalError", 503: "Unavailable"}
NEXT_TOKEN = re.compile(rb"<nextToken>([^<]*)</nextToken>")
LAUNCH_TIME = re.compile(rb"<launchTime>([^<]*)</launchTime>")
ITEM_TAG = re.compile(rb"<item>|</item>|</reservationSet>")
FAULTS = ("fail", "corrupt_next_token", "slow", "launch_time", "duplicate_instance", "pad",
          "max_results")
NETWORK_INTERFACE_ID = re.compile(rb"<networkInterfaceId>([^<]*)</networkInterfaceId>")
EC2_VERSION = "2016-11-15"


async def hold(slow, cleared):
    """A "slow" fault: `ms` milliseconds, or with "until_cleared" until `cleared` is
    set (at most `ms`)."""
    seconds = slow.get("ms", 0) / 1000
    if not slow.get("until_cleared"):
        await asyncio.sleep(seconds)
        return
    try:
        await asyncio.wait_for(cleared.wait(), seconds)
    except asyncio.TimeoutError:
        pass


def as_list(fault):
    if fault is None:
        return []
    return fault if isinstance(fault, list) else [fault]


def instance_tag(instance_id):
    return f"<instanceId>{instance_id}</instanceId>".encode()


def shift_launch_time(payload, instance_id, offset):
    """The payload with the first launchTime after the instance's ID (its own) shifted."""
    at = payload.find(instance_tag(instance_id))
    m = LAUNCH_TIME.search(payload, at) if at >= 0 else None
    if m is None:
        return payload
    when = datetime.datetime.fromisoformat(m.group(1).decode().replace("Z", "+00:00"))
    shifted = (when + datetime.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return payload[:m.start(1)] + shifted.encode() + payload[m.end(1):]


def reservation_spans(payload):
    """(start, end) of each item of the reservationSet (nested items skipped)."""
    start = payload.find(b"<reservationSet>")
    spans, depth, opened = [], 0, None
    if start < 0:
        return spans
    for m in ITEM_TAG.finditer(payload, start):
        if m.group(0) == b"</reservationSet>":
            break
        if m.group(0) == b"<item>":
            opened = m.start() if depth == 0 else opened
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                spans.append((opened, m.end()))
    return spans


def duplicate_reservation(payload, instance_id):
    """The payload with the reservation holding the instance named twice."""
    for start, end in reservation_spans(payload):
        if instance_tag(instance_id) in payload[start:end]:
            return payload[:end] + payload[start:end] + payload[end:]
    return payload


def ec2_error(status, code, message):
    body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>")
    return web.Response(status=status, body=body.encode(), content_type="text/xml")


class Proxy:
    def __init__(self, upstream):
        self.upstream = upstream.rstrip("/")
        self.session = None
        self.log = []
        self.faults = {}
        self.counts = {}
        # Set (and replaced) when the faults are cleared: what held requests wait for.
        self.cleared = asyncio.Event()
        # The NextTokens corrupt_next_token issued: EC2 refuses them (InvalidPaginationToken).
        self.forged_tokens = set()

    def hit(self, key, action, params):
        """The fault `key` firing for this request's `action` and `params` (and counting
        it), or None."""
        faults = self.faults.get(key)
        if faults is None or action is None:
            return None
        for i, fault in enumerate(faults if isinstance(faults, list) else [faults]):
            if fault.get("action") not in (None, action):
                continue
            if any(params.get(k) != v for k, v in fault.get("params", {}).items()):
                continue
            if fault.get("paged") and "NextToken" not in params:
                continue
            n = self.counts.get((key, i), 0)
            self.counts[(key, i)] = n + 1
            after, times = fault.get("after", 0), fault.get("times", 1)
            if n >= after and (times == -1 or n < after + times):
                return fault
        return None

    async def forward(self, request):
        body = await request.read()
        params = dict(urllib.parse.parse_qsl(request.query_string))
        if request.method == "POST" and body and "x-www-form-urlencoded" in request.headers.get("Content-Type", ""):
            params.update(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        action = params.get("Action") if "Action" in params else None
        entry = {"method": request.method, "path": request.path, "action": action,
                 "params": params if action else {}, "status": 0, "ts": time.time()}
        self.log.append(entry)
        slow = self.hit("slow", action, params)
        if slow:
            await hold(slow, self.cleared)
        fail = self.hit("fail", action, params)
        if fail:
            status = int(fail.get("status", 500))
            entry["status"] = status
            return ec2_error(status, fail.get("code") or ERROR_CODES.get(status, "InternalError"),
                             f"proxy fault: {action} fails with {status}")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        refusal = await self.as_ec2_refuses(action, params, headers)
        if refusal is not None:
            entry["status"] = refusal.status
            return refusal
        max_results = self.hit("max_results", action, params)
        if max_results and "MaxResults" in params:
            body = urllib.parse.urlencode({**dict(urllib.parse.parse_qsl(body.decode())),
                                           "MaxResults": str(max_results["value"])}).encode()
        url = self.upstream + request.path_qs
        try:
            async with self.session.request(request.method, url, headers=headers, data=body,
                                            allow_redirects=False) as upstream:
                payload = await upstream.read()
                status = upstream.status
                out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP}
        except aiohttp.ClientError as e:
            entry["status"] = 502
            return web.Response(status=502, text=f"the proxy could not reach moto: {e}")
        if status == 200 and NEXT_TOKEN.search(payload) and self.hit("corrupt_next_token", action, params):
            forged = uuid.uuid4().hex
            self.forged_tokens.add(forged)
            payload = NEXT_TOKEN.sub(f"<nextToken>{forged}</nextToken>".encode(), payload, count=1)
        if status == 200 and action == "DescribeInstances":
            payload = self.rewrite_instances(payload)
        entry["status"] = status
        pad = self.hit("pad", action, params) if status == 200 else None
        if pad:
            return await self.padded(request, status, payload, out_headers, int(pad["bytes"]))
        return web.Response(status=status, body=payload, headers=out_headers)

    async def as_ec2_refuses(self, action, params, headers):
        """EC2's refusal of a request moto would accept (see the module's doc), or None."""
        if params.get("NextToken") in self.forged_tokens:
            return ec2_error(400, "InvalidPaginationToken",
                             "The specified pagination token is not valid or is expired.")
        if action == "ModifyInstanceAttribute" and any(k.startswith("GroupId.") for k in params):
            instance = params.get("InstanceId", "")
            if len(await self.interfaces_of(instance, headers)) > 1:
                return ec2_error(400, "InvalidInstanceID",
                                 f"There are multiple interfaces attached to instance '{instance}'. "
                                 "Please specify an interface ID for the operation instead.")
        return None

    async def interfaces_of(self, instance, headers):
        """The network interfaces attached to `instance`, as moto has them (not logged)."""
        form = {"Action": "DescribeNetworkInterfaces", "Version": EC2_VERSION,
                "Filter.1.Name": "attachment.instance-id", "Filter.1.Value.1": instance}
        async with self.session.post(self.upstream + "/", headers=headers, data=form) as answer:
            return NETWORK_INTERFACE_ID.findall(await answer.read())

    def rewrite_instances(self, payload):
        """A DescribeInstances answer as the launch_time and duplicate_instance faults say."""
        for fault in as_list(self.faults.get("launch_time")):
            payload = shift_launch_time(payload, fault["instance"], float(fault["offset_seconds"]))
        for fault in as_list(self.faults.get("duplicate_instance")):
            payload = duplicate_reservation(payload, fault["instance"])
        return payload

    async def padded(self, request, status, payload, headers, size):
        """`payload` and `size` bytes of comment, chunked: the client has to stop reading."""
        headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        chunk = b"x" * (1 << 20)
        try:
            await response.write(payload + b"<!--")
            for _ in range(size // len(chunk)):
                await response.write(chunk)
            await response.write(b"-->")
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return response

    async def control(self, request):
        tail = request.match_info["tail"]
        if tail == "requests" and request.method in ("GET", "DELETE"):
            if request.method == "DELETE":
                self.log = []
            return web.json_response(self.log)
        if tail == "faults" and request.method == "GET":
            return web.json_response(self.faults)
        if tail == "faults" and request.method == "POST":
            try:
                body = await request.json()
            except ValueError:
                return web.json_response({"error": "the body is not JSON"}, status=400)
            for key, value in body.items():
                if key not in FAULTS:
                    return web.json_response({"error": f"unknown fault {key}"}, status=400)
                self.faults[key] = value
                self.counts = {k: v for k, v in self.counts.items() if k[0] != key}
            return web.json_response(self.faults)
        if tail == "faults/clear" and request.method == "POST":
            self.faults, self.counts = {}, {}
            self.cleared.set()
            self.cleared = asyncio.Event()
            return web.json_response({})
        return web.json_response({"error": f"no proxy endpoint {request.method} /proxy/{tail}"}, status=404)


async def main():
    ap = argparse.ArgumentParser(description="A logging, fault-injecting proxy in front of moto_server")
    ap.add_argument("port", type=int)
    ap.add_argument("upstream")
    ap.add_argument("--state-dir")
    args = ap.parse_args()
    proxy = Proxy(args.upstream)
    proxy.session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=120))
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_route("*", "/proxy/{tail:.*}", proxy.control)
    app.router.add_route("*", "/{tail:.*}", proxy.forward)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port, reuse_address=True)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    if args.state_dir:
        os.makedirs(args.state_dir, exist_ok=True)
        with open(os.path.join(args.state_dir, "aws-proxy.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
        tmp = os.path.join(args.state_dir, ".port.tmp")
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.rename(tmp, os.path.join(args.state_dir, "port"))
    print(f"AWS proxy listening on http://127.0.0.1:{port}, forwarding to {args.upstream}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await proxy.session.close()
    await runner.cleanup()
    if args.state_dir:
        for name in ("aws-proxy.pid", "port"):
            try:
                os.remove(os.path.join(args.state_dir, name))
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    asyncio.run(main())
