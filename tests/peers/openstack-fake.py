#!/usr/bin/env python3
"""A project-owned fake of the OpenStack APIs Tend's `cloud` capability uses, served over
real HTTP on loopback: Keystone v3 tokens, Nova 2.1 servers, Neutron 2.0 security groups,
rules and ports (a subset; the contract is /work/notes/openstack-contract.md, mirrored by
host/src/capabilities/cloud/openstack.rs).

    openstack-fake.py PORT [--state-dir DIR] [--token-ttl SECONDS] [--max-limit N]

PORT 0 picks a free port. With --state-dir, the chosen port goes to DIR/port (written once
the server listens), the PID to DIR/openstack-fake.pid and DIR/clouds.yaml names two
clouds for the `openstack` CLI and openstacksdk (OS_CLIENT_CONFIG_FILE=DIR/clouds.yaml):
`tend-fake` (password: user tend / tend-secret, project cluster, domain Default, region
RegionOne) and `tend-fake-app` (application credential tend-app / app-secret). No emulator of these services
exists in any registry and the real ones need hundreds of packages, hence this fake.

Why it can be trusted: the real `openstack` CLI (python-openstackclient, through
keystoneauth and openstacksdk) authenticates against it, discovers its endpoints from the
catalog, pages through servers, shows and deletes them, lists, creates and deletes security
groups and rules, lists and updates ports (tests/e2e/cloud_peers.rs).

Faithful to real OpenStack in:
- Keystone: version discovery (GET /identity, /identity/v3); POST /v3/auth/tokens with
  the password method (user by name + domain name or id, or by id) and the
  application_credential method (by id, or by name + user); project scope by name + domain
  or by id (no scope: the user's default project, as Keystone does); 401 on bad
  credentials; X-Subject-Token; a catalog with identity, compute, network and image
  endpoints (public, RegionOne); token expiry (--token-ttl, default 3600 s).
- Every service request needs X-Auth-Token of a live token: else 401 with
  keystonemiddleware's body and WWW-Authenticate header.
- Nova: servers/detail ordered by created desc then id desc, limit/marker paging with
  servers_links (at most min(limit, max_limit) per page; max_limit is Nova's
  [api]max_limit, default 1000), 400 on an unknown marker, DELETED servers unlisted, the
  `name` (regular expression) and `status` filters; server views with OS-EXT-STS/AZ/IPS
  attributes, addresses per network (floating addresses under the fixed network they are
  attached to), metadata, security group names that follow the server's ports; DELETE
  204, task_state "deleting" for the configured time, a repeated DELETE answering 204;
  itemNotFound bodies; microversion headers (the requested version echoed, up to 2.96).
- Neutron: security groups (two default egress rules per new group, revision_number
  bumped by rule changes, 409 SecurityGroupInUse when a port uses it), rules (400 on a bad
  direction, ethertype/CIDR conflict or both remote prefix and group; remote_ip_prefix
  normalised to its network; 409 SecurityGroupRuleExists on an equal rule, with protocol
  names and numbers equal as Neutron compares them), ports (PUT of security_groups with
  If-Match: revision_number=N and 412 RevisionNumberConstraintFailed); generic
  attribute filters (repeatable, any value matches), fields=, limit/marker paging with
  <resource>_links when more remain; NeutronError bodies.

Where it differs (simplifications nobody here relies on):
- One user (`tend`, password `tend-secret`), one project (`cluster`), one domain
  (`Default`, id `default`), one application credential (`tend-app`, `app-secret`); no
  roles, policy or multi-tenancy (all_tenants and project filters are ignored); scope
  given with an application credential is ignored rather than refused.
- No project gets an automatic "default" security group (reset means empty); a seeded
  server without groups has a port without groups.
- Server views have one shape whatever the microversion (the 2.47+ embedded flavor);
  no actions (reboot, stop...), no server create through Nova: servers are seeded
  through /fake. Ports are created only with seeded servers, one per fixed network.
- Nova emits servers_links only when more servers remain (as the contract says; real
  Nova also does when the last page is exactly full). Neutron emits no "previous" link.
- Keystone catalog and tokens only: no users/projects API, no token revocation list.

Fault switches and the control API (no token, not logged) are under /fake: see
Control.__doc__ below and the contract. Every Keystone/Nova/Neutron/Glance request is
logged (method, path, query, status, ts) for GET /fake/requests.
"""
import argparse
import asyncio
import datetime
import ipaddress
import json
import os
import re
import secrets
import signal
import time
import uuid

from aiohttp import web

DOMAIN = {"id": "default", "name": "Default"}
USER = {"id": "6d2d7ec3b5c0455b9a3c9f4b4c1e8a01", "name": "tend", "domain": DOMAIN,
        "password_expires_at": None}
PASSWORD = "tend-secret"
PROJECT = {"id": "5a1f0c6bb1b24c4e8f3c2d1e0a9b8c7d", "name": "cluster", "domain": DOMAIN}
APP_CREDENTIAL = {"id": "tend-app", "name": "tend-app", "secret": "app-secret"}
REGION = "RegionOne"
NOVA_MAX_MICROVERSION = "2.96"
FLAVOR = {"vcpus": 1, "ram": 2048, "disk": 20, "ephemeral": 0, "swap": 0,
          "original_name": "m1.small", "extra_specs": {}}
FLAVOR_ID = "2"
VM_STATE = {  # Nova status -> (vm_state, default task_state)
    "ACTIVE": ("active", None), "BUILD": ("building", "spawning"), "ERROR": ("error", None),
    "SHUTOFF": ("stopped", None), "REBOOT": ("active", "rebooting"),
    "HARD_REBOOT": ("active", "rebooting_hard"), "SUSPENDED": ("suspended", None),
    "PAUSED": ("paused", None), "RESCUE": ("rescued", None), "RESIZE": ("active", "resize_prep"),
    "VERIFY_RESIZE": ("resized", None), "SHELVED": ("shelved", None),
    "SHELVED_OFFLOADED": ("shelved_offloaded", None), "MIGRATING": ("active", "migrating"),
    "DELETED": ("deleted", None), "SOFT_DELETED": ("soft-delete", None),
    "UNKNOWN": ("error", None),
}
PROTOCOL_NUMBERS = {"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50,
                    "ah": 51, "ipv6-icmp": 58, "icmpv6": 58, "sctp": 132}
NOVA_ERROR_KEYS = {400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
                   409: "conflictingRequest", 413: "overLimit", 429: "overLimit",
                   500: "computeFault", 501: "notImplemented", 503: "serviceUnavailable"}
NEUTRON_PAGING = {"limit", "marker", "page_reverse", "fields", "sort_key", "sort_dir"}


def iso(ts, micro=False):
    t = datetime.datetime.fromtimestamp(ts, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def clouds_yaml(base):
    auth_url = f"{base}/identity/v3"
    common = "    region_name: RegionOne\n    interface: public\n    identity_api_version: 3\n"
    return (
        "clouds:\n"
        "  tend-fake:\n    auth_type: password\n    auth:\n"
        f"      auth_url: {auth_url}\n      username: {USER['name']}\n      password: {PASSWORD}\n"
        f"      project_name: {PROJECT['name']}\n      user_domain_name: {DOMAIN['name']}\n"
        f"      project_domain_name: {DOMAIN['name']}\n" + common +
        "  tend-fake-app:\n    auth_type: v3applicationcredential\n    auth:\n"
        f"      auth_url: {auth_url}\n      application_credential_id: {APP_CREDENTIAL['id']}\n"
        f"      application_credential_secret: {APP_CREDENTIAL['secret']}\n" + common)


def json_response(body, status=200, headers=None):
    return web.json_response(body, status=status, headers=headers)


def keystone_error(status, title, message):
    return json_response({"error": {"code": status, "title": title, "message": message}}, status)


def nova_error(status, message):
    return json_response({NOVA_ERROR_KEYS.get(status, "computeFault"): {"code": status, "message": message}},
                         status)


def neutron_error(status, kind, message):
    return json_response({"NeutronError": {"type": kind, "message": message, "detail": ""}}, status)


class Reject(Exception):
    """An error answer raised from deep inside a handler."""

    def __init__(self, response):
        super().__init__()
        self.response = response


def network_id(name):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tend-fake/network/{name}"))


def subnet_id(name, version):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tend-fake/subnet/{name}/v{version}"))


def path_matches(pattern, path):
    """A fault's path: exact, or a prefix when it ends with `*`."""
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


class Fake:
    def __init__(self, token_ttl, max_limit):
        self.token_ttl = token_ttl
        self.max_limit = max_limit
        self.base = "http://127.0.0.1"
        # Set (and replaced) when the faults are cleared: what requests a "slow"
        # fault with "until_cleared" holds wait for (at most its `ms`).
        self.cleared = asyncio.Event()
        self.reset()

    def reset(self):
        self.servers = {}
        self.groups = {}
        self.rules = {}
        self.ports = {}
        self.tokens = {}
        self.faults = {}
        self.fault_counts = {}
        self.log = []
        self.delete_seconds = 0.0
        self.next_ip = 5
        self._sorted_servers = None

    # --- shared helpers --------------------------------------------------------------

    def purge(self):
        """Servers whose delete time has passed are gone (with their ports)."""
        now = time.time()
        gone = [s["id"] for s in self.servers.values()
                if s["deleting_until"] is not None and s["deleting_until"] <= now]
        for sid in gone:
            self.remove_server(sid)

    def remove_server(self, sid):
        self.servers.pop(sid, None)
        for pid in [p["id"] for p in self.ports.values() if p["device_id"] == sid]:
            del self.ports[pid]
        self._sorted_servers = None

    def sorted_servers(self):
        if self._sorted_servers is None:
            self._sorted_servers = sorted(
                (s for s in self.servers.values() if s["status"] != "DELETED"),
                key=lambda s: (s["created"], s["id"]), reverse=True)
        return self._sorted_servers

    def fault_hit(self, key, path, method=None):
        """The fault `key` matching this request, counting it; None when it does not fire."""
        faults = self.faults.get(key)
        if faults is None:
            return None
        for i, fault in enumerate(faults if isinstance(faults, list) else [faults]):
            if not path_matches(fault.get("path", "/compute/v2.1/servers/detail"), path):
                continue
            if fault.get("method") and method and fault["method"].upper() != method:
                continue
            n = self.fault_counts.get((key, i), 0)
            self.fault_counts[(key, i)] = n + 1
            if n < fault.get("after", 0):
                continue
            times = fault.get("times", 1)
            if times != -1 and n >= fault.get("after", 0) + times:
                continue
            return fault
        return None

    def page(self, items, query, key, path, link_path=None):
        """Limit/marker paging: (page, next link or None). Items are in list order."""
        limit = min(int(query.get("limit", self.max_limit)), self.max_limit)
        if limit < 0:
            raise Reject(self.bad_request(path, f"limit must be >= 0, got {limit}"))
        start = 0
        marker = query.get("marker")
        if marker is not None:
            ids = [i["id"] for i in items]
            if marker not in ids:
                raise Reject(self.marker_not_found(path, marker))
            start = ids.index(marker) + 1
        page = items[start:start + limit]
        if not page or start + limit >= len(items):
            return page, None
        next_marker = page[-1]["id"]
        if self.fault_hit("bad_marker", path):
            next_marker = str(uuid.uuid4())
        params = [(k, v) for k, v in query.items() if k not in ("limit", "marker")]
        params += [("limit", str(limit)), ("marker", next_marker)]
        qs = "&".join(f"{k}={v}" for k, v in params)
        return page, [{"rel": "next", "href": f"{self.base}{link_path or path}?{qs}"}]

    def bad_request(self, path, message):
        if path.startswith("/network"):
            return neutron_error(400, "HTTPBadRequest", message)
        return nova_error(400, message)

    def marker_not_found(self, path, marker):
        if path.startswith("/network"):
            return neutron_error(400, "BadRequest", f"Bad request: marker {marker} not found")
        return nova_error(400, f"marker [{marker}] not found")

    # --- Keystone --------------------------------------------------------------------

    def catalog(self):
        def service(kind, name, path):
            return {"type": kind, "name": name, "id": uuid.uuid5(uuid.NAMESPACE_URL, kind).hex,
                    "endpoints": [{"id": uuid.uuid5(uuid.NAMESPACE_URL, path).hex, "interface": "public",
                                   "region": REGION, "region_id": REGION, "url": f"{self.base}{path}"}]}
        return [service("identity", "keystone", "/identity"),
                service("compute", "nova", "/compute/v2.1"),
                service("network", "neutron", "/network"),
                service("image", "glance", "/image")]

    def issue(self, body):
        auth = (body or {}).get("auth")
        if not isinstance(auth, dict) or not isinstance(auth.get("identity"), dict):
            return keystone_error(400, "Bad Request", "Expecting to find identity in auth.")
        identity = auth["identity"]
        methods = identity.get("methods") or []
        unauthorized = keystone_error(401, "Unauthorized", "The request you have made requires authentication.")
        if methods == ["password"]:
            user = (identity.get("password") or {}).get("user") or {}
            if user.get("id"):
                known = user["id"] == USER["id"]
            else:
                dom = user.get("domain") or {}
                known = user.get("name") == USER["name"] and (
                    dom.get("id") == DOMAIN["id"] or dom.get("name") == DOMAIN["name"])
            if not known or user.get("password") != PASSWORD:
                return unauthorized
            scope = auth.get("scope")
            if scope is not None:
                project = scope.get("project") if isinstance(scope, dict) else None
                if not isinstance(project, dict):
                    return keystone_error(401, "Unauthorized", "Only project scope is supported here.")
                if project.get("id"):
                    ok = project["id"] == PROJECT["id"]
                else:
                    dom = project.get("domain") or {}
                    ok = project.get("name") == PROJECT["name"] and (
                        dom.get("id") == DOMAIN["id"] or dom.get("name") == DOMAIN["name"])
                if not ok:
                    return unauthorized
        elif methods == ["application_credential"]:
            cred = identity.get("application_credential") or {}
            by_id = cred.get("id") == APP_CREDENTIAL["id"]
            by_name = cred.get("name") == APP_CREDENTIAL["name"] and (
                (cred.get("user") or {}).get("id") == USER["id"]
                or (cred.get("user") or {}).get("name") == USER["name"])
            if not (by_id or by_name) or cred.get("secret") != APP_CREDENTIAL["secret"]:
                return unauthorized
        else:
            return unauthorized
        now = time.time()
        token = "gAAAAA" + secrets.token_urlsafe(96)
        self.tokens[token] = {"expires": now + self.token_ttl, "issued": now, "methods": methods}
        return web.json_response(self.token_body(token), status=201, headers={"X-Subject-Token": token})

    def token_body(self, token):
        t = self.tokens[token]
        return {"token": {
            "methods": t["methods"], "expires_at": iso(t["expires"], micro=True),
            "issued_at": iso(t["issued"], micro=True), "audit_ids": [uuid.uuid4().hex[:22]],
            "user": USER, "project": PROJECT, "is_domain": False,
            "roles": [{"id": uuid.uuid5(uuid.NAMESPACE_URL, "member").hex, "name": "member"}],
            "catalog": self.catalog()}}

    def token_ok(self, token):
        t = self.tokens.get(token or "")
        return t is not None and t["expires"] > time.time()

    def identity_versions(self):
        return {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": f"{self.base}/identity/v3/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.identity-v3+json"}]}

    # --- Nova ------------------------------------------------------------------------

    def seed_server(self, spec):
        now = time.time()
        if "created" in spec:
            created = parse_time(spec["created"])
        else:
            created = now - float(spec.get("age_seconds", 0))
        sid = spec.get("id") or str(uuid.uuid4())
        if sid in self.servers:
            raise Reject(json_response({"error": f"server {sid} exists"}, 409))
        status = spec.get("status", "ACTIVE")
        if status not in VM_STATE:
            raise Reject(json_response({"error": f"unknown status {status}"}, 400))
        vm_state, task_state = VM_STATE[status]
        addresses = spec.get("addresses")
        if addresses is None:
            addresses = {"private": [f"10.0.{self.next_ip // 250}.{self.next_ip % 250 + 2}"]}
            self.next_ip += 1
        group_ids = spec.get("security_groups") or []
        for gid in group_ids:
            if gid not in self.groups:
                raise Reject(json_response({"error": f"no security group {gid}"}, 400))
        server = {
            "id": sid, "name": spec.get("name", f"server-{sid[:8]}"), "status": status,
            "task_state": spec.get("task_state", task_state), "vm_state": spec.get("vm_state", vm_state),
            "zone": spec.get("zone", "nova"), "created": created, "updated": created,
            "metadata": dict(spec.get("metadata") or {}),
            "fixed": {net: ips for net, ips in addresses.items() if net != "public"},
            "floating": list(addresses.get("public", [])),
            "deleting_until": None, "key_name": spec.get("key_name"),
        }
        self.servers[sid] = server
        self._sorted_servers = None
        for net, ips in server["fixed"].items():
            pid = str(uuid.uuid4())
            self.ports[pid] = {
                "id": pid, "name": "", "description": "", "network_id": network_id(net),
                "tenant_id": PROJECT["id"], "project_id": PROJECT["id"],
                "mac_address": "fa:16:3e:%02x:%02x:%02x" % tuple(secrets.token_bytes(3)),
                "admin_state_up": True, "status": "ACTIVE", "device_id": sid,
                "device_owner": f"compute:{server['zone']}",
                "fixed_ips": [{"ip_address": ip, "subnet_id": subnet_id(net, ipaddress.ip_address(ip).version)}
                              for ip in ips],
                "allowed_address_pairs": [], "extra_dhcp_opts": [], "security_groups": list(group_ids),
                "port_security_enabled": True, "revision_number": 1, "tags": [],
                "created_at": iso(created), "updated_at": iso(created), "_network": net,
            }
        return server

    def server_groups(self, sid):
        names = []
        for port in self.ports.values():
            if port["device_id"] == sid:
                for gid in port["security_groups"]:
                    name = self.groups[gid]["name"] if gid in self.groups else gid
                    if name not in names:
                        names.append(name)
        return [{"name": n} for n in names]

    def server_view(self, s):
        addresses = {}
        for net, ips in s["fixed"].items():
            mac = next((p["mac_address"] for p in self.ports.values()
                        if p["device_id"] == s["id"] and p["_network"] == net), None)
            entries = [{"addr": ip, "version": ipaddress.ip_address(ip).version, "OS-EXT-IPS:type": "fixed",
                        "OS-EXT-IPS-MAC:mac_addr": mac} for ip in ips]
            addresses[net] = entries
        if s["floating"]:
            first = next(iter(addresses), "public")
            addresses.setdefault(first, []).extend(
                {"addr": ip, "version": ipaddress.ip_address(ip).version, "OS-EXT-IPS:type": "floating",
                 "OS-EXT-IPS-MAC:mac_addr": None} for ip in s["floating"])
        link = f"{self.base}/compute/v2.1/servers/{s['id']}"
        return {
            "id": s["id"], "name": s["name"], "status": s["status"],
            "OS-EXT-STS:task_state": s["task_state"], "OS-EXT-STS:vm_state": s["vm_state"],
            "OS-EXT-STS:power_state": 1 if s["vm_state"] == "active" else 4,
            "OS-EXT-AZ:availability_zone": s["zone"], "created": iso(s["created"]),
            "updated": iso(s["updated"]), "addresses": addresses, "metadata": s["metadata"],
            "security_groups": self.server_groups(s["id"]), "tenant_id": PROJECT["id"],
            "user_id": USER["id"], "flavor": FLAVOR, "image": "", "key_name": s["key_name"],
            "hostId": "", "accessIPv4": "", "accessIPv6": "", "progress": 0,
            "config_drive": "", "locked": False, "locked_reason": None, "description": None,
            "tags": [], "trusted_image_certificates": None, "server_groups": [],
            "os-extended-volumes:volumes_attached": [], "OS-DCF:diskConfig": "MANUAL",
            "OS-SRV-USG:launched_at": iso(s["created"]), "OS-SRV-USG:terminated_at": None,
            "links": [{"rel": "self", "href": link}, {"rel": "bookmark", "href": link}],
        }

    def nova_version(self):
        return {"id": "v2.1", "status": "CURRENT", "version": NOVA_MAX_MICROVERSION,
                "min_version": "2.1", "updated": "2013-07-23T11:33:21Z",
                "links": [{"rel": "self", "href": f"{self.base}/compute/v2.1/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.compute+json;version=2.1"}]}

    def nova(self, request, rest):
        q = request.query
        method = request.method
        if rest in ("", "/"):
            return json_response({"version": self.nova_version()})
        if rest in ("/servers/detail", "/servers") and method == "GET":
            servers = self.sorted_servers()
            if "name" in q:
                pattern = re.compile(q["name"])
                servers = [s for s in servers if pattern.search(s["name"])]
            if "status" in q:
                servers = [s for s in servers if s["status"] == q["status"].upper()]
            if self.faults.get("empty_servers"):
                servers = []
            page, links = self.page(servers, q, "servers", request.path)
            # duplicate_server: ID: the page holding that server names it twice.
            duplicate = self.faults.get("duplicate_server")
            page = page + [s for s in page if s["id"] == duplicate]
            if rest == "/servers":
                body = {"servers": [{"id": s["id"], "name": s["name"],
                                     "links": self.server_view(s)["links"]} for s in page]}
            else:
                body = {"servers": [self.server_view(s) for s in page]}
            if links:
                body["servers_links"] = links
            return json_response(body)
        m = re.fullmatch(r"/servers/([^/]+)", rest)
        if m:
            s = self.servers.get(m.group(1))
            if s is None or s["status"] == "DELETED":
                return nova_error(404, f"Instance {m.group(1)} could not be found.")
            if method == "GET":
                return json_response({"server": self.server_view(s)})
            if method == "DELETE":
                if self.delete_seconds <= 0:
                    self.remove_server(s["id"])
                elif s["deleting_until"] is None:
                    s["task_state"] = "deleting"
                    s["updated"] = time.time()
                    s["deleting_until"] = time.time() + self.delete_seconds
                return web.Response(status=204)
            return nova_error(405, f"{method} is not allowed here")
        if rest == "/flavors/detail" or rest == "/flavors":
            return json_response({"flavors": [self.flavor_view()]})
        if rest == f"/flavors/{FLAVOR_ID}":
            return json_response({"flavor": self.flavor_view()})
        if rest == "/os-availability-zone":
            return json_response({"availabilityZoneInfo": [{"zoneName": "nova", "zoneState": {"available": True},
                                                            "hosts": None}]})
        return nova_error(404, "The resource could not be found.")

    def flavor_view(self):
        return {"id": FLAVOR_ID, "name": FLAVOR["original_name"], "vcpus": FLAVOR["vcpus"],
                "ram": FLAVOR["ram"], "disk": FLAVOR["disk"], "OS-FLV-EXT-DATA:ephemeral": 0,
                "swap": "", "rxtx_factor": 1.0, "os-flavor-access:is_public": True,
                "description": None, "extra_specs": {}, "links": []}

    # --- Neutron ---------------------------------------------------------------------

    def new_rule(self, spec, check=True):
        gid = spec.get("security_group_id")
        if gid not in self.groups:
            raise Reject(neutron_error(404, "SecurityGroupNotFound", f"Security group {gid} does not exist"))
        direction = spec.get("direction")
        if direction not in ("ingress", "egress"):
            raise Reject(neutron_error(400, "HTTPBadRequest",
                                       f"Invalid input for direction. Reason: {direction!r} is not in "
                                       "['ingress', 'egress']."))
        ethertype = spec.get("ethertype") or "IPv4"
        if ethertype not in ("IPv4", "IPv6"):
            raise Reject(neutron_error(400, "SecurityGroupRuleInvalidEtherType",
                                       f"Security group rule for ethertype '{ethertype}' not supported. "
                                       "Allowed values are ('IPv4', 'IPv6')."))
        protocol = spec.get("protocol")
        if protocol is not None:
            protocol = str(protocol).lower()
            if protocol == "any":
                protocol = None
            elif protocol not in PROTOCOL_NUMBERS and not protocol.isdigit():
                raise Reject(neutron_error(400, "SecurityGroupRuleInvalidProtocol",
                                           f"Security group rule protocol {protocol} not supported."))
        prefix = spec.get("remote_ip_prefix")
        if prefix is not None:
            try:
                net = ipaddress.ip_network(prefix, strict=False)
            except ValueError:
                raise Reject(neutron_error(400, "HTTPBadRequest",
                                           f"Invalid input for remote_ip_prefix. Reason: '{prefix}' is not a "
                                           "valid IP subnet."))
            if f"IPv{net.version}" != ethertype:
                raise Reject(neutron_error(400, "SecurityGroupRuleParameterConflict",
                                           f"Conflicting value ethertype {ethertype} for CIDR {prefix}"))
            prefix = str(net)
        remote_group = spec.get("remote_group_id")
        if prefix is not None and remote_group is not None:
            raise Reject(neutron_error(400, "SecurityGroupRemoteGroupAndRemoteIpPrefix",
                                       "Only remote_ip_prefix or remote_group_id may be provided."))
        if remote_group is not None and remote_group not in self.groups:
            raise Reject(neutron_error(404, "SecurityGroupNotFound",
                                       f"Security group {remote_group} does not exist"))
        pmin, pmax = spec.get("port_range_min"), spec.get("port_range_max")
        if pmin is not None and pmax is None and protocol in ("tcp", "udp", "6", "17", "sctp", "132"):
            pmax = pmin
        if pmin is not None and pmax is not None and protocol in ("tcp", "udp", "6", "17", "sctp", "132") \
                and int(pmin) > int(pmax):
            raise Reject(neutron_error(400, "SecurityGroupInvalidPortRange",
                                       "For TCP/UDP protocols, port_range_min must be <= port_range_max"))
        rule = {
            "id": spec.get("id") or str(uuid.uuid4()), "security_group_id": gid, "direction": direction,
            "ethertype": ethertype, "protocol": protocol,
            "port_range_min": None if pmin is None else int(pmin),
            "port_range_max": None if pmax is None else int(pmax),
            "remote_ip_prefix": prefix, "remote_group_id": remote_group,
            "remote_address_group_id": None, "normalized_cidr": prefix,
            "description": spec.get("description", ""), "project_id": PROJECT["id"],
            "tenant_id": PROJECT["id"], "revision_number": 0, "tags": [],
            "created_at": iso(time.time()), "updated_at": iso(time.time()),
        }
        if check:
            key = self.rule_key(rule)
            for other in self.rules.values():
                if self.rule_key(other) == key:
                    raise Reject(neutron_error(409, "SecurityGroupRuleExists",
                                               f"Security group rule already exists. Rule id is {other['id']}."))
        return rule

    @staticmethod
    def rule_key(rule):
        protocol = rule["protocol"]
        number = PROTOCOL_NUMBERS.get(protocol, protocol)
        return (rule["security_group_id"], rule["direction"], rule["ethertype"],
                None if number is None else str(number), rule["port_range_min"], rule["port_range_max"],
                rule["remote_ip_prefix"], rule["remote_group_id"])

    def add_rule(self, rule):
        self.rules[rule["id"]] = rule
        self.groups[rule["security_group_id"]]["revision_number"] += 1

    def new_group(self, spec):
        gid = spec.get("id") or str(uuid.uuid4())
        if gid in self.groups:
            raise Reject(json_response({"error": f"security group {gid} exists"}, 409))
        now = iso(time.time())
        group = {"id": gid, "name": spec.get("name", ""), "description": spec.get("description", ""),
                 "project_id": PROJECT["id"], "tenant_id": PROJECT["id"], "revision_number": 1,
                 "stateful": spec.get("stateful", True), "shared": False, "tags": [],
                 "created_at": now, "updated_at": now}
        self.groups[gid] = group
        rules = spec.get("rules")
        if rules is None:
            rules = [{"direction": "egress", "ethertype": "IPv4"}, {"direction": "egress", "ethertype": "IPv6"}]
        try:
            for r in rules:
                self.add_rule(self.new_rule({**r, "security_group_id": gid}))
        except Reject:
            self.groups.pop(gid)
            for rid in [r["id"] for r in self.rules.values() if r["security_group_id"] == gid]:
                del self.rules[rid]
            raise
        group["revision_number"] = 1
        return group

    def group_view(self, g):
        return {**g, "security_group_rules": [r for r in self.rules.values() if r["security_group_id"] == g["id"]]}

    @staticmethod
    def port_view(p):
        return {k: v for k, v in p.items() if not k.startswith("_")}

    def neutron_list(self, request, key, items):
        """Neutron's GET on a collection: attribute filters, sort by id, paging, fields=."""
        q = request.query
        for name in set(q.keys()) - NEUTRON_PAGING:
            wanted = q.getall(name)
            items = [i for i in items if name in i and (
                str(i[name]).lower() if isinstance(i[name], bool) else str(i[name])) in wanted]
        items = sorted(items, key=lambda i: i["id"])
        page, links = self.page(items, q, key, request.path)
        fields = q.getall("fields", [])
        if fields:
            page = [{k: v for k, v in i.items() if k in fields} for i in page]
        body = {key: page}
        if links:
            body[f"{key}_links"] = links
        return json_response(body)

    async def neutron(self, request, rest):
        method = request.method
        if rest in ("", "/"):
            return json_response({"versions": [{"id": "v2.0", "status": "CURRENT", "links": [
                {"rel": "self", "href": f"{self.base}/network/v2.0/"}]}]})
        if not rest.startswith("/v2.0"):
            return neutron_error(404, "HTTPNotFound", "The resource could not be found.")
        rest = rest[len("/v2.0"):]
        if rest.endswith(".json"):
            rest = rest[:-5]
        if rest in ("", "/"):
            return json_response({"resources": [
                {"name": n, "collection": c, "links": [{"rel": "self", "href": f"{self.base}/network/v2.0/{c}"}]}
                for n, c in (("security_group", "security-groups"),
                             ("security_group_rule", "security-group-rules"), ("port", "ports"))]})
        if rest == "/extensions":
            return json_response({"extensions": [
                {"alias": a, "name": a, "description": "", "updated": "2020-01-01T00:00:00-00:00", "links": []}
                for a in ("security-group", "standard-attr-revisions", "revision-if-match",
                          "port-security", "stateful-security-group")]})
        body = None
        if method in ("POST", "PUT"):
            try:
                body = await request.json()
            except ValueError:
                return neutron_error(400, "HTTPBadRequest", "Malformed request body")
        if rest == "/security-groups":
            if method == "GET":
                return self.neutron_list(request, "security_groups",
                                         [self.group_view(g) for g in self.groups.values()])
            if method == "POST":
                spec = (body or {}).get("security_group") or {}
                return json_response({"security_group": self.group_view(
                    self.new_group({"name": spec.get("name", ""), "description": spec.get("description", ""),
                                    "stateful": spec.get("stateful", True)}))}, 201)
        m = re.fullmatch(r"/security-groups/([^/]+)", rest)
        if m:
            g = self.groups.get(m.group(1))
            if g is None:
                return neutron_error(404, "SecurityGroupNotFound", f"Security group {m.group(1)} does not exist")
            if method == "GET":
                return json_response({"security_group": self.group_view(g)})
            if method == "PUT":
                spec = (body or {}).get("security_group") or {}
                for k in ("name", "description", "stateful"):
                    if k in spec:
                        g[k] = spec[k]
                g["revision_number"] += 1
                return json_response({"security_group": self.group_view(g)})
            if method == "DELETE":
                if any(g["id"] in p["security_groups"] for p in self.ports.values()):
                    return neutron_error(409, "SecurityGroupInUse",
                                         f"Security Group {g['id']} in use.")
                del self.groups[g["id"]]
                for rid in [r["id"] for r in self.rules.values() if r["security_group_id"] == g["id"]]:
                    del self.rules[rid]
                return web.Response(status=204)
        if rest == "/security-group-rules":
            if method == "GET":
                return self.neutron_list(request, "security_group_rules", list(self.rules.values()))
            if method == "POST":
                spec = (body or {}).get("security_group_rule")
                if not isinstance(spec, dict):
                    return neutron_error(400, "HTTPBadRequest", "Resource body required")
                rule = self.new_rule(spec)
                self.add_rule(rule)
                return json_response({"security_group_rule": rule}, 201)
        m = re.fullmatch(r"/security-group-rules/([^/]+)", rest)
        if m:
            r = self.rules.get(m.group(1))
            if r is None:
                return neutron_error(404, "SecurityGroupRuleNotFound",
                                     f"Security group rule {m.group(1)} does not exist")
            if method == "GET":
                return json_response({"security_group_rule": r})
            if method == "DELETE":
                del self.rules[r["id"]]
                if r["security_group_id"] in self.groups:
                    self.groups[r["security_group_id"]]["revision_number"] += 1
                return web.Response(status=204)
        if rest == "/ports" and method == "GET":
            return self.neutron_list(request, "ports", [self.port_view(p) for p in self.ports.values()])
        m = re.fullmatch(r"/ports/([^/]+)", rest)
        if m:
            p = self.ports.get(m.group(1))
            if p is None:
                return neutron_error(404, "PortNotFound", f"Port {m.group(1)} could not be found.")
            if method == "GET":
                return json_response({"port": self.port_view(p)})
            if method == "PUT":
                match = re.fullmatch(r"\s*revision_number=(\d+)\s*", request.headers.get("If-Match", "")) \
                    if "If-Match" in request.headers else None
                if "If-Match" in request.headers and (match is None or int(match.group(1)) != p["revision_number"]):
                    return neutron_error(412, "RevisionNumberConstraintFailed",
                                         f"Constrained to {match.group(1) if match else request.headers['If-Match']}, "
                                         f"but current revision is {p['revision_number']}")
                spec = (body or {}).get("port")
                if not isinstance(spec, dict):
                    return neutron_error(400, "HTTPBadRequest", "Resource body required")
                if "security_groups" in spec:
                    groups = spec["security_groups"] or []
                    for gid in groups:
                        if gid not in self.groups:
                            return neutron_error(404, "SecurityGroupNotFound",
                                                 f"Security group {gid} does not exist")
                    p["security_groups"] = list(dict.fromkeys(groups))
                for k in ("name", "description", "admin_state_up"):
                    if k in spec:
                        p[k] = spec[k]
                p["revision_number"] += 1
                p["updated_at"] = iso(time.time())
                return json_response({"port": self.port_view(p)})
        return neutron_error(404 if method == "GET" else 405, "HTTPNotFound",
                             "The resource could not be found.")

    # --- Glance (only what `openstack server list` asks for) --------------------------

    def glance(self, request, rest):
        if rest in ("", "/", "/versions"):
            return json_response({"versions": [{"id": "v2.16", "status": "CURRENT", "links": [
                {"rel": "self", "href": f"{self.base}/image/v2/"}]}]})
        if rest == "/v2/images":
            return json_response({"images": [], "first": "/v2/images", "schema": "/v2/schemas/images"})
        if rest.startswith("/v2/images/"):
            return web.Response(status=404, text="404 Not Found\n\nNo image found.")
        return web.Response(status=404, text="404 Not Found")

    # --- dispatch --------------------------------------------------------------------

    async def service(self, request):
        """Keystone, Nova, Neutron, Glance: faults, authentication, the handler, the log."""
        path = request.path
        self.purge()
        status = 500
        try:
            response = await self.dispatch(request, path)
            status = response.status
            return response
        except Reject as r:
            status = r.response.status
            return r.response
        except asyncio.CancelledError:
            status = request.get("truncated_status", 499)
            raise
        finally:
            self.log.append({"method": request.method, "path": path, "query": request.query_string,
                             "status": status, "ts": time.time()})

    async def dispatch(self, request, path):
        method = request.method
        slow = self.fault_hit("slow", path, method)
        if slow:
            seconds = slow.get("ms", 0) / 1000
            if slow.get("until_cleared"):
                try:
                    await asyncio.wait_for(self.cleared.wait(), seconds)
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(seconds)
        redirect = self.fault_hit("redirect", path, method)
        if redirect:
            # {"redirect": {"path": ..., "location": URL}}: a 307 elsewhere (a
            # client that follows it hands that URL the token).
            return web.Response(status=307, headers={"Location": redirect["location"]})
        fail = self.fault_hit("fail", path, method)
        if fail:
            code = int(fail.get("status", 500))
            message = f"fake fault: {method} {path} fails with {code}"
            if path.startswith("/network"):
                return neutron_error(code, "HTTPInternalServerError" if code >= 500 else "HTTPError", message)
            if path.startswith("/identity"):
                return keystone_error(code, "Fault", message)
            return nova_error(code, message)
        if path in ("/identity", "/identity/"):
            return json_response({"versions": {"values": [self.identity_versions()]}}, 300)
        if path in ("/identity/v3", "/identity/v3/"):
            return json_response({"version": self.identity_versions()})
        if path == "/identity/v3/auth/tokens":
            if method == "POST":
                try:
                    body = await request.json()
                except ValueError:
                    return keystone_error(400, "Bad Request", "Malformed request body")
                return self.issue(body)
            if method == "GET":
                if not self.token_ok(request.headers.get("X-Auth-Token")):
                    return self.unauthorized()
                subject = request.headers.get("X-Subject-Token")
                if not self.token_ok(subject):
                    return keystone_error(404, "Not Found", f"Could not find token: {subject}.")
                return json_response(self.token_body(subject), headers={"X-Subject-Token": subject})
        if path.startswith("/identity"):
            return keystone_error(404, "Not Found", "The resource could not be found.")
        for prefix in ("/compute/v2.1", "/compute", "/network", "/image"):
            if path == prefix or path.startswith(prefix + "/"):
                break
        else:
            return web.Response(status=404, text="404 Not Found")
        rest = path[len(prefix):]
        if prefix == "/compute":  # unversioned root: the versions list
            if rest in ("", "/"):
                return json_response({"versions": [self.nova_version()]})
            return nova_error(404, "The resource could not be found.")
        discovery = rest in ("", "/") or (prefix == "/network" and rest in ("/v2.0", "/v2.0/"))
        if not discovery and not self.token_ok(request.headers.get("X-Auth-Token")):
            return self.unauthorized()
        if prefix == "/compute/v2.1":
            response = self.nova(request, rest)
            asked = request.headers.get("OpenStack-API-Version", "").replace("compute", "").strip() \
                or request.headers.get("X-OpenStack-Nova-API-Version", "")
            version = NOVA_MAX_MICROVERSION if asked in ("", "latest") else asked
            response.headers["OpenStack-API-Version"] = f"compute {version}"
            response.headers["X-OpenStack-Nova-API-Version"] = version
            response.headers["Vary"] = "OpenStack-API-Version, X-OpenStack-Nova-API-Version"
        elif prefix == "/network":
            response = await self.neutron(request, rest)
        else:
            response = self.glance(request, rest)
        if 200 <= response.status < 300 and self.fault_hit("truncate", path, method):
            return await self.truncated(request, response)
        return response

    def unauthorized(self):
        response = keystone_error(401, "Unauthorized", "The request you have made requires authentication.")
        response.headers["WWW-Authenticate"] = f"Keystone uri=\"{self.base}/identity\""
        return response

    @staticmethod
    async def truncated(request, response):
        """Send the whole body's Content-Length, half the body, then close the connection."""
        body = response.body
        raw = (f"HTTP/1.1 {response.status} OK\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body[:len(body) // 2]
        request["truncated_status"] = response.status
        transport = request.transport
        transport.write(raw)
        await asyncio.sleep(0.05)  # let the half body leave before the connection goes
        transport.close()
        raise asyncio.CancelledError()  # aiohttp must not write an answer of its own

    # --- the control API -------------------------------------------------------------

    async def control(self, request):
        """POST /fake/reset; POST /fake/servers, /fake/servers/bulk, PATCH /fake/servers/{id};
        POST /fake/security-groups; POST /fake/faults, /fake/faults/clear; GET/DELETE
        /fake/requests; GET /fake/state; GET/POST /fake/config ({"token_ttl", "max_limit",
        "delete_seconds"})."""
        tail = request.match_info["tail"]
        method = request.method
        body = None
        if method in ("POST", "PATCH", "PUT") and request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return json_response({"error": "the body is not JSON"}, 400)
        body = body if body is not None else {}
        try:
            return self.control_route(method, tail, body)
        except Reject as r:
            return r.response

    def control_route(self, method, tail, body):
        if (method, tail) == ("POST", "reset"):
            self.reset()
            return json_response({"reset": True})
        if (method, tail) == ("POST", "servers"):
            return json_response(self.server_view(self.seed_server(body)), 201)
        if (method, tail) == ("POST", "servers/bulk"):
            template = body.get("template") or {}
            base = template.get("name", "server")
            ids = [self.seed_server({**template, "name": f"{base}-{i}"})["id"]
                   for i in range(int(body.get("count", 0)))]
            return json_response({"ids": ids}, 201)
        m = re.fullmatch(r"servers/([^/]+)", tail)
        if m and method == "PATCH":
            s = self.servers.get(m.group(1))
            if s is None:
                return json_response({"error": f"no server {m.group(1)}"}, 404)
            if "status" in body:
                if body["status"] not in VM_STATE:
                    return json_response({"error": f"unknown status {body['status']}"}, 400)
                s["status"] = body["status"]
                s["vm_state"], s["task_state"] = VM_STATE[body["status"]]
                self._sorted_servers = None
            for key in ("task_state", "vm_state", "name"):
                if key in body:
                    s[key] = body[key]
            if "metadata" in body:
                s["metadata"] = dict(body["metadata"])
            s["updated"] = time.time()
            return json_response(self.server_view(s))
        if (method, tail) == ("POST", "security-groups"):
            return json_response(self.group_view(self.new_group(body)), 201)
        if (method, tail) == ("POST", "faults"):
            if body.pop("expire_tokens", False):
                for t in self.tokens.values():
                    t["expires"] = min(t["expires"], time.time())
            if "delete_seconds" in body:
                self.delete_seconds = float(body.pop("delete_seconds"))
            for key, value in body.items():
                self.faults[key] = value
                for k in [k for k in self.fault_counts if k[0] == key]:
                    del self.fault_counts[k]
            return json_response({"faults": self.faults, "delete_seconds": self.delete_seconds})
        if (method, tail) == ("POST", "faults/clear"):
            self.faults, self.fault_counts, self.delete_seconds = {}, {}, 0.0
            self.cleared.set()
            self.cleared = asyncio.Event()
            return json_response({"faults": {}})
        if tail == "requests" and method in ("GET", "DELETE"):
            if method == "DELETE":
                self.log = []
            return json_response(self.log)
        if (method, tail) == ("GET", "state"):
            self.purge()
            return json_response({
                "servers": [self.server_view(s) for s in self.servers.values()],
                "security_groups": [self.group_view(g) for g in self.groups.values()],
                "ports": [self.port_view(p) for p in self.ports.values()],
                "tokens": len(self.tokens), "faults": self.faults, "delete_seconds": self.delete_seconds})
        if tail == "config" and method in ("GET", "POST"):
            if "token_ttl" in body:
                self.token_ttl = float(body["token_ttl"])
            if "max_limit" in body:
                self.max_limit = int(body["max_limit"])
            if "delete_seconds" in body:
                self.delete_seconds = float(body["delete_seconds"])
            return json_response({"token_ttl": self.token_ttl, "max_limit": self.max_limit,
                                  "delete_seconds": self.delete_seconds})
        return json_response({"error": f"no control endpoint {method} /fake/{tail}"}, 404)


async def main():
    ap = argparse.ArgumentParser(description="A fake of Keystone v3, Nova and Neutron on loopback")
    ap.add_argument("port", type=int)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--state-dir")
    ap.add_argument("--token-ttl", type=float, default=3600.0, help="token lifetime in seconds")
    ap.add_argument("--max-limit", type=int, default=1000, help="Nova's and Neutron's page size cap")
    args = ap.parse_args()
    fake = Fake(args.token_ttl, args.max_limit)
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_route("*", "/fake/{tail:.*}", fake.control)
    app.router.add_route("*", "/{tail:.*}", fake.service)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=True)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    fake.base = f"http://{args.host}:{port}"
    if args.state_dir:
        os.makedirs(args.state_dir, exist_ok=True)
        with open(os.path.join(args.state_dir, "openstack-fake.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
        with open(os.path.join(args.state_dir, "clouds.yaml"), "w") as f:
            f.write(clouds_yaml(fake.base))
        tmp = os.path.join(args.state_dir, ".port.tmp")
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.rename(tmp, os.path.join(args.state_dir, "port"))
    print(f"OpenStack fake listening on {fake.base}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    if args.state_dir:
        for name in ("openstack-fake.pid", "port"):
            try:
                os.remove(os.path.join(args.state_dir, name))
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    asyncio.run(main())
