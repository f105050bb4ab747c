#!/usr/bin/env python3
"""A faithful fake of the Kubernetes API server, served over real HTTP on loopback.

    kube-apiserver.py PORT [--state-dir DIR] [--history N] [--bookmark-interval S] [--token TOKEN=USER]...

PORT 0 picks a free port. With --state-dir, the chosen port goes to DIR/port (written
once the server listens), the PID to DIR/kube-apiserver.pid, a request log to
DIR/kube-apiserver.log; it also serves HTTPS on DIR/tls-port, with a self-signed
certificate for 127.0.0.1 in DIR/tls.crt, and DIR/kubeconfig is the admin's: the admin
token (below) over HTTPS, as kubectl sends credentials over TLS only (kube-rs sends them
over plain HTTP too).

What it keeps from the real server (tested against kubectl, tests/e2e/kube_fake.rs):
one global, monotonically increasing resourceVersion; uid, creationTimestamp,
generation (bumped on spec changes, for the kinds whose real strategy sets it);
standard Status objects (NotFound, AlreadyExists, Conflict, Invalid, Expired/410,
MethodNotAllowed, BadRequest, Forbidden, NotAcceptable, UnsupportedMediaType);
label and field selectors; paging with limit/continue over a consistent snapshot;
PUT with optimistic concurrency; JSON, merge, strategic-merge and apply
(server-side apply) patches; watch with resourceVersion replay, bookmarks,
timeoutSeconds, sendInitialEvents, 410 after compaction; the status subresource;
server-side Table printing; legacy and aggregated discovery; enough of OpenAPI v3
for kubectl's server-side field validation; Events in core/v1 and events.k8s.io/v1
over one storage, as the real server does; pods/eviction (kubectl drain) held to
PodDisruptionBudgets; finalizers and graceful deletion of pods bound to a node; namespace
deletion with its contents. Kinds: Namespace, Node, Pod, ConfigMap, Secret, Service,
ServiceAccount, Event (v1 and events.k8s.io/v1), Lease (coordination.k8s.io/v1),
Deployment and DaemonSet (apps/v1), PodDisruptionBudget (policy/v1, `pdb`), Role,
ClusterRole, RoleBinding, ClusterRoleBinding (rbac.authorization.k8s.io/v1),
SelfSubjectAccessReview (authorization.k8s.io/v1, `kubectl auth can-i`).

PodDisruptionBudgets and evictions, as pkg/registry/core/pod/storage/eviction.go and the
disruption controller (pkg/controller/disruption) have them. A PDB is validated as
pkg/apis/policy/validation does (minAvailable and maxUnavailable together are the real 422
`spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable
cannot be both set`; each a non-negative int or a percentage up to 100%; the selector's
operators; unhealthyPodEvictionPolicy AlwaysAllow or IfHealthyBudget; the selector is not
required: a nil one selects no pods); its status is cleared on create and is the
disruption controller's, which runs in process: after every change to a pod or a PDB
(and before any request about PDBs and any eviction) it syncs the PDBs of that namespace
and writes their status through the status subresource as kube-controller-manager when it
changed (a MODIFIED event with a new resourceVersion, as the real controller's writes
are). Its arithmetic is the real one: the selected pods are those of the namespace its
selector matches (an empty selector: all); expectedPods is their number for an integer
minAvailable, else the sum of the scales of their controllers (getExpectedScale: pods
without a controller reference are left out, so bare pods under maxUnavailable give
expectedPods 0 and no disruption allowed; a Deployment's scale is its spec.replicas; a
controller the fake cannot find, e.g. a ReplicaSet, which it does not store, is the
controller's "found no controllers for pod" failure, and a DaemonSet's "does not
implement the scale subresource"; a failure is failSafe: disruptionsAllowed 0, condition
DisruptionAllowed=False reason SyncFailed, observedGeneration not advanced, so evictions
get the 429 "is still being processed by the server."); desiredHealthy is minAvailable, a
percentage of expectedPods rounded up, or expectedPods - maxUnavailable (a percentage
rounded up) and at least 0; currentHealthy counts the selected pods that are not
terminating, not in disruptedPods (an entry lasts until its pod terminates, or 2 minutes)
and have Ready=True; disruptionsAllowed is currentHealthy - desiredHealthy, at least 0, and
0 while expectedPods is 0; observedGeneration is the generation; the DisruptionAllowed
condition is SufficientPods or InsufficientPods. An eviction (see evict) decides on that
status: a refusal is the real 429 (reason TooManyRequests, details.causes [{reason
DisruptionBudget, message "The disruption budget NAME needs D healthy pods and has C
currently"}]), two PDBs for one pod the real 500 with no reason. `kubectl get pdb` prints
the real table (NAME, MIN AVAILABLE, MAX UNAVAILABLE, ALLOWED DISRUPTIONS, AGE). Not
modelled: the controller's Events (NoPods, UnmanagedPods, NotDeleted,
CalculateExpectedPodCountFailed), ReplicationController/ReplicaSet/StatefulSet/custom
scale finders (those kinds are not stored), clearing a stale DisruptionTarget condition,
the handler's retries on conflicts (nothing else writes while a request is handled).

Kubelet stand-ins (off by default; test-controlled, per node): without one, a pod bound to
a node and deleted gracefully stays terminating until something deletes it with grace 0;
while node NAME's stand-in runs, each such pod on NAME (including those already
terminating when it starts) is deleted with grace 0 when its grace period ends (its
deletionTimestamp), as the kubelet's final delete after the containers stopped: a
DELETED event (with finalizers left, the pod stays until they are removed). It does
nothing else a kubelet does (no status, no Ready, no phase changes).

Leases refuse a PUT without metadata.resourceVersion (422, as their strategy does not
allow unconditional updates) and a stale one (409 Conflict).

Node status, as the kubelet and node-problem-detector write it: GET/PUT/PATCH of
nodes/NAME/status; strategic merge of status.conditions by `type` (`$patch: delete`
removes one; an item without `type` is the real 500 `map: map[...] does not contain
declared merge key: type`); a merge patch replaces the whole list; a JSON patch whose
`test` fails is the real 422 with no causes; a status write keeps spec and a main-resource
write keeps status; Nodes have no metadata.generation; every change bumps resourceVersion
and is a MODIFIED event; conditions are not validated (the real server checks none) but
read back as the Go type writes them (type and status always present, a missing time
null, times in UTC at second precision, empty reason and message dropped).

Authentication and authorization, as a real kube-apiserver with its defaults
(--anonymous-auth=true, --authorization-mode=Node,RBAC): a request with
`Authorization: Bearer TOKEN` acts as the user the token was registered for (--token,
POST /fake/tokens), e.g. system:serviceaccount:NS:NAME (groups system:serviceaccounts,
system:serviceaccounts:NS, system:authenticated); an unknown token is 401 Unauthorized.
A request without credentials is system:anonymous (group system:unauthenticated): RBAC
gives it only what the bootstrap role system:public-info-viewer gives everyone (GET
/version, /healthz, /livez, /readyz); anything else is the real 403 Forbidden Status
(`nodes is forbidden: User "system:anonymous" cannot list resource "nodes" ...`, for
discovery `forbidden: User "system:anonymous" cannot get path "/api"`, which kubectl
prints as "Error from server (Forbidden): unknown"). The fixtures' admin is the fixed
token ADMIN_TOKEN ("tend-fake-admin-token") of user kubernetes-admin in group
system:masters, which is allowed everything before RBAC is asked, as on a real server
(the privileged-group authorizer); it is registered at start and is in DIR/kubeconfig.
Every other user is authorized by the RBAC objects in the store, as the RBAC authorizer
does it: ClusterRoleBindings everywhere, RoleBindings in their namespace, to Role or
ClusterRole rules matched on verb (the request's: get, list, watch, create, update,
patch, delete, deletecollection), API group, resource (subresources such as
pods/eviction and nodes/status, `*` and `*/sub`), resourceNames (a list or watch with
fieldSelector metadata.name=NAME is about NAME) and namespace; a PUT or apply that
creates also needs `create`. Every authenticated user also has what the bootstrap roles
system:discovery and system:basic-user give (discovery, OpenAPI, /version,
SelfSubjectAccessReviews). A denial is the real 403 Forbidden Status. Not modelled:
other bootstrap roles (view, edit, cluster-admin: create them if needed), ClusterRole
aggregation, escalation checks on writing RBAC objects, validation of RBAC objects beyond
their names (roleRef immutability, rule shapes), impersonation, client certificates,
SelfSubjectRulesReview, ServiceAccount token issuance (tokens are registered, not minted).

Admin endpoints for tests (never blackholed, not counted):
  GET  /fake/requests[?since=SEQ]   request counts per verb and resource, and a log
  POST /fake/requests/reset         zero the counts and the log
  GET  /fake/watches                open watches per (resource, namespace, selectors)
  POST /fake/compact[?resourceVersion=N]  drop the event history up to N (default: now)
  POST /fake/bookmark               send a BOOKMARK now to every watch that allows them
  POST /fake/blackhole?seconds=N[&userAgent=SUBSTR]  hang matching requests for N s
  DELETE /fake/blackhole            end a blackhole now
  POST /fake/outage?seconds=N[&userAgent=SUBSTR]  for N s, matching requests answer 503
                                    ServiceUnavailable at once and their open watches end
  DELETE /fake/outage               end an outage now
  POST /fake/kubelet?node=NAME      start NAME's kubelet stand-in (finishes graceful deletions)
  DELETE /fake/kubelet?node=NAME    stop it (its pending deletions stay pending)
  POST /fake/reset                  remove every object (but the default namespaces), stop
                                    every kubelet stand-in
  GET  /fake/state                  resourceVersion, compaction point, history size
  POST /fake/tokens  {"token": T, "user": U}  register a bearer token for user U
The admin endpoints need no credentials: they are the test's, not the API's.

Simplified (see the docstrings below): authentication by registered tokens only, no
admission beyond namespace lifecycle, no controllers but the disruption controller and
the kubelet stand-ins above (no garbage collection, scheduler, Deployment controller, no
kubelet status), partial defaulting and validation (no
OpenAPI schemas: fieldValidation=Strict checks top-level and metadata fields only),
managedFields tracked for server-side apply with a simplified field model (merge keys
of the built-in types, no schema-declared atomic maps), responses always JSON,
protobuf request bodies decoded for ConfigMap, Secret, Namespace, ServiceAccount,
PodDisruptionBudget and Eviction only (what kubectl >= 1.33 sends from its typed
clients), no TTL on Events.
"""

import argparse
import asyncio
import base64
import copy
import datetime
import hashlib
import json
import os
import random
import re
import signal
import ssl
import time
import uuid
from collections import deque

import jsonpatch
import yaml
from aiohttp import web

SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.0-tend-fake",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.24.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

# ---------------------------------------------------------------------------------
# Time and small helpers
# ---------------------------------------------------------------------------------


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def ts(t=None):
    return (t or utcnow()).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(value):
    if not value or not isinstance(value, str):
        return None
    try:
        v = value.replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(v)
    except ValueError:
        return None


def human_duration(seconds):
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    s = int(seconds)
    if s < 60 * 2:
        return f"{s}s"
    m = s // 60
    if m < 10:
        sec = s % 60
        return f"{m}m" if sec == 0 else f"{m}m{sec}s"
    if m < 60 * 3:
        return f"{m}m"
    h = m // 60
    if h < 8:
        mm = m % 60
        return f"{h}h" if mm == 0 else f"{h}h{mm}m"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        hh = h % 24
        return f"{h // 24}d" if hh == 0 else f"{h // 24}d{hh}h"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        return f"{h // 24 // 365}y{(h // 24) % 365}d"
    return f"{h // 24 // 365}y"


def age(value):
    t = parse_ts(value)
    if t is None:
        return "<unknown>"
    return human_duration((utcnow() - t).total_seconds())


def dig(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict):
            obj = obj.get(p)
        elif isinstance(obj, list) and isinstance(p, int) and p < len(obj):
            obj = obj[p]
        else:
            return default
        if obj is None:
            return default
    return obj


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


# ---------------------------------------------------------------------------------
# Errors: metav1.Status with the real reasons and codes
# ---------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details
        self.headers = headers  # e.g. Retry-After, which ErrorNegotiated sets from details.retryAfterSeconds

    def status(self):
        s = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # StatusReasonUnknown is "", omitted as metav1.Status omits it
            del s["reason"]
        if self.details is not None:  # before code, in metav1.Status's field order
            del s["code"]
            s["details"] = self.details
            s["code"] = self.code
        return s


def qualified(res):
    return res.plural if not res.group else f"{res.plural}.{res.group}"


def not_found(res, name):
    return ApiError(404, "NotFound", f'{qualified(res)} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def already_exists(res, name):
    return ApiError(409, "AlreadyExists", f'{qualified(res)} "{name}" already exists',
                    {"name": name, "group": res.group, "kind": res.plural})


def conflict(res, name, why="the object has been modified; please apply your changes to the latest version and try again"):
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(res)} "{name}": {why}',
                    {"name": name, "group": res.group, "kind": res.plural})


def immutable_uid(res, name, cur, new):
    """A patch or apply (no UID precondition: handlers/patch.go passes no object
    to DefaultUpdatedObjectInfo) that would change metadata.uid fails
    ValidateObjectMetaUpdate: 422, field is immutable."""
    uid = dig(new, "metadata", "uid")
    if uid and uid != cur["metadata"]["uid"]:
        raise invalid(res, name, [("metadata.uid", "FieldValueInvalid",
                                   f'Invalid value: "{uid}": field is immutable')])


def invalid(res, name, causes):
    """causes: [(field, reason, message)] with reason FieldValueRequired/Invalid/Forbidden..."""
    text = ", ".join(f"{f}: {m}" for f, _, m in causes)
    if len(causes) > 1:
        text = "[" + text + "]"
    kind = res.kind if not res.group else f"{res.kind}.{res.group}"
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', {
        "name": name, "group": res.group, "kind": res.kind,
        "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
    })


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def expired(message):
    return ApiError(410, "Expired", message)


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def path_not_found():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


# ---------------------------------------------------------------------------------
# Resource types
# ---------------------------------------------------------------------------------

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class Res:
    def __init__(self, group, version, plural, kind, namespaced, *, short=(), categories=(),
                 status=False, generation=False, create_on_update=False, return_deleted=False,
                 fields=(), field_map=None, printer="default", storage=None, verbs=ALL_VERBS,
                 unconditional_update=True):
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespaced, self.short, self.categories = namespaced, list(short), list(categories)
        self.status, self.generation, self.create_on_update = status, generation, create_on_update
        self.return_deleted, self.printer, self.verbs = return_deleted, printer, list(verbs)
        # the strategy's AllowUnconditionalUpdate: false for Leases (a PUT must carry a resourceVersion)
        self.unconditional_update = unconditional_update
        self.fields = {"metadata.name", "metadata.namespace"} | set(fields)
        self.field_map = field_map or {}  # selector field of this version -> storage field
        self.storage = storage or f"{group}/{plural}"
        self.singular = kind.lower()

    @property
    def group_version(self):
        return self.version if not self.group else f"{self.group}/{self.version}"

    def __repr__(self):
        return f"Res({self.group_version} {self.plural})"


POD_FIELDS = ["spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
              "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"]
EVENT_FIELDS = ["involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"]
EVENT_V1_FIELD_MAP = {f"regarding.{k}": f"involvedObject.{k}" for k in
                      ["kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"]}
EVENT_V1_FIELD_MAP.update({"reportingController": "reportingComponent", "reason": "reason", "type": "type"})

RESOURCES = [
    Res("", "v1", "namespaces", "Namespace", False, short=["ns"], status=True, fields=["status.phase"],
        printer="namespace", verbs=["create", "delete", "get", "list", "patch", "update", "watch"]),
    Res("", "v1", "nodes", "Node", False, short=["no"], status=True, fields=["spec.unschedulable"],
        printer="node"),
    Res("", "v1", "pods", "Pod", True, short=["po"], categories=["all"], status=True, generation=True,
        return_deleted=True, fields=POD_FIELDS, printer="pod"),
    Res("", "v1", "configmaps", "ConfigMap", True, short=["cm"], printer="configmap"),
    Res("", "v1", "secrets", "Secret", True, fields=["type"], printer="secret"),
    Res("", "v1", "services", "Service", True, short=["svc"], categories=["all"], status=True,
        return_deleted=True, printer="service"),
    Res("", "v1", "serviceaccounts", "ServiceAccount", True, short=["sa"], printer="serviceaccount"),
    Res("", "v1", "events", "Event", True, short=["ev"], create_on_update=True, fields=EVENT_FIELDS,
        printer="event", storage="/events"),
    Res("coordination.k8s.io", "v1", "leases", "Lease", True, create_on_update=True, printer="lease",
        unconditional_update=False),
    Res("events.k8s.io", "v1", "events", "Event", True, short=["ev"], create_on_update=True,
        fields=list(EVENT_V1_FIELD_MAP), field_map=EVENT_V1_FIELD_MAP, printer="event",
        storage="/events"),
    Res("apps", "v1", "deployments", "Deployment", True, short=["deploy"], categories=["all"],
        status=True, generation=True, printer="deployment"),
    Res("apps", "v1", "daemonsets", "DaemonSet", True, short=["ds"], categories=["all"], status=True,
        generation=True, printer="daemonset"),
    Res("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, short=["pdb"], status=True,
        generation=True, printer="pdb"),
    Res("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    Res("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False),
    Res("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    Res("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    # The CRDs of examples/deploy/components/medik8s, served as if installed: NodeHealthCheck's
    # template and the remediation it makes of it (no status subresource, as those CRDs say).
    Res("remediation.tend.dev", "v1alpha1", "tendremediationtemplates", "TendRemediationTemplate", True,
        generation=True),
    Res("remediation.tend.dev", "v1alpha1", "tendremediations", "TendRemediation", True, generation=True),
    # not stored: a create answers whether the caller may do what it describes
    Res("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
        verbs=["create"]),
]
BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}
GROUPS = []  # [(group, [versions])], in discovery order
for _r in RESOURCES:
    if _r.group and _r.group not in [g for g, _ in GROUPS]:
        GROUPS.append((_r.group, []))
    for _g, _vs in GROUPS:
        if _g == _r.group and _r.version not in _vs:
            _vs.append(_r.version)
STORAGE_RES = {}  # storage key -> the Res whose format is stored
for _r in RESOURCES:
    STORAGE_RES.setdefault(_r.storage, _r)
NAMESPACES = BY_PATH[("", "v1", "namespaces")]
PODS = BY_PATH[("", "v1", "pods")]
PDBS = BY_PATH[("policy", "v1", "poddisruptionbudgets")]
DEPLOYMENTS = BY_PATH[("apps", "v1", "deployments")]
DEFAULT_NAMESPACES = ["default", "kube-system", "kube-public", "kube-node-lease"]

# ---------------------------------------------------------------------------------
# Events: core/v1 is the storage format; events.k8s.io/v1 is converted to and from it
# ---------------------------------------------------------------------------------

EVENT_V1_PAIRS = [("eventTime", "eventTime"), ("series", "series"),
                  ("reportingComponent", "reportingController"), ("reportingInstance", "reportingInstance"),
                  ("action", "action"), ("reason", "reason"), ("involvedObject", "regarding"),
                  ("related", "related"), ("message", "note"), ("type", "type"), ("source", "deprecatedSource"),
                  ("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"),
                  ("count", "deprecatedCount")]


def to_version(res, stored):
    """The stored object as `res`'s version shows it (a fresh copy)."""
    obj = copy.deepcopy(stored)
    if res.storage == "/events" and res.group == "events.k8s.io":
        out = {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": obj.get("metadata", {})}
        for core, v1 in EVENT_V1_PAIRS:
            if obj.get(core) not in (None, "", 0):
                out[v1] = obj[core]
        return out
    obj["apiVersion"], obj["kind"] = res.group_version, res.kind
    return obj


def to_storage(res, obj):
    if res.storage == "/events" and res.group == "events.k8s.io":
        out = {"kind": "Event", "apiVersion": "v1", "metadata": obj.get("metadata", {})}
        for core, v1 in EVENT_V1_PAIRS:
            if v1 in obj:
                out[core] = obj[v1]
        return out
    obj = dict(obj)
    obj["apiVersion"], obj["kind"] = res.group_version, res.kind
    return obj


# ---------------------------------------------------------------------------------
# Selectors
# ---------------------------------------------------------------------------------

LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def valid_label_key(key):
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_NAME.match(name))


def valid_label_value(value):
    return value == "" or (len(value) <= 63 and bool(LABEL_NAME.match(value)))


def parse_label_selector(text):
    """labels.Parse: [(key, op, values)] with op in = != in notin exists !exists gt lt."""
    reqs = []
    if not text:
        return reqs
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    for raw in terms:
        term = raw.strip()
        if not term:
            raise bad_request('unable to parse requirement: found \'\', expected: identifier')
        m = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", term)
        if m:
            key, op, vals = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            vals = [v for v in vals if v != ""] if m.group(3).strip() else []
        elif term.startswith("!"):
            key, op, vals = term[1:].strip(), "!exists", []
        elif "!=" in term:
            key, v = term.split("!=", 1)
            key, op, vals = key.strip(), "!=", [v.strip()]
        elif "==" in term:
            key, v = term.split("==", 1)
            key, op, vals = key.strip(), "=", [v.strip()]
        elif "=" in term:
            key, v = term.split("=", 1)
            key, op, vals = key.strip(), "=", [v.strip()]
        elif ">" in term or "<" in term:
            op = "gt" if ">" in term else "lt"
            key, v = term.split(">" if op == "gt" else "<", 1)
            key, vals = key.strip(), [v.strip()]
            if not re.match(r"^-?\d+$", vals[0]):
                raise bad_request("unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer")
        else:
            key, op, vals = term, "exists", []
        if not valid_label_key(key):
            raise bad_request(f'unable to parse requirement: values[0][{key}]: Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\'')
        for v in vals:
            if not valid_label_value(v):
                raise bad_request(f'unable to parse requirement: values[0][{key}]: Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\'')
        if op in ("in", "notin") and not vals:
            raise bad_request("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty")
        reqs.append((key, op, vals))
    return reqs


def labels_match(obj, reqs):
    labels = dig(obj, "metadata", "labels") or {}
    for key, op, vals in reqs:
        has, v = key in labels, labels.get(key)
        if op == "=":
            ok = has and v == vals[0]
        elif op == "!=":
            ok = not has or v != vals[0]
        elif op == "in":
            ok = has and v in vals
        elif op == "notin":
            ok = not has or v not in vals
        elif op == "exists":
            ok = has
        elif op == "!exists":
            ok = not has
        else:
            try:
                n = int(v) if has else None
            except ValueError:
                n = None
            ok = n is not None and (n > int(vals[0]) if op == "gt" else n < int(vals[0]))
        if not ok:
            return False
    return True


def parse_field_selector(res, text):
    """fields.ParseSelector + the resource's field label conversion: [(storage field, op, value)]."""
    reqs = []
    if not text:
        return reqs
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        for op in ("!=", "==", "="):
            if op in term:
                field, value = term.split(op, 1)
                break
        else:
            raise bad_request(f'invalid selector: \'{text}\'; can\'t understand \'{term}\'')
        field = field.strip()
        if field not in res.fields:
            raise bad_request(f'field label not supported: {field}')
        reqs.append((res.field_map.get(field, field), "!=" if op == "!=" else "=", value.strip()))
    return reqs


def field_value(obj, field):
    v = obj
    for part in field.split("."):
        v = v.get(part) if isinstance(v, dict) else None
    if field == "source" and isinstance(v, dict):
        v = v.get("component")
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def fields_match(obj, reqs):
    for field, op, value in reqs:
        v = field_value(obj, field)
        if (v == value) != (op == "="):
            return False
    return True


# ---------------------------------------------------------------------------------
# Strategic merge patch, JSON merge patch, server-side apply
# ---------------------------------------------------------------------------------

MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
    "volumeMounts": "mountPath", "volumes": "name", "volumeDevices": "devicePath",
    "imagePullSecrets": "name", "conditions": "type", "addresses": "type", "ownerReferences": "uid",
    "hostAliases": "ip", "topologySpreadConstraints": "topologyKey", "resourceClaims": "name",
    "secrets": "name", "podIPs": "ip", "hostIPs": "ip",
}
SET_LISTS = {"finalizers"}


def merge_key(field, items):
    if field == "ports":
        dicts = [i for i in items if isinstance(i, dict)]
        if any("containerPort" in i for i in dicts):
            return "containerPort"
        if any("port" in i for i in dicts):
            return "port"
        return None
    return MERGE_KEYS.get(field)


def json_merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = json_merge_patch(out.get(k), v)
    return out


def strip_directives(v):
    if isinstance(v, dict):
        return {k: strip_directives(x) for k, x in v.items() if not k.startswith("$")}
    if isinstance(v, list):
        return [strip_directives(x) for x in v if not (isinstance(x, dict) and "$patch" in x)]
    return v


def strategic_merge(orig, patch):
    """A strategic merge patch as kubectl sends it: merge keys of the built-in types,
    `$patch: replace|delete`, `$retainKeys`, `$setElementOrder/`, `$deleteFromPrimitiveList/`."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return strip_directives({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return None
    out = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    orders = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            field = k.split("/", 1)[1]
            if isinstance(out.get(field), list):
                out[field] = [x for x in out[field] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            merged = strategic_merge(out.get(k), v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        elif isinstance(v, list):
            out[k] = strategic_merge_list(k, out.get(k), v)
        else:
            out[k] = v
    for field, order in orders.items():
        items = out.get(field)
        if not isinstance(items, list):
            continue
        key = merge_key(field, items + [o for o in order if isinstance(o, dict)])

        def ident(x):
            return x.get(key) if key and isinstance(x, dict) else x

        wanted = [ident(o) for o in order]
        ranked = sorted(items, key=lambda x: wanted.index(ident(x)) if ident(x) in wanted else len(wanted))
        out[field] = ranked
    if isinstance(patch.get("$retainKeys"), list):
        keep = set(patch["$retainKeys"])
        out = {k: v for k, v in out.items() if k in keep}
    return out


def strategic_merge_list(field, cur, patch):
    cur = cur if isinstance(cur, list) else []
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return strip_directives([i for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")])
    if field in SET_LISTS:
        out = list(cur)
        for i in patch:
            if i not in out:
                out.append(i)
        return out
    key = merge_key(field, cur + patch)
    if not key or not all(isinstance(i, dict) for i in patch):
        return strip_directives(patch)
    out = copy.deepcopy(cur)
    for item in patch:
        if key not in item:
            raise no_merge_key(item, key)
        k = item.get(key)
        idx = next((n for n, c in enumerate(out) if isinstance(c, dict) and c.get(key) == k), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append(strip_directives(item))
        else:
            out[idx] = strategic_merge(out[idx], item)
    return out


def go_value(v):
    """Go's fmt %v of a decoded JSON value (maps with sorted keys, as Go >= 1.12 prints them)."""
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_value(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(go_value(x) for x in v) + "]"
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return str(v)


def no_merge_key(item, key):
    """strategicpatch's mergepatch.ErrNoMergeKey, a plain error the API server answers as
    500 with no reason (handlers/patch.go interpretStrategicMergePatchError passes it on;
    ErrorToAPIStatus makes any other error StatusReasonUnknown, 500): kubectl prints
    `Error from server: map: map[...] does not contain declared merge key: type`."""
    return ApiError(500, "", f"map: {go_value(item)} does not contain declared merge key: {key}")


# Server-side apply: a field is a path of elements "f:name" (map field), 'k:{"name":"x"}'
# (an item of a keyed list), 'v:"x"' (an item of a set), "." (the keyed item itself).

META_OWNED = {"labels", "annotations", "finalizers", "ownerReferences", "generateName"}


def owned_view(res, obj, subresource):
    """The part of an object that field managers own."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    out = {}
    for k, v in obj.items():
        if k in ("apiVersion", "kind"):
            continue
        if k == "status" and res.status:
            continue
        if k == "metadata":
            m = {mk: mv for mk, mv in (v or {}).items() if mk in META_OWNED}
            if m:
                out["metadata"] = m
            continue
        out[k] = v
    return out


def leaf_fields(value, path=(), field=None, out=None):
    out = {} if out is None else out
    if not path and not value:
        return out
    if isinstance(value, dict) and value:
        for k, v in value.items():
            if v is None:
                continue
            leaf_fields(v, path + (f"f:{k}",), k, out)
    elif isinstance(value, list) and value and (field in SET_LISTS or merge_key(field, value)) :
        if field in SET_LISTS:
            for item in value:
                out[path + (f"v:{dumps(item)}",)] = item
        else:
            key = merge_key(field, value)
            for item in value:
                if not isinstance(item, dict) or key not in item:
                    out[path] = value
                    return out
            for item in value:
                kp = path + (f"k:{dumps({key: item[key]})}",)
                out[kp + (".",)] = {key: item[key]}
                leaf_fields({k: v for k, v in item.items()}, kp, None, out)
    else:
        out[path] = value
    return out


def get_path(obj, path):
    cur = obj
    for el in path:
        if el == ".":
            return cur
        kind, _, rest = el.partition(":")
        if kind == "f":
            if not isinstance(cur, dict) or rest not in cur:
                return KeyError
            cur = cur[rest]
        elif kind == "k":
            key = json.loads(rest)
            if not isinstance(cur, list):
                return KeyError
            cur = next((i for i in cur if isinstance(i, dict) and all(i.get(a) == b for a, b in key.items())), KeyError)
            if cur is KeyError:
                return KeyError
        elif kind == "v":
            value = json.loads(rest)
            if not isinstance(cur, list) or value not in cur:
                return KeyError
            return value
    return cur


def item_identity(path, obj):
    """For a path ending with '.', the key of the item if it exists in obj."""
    item = get_path(obj, path[:-1])
    if item is KeyError:
        return KeyError
    return json.loads(path[-2].partition(":")[2])


def value_at(obj, path):
    if path and path[-1] == ".":
        return item_identity(path, obj)
    return get_path(obj, path)


def remove_path(obj, path):
    """Remove the field at path; prune maps emptied by it (not top-level sections)."""
    if path and path[-1] == ".":
        path = path[:-1]
    parents = []
    cur = obj
    for el in path[:-1]:
        parents.append(cur)
        nxt = get_path(cur, (el,))
        if nxt is KeyError:
            return
        cur = nxt
    last = path[-1]
    kind, _, rest = last.partition(":")
    if kind == "f" and isinstance(cur, dict):
        cur.pop(rest, None)
    elif kind == "k" and isinstance(cur, list):
        key = json.loads(rest)
        cur[:] = [i for i in cur if not (isinstance(i, dict) and all(i.get(a) == b for a, b in key.items()))]
    elif kind == "v" and isinstance(cur, list):
        value = json.loads(rest)
        cur[:] = [i for i in cur if i != value]
    # prune emptied containers, deepest first, but keep depth-1 sections (spec, metadata)
    for depth in range(len(path) - 1, 1, -1):
        container = get_path(obj, path[:depth])
        if container in ({}, []):
            remove_path_shallow(obj, path[:depth])
        else:
            break


def remove_path_shallow(obj, path):
    parent = get_path(obj, path[:-1]) if len(path) > 1 else obj
    kind, _, rest = path[-1].partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind == "k" and isinstance(parent, list):
        key = json.loads(rest)
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(i.get(a) == b for a, b in key.items()))]


def drop_nulls(v):
    if isinstance(v, dict):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v


def ssa_merge(cur, cfg, field=None):
    if isinstance(cfg, dict):
        out = copy.deepcopy(cur) if isinstance(cur, dict) else {}
        for k, v in cfg.items():
            out[k] = ssa_merge(out.get(k), v, k)
        return out
    if isinstance(cfg, list) and isinstance(cur, list):
        if field in SET_LISTS:
            return list(cur) + [i for i in cfg if i not in cur]
        key = merge_key(field, cfg + cur)
        if key and all(isinstance(i, dict) and key in i for i in cfg + cur):
            out = copy.deepcopy(cur)
            for item in cfg:
                idx = next((n for n, c in enumerate(out) if c.get(key) == item.get(key)), None)
                if idx is None:
                    out.append(copy.deepcopy(item))
                else:
                    out[idx] = ssa_merge(out[idx], item)
            return out
    return copy.deepcopy(cfg)


def fields_v1(paths):
    tree = {}
    for path in sorted(paths):
        node = tree
        for el in path:
            node = node.setdefault(el, {})
    return tree


def parse_fields_v1(tree, path=()):
    out = set()
    for k, sub in (tree or {}).items():
        p = path + (k,)
        if not sub:
            out.add(p)
        else:
            out |= parse_fields_v1(sub, p)
    return out


def managers_of(obj):
    """[{manager, operation, subresource, apiVersion, time, fields: set}]"""
    out = []
    for e in dig(obj, "metadata", "managedFields", default=[]) or []:
        out.append({"manager": e.get("manager", ""), "operation": e.get("operation", "Update"),
                    "subresource": e.get("subresource", ""), "apiVersion": e.get("apiVersion", ""),
                    "time": e.get("time"), "fields": parse_fields_v1(e.get("fieldsV1"))})
    return out


def render_managers(managers):
    out = []
    for m in managers:
        if not m["fields"]:
            continue
        e = {"manager": m["manager"], "operation": m["operation"], "apiVersion": m["apiVersion"],
             "time": m["time"], "fieldsType": "FieldsV1", "fieldsV1": fields_v1(m["fields"])}
        if m["subresource"]:
            e["subresource"] = m["subresource"]
        out.append(e)
    return out


def display_path(path):
    out = ""
    for el in path:
        kind, _, rest = el.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            key = json.loads(rest)
            out += "[" + ",".join(f"{a}={json.dumps(b)}" for a, b in key.items()) + "]"
        elif kind == "v":
            out += "[=" + rest + "]"
    return out


# ---------------------------------------------------------------------------------
# Protobuf request bodies (application/vnd.kubernetes.protobuf), as kubectl >= 1.33
# sends them from its typed clients (`kubectl create configmap|secret|namespace|
# serviceaccount|poddisruptionbudget`). Only those kinds are decoded; responses are always JSON, which
# such clients accept too.
# ---------------------------------------------------------------------------------

PB_TIME = {1: ("seconds", "int"), 2: ("nanos", "int")}
PB_OWNER = {1: ("kind", "str"), 3: ("name", "str"), 4: ("uid", "str"), 5: ("apiVersion", "str"),
            6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
PB_META = {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"), 5: ("uid", "str"),
           6: ("resourceVersion", "str"), 7: ("generation", "int"), 8: ("creationTimestamp", "time"),
           11: ("labels", "map_str"), 12: ("annotations", "map_str"), 13: ("ownerReferences", ("list", PB_OWNER)),
           14: ("finalizers", "list_str")}
PB_OBJREF = {1: ("kind", "str"), 2: ("namespace", "str"), 3: ("name", "str"), 4: ("uid", "str"),
             5: ("apiVersion", "str"), 6: ("resourceVersion", "str"), 7: ("fieldPath", "str")}
PB_KINDS = {
    "ConfigMap": {1: ("metadata", PB_META), 2: ("data", "map_str"), 3: ("binaryData", "map_bytes"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", PB_META), 2: ("data", "map_bytes"), 3: ("type", "str"), 4: ("stringData", "map_str"),
               5: ("immutable", "bool")},
    "Namespace": {1: ("metadata", PB_META), 2: ("spec", {1: ("finalizers", "list_str")}),
                  3: ("status", {1: ("phase", "str")})},
    "Eviction": {1: ("metadata", PB_META), 2: ("deleteOptions", {
        1: ("gracePeriodSeconds", "int_kept"), 2: ("preconditions", {1: ("uid", "str"), 2: ("resourceVersion", "str")}),
        4: ("propagationPolicy", "str"), 5: ("dryRun", "list_str")})},
    "PodDisruptionBudget": {1: ("metadata", PB_META), 2: ("spec", {
        1: ("minAvailable", "intstr"),
        2: ("selector", {1: ("matchLabels", "map_str"), 2: ("matchExpressions", ("list", {
            1: ("key", "str"), 2: ("operator", "str"), 3: ("values", "list_str")}))}),
        3: ("maxUnavailable", "intstr"), 4: ("unhealthyPodEvictionPolicy", "str")})},
    "SelfSubjectAccessReview": {1: ("metadata", PB_META), 2: ("spec", {
        1: ("resourceAttributes", {1: ("namespace", "str"), 2: ("verb", "str"), 3: ("group", "str"),
                                   4: ("version", "str"), 5: ("resource", "str"), 6: ("subresource", "str"),
                                   7: ("name", "str")}),
        2: ("nonResourceAttributes", {1: ("path", "str"), 2: ("verb", "str")})})},
    "ServiceAccount": {1: ("metadata", PB_META), 2: ("secrets", ("list", PB_OBJREF)),
                       3: ("imagePullSecrets", ("list", {1: ("name", "str")})),
                       4: ("automountServiceAccountToken", "bool")},
}


def pb_fields(data):
    """(field number, wire type, value) of a protobuf message."""
    i = 0

    def varint():
        nonlocal i
        shift = result = 0
        while True:
            b = data[i]
            i += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result

    while i < len(data):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            yield field, wire, varint()
        elif wire == 2:
            n = varint()
            yield field, wire, data[i:i + n]
            i += n
        elif wire == 1:
            yield field, wire, data[i:i + 8]
            i += 8
        elif wire == 5:
            yield field, wire, data[i:i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def pb_decode(data, schema):
    out = {}
    for field, _, value in pb_fields(data):
        if field not in schema:
            continue
        name, kind = schema[field]
        # gogo-protobuf writes empty strings, zero numbers and zero times too: JSON omits them
        if kind == "str":
            if value:
                out[name] = value.decode()
        elif kind == "int":
            if value:
                out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "int_kept":  # a pointer field: zero is a value
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "bool":
            out[name] = bool(value)
        elif kind == "intstr":  # intstr.IntOrString: type 0 is intVal, 1 is strVal
            v = pb_decode(value, {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "str")})
            out[name] = v.get("strVal", "") if v.get("type") == 1 else v.get("intVal", 0)
        elif kind == "time":
            t = pb_decode(value, PB_TIME)
            if t.get("seconds"):
                out[name] = ts(datetime.datetime.fromtimestamp(t["seconds"], datetime.timezone.utc))
        elif kind in ("map_str", "map_bytes"):
            entry = dict((f, v) for f, _, v in pb_fields(value))
            key = entry.get(1, b"").decode()
            raw = entry.get(2, b"")
            out.setdefault(name, {})[key] = raw.decode() if kind == "map_str" else base64.b64encode(raw).decode()
        elif kind == "list_str":
            out.setdefault(name, []).append(value.decode())
        elif isinstance(kind, tuple):
            out.setdefault(name, []).append(pb_decode(value, kind[1]))
        else:
            out[name] = pb_decode(value, kind)
    return out


def decode_protobuf(body):
    if not body.startswith(b"k8s\x00"):
        raise bad_request("protobuf body without the k8s envelope")
    unknown = dict((f, v) for f, _, v in pb_fields(body[4:]))
    type_meta = pb_decode(unknown.get(1, b""), {1: ("apiVersion", "str"), 2: ("kind", "str")})
    kind = type_meta.get("kind", "")
    if kind not in PB_KINDS:
        raise ApiError(415, "UnsupportedMediaType",
                       f"the fake API server decodes protobuf bodies of {', '.join(sorted(PB_KINDS))} only, "
                       f"not {kind or 'this kind'}: send application/json")
    obj = pb_decode(unknown.get(2, b""), PB_KINDS[kind])
    return {"apiVersion": type_meta.get("apiVersion", ""), "kind": kind, **obj}


# ---------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------


class Change:
    __slots__ = ("rv", "skey", "ns", "name", "type", "obj", "prev")

    def __init__(self, rv, skey, ns, name, type_, obj, prev):
        self.rv, self.skey, self.ns, self.name, self.type, self.obj, self.prev = rv, skey, ns, name, type_, obj, prev


class Store:
    def __init__(self, history):
        self.rv = 100
        self.objs = {}  # skey -> {(ns, name): obj}
        self.history = deque()
        self.max_history = history
        self.compacted = self.rv  # watching/listing from an rv older than this: 410
        self.watchers = set()
        self.on_commit = None  # the server's in-process controllers, told of every change
        self.ip = 0
        for ns in DEFAULT_NAMESPACES:
            self.create_namespace(ns)

    def create_namespace(self, name):
        obj = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}}
        new_meta(NAMESPACES, obj)
        self.commit(NAMESPACES, "ADDED", obj, None)

    def table(self, skey):
        return self.objs.setdefault(skey, {})

    def get(self, res, ns, name):
        return self.table(res.storage).get((ns or "", name))

    def commit(self, res, type_, obj, prev):
        """Store a change: a new resourceVersion, the history, every watcher told."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        m = obj["metadata"]
        key = (m.get("namespace", ""), m["name"])
        t = self.table(res.storage)
        if type_ == "DELETED":
            t.pop(key, None)
        else:
            t[key] = obj
        change = Change(self.rv, res.storage, key[0], key[1], type_, obj, prev)
        self.history.append(change)
        while len(self.history) > self.max_history:
            self.compacted = self.history.popleft().rv
        for w in list(self.watchers):
            w.offer(change)
        if self.on_commit is not None:
            self.on_commit(change)
        return obj

    def compact(self, rv=None):
        rv = self.rv if rv is None else min(int(rv), self.rv)
        while self.history and self.history[0].rv <= rv:
            self.history.popleft()
        self.compacted = max(self.compacted, rv)

    def snapshot(self, skey, rv):
        """Every object of skey as of resourceVersion rv: {(ns, name): obj}."""
        if rv < self.compacted:
            raise expired(f"too old resource version: {rv} ({self.compacted})")
        state = dict(self.table(skey))
        first_after = {}
        for c in self.history:
            if c.rv > rv and c.skey == skey and (c.ns, c.name) not in first_after:
                first_after[(c.ns, c.name)] = c
        for key, c in first_after.items():
            if c.prev is None:
                state.pop(key, None)
            else:
                state[key] = c.prev
        return state

    def next_ip(self, dry=False):
        """The next ClusterIP; a dry run sees it without taking it."""
        ip = self.ip + 1
        if not dry:
            self.ip = ip
        return f"10.96.{(ip >> 8) & 255}.{ip & 255}"


def new_meta(res, obj):
    m = obj.setdefault("metadata", {})
    m["uid"] = str(uuid.uuid4())
    m["creationTimestamp"] = ts()
    if res.generation:
        m["generation"] = 1
    return obj


# ---------------------------------------------------------------------------------
# Defaulting and validation (partial: what clients most often rely on)
# ---------------------------------------------------------------------------------


def default_pod_spec(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(c, dict):
            continue
        image = c.get("image", "")
        tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
        c.setdefault("imagePullPolicy",
                     "Always" if not tagged or image.endswith(":latest") else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})


def default_on_create(res, obj, store, dry=False):
    k = res.kind
    if res.plural == "pods":
        default_pod_spec(obj.setdefault("spec", {}))
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif k == "Namespace":
        name = obj["metadata"]["name"]
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif k in ("Deployment", "DaemonSet"):
        spec = obj.setdefault("spec", {})
        if k == "Deployment":
            spec.setdefault("replicas", 1)
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("progressDeadlineSeconds", 600)
        else:
            spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                               "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        spec.setdefault("revisionHistoryLimit", 10)
        default_pod_spec(dig(spec, "template", "spec", default=None) or spec.setdefault("template", {}).setdefault("spec", {}))
        obj["status"] = {}
    elif k == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("type") != "ExternalName" and "clusterIP" not in spec:
            spec["clusterIP"] = store.next_ip(dry)
            spec["clusterIPs"] = [spec["clusterIP"]]
        for p in spec.get("ports") or []:
            if isinstance(p, dict):
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p.get("port"))
        obj["status"] = {"loadBalancer": {}}
    elif k == "PodDisruptionBudget":
        # the strategy's PrepareForCreate: status cleared (the zero PodDisruptionBudgetStatus,
        # whose four counts are not omitempty); the disruption controller fills it in
        obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}
    elif k == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None) or {}
        for key, v in string_data.items():
            obj.setdefault("data", {})[key] = base64.b64encode(str(v).encode()).decode()


NODE_CONDITION_TIMES = ("lastHeartbeatTime", "lastTransitionTime")


def typed_round_trip(res, obj):
    """What decoding into the Go type and encoding again does to the fields a client
    writes often, for Node conditions (k8s.io/api/core/v1 NodeCondition): `type` and
    `status` are not omitempty (a missing one reads ""); the two times are metav1.Time,
    which encodes a missing one as null and a present one in UTC at second precision;
    `reason` and `message` are omitempty (an empty one is dropped)."""
    if res.plural != "nodes":
        return obj
    for c in dig(obj, "status", "conditions", default=[]) or []:
        if not isinstance(c, dict):
            continue
        c.setdefault("type", "")
        c.setdefault("status", "")
        for f in ("reason", "message"):
            if c.get(f) == "":
                del c[f]
        for f in NODE_CONDITION_TIMES:
            t = parse_ts(c.get(f))
            if f not in c:
                c[f] = None
            elif t is not None and t.tzinfo is not None:
                c[f] = ts(t.astimezone(datetime.timezone.utc))
    return obj


def validate(res, obj, old, request_res):
    """Causes [(field, reason, message)]; empty when valid."""
    causes = []
    m = obj.get("metadata") or {}
    name = m.get("name", "")
    pattern = DNS_LABEL if res.kind in ("Namespace", "Service") else DNS_SUBDOMAIN
    if res.group == RBAC_GROUP:
        # ValidateRBACName: any path segment name ("system:node", "tend-system:tend")
        bad = [f"may not be '{name}'"] if name in (".", "..") else [f"may not contain '{c}'" for c in "/%" if c in name]
        causes += [("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {b}') for b in bad]
    elif name and (len(name) > (63 if pattern is DNS_LABEL else 253) or not pattern.match(name)):
        what = "RFC 1123 label" if pattern is DNS_LABEL else "RFC 1123 subdomain"
        causes.append(("metadata.name", "FieldValueInvalid",
                       f'Invalid value: "{name}": a lowercase {what} must consist of lower case alphanumeric characters, \'-\' or \'.\', and must start and end with an alphanumeric character'))
    for key, value in (m.get("labels") or {}).items():
        if not valid_label_key(key):
            causes.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
        if not isinstance(value, str) or not valid_label_value(value):
            causes.append(("metadata.labels", "FieldValueInvalid", f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
    for key, value in (m.get("annotations") or {}).items():
        if not isinstance(value, str):
            causes.append(("metadata.annotations", "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: annotation values must be strings"))
    k = res.kind
    # Nodes: nothing in status.conditions is checked (a condition without `type` or `status`
    # is stored), as pkg/apis/core/validation/validation.go ValidateNode and
    # ValidateNodeUpdate check no NodeCondition field ("All status fields are optional").
    if res.plural == "pods":
        containers = dig(obj, "spec", "containers")
        if not containers:
            causes.append(("spec.containers", "FieldValueRequired", "Required value"))
        for i, c in enumerate(containers or []):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append((f"spec.containers[{i}].name", "FieldValueRequired", "Required value"))
            if not isinstance(c, dict) or not c.get("image"):
                causes.append((f"spec.containers[{i}].image", "FieldValueRequired", "Required value"))
        if old is not None:
            def mutable_spec(o):
                s = copy.deepcopy(o.get("spec") or {})
                for f in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
                    s.pop(f, None)
                for c in (s.get("containers") or []) + (s.get("initContainers") or []):
                    if isinstance(c, dict):
                        c.pop("image", None)
                return s
            if mutable_spec(obj) != mutable_spec(old):
                causes.append(("spec", "FieldValueForbidden",
                               "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"))
    elif k in ("Deployment", "DaemonSet"):
        if not dig(obj, "spec", "selector"):
            causes.append(("spec.selector", "FieldValueRequired", "Required value"))
        tl = dig(obj, "spec", "template", "metadata", "labels") or {}
        sel = dig(obj, "spec", "selector", "matchLabels") or {}
        if sel and any(tl.get(a) != b for a, b in sel.items()):
            causes.append(("spec.template.metadata.labels", "FieldValueInvalid",
                           f"Invalid value: {json.dumps(tl)}: `selector` does not match template `labels`"))
        if not dig(obj, "spec", "template", "spec", "containers"):
            causes.append(("spec.template.spec.containers", "FieldValueRequired", "Required value"))
    elif k == "PodDisruptionBudget":
        causes += validate_pdb(obj, old)
    elif k == "Lease":
        d = dig(obj, "spec", "leaseDurationSeconds")
        if d is not None and (not isinstance(d, int) or d <= 0):
            causes.append(("spec.leaseDurationSeconds", "FieldValueInvalid", f"Invalid value: {d}: must be greater than 0"))
        t = dig(obj, "spec", "leaseTransitions")
        if t is not None and (not isinstance(t, int) or t < 0):
            causes.append(("spec.leaseTransitions", "FieldValueInvalid", f"Invalid value: {t}: must be greater than or equal to 0"))
    elif k == "ConfigMap" and old is not None and old.get("immutable"):
        if obj.get("data") != old.get("data") or obj.get("binaryData") != old.get("binaryData"):
            causes.append(("data", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set"))
    elif k == "Event":
        io = obj.get("involvedObject") or {}
        ns = m.get("namespace", "")
        if io.get("namespace") and io.get("namespace") != ns:
            causes.append(("involvedObject.namespace", "FieldValueInvalid",
                           f'Invalid value: "{io.get("namespace")}": does not match event.namespace'))
        if request_res.group == "events.k8s.io" and old is None:
            for core, v1 in (("eventTime", "eventTime"), ("reportingComponent", "reportingController"),
                             ("reportingInstance", "reportingInstance"), ("action", "action"), ("reason", "reason")):
                if not obj.get(core):
                    causes.append((v1, "FieldValueRequired", "Required value"))
            if obj.get("type") not in ("Normal", "Warning"):
                causes.append(("type", "FieldValueNotSupported",
                               f'Unsupported value: "{obj.get("type", "")}": supported values: "Normal", "Warning"'))
    return causes


def go_int_or_string(v):
    """%#v of an intstr.IntOrString, as field.Invalid prints one."""
    if isinstance(v, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:{json.dumps(v)}}}'
    return f'intstr.IntOrString{{Type:0, IntVal:{v}, StrVal:""}}'


def go_pointer(kind, value, seed):
    """%#v of a pointer field: nil, or a (made-up, stable) heap address."""
    if value is None:
        return f"(*{kind})(nil)"
    return f"(*{kind})(0xc000{(hashlib.sha256(seed.encode()).hexdigest()[:6])})"


PERCENT_MSG = ("a valid percent string must be a numeric string followed by an ending '%' "
               "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')")
UNHEALTHY_POD_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")


def validate_int_or_percent(value, field):
    """appsvalidation.ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [(field, "FieldValueInvalid", f"Invalid value: {json.dumps(value)}: must be an integer or percentage (e.g '5%%')")]
    if isinstance(value, int):
        if value < 0:
            return [(field, "FieldValueInvalid", f"Invalid value: {value}: must be greater than or equal to 0")]
        return []
    if not re.fullmatch(r"[0-9]+%", value):
        return [(field, "FieldValueInvalid", f"Invalid value: {go_int_or_string(value)}: {PERCENT_MSG}")]
    if int(value[:-1]) > 100:
        return [(field, "FieldValueInvalid", f"Invalid value: {go_int_or_string(value)}: must not be greater than 100%")]
    return []


def validate_label_selector(sel, field):
    """unversionedvalidation.ValidateLabelSelector (a nil selector is valid: it selects nothing)."""
    causes = []
    if sel is None:
        return causes
    if not isinstance(sel, dict):
        return [(field, "FieldValueInvalid", f"Invalid value: {json.dumps(sel)}: must be an object")]
    for key, value in (sel.get("matchLabels") or {}).items():
        if not valid_label_key(key):
            causes.append((f"{field}.matchLabels", "FieldValueInvalid", f'Invalid value: "{key}": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
        if not isinstance(value, str) or not valid_label_value(value):
            causes.append((f"{field}.matchLabels", "FieldValueInvalid", f'Invalid value: "{value}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
    for i, expr in enumerate(sel.get("matchExpressions") or []):
        at = f"{field}.matchExpressions[{i}]"
        expr = expr if isinstance(expr, dict) else {}
        op, values = expr.get("operator"), expr.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                causes.append((f"{at}.values", "FieldValueRequired",
                               "Required value: must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                causes.append((f"{at}.values", "FieldValueForbidden",
                               "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            causes.append((f"{at}.operator", "FieldValueInvalid", f"Invalid value: {json.dumps(op or '')}: not a valid selector operator"))
        if not valid_label_key(expr.get("key") or ""):
            causes.append((f"{at}.key", "FieldValueInvalid", f'Invalid value: "{expr.get("key") or ""}": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
        for j, v in enumerate(values):
            if not isinstance(v, str) or not valid_label_value(v):
                causes.append((f"{at}.values[{j}]", "FieldValueInvalid", f'Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric characters, \'-\', \'_\' or \'.\', and must start and end with an alphanumeric character'))
    return causes


def validate_pdb(obj, old):
    """pkg/apis/policy/validation ValidatePodDisruptionBudget(Spec) (and, on an update, the
    status counts ValidatePodDisruptionBudgetStatusUpdate checks). The selector is not
    required: a nil selector selects no pods, an empty one every pod of the namespace."""
    spec = obj.get("spec") or {}
    causes = []
    ma, mu = spec.get("minAvailable"), spec.get("maxUnavailable")
    if ma is not None and mu is not None:
        name = dig(obj, "metadata", "name", default="")
        value = ("policy.PodDisruptionBudgetSpec{"
                 f"MinAvailable:{go_pointer('intstr.IntOrString', ma, name + '/min')}, "
                 f"Selector:{go_pointer('v1.LabelSelector', spec.get('selector'), name + '/sel')}, "
                 f"MaxUnavailable:{go_pointer('intstr.IntOrString', mu, name + '/max')}, "
                 f"UnhealthyPodEvictionPolicy:{go_pointer('policy.UnhealthyPodEvictionPolicyType', spec.get('unhealthyPodEvictionPolicy'), name + '/uh')}}}")
        causes.append(("spec", "FieldValueInvalid", f"Invalid value: {value}: minAvailable and maxUnavailable cannot be both set"))
    if ma is not None:
        causes += validate_int_or_percent(ma, "spec.minAvailable")
    if mu is not None:
        causes += validate_int_or_percent(mu, "spec.maxUnavailable")
    causes += validate_label_selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in UNHEALTHY_POD_EVICTION_POLICIES:
        causes.append(("spec.unhealthyPodEvictionPolicy", "FieldValueNotSupported",
                       f'Unsupported value: {json.dumps(policy)}: supported values: "AlwaysAllow", "IfHealthyBudget"'))
    if old is not None:
        for f in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
            v = dig(obj, "status", f)
            if isinstance(v, int) and v < 0:
                causes.append((f"status.{f}", "FieldValueInvalid", f"Invalid value: {v}: must be greater than or equal to 0"))
    return causes


TOP_LEVEL = {"apiVersion", "kind", "metadata", "spec", "status"}
EXTRA_TOP = {"ConfigMap": {"data", "binaryData", "immutable"}, "Secret": {"data", "stringData", "type", "immutable"},
             "Role": {"rules"}, "ClusterRole": {"rules", "aggregationRule"},
             "RoleBinding": {"roleRef", "subjects"}, "ClusterRoleBinding": {"roleRef", "subjects"},
             "ServiceAccount": {"secrets", "imagePullSecrets", "automountServiceAccountToken"},
             "Event": {v for pair in EVENT_V1_PAIRS for v in pair}}
META_FIELDS = {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
               "annotations", "ownerReferences", "finalizers", "managedFields"}


def strict_check(res, obj):
    """fieldValidation=Strict, for the top level and metadata only (no schemas here)."""
    allowed = TOP_LEVEL | EXTRA_TOP.get(res.kind, set())
    unknown = [f'unknown field "{k}"' for k in obj if k not in allowed]
    unknown += [f'unknown field "metadata.{k}"' for k in (obj.get("metadata") or {}) if k not in META_FIELDS]
    if unknown:
        raise bad_request("strict decoding error: " + ", ".join(unknown))


# ---------------------------------------------------------------------------------
# Table printing (server-side, as kubectl get asks for it)
# ---------------------------------------------------------------------------------


def col(name, type_="string", priority=0, fmt=""):
    return {"name": name, "type": type_, "format": fmt, "description": name, "priority": priority}


def pod_row(o):
    statuses = dig(o, "status", "containerStatuses", default=[]) or []
    containers = dig(o, "spec", "containers", default=[]) or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount", 0) or 0) for s in statuses)
    reason = dig(o, "status", "reason") or dig(o, "status", "phase", default="")
    if dig(o, "metadata", "deletionTimestamp"):
        reason = "Terminating"
    return [f"{ready}/{len(containers)}", reason, restarts, age(dig(o, "metadata", "creationTimestamp")),
            dig(o, "status", "podIP", default="<none>"), dig(o, "spec", "nodeName", default="<none>"),
            dig(o, "status", "nominatedNodeName", default="<none>"), "<none>"]


def node_row(o):
    conds = {c.get("type"): c.get("status") for c in dig(o, "status", "conditions", default=[]) or []}
    status = {"True": "Ready", "False": "NotReady"}.get(conds.get("Ready"), "Unknown")
    if dig(o, "spec", "unschedulable"):
        status += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in (dig(o, "metadata", "labels") or {})
                   if k.startswith("node-role.kubernetes.io/"))
    addrs = {a.get("type"): a.get("address") for a in dig(o, "status", "addresses", default=[]) or []}
    info = dig(o, "status", "nodeInfo", default={}) or {}
    return [status, ",".join(roles) or "<none>", age(dig(o, "metadata", "creationTimestamp")),
            info.get("kubeletVersion", ""), addrs.get("InternalIP", "<none>"), addrs.get("ExternalIP", "<none>"),
            info.get("osImage", "<unknown>"), info.get("kernelVersion", "<unknown>"),
            info.get("containerRuntimeVersion", "<unknown>")]


def event_row(o):
    last = (o.get("lastTimestamp") or dig(o, "series", "lastObservedTime") or o.get("eventTime")
            or dig(o, "metadata", "creationTimestamp"))
    first = o.get("firstTimestamp") or o.get("eventTime") or dig(o, "metadata", "creationTimestamp")
    io = o.get("involvedObject") or {}
    source = dig(o, "source", "component") or o.get("reportingComponent", "")
    if dig(o, "source", "host"):
        source += ", " + dig(o, "source", "host")
    count = o.get("count") or dig(o, "series", "count") or 1
    return [age(last), o.get("type", ""), o.get("reason", ""), f"{(io.get('kind') or '').lower()}/{io.get('name', '')}",
            io.get("fieldPath", ""), source, o.get("message", ""), age(first), count, dig(o, "metadata", "name")]


def images(o, path):
    cs = dig(o, *path, default=[]) or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def selector_text(sel):
    ml = (sel or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in ml.items()) or "<none>"


def int_or_string_text(v):
    """intstr.IntOrString's String(), or N/A when unset (printPodDisruptionBudget)."""
    return "N/A" if v is None else str(v)


PRINTERS = {
    "pdb": ([col("Min Available"), col("Max Unavailable"), col("Allowed Disruptions", "integer"), col("Age")],
            lambda o: [int_or_string_text(dig(o, "spec", "minAvailable")),
                       int_or_string_text(dig(o, "spec", "maxUnavailable")),
                       dig(o, "status", "disruptionsAllowed", default=0),
                       age(dig(o, "metadata", "creationTimestamp"))]),
    "pod": ([col("Ready"), col("Status"), col("Restarts", "string"), col("Age"), col("IP", priority=1),
             col("Node", priority=1), col("Nominated Node", priority=1), col("Readiness Gates", priority=1)], pod_row),
    "node": ([col("Status"), col("Roles"), col("Age"), col("Version"), col("Internal-IP", priority=1),
              col("External-IP", priority=1), col("OS-Image", priority=1), col("Kernel-Version", priority=1),
              col("Container-Runtime", priority=1)], node_row),
    "namespace": ([col("Status"), col("Age")],
                  lambda o: [dig(o, "status", "phase", default=""), age(dig(o, "metadata", "creationTimestamp"))]),
    "configmap": ([col("Data", "integer"), col("Age")],
                  lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                             age(dig(o, "metadata", "creationTimestamp"))]),
    "secret": ([col("Type"), col("Data", "integer"), col("Age")],
               lambda o: [o.get("type", ""), len(o.get("data") or {}), age(dig(o, "metadata", "creationTimestamp"))]),
    "service": ([col("Type"), col("Cluster-IP"), col("External-IP"), col("Port(s)"), col("Age"),
                 col("Selector", priority=1)],
                lambda o: [dig(o, "spec", "type", default=""), dig(o, "spec", "clusterIP", default="<none>"),
                           "<none>", ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}"
                                              for p in dig(o, "spec", "ports", default=[]) or []) or "<none>",
                           age(dig(o, "metadata", "creationTimestamp")),
                           ",".join(f"{k}={v}" for k, v in (dig(o, "spec", "selector") or {}).items()) or "<none>"]),
    "serviceaccount": ([col("Secrets", "integer"), col("Age")],
                       lambda o: [len(o.get("secrets") or []), age(dig(o, "metadata", "creationTimestamp"))]),
    "event": ([col("Last Seen"), col("Type"), col("Reason"), col("Object"), col("Subobject", priority=1),
               col("Source", priority=1), col("Message"), col("First Seen", priority=1),
               col("Count", "integer", priority=1), col("Name", priority=1, fmt="name")], None),
    "lease": ([col("Holder"), col("Age")],
              lambda o: [dig(o, "spec", "holderIdentity", default=""), age(dig(o, "metadata", "creationTimestamp"))]),
    "deployment": ([col("Ready"), col("Up-to-date", "integer"), col("Available", "integer"), col("Age"),
                    col("Containers", priority=1), col("Images", priority=1), col("Selector", priority=1)],
                   lambda o: [f"{dig(o, 'status', 'readyReplicas', default=0)}/{dig(o, 'spec', 'replicas', default=0)}",
                              dig(o, "status", "updatedReplicas", default=0),
                              dig(o, "status", "availableReplicas", default=0),
                              age(dig(o, "metadata", "creationTimestamp")),
                              *images(o, ("spec", "template", "spec", "containers")),
                              selector_text(dig(o, "spec", "selector"))]),
    "daemonset": ([col("Desired", "integer"), col("Current", "integer"), col("Ready", "integer"),
                   col("Up-to-date", "integer"), col("Available", "integer"), col("Node Selector"), col("Age"),
                   col("Containers", priority=1), col("Images", priority=1), col("Selector", priority=1)],
                  lambda o: [dig(o, "status", f, default=0) for f in
                             ("desiredNumberScheduled", "currentNumberScheduled", "numberReady",
                              "updatedNumberScheduled", "numberAvailable")]
                  + [",".join(f"{k}={v}" for k, v in (dig(o, "spec", "template", "spec", "nodeSelector") or {}).items()) or "<none>",
                     age(dig(o, "metadata", "creationTimestamp")),
                     *images(o, ("spec", "template", "spec", "containers")),
                     selector_text(dig(o, "spec", "selector"))]),
}


def to_table(res, stored_objs, include, list_meta):
    """meta.k8s.io/v1 Table of stored objects (printed from the storage format)."""
    name_col = col("Name", fmt="name")
    if res.printer == "event":  # the real event table has its Name column last
        columns, cells = PRINTERS["event"][0], event_row
    else:
        cols, row_fn = PRINTERS.get(res.printer) or (
            [col("Created At", "date")], lambda o: [dig(o, "metadata", "creationTimestamp")])
        columns = [name_col] + cols

        def cells(o):
            return [dig(o, "metadata", "name")] + row_fn(o)
    rows = []
    for o in stored_objs:
        row = {"cells": cells(o)}
        if include == "Object":
            row["object"] = to_version(res, o)
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": copy.deepcopy(o.get("metadata", {}))}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta,
            "columnDefinitions": columns, "rows": rows}


# ---------------------------------------------------------------------------------
# Discovery and OpenAPI
# ---------------------------------------------------------------------------------


def api_resource(r):
    out = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
           "verbs": r.verbs, "storageVersionHash": base64.b64encode(hashlib.sha256(r.storage.encode()).digest()[:8]).decode()}
    if r.short:
        out["shortNames"] = r.short
    if r.categories:
        out["categories"] = r.categories
    return out


def resource_list(group, version):
    rs = [r for r in RESOURCES if r.group == group and r.version == version]
    if not rs:
        return None
    resources = []
    for r in rs:
        resources.append(api_resource(r))
        if r.status:
            resources.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                              "kind": r.kind, "verbs": ["get", "patch", "update"]})
        if r.plural == "pods":
            resources.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                              "version": "v1", "kind": "Eviction", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": rs[0].group_version,
            "resources": resources}


def api_group(group, versions):
    vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs, "preferredVersion": vs[0]}


def aggregated(groups, discovery_version):
    items = []
    for group, versions in groups:
        vs = []
        for v in versions:
            resources = []
            for r in RESOURCES:
                if r.group != group or r.version != v:
                    continue
                d = {"resource": r.plural, "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                     "scope": "Namespaced" if r.namespaced else "Cluster", "singularResource": r.singular,
                     "verbs": r.verbs}
                if r.short:
                    d["shortNames"] = r.short
                if r.categories:
                    d["categories"] = r.categories
                if r.status:
                    d["subresources"] = [{"subresource": "status", "responseKind": dict(d["responseKind"]),
                                          "verbs": ["get", "patch", "update"]}]
                if r.plural == "pods":
                    d["subresources"].append({"subresource": "eviction", "verbs": ["create"], "responseKind": {
                        "group": "policy", "version": "v1", "kind": "Eviction"}})
                resources.append(d)
            vs.append({"version": v, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": vs})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{discovery_version}",
            "metadata": {}, "items": items}


def openapi_gv_path(group, version):
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_doc(group, version):
    """Paths and operations with their parameters and GVK extensions: what kubectl reads
    to learn that the server supports fieldValidation. No schemas."""
    def param(name, where="query", required=False):
        return {"name": name, "in": where, "required": required, "schema": {"type": "string", "uniqueItems": True}}

    common = [param("dryRun"), param("fieldManager"), param("fieldValidation")]
    paths = {}
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        base = "/" + openapi_gv_path(group, version) + ("/namespaces/{namespace}" if r.namespaced else "")
        ref = {"$ref": f"#/components/schemas/{r.kind}"}
        body = {"content": {"*/*": {"schema": ref}}, "required": True}
        patch_body = {"content": {t: {"schema": {"type": "object"}} for t in (
            "application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")},
            "required": True}
        resp = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}

        def op(action, verb_name, params=(), body_=None):
            o = {"operationId": f"{verb_name}{r.kind}", "x-kubernetes-action": action,
                 "x-kubernetes-group-version-kind": gvk, "parameters": list(params), "responses": resp}
            if body_:
                o["requestBody"] = body_
            return o

        item_params = [param("name", "path", True)] + ([param("namespace", "path", True)] if r.namespaced else [])
        coll_params = [param("namespace", "path", True)] if r.namespaced else []
        paths[f"{base}/{r.plural}"] = {
            "get": op("list", "list", [param(n) for n in ("labelSelector", "fieldSelector", "limit", "continue",
                                                           "resourceVersion", "watch", "timeoutSeconds")]),
            "post": op("post", "create", common, body),
            "delete": op("deletecollection", "deleteCollection"),
            "parameters": coll_params,
        }
        paths[f"{base}/{r.plural}/{{name}}"] = {
            "get": op("get", "read"), "put": op("put", "replace", common, body),
            "patch": op("patch", "patch", common + [param("force")], patch_body),
            "delete": op("delete", "delete", [param("dryRun"), param("gracePeriodSeconds")]),
            "parameters": item_params,
        }
        if r.status:
            paths[f"{base}/{r.plural}/{{name}}/status"] = {
                "get": op("get", "readStatus"), "put": op("put", "replaceStatus", common, body),
                "patch": op("patch", "patchStatus", common + [param("force")], patch_body),
                "parameters": item_params,
            }
    schemas = {r.kind: {"type": "object", "x-kubernetes-group-version-kind": [
        {"group": r.group, "version": r.version, "kind": r.kind}]}
        for r in RESOURCES if r.group == group and r.version == version}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def pb_string(field, text):
    data = text.encode()
    return bytes([field << 3 | 2, len(data)]) + data


OPENAPI_V2_PB = pb_string(1, "2.0") + bytes([2 << 3 | 2]) + bytes(
    [len(pb_string(1, "Kubernetes") + pb_string(2, SERVER_VERSION["gitVersion"]))]) + \
    pb_string(1, "Kubernetes") + pb_string(2, SERVER_VERSION["gitVersion"])

OPENAPI_GVS = [("", "v1")] + [(g, v) for g, vs in GROUPS for v in vs]


def openapi_hash(group, version):
    return hashlib.sha512(dumps(openapi_doc(group, version)).encode()).hexdigest()[:64].upper()


# ---------------------------------------------------------------------------------
# Content negotiation
# ---------------------------------------------------------------------------------


def parse_accept(header):
    out = []
    for part in (header or "*/*").split(","):
        bits = [b.strip() for b in part.split(";")]
        params = {}
        for b in bits[1:]:
            if "=" in b:
                k, v = b.split("=", 1)
                params[k.strip()] = v.strip()
        out.append((bits[0].lower(), params))
    return out


def negotiate(request):
    """('json'|'yaml', as) where as is None, 'Table', 'PartialObjectMetadata', 'PartialObjectMetadataList'."""
    for mt, params in parse_accept(request.headers.get("Accept")):
        if mt in ("application/json", "*/*", "application/*", "application/yaml"):
            fmt = "yaml" if mt == "application/yaml" else "json"
            as_ = params.get("as")
            if as_ is None:
                return fmt, None
            if params.get("g") == "meta.k8s.io" and as_ in ("Table", "PartialObjectMetadata", "PartialObjectMetadataList"):
                return fmt, as_
    raise ApiError(406, "NotAcceptable", "only the following media types are accepted: application/json, application/yaml")


# ---------------------------------------------------------------------------------
# Watches
# ---------------------------------------------------------------------------------


class Watcher:
    def __init__(self, server, res, ns, lsel, fsel, raw, request):
        self.server, self.res, self.ns, self.lsel, self.fsel = server, res, ns, lsel, fsel
        self.raw = raw  # (labelSelector, fieldSelector) as asked
        self.queue = asyncio.Queue()
        self.bookmarks = False
        self.user_agent = request.headers.get("User-Agent", "")
        self.request = request

    def matches(self, obj):
        if obj is None:
            return False
        if self.ns and dig(obj, "metadata", "namespace") != self.ns:
            return False
        return labels_match(obj, self.lsel) and fields_match(obj, self.fsel)

    def translate(self, change):
        """The watch event this watcher sees for a change (or None): objects moving into or
        out of its selection are ADDED or DELETED, as the real watch cache reports them."""
        if change.skey != self.res.storage:
            return None
        now, before = self.matches(change.obj), self.matches(change.prev)
        if change.type == "ADDED":
            return ("ADDED", change.obj) if now else None
        if change.type == "DELETED":
            return ("DELETED", change.obj) if before or now else None
        if now and before:
            return ("MODIFIED", change.obj)
        if now:
            return ("ADDED", change.obj)
        if before:
            return ("DELETED", change.obj)
        return None

    def offer(self, change):
        event = self.translate(change)
        if event:
            self.queue.put_nowait(event)

    def bookmark(self):
        if self.bookmarks:
            self.queue.put_nowait(("BOOKMARK", None))



# ---------------------------------------------------------------------------------
# Authentication (bearer tokens) and authorization (RBAC), as the real server's
# token authenticator, anonymous authenticator and authorizers (system:masters, then
# RBAC) do them: a request with a token the server knows acts as that user; one
# without Authorization is system:anonymous (anonymous auth is on by default), whom
# only the bootstrap role system:public-info-viewer allows anything; any other token
# is 401 Unauthorized.
# ---------------------------------------------------------------------------------

SA_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"
# The fixtures' credential (the --state-dir kubeconfig): a user in system:masters,
# as kubeadm's admin.conf has it.
ADMIN_TOKEN = "tend-fake-admin-token"
ADMIN_USER = "kubernetes-admin"
MASTERS = "system:masters"


class User:
    def __init__(self, name, groups=None):
        self.name = name
        self.groups = groups or ["system:authenticated"]
        if groups is None and name.startswith(SA_PREFIX) and name.count(":") == 3:
            ns = name.split(":")[2]
            self.groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]


ANONYMOUS = User("system:anonymous", ["system:unauthenticated"])

# What the bootstrap roles give, and to which group their ClusterRoleBinding binds them:
# system:public-info-viewer to everyone, anonymous included; system:discovery and
# system:basic-user to authenticated users only (since Kubernetes 1.14).
BOOTSTRAP_RULES = [
    ({"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]},
     "system:public-info-viewer", ("system:authenticated", "system:unauthenticated")),
    ({"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version", "/version/", "/openapi", "/openapi/*"],
      "verbs": ["get"]}, "system:discovery", ("system:authenticated",)),
    ({"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
      "verbs": ["create"]}, "system:basic-user", ("system:authenticated",)),
]


class Attributes:
    """authorizer.Attributes of a request: resource requests (verb, group, resource,
    subresource, namespace, name) or non-resource ones (verb, path)."""

    def __init__(self, verb, group="", resource="", subresource="", namespace="", name="", path=None):
        self.verb, self.group, self.resource, self.subresource = verb, group, resource, subresource
        self.namespace, self.name, self.path = namespace or "", name or "", path

    def forbidden(self, user):
        """The Status the real server answers a denial with (responsewriters.forbiddenMessage)."""
        if self.path is not None:
            return ApiError(403, "Forbidden", f'forbidden: User "{user.name}" cannot {self.verb} path "{self.path}"', {})
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        why = f'User "{user.name}" cannot {self.verb} resource "{resource}" in API group "{self.group}" {where}'
        gr = f"{self.resource}.{self.group}" if self.group else self.resource
        message = f'{gr} "{self.name}" is forbidden: {why}' if self.name else f"{gr} is forbidden: {why}"
        details = {"name": self.name, "group": self.group, "kind": self.resource}
        return ApiError(403, "Forbidden", message, {k: v for k, v in details.items() if v})


def rule_allows(attrs, rule):
    """rbac.RuleAllows: verbs, then API groups, resources (with subresources and "*/sub"),
    resource names; or verbs and non-resource URLs ("*" and "prefix*")."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attrs.verb not in verbs:
        return False
    if attrs.path is not None:
        return any(u == "*" or u == attrs.path or (u.endswith("*") and attrs.path.startswith(u[:-1]))
                   for u in rule.get("nonResourceURLs") or [])
    groups = rule.get("apiGroups") or []
    if "*" not in groups and attrs.group not in groups:
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    resources = rule.get("resources") or []
    if not any(r == "*" or r == combined or (attrs.subresource and r == "*/" + attrs.subresource)
               for r in resources):
        return False
    names = rule.get("resourceNames") or []
    return not names or attrs.name in names


def subject_matches(subject, user, binding_ns):
    """rbac appliesToUser: a User by name, a Group by membership, a ServiceAccount by
    its username (its namespace defaulting to the binding's)."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return bool(ns) and user.name == f"{SA_PREFIX}{ns}:{name}"
    return False


def describe_subject(subject, binding_ns):
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_ns}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


def rbac_res(plural):
    return BY_PATH[(RBAC_GROUP, "v1", plural)]


# ---------------------------------------------------------------------------------
# PodDisruptionBudgets: the disruption controller's arithmetic
# (pkg/controller/disruption/disruption.go) and the pod helpers eviction.go uses
# ---------------------------------------------------------------------------------

# disruption.DeletionTimeout: how long a pod the eviction subresource approved stays
# in status.disruptedPods (counted unhealthy) while it has not started terminating
PDB_DELETION_TIMEOUT = 120.0
# eviction.go MaxDisruptedPodSize
MAX_DISRUPTED_POD_SIZE = 2000


class SyncFailed(Exception):
    """An error of the controller's trySync, which failSafe records."""


def selector_requirements(sel):
    """metav1.LabelSelectorAsSelector as requirements for labels_match: None for a nil (or
    invalid) selector, which matches nothing; [] for an empty one, which matches all."""
    if not isinstance(sel, dict):
        return None
    reqs = [(k, "=", [v]) for k, v in (sel.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for e in sel.get("matchExpressions") or []:
        if not isinstance(e, dict) or e.get("operator") not in ops:
            return None
        reqs.append((e.get("key"), ops[e["operator"]], list(e.get("values") or [])))
    return reqs


def pod_ready(pod):
    """podutil.IsPodReady: a Ready condition whose status is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in dig(pod, "status", "conditions", default=[]) or [] if isinstance(c, dict))


def controller_ref(obj):
    return next((r for r in dig(obj, "metadata", "ownerReferences", default=[]) or []
                 if isinstance(r, dict) and r.get("controller") is True), None)


def scaled_value(v, total):
    """intstr.GetScaledValueFromIntOrPercent(v, total, roundUp=true)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str):
        if not v.endswith("%"):
            raise SyncFailed("invalid value for IntOrString: invalid type: string is not a percentage")
        try:
            pct = int(v[:-1])
        except ValueError:
            raise SyncFailed(f'invalid value for IntOrString: invalid value "{v}": strconv.Atoi: parsing "{v[:-1]}": invalid syntax') from None
        return -(-pct * total // 100)
    raise SyncFailed("invalid value for IntOrString: invalid type: neither int nor percentage")


def set_pdb_condition(status, cond_status, reason, message, observed, now):
    """meta.SetStatusCondition of the DisruptionAllowed condition: the transition time
    changes only with the status."""
    conds = status.setdefault("conditions", [])
    cur = next((c for c in conds if c.get("type") == "DisruptionAllowed"), None)
    new = {"type": "DisruptionAllowed", "status": cond_status}
    if observed:
        new["observedGeneration"] = observed
    new["lastTransitionTime"] = cur["lastTransitionTime"] if cur and cur.get("status") == cond_status else ts(now)
    new["reason"], new["message"] = reason, message
    if cur is None:
        conds.append(new)
    else:
        conds[conds.index(cur)] = new


def update_disruption_allowed_condition(status, now):
    """pdbhelper.UpdateDisruptionAllowedCondition."""
    if status.get("disruptionsAllowed", 0) > 0:
        set_pdb_condition(status, "True", "SufficientPods", "", status.get("observedGeneration"), now)
    else:
        set_pdb_condition(status, "False", "InsufficientPods", "", status.get("observedGeneration"), now)


def pdb_status(observed, disrupted, allowed, current, desired, expected, conditions):
    """A PodDisruptionBudgetStatus in its JSON field order (observedGeneration and
    disruptedPods omitempty, the four counts always present)."""
    out = {}
    if observed:
        out["observedGeneration"] = observed
    if disrupted:
        out["disruptedPods"] = disrupted
    out.update({"disruptionsAllowed": allowed, "currentHealthy": current, "desiredHealthy": desired,
                "expectedPods": expected})
    if conditions:
        out["conditions"] = conditions
    return out


def too_many_requests(message, cause, retry_after=0):
    """errors.NewTooManyRequests with a DisruptionBudget cause, as eviction.go builds it
    (a retryAfterSeconds > 0 is also the Retry-After header)."""
    details = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers = None
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers = {"Retry-After": str(retry_after)}
    return ApiError(429, "TooManyRequests", message, details, headers)


CANNOT_EVICT = "Cannot evict pod as it would violate the pod's disruption budget."


# ---------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------

VERB_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


class Server:
    def __init__(self, args):
        self.args = args
        self.store = Store(args.history)
        self.blackhole_until = 0.0
        self.blackhole_agent = None
        self.blackhole_event = asyncio.Event()
        self.outage_until = 0.0
        self.outage_agent = None
        self.reset_counts()
        self.watches_opened = 0
        self.log_file = None
        self.tokens = {ADMIN_TOKEN: User(ADMIN_USER, [MASTERS, "system:authenticated"])}  # bearer token -> User
        for pair in args.token or []:
            token, _, user = pair.partition("=")
            self.tokens[token] = User(user)
        # the disruption controller: namespaces whose PDBs are to be synced
        self.pdb_dirty = set()
        self.pdb_flush_scheduled = False
        # the kubelet stand-ins: nodes whose kubelet runs, and a timer per terminating pod
        self.kubelets = set()
        self.kubelet_timers = {}  # pod uid -> (node, asyncio.TimerHandle)
        self.deletion_due = {}  # pod uid -> time.time() its grace period ends (deletionTimestamp, unrounded)
        self.store.on_commit = self.after_commit

    def reset_counts(self):
        self.counts = {}
        self.by_resource = {}
        self.log = deque(maxlen=10000)
        self.seq = 0

    # -- admin --------------------------------------------------------------------

    async def admin(self, request):
        path, q = request.path, request.query
        if path == "/fake/requests" and request.method == "GET":
            since = int(q.get("since", "0") or 0)
            return web.json_response({"total": sum(self.counts.values()), "seq": self.seq, "counts": self.counts,
                                      "resources": self.by_resource,
                                      "log": [e for e in self.log if e["seq"] > since]})
        if path == "/fake/requests/reset" and request.method == "POST":
            self.reset_counts()
            return web.json_response({"ok": True})
        if path == "/fake/watches" and request.method == "GET":
            groups = {}
            for w in self.store.watchers:
                key = (w.res.group, w.res.version, w.res.plural, w.ns or "", w.raw[0], w.raw[1])
                g = groups.setdefault(key, {"group": key[0], "version": key[1], "resource": key[2],
                                            "namespace": key[3], "labelSelector": key[4], "fieldSelector": key[5],
                                            "count": 0, "userAgents": []})
                g["count"] += 1
                if w.user_agent not in g["userAgents"]:
                    g["userAgents"].append(w.user_agent)
            return web.json_response({"total": len(self.store.watchers), "opened": self.watches_opened,
                                      "watches": sorted(groups.values(), key=lambda g: (g["resource"], g["namespace"]))})
        if path == "/fake/compact" and request.method == "POST":
            self.store.compact(q.get("resourceVersion"))
            return web.json_response(self.state())
        if path == "/fake/bookmark" and request.method == "POST":
            n = 0
            for w in list(self.store.watchers):
                if w.bookmarks:
                    w.bookmark()
                    n += 1
            return web.json_response({"sent": n})
        if path == "/fake/blackhole" and request.method == "POST":
            seconds = float(q.get("seconds", "30"))
            self.blackhole_until = time.monotonic() + seconds
            self.blackhole_agent = q.get("userAgent") or None
            self.blackhole_event = asyncio.Event()
            asyncio.get_running_loop().call_later(seconds, self.end_blackhole, self.blackhole_event)
            return web.json_response({"seconds": seconds, "userAgent": self.blackhole_agent})
        if path == "/fake/blackhole" and request.method == "DELETE":
            self.end_blackhole(self.blackhole_event)
            return web.json_response({"ok": True})
        if path == "/fake/outage" and request.method == "POST":
            seconds = float(q.get("seconds", "30"))
            self.outage_until = time.monotonic() + seconds
            self.outage_agent = q.get("userAgent") or None
            for w in list(self.store.watchers):
                if self.agent_matches(self.outage_agent, w.request):
                    w.queue.put_nowait(("END", None))
            return web.json_response({"seconds": seconds, "userAgent": self.outage_agent})
        if path == "/fake/outage" and request.method == "DELETE":
            self.outage_until = 0.0
            return web.json_response({"ok": True})
        if path == "/fake/kubelet" and request.method in ("POST", "DELETE"):
            node = q.get("node")
            if not node:
                return web.json_response(bad_request("node is required").status(), status=400)
            if request.method == "POST":
                self.kubelets.add(node)
                for pod in list(self.store.table(PODS.storage).values()):
                    self.kubelet_schedule(pod)
            else:
                self.kubelets.discard(node)
                for uid, (on, timer) in list(self.kubelet_timers.items()):
                    if on == node:
                        timer.cancel()
                        del self.kubelet_timers[uid]
            return web.json_response({"kubelets": sorted(self.kubelets)})
        if path == "/fake/reset" and request.method == "POST":
            self.reset()
            return web.json_response(self.state())
        if path == "/fake/state" and request.method == "GET":
            return web.json_response(self.state())
        if path == "/fake/tokens" and request.method == "POST":
            body = await request.json()
            if not body.get("token") or not body.get("user"):
                return web.json_response(bad_request("token and user are required").status(), status=400)
            self.tokens[body["token"]] = User(body["user"])
            return web.json_response({"users": sorted({u.name for u in self.tokens.values()})})
        return web.json_response(path_not_found().status(), status=404)

    def state(self):
        s = self.store
        return {"resourceVersion": str(s.rv), "compacted": str(s.compacted), "history": len(s.history),
                "objects": sum(len(t) for t in s.objs.values()), "watches": len(s.watchers)}

    def end_blackhole(self, event):
        if event is self.blackhole_event:
            self.blackhole_until = 0.0
            self.blackhole_agent = None
        event.set()

    @staticmethod
    def agent_matches(agent, request):
        return agent is None or agent in request.headers.get("User-Agent", "")

    def blackholed(self, request):
        return time.monotonic() < self.blackhole_until and self.agent_matches(self.blackhole_agent, request)

    def in_outage(self, request):
        return time.monotonic() < self.outage_until and self.agent_matches(self.outage_agent, request)

    def reset(self):
        self.kubelets.clear()
        for _, timer in self.kubelet_timers.values():
            timer.cancel()
        self.kubelet_timers.clear()
        s = self.store
        for skey, table in list(s.objs.items()):
            res = STORAGE_RES[skey]
            for (ns, name), obj in list(table.items()):
                if res is NAMESPACES and name in DEFAULT_NAMESPACES:
                    continue
                s.commit(res, "DELETED", copy.deepcopy(obj), obj)
        s.compact()

    # -- authentication and authorization --------------------------------------------

    def authenticate(self, request):
        """The caller: system:anonymous without an Authorization header, else the User
        its bearer token names; 401 for any other credential."""
        header = request.headers.get("Authorization")
        if header is None:
            return ANONYMOUS
        scheme, _, token = header.partition(" ")
        user = self.tokens.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return user

    def rules_for(self, user, namespace):
        """(rule, why) of every rule that applies to `user` in `namespace` ("" for the
        cluster scope), as the RBAC authorizer visits them: the bootstrap roles of every
        authenticated user, then ClusterRoleBindings (everywhere), then the RoleBindings
        of the namespace (there only)."""
        for rule, role, groups in BOOTSTRAP_RULES:
            group = next((g for g in groups if g in user.groups), None)
            if group:
                yield rule, f'RBAC: allowed by ClusterRoleBinding "{role}" of ClusterRole "{role}" to Group "{group}"'
        bindings = [(b, "") for b in self.store.table(rbac_res("clusterrolebindings").storage).values()]
        if namespace:
            bindings += [(b, namespace) for (ns, _), b in self.store.table(rbac_res("rolebindings").storage).items()
                         if ns == namespace]
        for binding, ns in bindings:
            subject = next((s for s in binding.get("subjects") or [] if subject_matches(s, user, ns)), None)
            ref = binding.get("roleRef") or {}
            if subject is None or ref.get("apiGroup") != RBAC_GROUP:
                continue
            if ref.get("kind") == "ClusterRole":
                role = self.store.get(rbac_res("clusterroles"), None, ref.get("name"))
            elif ref.get("kind") == "Role" and ns:
                role = self.store.get(rbac_res("roles"), ns, ref.get("name"))
            else:
                role = None
            if role is None:
                continue
            kind = "RoleBinding" if ns else "ClusterRoleBinding"
            name = f"{binding['metadata']['name']}/{ns}" if ns else binding["metadata"]["name"]
            why = f'RBAC: allowed by {kind} "{name}" of {ref["kind"]} "{ref["name"]}" to {describe_subject(subject, ns)}'
            for rule in role.get("rules") or []:
                yield rule, why

    def allowed(self, user, attrs):
        """Why `attrs` is allowed to `user`, or None when denied: the system:masters
        group is allowed everything (the privileged-group authorizer, before RBAC)."""
        if MASTERS in user.groups:
            return ""
        return next((why for rule, why in self.rules_for(user, attrs.namespace) if rule_allows(attrs, rule)), None)

    def authorize(self, request, verb, res, ns, name, sub):
        """403 Forbidden unless the caller may `verb` the resource."""
        if res is NAMESPACES and name:
            ns = name  # a Namespace is in itself, as RequestInfo has it
        elif not res.namespaced:
            ns = ""
        attrs = Attributes(verb, res.group, res.plural, sub or "", ns, name)
        user = request["user"]
        if self.allowed(user, attrs) is None:
            raise attrs.forbidden(user)

    def authorize_request(self, request, res, ns, name, sub, watch_path):
        """RequestInfo's verb for the request, then RBAC (403 when denied). A list or watch
        with the field selector metadata.name=NAME is about NAME (resourceNames apply)."""
        q, m = request.query, request.method
        if m == "GET" and (watch_path or q.get("watch") in ("1", "true", "True")):
            verb = "watch"
        elif m == "GET":
            verb = "get" if name else "list"
        elif m == "DELETE":
            verb = "delete" if name else "deletecollection"
        elif m in VERB_BY_METHOD:
            verb = VERB_BY_METHOD[m]
        else:
            return  # 405 follows
        if verb in ("list", "watch") and not name:
            for term in q.get("fieldSelector", "").split(","):
                exact = re.match(r"^\s*metadata\.name\s*==?\s*(.*?)\s*$", term)
                if exact:
                    name = exact.group(1)
        self.authorize(request, verb, res, ns, name, sub)

    async def access_review(self, request, res):
        """A SelfSubjectAccessReview: may the caller do what its spec describes?"""
        ct, review = await self.body(request, res)
        review = self.check_body_object(res, review, None)
        spec = review.get("spec") or {}
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if bool(ra) == bool(nra):
            raise invalid(res, "", [("spec.resourceAttributes", "FieldValueRequired",
                                     "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified")])
        if ra:
            attrs = Attributes(ra.get("verb", ""), ra.get("group", ""), ra.get("resource", ""),
                               ra.get("subresource", ""), ra.get("namespace", ""), ra.get("name", ""))
        else:
            attrs = Attributes(nra.get("verb", ""), path=nra.get("path", ""))
        why = self.allowed(request["user"], attrs)
        status = {"allowed": why is not None}
        if why:
            status["reason"] = why
        return web.json_response({"kind": res.kind, "apiVersion": res.group_version,
                                  "metadata": {"creationTimestamp": None}, "spec": spec, "status": status},
                                 status=201)

    # -- request plumbing ---------------------------------------------------------

    @web.middleware
    async def middleware(self, request, handler):
        if request.path.startswith("/fake/"):
            return await handler(request)
        entry = self.record(request)
        try:
            request["user"] = self.authenticate(request)
        except ApiError as e:
            entry["code"] = e.code
            return web.json_response(e.status(), status=e.code, headers=e.headers)
        entry["user"] = request["user"].name
        if self.blackholed(request):
            event = self.blackhole_event
            await event.wait()
            # The partition heals: this request was lost; the client sees its connection drop.
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=503)
        if self.in_outage(request):
            entry["code"] = 503
            error = ApiError(503, "ServiceUnavailable", "the server is currently unable to handle the request (a test's outage)")
            return web.json_response(error.status(), status=503)
        try:
            resp = await handler(request)
        except ApiError as e:
            resp = web.json_response(e.status(), status=e.code, headers=e.headers)
        entry["code"] = resp.status
        if self.log_file:
            self.log_file.write(f"{ts()} {request.method} {request.path_qs} {resp.status} {entry['user']} {request.headers.get('User-Agent', '')}\n")
            self.log_file.flush()
        return resp

    def record(self, request):
        parsed = None
        try:
            parsed = parse_path(request.path)
        except ApiError:
            pass
        verb, resource = "nonresource", None
        if parsed:
            res, ns, name, sub, watch_path = parsed
            resource = res.plural if not sub else f"{res.plural}/{sub}"
            if res.group:
                resource = f"{resource}.{res.group}"
            if request.method == "GET":
                if watch_path or request.query.get("watch") in ("1", "true", "True"):
                    verb = "watch"
                else:
                    verb = "get" if name else "list"
            elif request.method == "DELETE":
                verb = "delete" if name else "deletecollection"
            else:
                verb = VERB_BY_METHOD.get(request.method, request.method.lower())
        self.counts[verb] = self.counts.get(verb, 0) + 1
        if resource:
            r = self.by_resource.setdefault(resource, {})
            r[verb] = r.get(verb, 0) + 1
        self.seq += 1
        entry = {"seq": self.seq, "verb": verb, "method": request.method, "path": request.path,
                 "query": dict(request.query), "resource": resource, "userAgent": request.headers.get("User-Agent", ""),
                 "contentType": request.headers.get("Content-Type"), "code": None, "user": None}
        if parsed:
            entry["namespace"], entry["name"] = parsed[1], parsed[2]
        self.log.append(entry)
        return entry

    async def handle(self, request):
        path = request.path
        parsed = parse_path_soft(path)
        if parsed:
            self.authorize_request(request, *parsed)
        else:
            attrs = Attributes(request.method.lower(), path=path)
            if self.allowed(request["user"], attrs) is None:
                raise attrs.forbidden(request["user"])
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            return web.json_response(SERVER_VERSION)
        if path in ("/api", "/apis") or path.startswith("/apis/") and path.count("/") <= 3 and not parse_path_soft(path):
            return self.discovery(request)
        if path == "/api/v1" and request.method == "GET":
            return web.json_response(resource_list("", "v1"))
        if path.startswith("/openapi/"):
            return self.openapi(request)
        parsed = parse_path(path)
        if not parsed:
            raise path_not_found()
        res, ns, name, sub, watch_path = parsed
        if res is PDBS:
            self.flush_pdbs()  # the disruption controller has caught up with every change
        if res.plural == "selfsubjectaccessreviews":
            if request.method != "POST" or name:
                raise method_not_allowed()
            return await self.access_review(request, res)
        if sub == "eviction" and res.plural == "pods" and name and ns:
            if request.method != "POST":
                raise method_not_allowed()
            return await self.evict(request, res, ns, name)
        if sub not in (None, "status"):
            raise path_not_found()
        if sub == "status" and not res.status:
            raise path_not_found()
        q = request.query
        m = request.method
        if m == "GET":
            if watch_path or q.get("watch") in ("1", "true", "True"):
                if not res.namespaced:
                    ns = None
                return await self.watch(request, res, ns, name)
            if name:
                return self.respond(request, res, self.get_obj(res, ns, name))
            return self.list(request, res, ns)
        if m == "POST" and not name:
            if res.namespaced and not ns:
                raise method_not_allowed()
            return self.respond(request, res, *(await self.create(request, res, ns)))
        if m == "PUT" and name:
            return self.respond(request, res, *(await self.update(request, res, ns, name, sub)))
        if m == "PATCH" and name:
            return self.respond(request, res, *(await self.patch(request, res, ns, name, sub)))
        if m == "DELETE" and name and not sub:
            return self.respond(request, res, *(await self.delete(request, res, ns, name)))
        if m == "DELETE" and not name and "deletecollection" in res.verbs:
            return self.encode(await self.delete_collection(request, res, ns), negotiate(request)[0])
        raise method_not_allowed()

    def discovery(self, request):
        path = request.path
        accept = parse_accept(request.headers.get("Accept"))
        for mt, params in accept:
            if params.get("as") == "APIGroupDiscoveryList" and params.get("g") == "apidiscovery.k8s.io" \
                    and params.get("v") in ("v2", "v2beta1") and path in ("/api", "/apis"):
                groups = [("", ["v1"])] if path == "/api" else GROUPS
                body = aggregated(groups, params["v"])
                ct = f"application/json;g=apidiscovery.k8s.io;v={params['v']};as=APIGroupDiscoveryList"
                return web.Response(text=dumps(body), headers={"Content-Type": ct})
            if mt in ("application/json", "*/*", "application/*"):
                break
        if path == "/api":
            host = request.host or "127.0.0.1"
            return web.json_response({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": host}]})
        if path == "/apis":
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1",
                                      "groups": [api_group(g, vs) for g, vs in GROUPS]})
        parts = path.strip("/").split("/")
        if len(parts) == 2:
            for g, vs in GROUPS:
                if g == parts[1]:
                    return web.json_response(api_group(g, vs))
        if len(parts) == 3:
            rl = resource_list(parts[1], parts[2])
            if rl:
                return web.json_response(rl)
        raise path_not_found()

    def openapi(self, request):
        path = request.path
        if path == "/openapi/v2":
            # A gnostic openapi_v2.Document in protobuf, as kubectl asks for it: swagger
            # "2.0" and info, no definitions (kubectl then leaves validation to the server).
            return web.Response(body=OPENAPI_V2_PB, headers={
                "Content-Type": "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"})
        if path == "/openapi/v3":
            return web.json_response({"paths": {openapi_gv_path(g, v): {
                "serverRelativeURL": f"/openapi/v3/{openapi_gv_path(g, v)}?hash={openapi_hash(g, v)}"}
                for g, v in OPENAPI_GVS}})
        for g, v in OPENAPI_GVS:
            if path == f"/openapi/v3/{openapi_gv_path(g, v)}":
                return web.json_response(openapi_doc(g, v), headers={
                    "Cache-Control": "public, immutable" if request.query.get("hash") else "no-cache, private",
                    "Etag": f'"{openapi_hash(g, v)}"'})
        raise path_not_found()

    # -- responses ----------------------------------------------------------------

    def respond(self, request, res, stored, status=200):
        if isinstance(stored, dict) and stored.get("kind") == "Status":
            return web.json_response(stored, status=status)
        fmt, as_ = negotiate(request)
        if as_ == "Table":
            body = to_table(res, [stored], request.query.get("includeObject", "Metadata"),
                            {"resourceVersion": dig(stored, "metadata", "resourceVersion", default="")})
        elif as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            body = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": copy.deepcopy(stored.get("metadata", {}))}
        else:
            body = to_version(res, stored)
        return self.encode(body, fmt, status)

    def encode(self, body, fmt, status=200):
        if fmt == "yaml":
            return web.Response(text=yaml.safe_dump(body, sort_keys=False), status=status,
                                content_type="application/yaml")
        return web.Response(text=dumps(body), status=status, content_type="application/json")

    def get_obj(self, res, ns, name):
        obj = self.store.get(res, ns, name)
        if obj is None:
            raise not_found(res, name)
        return obj

    # -- list -----------------------------------------------------------------------

    async def wait_for_rv(self, rv):
        """A resourceVersion newer than the server's: wait up to 3 s, as the watch cache does."""
        deadline = time.monotonic() + 3
        while self.store.rv < rv and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.store.rv < rv:
            raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {rv}, current: {self.store.rv}",
                           {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1})

    def parse_rv(self, value, what="resourceVersion"):
        try:
            rv = int(value)
            if rv < 0:
                raise ValueError
            return rv
        except ValueError:
            raise bad_request(f'invalid {what}: "{value}"') from None

    def list(self, request, res, ns):
        q = request.query
        lsel = parse_label_selector(q.get("labelSelector", ""))
        fsel = parse_field_selector(res, q.get("fieldSelector", ""))
        limit = q.get("limit")
        limit = self.parse_rv(limit, "limit") if limit else 0
        token = q.get("continue")
        rv_param = q.get("resourceVersion")
        match = q.get("resourceVersionMatch")
        if not res.namespaced:
            ns = None
        if match and match not in ("Exact", "NotOlderThan"):
            raise bad_request(f'resourceVersionMatch: Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"')
        if match and not rv_param:
            raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        start = ""
        if token:
            if rv_param:
                raise bad_request("specifying resource version is not allowed when using continue")
            try:
                t = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
                snap_rv, start = int(t["rv"]), t["start"]
            except Exception:
                raise bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)") from None
            if snap_rv < self.store.compacted:
                raise expired("The provided continue parameter is too old to display a consistent list result. "
                              "You can start a new list without the continue parameter, or use the continue token "
                              "in this response to retrieve the remainder of the results. Continuing with the "
                              "provided token results in an inconsistent list - objects that were created, modified, "
                              "or deleted between the time the first chunk was returned and now may show up in the list.")
            state = self.store.snapshot(res.storage, snap_rv)
        elif rv_param and rv_param != "0" and (match == "Exact" or (limit and not match)):
            snap_rv = self.parse_rv(rv_param)
            if snap_rv > self.store.rv:
                raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {snap_rv}, current: {self.store.rv}")
            state = self.store.snapshot(res.storage, snap_rv)
        else:
            if rv_param and rv_param != "0":
                want = self.parse_rv(rv_param)
                if want > self.store.rv:
                    raise ApiError(504, "Timeout", f"Timeout: Too large resource version: {want}, current: {self.store.rv}",
                                   {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                                    "retryAfterSeconds": 1})
            snap_rv = self.store.rv
            state = dict(self.store.table(res.storage))
        # etcd's order: by key, namespace/name
        keyed = sorted((f"{k[0]}/{k[1]}", k) for k in state if ns is None or k[0] == ns)
        keyed = [(sk, k) for sk, k in keyed if sk > start]
        items, last_key, next_key, remaining = [], None, None, 0
        for i, (sk, k) in enumerate(keyed):
            obj = state[k]
            if not (labels_match(obj, lsel) and fields_match(obj, fsel)):
                continue
            if limit and len(items) == limit:
                next_key, remaining = last_key, len(keyed) - i
                break
            items.append(obj)
            last_key = sk
        meta = {"resourceVersion": str(snap_rv)}
        if next_key is not None:
            meta["continue"] = base64.urlsafe_b64encode(dumps(
                {"v": "meta.k8s.io/v1", "rv": snap_rv, "start": next_key + "\x00"}).encode()).decode().rstrip("=")
            if not lsel and not fsel:
                meta["remainingItemCount"] = remaining
        fmt, as_ = negotiate(request)
        if as_ == "Table":
            body = to_table(res, items, q.get("includeObject", "Metadata"), meta)
        elif as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            body = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": copy.deepcopy(o.get("metadata", {}))} for o in items]}
        else:
            out_items = []
            for o in items:
                v = to_version(res, o)
                v.pop("apiVersion", None)
                v.pop("kind", None)
                out_items.append(v)
            body = {"kind": f"{res.kind}List", "apiVersion": res.group_version, "metadata": meta, "items": out_items}
        return self.encode(body, fmt)

    # -- watch ----------------------------------------------------------------------

    async def watch(self, request, res, ns, name):
        q = request.query
        fs = q.get("fieldSelector", "")
        if name:  # legacy /watch/.../NAME
            fs = f"metadata.name={name}" + ("," + fs if fs else "")
        lsel = parse_label_selector(q.get("labelSelector", ""))
        fsel = parse_field_selector(res, fs)
        fmt, as_ = negotiate(request)
        rv_param = q.get("resourceVersion", "")
        timeout = float(q.get("timeoutSeconds") or 1800)
        send_initial = q.get("sendInitialEvents") in ("true", "1")
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        if send_initial and not bookmarks:
            raise invalid(res, "", [("allowWatchBookmarks", "FieldValueRequired",
                                     "Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set")])
        store = self.store
        w = Watcher(self, res, ns, lsel, fsel, (q.get("labelSelector", ""), q.get("fieldSelector", "")), request)
        w.bookmarks = bookmarks and as_ != "Table"
        initial, error = [], None
        if send_initial or rv_param in ("", "0"):
            for k in sorted(store.table(res.storage)):
                obj = store.table(res.storage)[k]
                if w.matches(obj):
                    initial.append(("ADDED", obj))
            if send_initial:
                initial.append(("BOOKMARK-END", None))
        else:
            rv = self.parse_rv(rv_param)
            if rv < store.compacted:
                error = expired(f"too old resource version: {rv} ({store.compacted})")
            elif rv > store.rv:
                await self.wait_for_rv(rv)
            if error is None:
                for c in store.history:
                    if c.rv > rv:
                        e = w.translate(c)
                        if e:
                            initial.append(e)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json",
                                                        "Cache-Control": "no-cache, private"})
        if request.version >= (1, 1):
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        if error is not None:
            await resp.write((dumps({"type": "ERROR", "object": error.status()}) + "\n").encode())
            await resp.write_eof()
            return resp
        for e in initial:
            w.queue.put_nowait(e)
        store.watchers.add(w)
        self.watches_opened += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interval = self.args.bookmark_interval
        next_bookmark = loop.time() + interval
        try:
            while True:
                now = loop.time()
                if now >= deadline:
                    break
                if w.bookmarks and now >= next_bookmark:
                    w.bookmark()
                    next_bookmark = now + interval
                wait = min(deadline, next_bookmark if w.bookmarks else deadline) - now
                try:
                    type_, obj = await asyncio.wait_for(w.queue.get(), timeout=max(wait, 0.001))
                except asyncio.TimeoutError:
                    continue
                if type_ == "END":
                    break
                if self.blackholed(request):
                    await self.blackhole_event.wait()
                    if request.transport is not None:
                        request.transport.close()
                    break
                await resp.write((dumps(self.watch_event(w, res, type_, obj, as_, q)) + "\n").encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            store.watchers.discard(w)
        try:
            await resp.write_eof()
        except Exception:
            pass
        return resp

    def watch_event(self, w, res, type_, obj, as_, q):
        if type_ in ("BOOKMARK", "BOOKMARK-END"):
            meta = {"resourceVersion": str(self.store.rv)}
            if type_ == "BOOKMARK-END":
                meta["annotations"] = {"k8s.io/initial-events-end": "true"}
            return {"type": "BOOKMARK", "object": {"kind": res.kind, "apiVersion": res.group_version, "metadata": meta}}
        if as_ == "Table":
            body = to_table(res, [obj], q.get("includeObject", "Metadata"),
                            {"resourceVersion": dig(obj, "metadata", "resourceVersion", default="")})
        elif as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            body = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                    "metadata": copy.deepcopy(obj.get("metadata", {}))}
        else:
            body = to_version(res, obj)
        return {"type": type_, "object": body}

    # -- writes ---------------------------------------------------------------------

    async def body(self, request, res):
        ct = (request.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ct == "application/vnd.kubernetes.protobuf":
            try:
                return "application/json", decode_protobuf(await request.read())
            except (ValueError, IndexError, UnicodeDecodeError) as e:
                raise bad_request(f"error decoding protobuf: {e}") from None
        text = await request.text()
        if ct in ("application/json", "application/merge-patch+json", "application/strategic-merge-patch+json",
                  "application/json-patch+json"):
            try:
                return ct, json.loads(text or "null")
            except ValueError as e:
                raise bad_request(f"error decoding request body: {e}") from None
        if ct in ("application/yaml", "application/apply-patch+yaml"):
            try:
                return ct, yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise bad_request(f"error decoding YAML: {e}") from None
        raise ApiError(415, "UnsupportedMediaType", 'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf')

    def check_body_object(self, res, obj, ns, name=None):
        if not isinstance(obj, dict):
            raise bad_request("the request body must be an object")
        want_api = res.group_version
        if obj.get("apiVersion") not in (None, "", want_api) or obj.get("kind") not in (None, "", res.kind):
            raise bad_request(f'the API version in the data ({obj.get("apiVersion")}) does not match the expected API version ({want_api})'
                              if obj.get("apiVersion") not in (None, "", want_api) else
                              f'the kind in the data ({obj.get("kind")}) does not match the expected kind ({res.kind})')
        m = obj.setdefault("metadata", {})
        if not isinstance(m, dict):
            raise bad_request("metadata must be an object")
        if res.namespaced:
            if m.get("namespace") and ns and m["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            m["namespace"] = ns
        else:
            m.pop("namespace", None)
        if name is not None and m.get("name") and m["name"] != name:
            raise bad_request(f'the name of the object ({m["name"]}) does not match the name on the URL ({name})')
        return obj

    def manager(self, request, default):
        fm = request.query.get("fieldManager")
        if fm:
            if len(fm) > 128:
                raise invalid_simple("fieldManager", "must have at most 128 characters")
            return fm
        ua = request.headers.get("User-Agent", "")
        return ua.split("/")[0] if ua else default

    def dry_run(self, request, body=None):
        dr = request.query.getall("dryRun", [])
        if isinstance(body, dict) and body.get("dryRun"):
            dr = dr + list(body["dryRun"])
        for v in dr:
            if v != "All":
                raise bad_request(f'dryRun: Unsupported value: "{v}": supported values: "All"')
        return bool(dr)

    def check_namespace(self, res, ns):
        if not res.namespaced:
            return
        nso = self.store.get(NAMESPACES, None, ns)
        if nso is None:
            raise not_found(NAMESPACES, ns)
        if dig(nso, "metadata", "deletionTimestamp") or dig(nso, "status", "phase") == "Terminating":
            raise ApiError(403, "Forbidden",
                           f'{qualified(res)} "" is forbidden: unable to create new content in namespace {ns} because it is being terminated',
                           {"group": res.group, "kind": res.plural, "causes": [
                               {"reason": "NamespaceTerminating", "message": f"namespace {ns} is being terminated",
                                "field": "metadata.namespace"}]})

    async def create(self, request, res, ns):
        ct, obj = await self.body(request, res)
        obj = self.check_body_object(res, obj, ns)
        if request.query.get("fieldValidation") == "Strict":
            strict_check(res, obj)
        obj = to_storage(res, obj)
        dry = self.dry_run(request)
        return self.create_obj(request, res, ns, obj, self.manager(request, "unknown"), dry, "Update")

    def create_obj(self, request, res, ns, obj, manager, dry, operation, applied_fields=None):
        m = obj["metadata"]
        if m.get("resourceVersion"):
            raise ApiError(500, "InternalError", "resourceVersion should not be set on objects to be created")
        if not m.get("name"):
            if m.get("generateName"):
                alphabet = "bcdfghjklmnpqrstvwxz2456789"
                m["name"] = m["generateName"] + "".join(random.choice(alphabet) for _ in range(5))
            else:
                raise invalid(res, "", [("metadata.name", "FieldValueRequired", "Required value: name or generateName is required")])
        name = m["name"]
        self.check_namespace(res, ns)
        if self.store.get(res, ns, name) is not None:
            raise already_exists(res, name)
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                  "selfLink"):
            m.pop(f, None)
        m.pop("managedFields", None)
        obj = typed_round_trip(res, drop_nulls(obj))
        new_meta(res, obj)
        default_on_create(res, obj, self.store, dry)
        causes = validate(res, obj, None, res)
        if causes:
            raise invalid(res, name, causes)
        fields = applied_fields if applied_fields is not None else set(leaf_fields(owned_view(res, obj, "")))
        obj["metadata"]["managedFields"] = render_managers([{
            "manager": manager, "operation": operation, "subresource": "", "apiVersion": res.group_version,
            "time": ts(), "fields": fields}])
        if not obj["metadata"]["managedFields"]:
            obj["metadata"].pop("managedFields")
        if dry:
            return obj, 201
        return self.store.commit(res, "ADDED", obj, None), 201

    async def update(self, request, res, ns, name, sub):
        ct, obj = await self.body(request, res)
        obj = self.check_body_object(res, obj, ns, name)
        if request.query.get("fieldValidation") == "Strict":
            strict_check(res, obj)
        obj["metadata"]["name"] = name
        obj = to_storage(res, obj)
        dry = self.dry_run(request)
        cur = self.store.get(res, ns, name)
        manager = self.manager(request, "unknown")
        if cur is None:
            if sub or not res.create_on_update:
                raise not_found(res, name)
            obj["metadata"].pop("resourceVersion", None)
            self.authorize(request, "create", res, ns, name, sub)
            return self.create_obj(request, res, ns, obj, manager, dry, "Update")
        if not res.unconditional_update and not obj["metadata"].get("resourceVersion"):
            raise invalid(res, name, [("metadata.resourceVersion", "FieldValueInvalid",
                                       "Invalid value: 0x0: must be specified for an update")])
        return self.write(res, cur, obj, manager, sub, dry, "Update")

    async def patch(self, request, res, ns, name, sub):
        ct, patch = await self.body(request, res)
        dry = self.dry_run(request)
        cur = self.store.get(res, ns, name)
        q = request.query
        if ct == "application/apply-patch+yaml":
            manager = q.get("fieldManager")
            if not manager:
                raise invalid_simple("fieldManager", "Required value: is required for apply patch")
            force = q.get("force") in ("true", "1")
            cfg = self.check_body_object(res, drop_nulls(patch), ns, name)
            if not patch.get("apiVersion") or not patch.get("kind"):
                raise bad_request("apiVersion and kind must be set in an apply configuration")
            if q.get("fieldValidation") == "Strict":
                strict_check(res, cfg)
            cfg["metadata"]["name"] = name
            cfg = to_storage(res, cfg)
            return self.apply(res, ns, name, cur, cfg, manager, force, sub, dry, request)
        if q.get("force"):
            raise bad_request("force is only allowed for apply patches")
        if cur is None:
            raise not_found(res, name)
        manager = self.manager(request, "unknown")
        base = to_version(res, cur)
        try:
            if ct == "application/json-patch+json":
                if not isinstance(patch, list):
                    raise bad_request("json patch must be a list of operations")
                new = jsonpatch.apply_patch(base, patch)
            elif ct == "application/merge-patch+json":
                new = json_merge_patch(base, patch)
            elif ct == "application/strategic-merge-patch+json":
                new = strategic_merge(base, patch)
            else:
                raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json")
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
            # handlers/patch.go applyJSPatch: NewGenericServerResponse(422, ...) keeps the
            # json-patch error out of the Status (no causes); kubectl prints "The request is
            # invalid: the server rejected our request due to an error in our request".
            raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request",
                           {}) from None
        if not isinstance(new, dict):
            raise bad_request("the patched object is not an object")
        new = self.check_body_object(res, new, ns, name)
        if q.get("fieldValidation") == "Strict":
            strict_check(res, new)
        new["metadata"]["name"] = name
        immutable_uid(res, name, cur, new)
        return self.write(res, cur, to_storage(res, new), manager, sub, dry, "Update")

    def write(self, res, cur, obj, manager, sub, dry, operation, owners=None):
        """An update of cur into obj (both storage format) by `manager`."""
        m, cm = obj["metadata"], cur["metadata"]
        name = cm["name"]
        rv = m.get("resourceVersion")
        if rv and rv != cm["resourceVersion"]:
            raise conflict(res, name)
        if m.get("uid") and m["uid"] != cm["uid"]:
            raise conflict(res, name, f"Precondition failed: UID in precondition: {m['uid']}, UID in object meta: {cm['uid']}")
        obj = typed_round_trip(res, drop_nulls(obj))
        m = obj["metadata"]
        # What a client cannot change here.
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
            if f in cm:
                m[f] = cm[f]
            else:
                m.pop(f, None)
        if res.namespaced:
            m["namespace"] = cm["namespace"]
        if sub == "status":
            # a status write changes status (and metadata labels/annotations), never spec
            new = copy.deepcopy(cur)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
            for k in ("labels", "annotations"):
                if k in m:
                    new["metadata"][k] = m[k]
            obj, m = new, new["metadata"]
        elif res.status:
            if "status" in cur:
                obj["status"] = copy.deepcopy(cur["status"])
            else:
                obj.pop("status", None)
        if cm.get("deletionTimestamp"):
            added = set(m.get("finalizers") or []) - set(cm.get("finalizers") or [])
            if added:
                raise invalid(res, name, [("metadata.finalizers", "FieldValueForbidden",
                                           "Forbidden: no new finalizers can be added if the object is being deleted")])
        causes = validate(res, obj, cur, res)
        if causes:
            raise invalid(res, name, causes)
        if res.generation and spec_of(obj) != spec_of(cur):
            m["generation"] = cm.get("generation", 1) + 1
        # field ownership
        view_old, view_new = leaf_fields(owned_view(res, cur, sub or "")), leaf_fields(owned_view(res, obj, sub or ""))
        if owners is None:
            # an Update takes the fields it changes from their owners; removed fields go
            owners = managers_of(cur)
            # managedFields a client wrote replace the server's ([] is ignored, [{}] resets)
            incoming = m.get("managedFields")
            if isinstance(incoming, list) and incoming and incoming != cm.get("managedFields"):
                owners = [] if incoming == [{}] else managers_of(obj)
            changed = {p for p in set(view_old) | set(view_new)
                       if view_old.get(p, KeyError) != view_new.get(p, KeyError)}
            mine = None
            for e in owners:
                if e["subresource"] != (sub or ""):
                    continue
                e["fields"] = {p for p in e["fields"] if p not in changed and p in view_new}
                if e["manager"] == manager and e["operation"] == operation:
                    mine = e
            if mine is None:
                mine = {"manager": manager, "operation": operation, "subresource": sub or "",
                        "apiVersion": res.group_version, "time": None, "fields": set()}
                owners.append(mine)
            mine["fields"] |= {p for p in changed if p in view_new}
        # no-op: nothing but managedFields times would change
        unchanged = strip_for_compare(obj) == strip_for_compare(cur) and \
            [(e["manager"], e["operation"], e["subresource"], sorted(e["fields"])) for e in owners if e["fields"]] == \
            [(e["manager"], e["operation"], e["subresource"], sorted(e["fields"])) for e in managers_of(cur) if e["fields"]]
        if unchanged:
            return cur, 200
        now = ts()
        old_times = {(e["manager"], e["operation"], e["subresource"]): (e["time"], sorted(e["fields"])) for e in managers_of(cur)}
        for e in owners:
            prev = old_times.get((e["manager"], e["operation"], e["subresource"]))
            e["time"] = prev[0] if prev and prev[1] == sorted(e["fields"]) and e["time"] else now
        m["managedFields"] = render_managers(owners)
        if not m["managedFields"]:
            m.pop("managedFields")
        if dry:
            m["resourceVersion"] = cm["resourceVersion"]
            return obj, 200
        if cm.get("deletionTimestamp") and not m.get("finalizers") and not self.graceful_pending(res, obj):
            return self.store.commit(res, "DELETED", obj, cur), 200
        return self.store.commit(res, "MODIFIED", obj, cur), 200

    def graceful_pending(self, res, obj):
        return res.plural == "pods" and (dig(obj, "metadata", "deletionGracePeriodSeconds") or 0) > 0

    def apply(self, res, ns, name, cur, cfg, manager, force, sub, dry, request):
        view_cfg = owned_view(res, cfg, sub or "")
        cfg_fields = leaf_fields(view_cfg)
        if cur is None:
            if sub:
                raise not_found(res, name)
            if dig(cfg, "metadata", "uid"):
                # store.go Update, create on apply: a UID names an object that exists.
                raise conflict(res, name, f"uid mismatch: the provided object specified uid {cfg['metadata']['uid']}, "
                                          "and no existing object was found")
            obj = copy.deepcopy(cfg)
            self.authorize(request, "create", res, ns, name, sub)
            return self.create_obj(request, res, ns, obj, manager, dry, "Apply", set(cfg_fields))
        if cfg["metadata"].get("resourceVersion") and cfg["metadata"]["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise conflict(res, name)
        owners = managers_of(cur)
        sub_key = sub or ""
        mine = next((e for e in owners if e["manager"] == manager and e["operation"] == "Apply"
                     and e["subresource"] == sub_key), None)
        cur_view = owned_view(res, cur, sub_key)
        conflicts = []
        for p, v in cfg_fields.items():
            for e in owners:
                if e is mine or e["subresource"] != sub_key:
                    continue
                if p in e["fields"] and value_at(cur_view, p) != v:
                    conflicts.append((e, p))
        if conflicts and not force:
            msgs = [f'conflict with "{e["manager"]}"' + (" using " + e["apiVersion"] if e["apiVersion"] else "")
                    + f": {display_path(p)}" for e, p in conflicts]
            text = (f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: "
                    + "\n".join(msgs) if len(msgs) > 1 else f"Apply failed with 1 conflict: {msgs[0]}")
            raise ApiError(409, "Conflict", text, {"causes": [
                {"reason": "FieldManagerConflict", "message": f'conflict with "{e["manager"]}"', "field": display_path(p)}
                for e, p in conflicts]})
        for e, p in conflicts:
            e["fields"].discard(p)
        # values this apply changes are no longer owned by others (an Update is overwritten)
        for p, v in cfg_fields.items():
            if value_at(cur_view, p) != v:
                for e in owners:
                    if e is not mine and e["subresource"] == sub_key:
                        e["fields"].discard(p)
        merged = ssa_merge(copy.deepcopy(cur), cfg)
        merged["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        # fields this manager applied before and no longer applies, owned by nobody else: removed
        if mine is not None:
            others = set()
            for e in owners:
                if e is not mine and e["subresource"] == sub_key:
                    others |= e["fields"]
            gone = sorted(mine["fields"] - set(cfg_fields) - others, key=len, reverse=True)
            for p in gone:
                prefix = p[:-1] if p and p[-1] == "." else p
                if any(o[:len(prefix)] == prefix for o in others | set(cfg_fields)):
                    continue
                remove_path(merged, p)
        if mine is None:
            mine = {"manager": manager, "operation": "Apply", "subresource": sub_key,
                    "apiVersion": res.group_version, "time": None, "fields": set()}
            owners.append(mine)
        mine["fields"] = set(cfg_fields)
        immutable_uid(res, name, cur, merged)
        return self.write(res, cur, merged, manager, sub, dry, "Apply", owners=owners)

    async def evict(self, request, res, ns, name):
        """policy/v1 Eviction, as pkg/registry/core/pod/storage/eviction.go: a pod that
        canIgnorePDB (phase Succeeded, Failed or Pending, or already terminating) is deleted
        at once; otherwise the PodDisruptionBudgets of its namespace whose selector matches
        its labels (a nil or empty selector matches none here) decide: none, it is deleted;
        more than one, the real 500 ("This pod has more than one PodDisruptionBudget, ...");
        one, then a pod that is not Ready is deleted without touching the budget when the
        budget's unhealthyPodEvictionPolicy is AlwaysAllow, or (IfHealthyBudget, the default)
        when status.currentHealthy >= status.desiredHealthy > 0; any other pod goes through
        checkAndDecrement: observedGeneration behind the generation is the 429 "is still
        being processed by the server." (retryAfterSeconds 10), disruptionsAllowed 0 the 429
        "needs N healthy pods and has M currently" and the pod is untouched; else the budget's
        status is written (disruptionsAllowed - 1, the pod in disruptedPods) before the pod is
        deleted. The budget's status is the disruption controller's, synced first. A deletion
        adds the pod's DisruptionTarget condition (reason EvictionByEvictionAPI) first, as the
        PodDisruptionConditions feature (GA in 1.31) does; dryRun=All decides the same and
        writes nothing."""
        _, body = await self.body(request, res)
        if not isinstance(body, dict):
            raise bad_request("the request body must be an Eviction")
        if dig(body, "metadata", "name", default="") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        opts = body.get("deleteOptions") or {}
        dry = self.dry_run(request, opts)
        grace = opts.get("gracePeriodSeconds")
        pre = dict(opts.get("preconditions") or {})
        cur = self.get_obj(res, ns, name)
        if self.can_ignore_pdb(cur):
            return self.evict_pod(cur, pre, grace, dry)
        self.sync_pdbs(ns)
        labels = dig(cur, "metadata", "labels") or {}
        pdbs = []
        for key in sorted(k for k in self.store.table(PDBS.storage) if k[0] == ns):
            pdb = self.store.table(PDBS.storage)[key]
            reqs = selector_requirements(dig(pdb, "spec", "selector"))
            if reqs and labels_match({"metadata": {"labels": labels}}, reqs):
                pdbs.append(pdb)
        if len(pdbs) > 1:
            # a Failure Status the handler returns, which FinishRequest turns into an error:
            # HTTP 500 and no reason
            raise ApiError(500, "", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")
        if not pdbs:
            return self.evict_pod(cur, pre, grace, dry)
        pdb = pdbs[0]
        st = pdb.get("status") or {}
        if not pod_ready(cur) and (dig(pdb, "spec", "unhealthyPodEvictionPolicy") == "AlwaysAllow" or
                                   st.get("currentHealthy", 0) >= st.get("desiredHealthy", 0) > 0):
            # updateDeletionOptions: the pod's resourceVersion becomes the precondition, so
            # that it did not turn healthy meanwhile; a conflict is a 429 when the client
            # gave no resourceVersion itself
            own_rv = "resourceVersion" in pre
            pre["resourceVersion"] = cur["metadata"]["resourceVersion"]
            try:
                return self.evict_pod(cur, pre, grace, dry)
            except ApiError as e:
                if e.code == 409 and not own_rv:
                    raise too_many_requests(CANNOT_EVICT, f"The disruption budget {pdb['metadata']['name']} is still being processed by the server.", 10) from None
                raise
        self.check_and_decrement(pdb, name, dry)
        return self.evict_pod(cur, pre, grace, dry)

    @staticmethod
    def can_ignore_pdb(pod):
        """eviction.go canIgnorePDB."""
        return dig(pod, "status", "phase") in ("Succeeded", "Failed", "Pending") or \
            bool(dig(pod, "metadata", "deletionTimestamp"))

    def check_and_decrement(self, pdb, pod_name, dry):
        """eviction.go checkAndDecrement."""
        st = pdb.get("status") or {}
        name = pdb["metadata"]["name"]
        if (st.get("observedGeneration") or 0) < (pdb["metadata"].get("generation") or 0):
            raise too_many_requests(CANNOT_EVICT, f"The disruption budget {name} is still being processed by the server.", 10)
        allowed = st.get("disruptionsAllowed", 0)

        def forbidden(why):
            return ApiError(403, "Forbidden", f'poddisruptionbudget.policy "{name}" is forbidden: {why}',
                            {"name": name, "group": "policy", "kind": "poddisruptionbudget"})
        if allowed < 0:
            raise forbidden("pdb disruptions allowed is negative")
        if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_POD_SIZE:
            raise forbidden("DisruptedPods map too big - too many evictions not confirmed by PDB controller")
        if allowed == 0:
            raise too_many_requests(CANNOT_EVICT, f"The disruption budget {name} needs {st.get('desiredHealthy', 0)} "
                                                  f"healthy pods and has {st.get('currentHealthy', 0)} currently")
        if dry:
            return
        status = copy.deepcopy(st)
        status["disruptionsAllowed"] = allowed - 1
        if status["disruptionsAllowed"] == 0:
            update_disruption_allowed_condition(status, utcnow())
        disrupted = dict(status.get("disruptedPods") or {})
        disrupted[pod_name] = ts()
        status = pdb_status(status.get("observedGeneration"), disrupted, status["disruptionsAllowed"],
                            status.get("currentHealthy", 0), status.get("desiredHealthy", 0),
                            status.get("expectedPods", 0), status.get("conditions"))
        self.write_pdb_status(pdb, status, "kube-apiserver")

    def evict_pod(self, cur, pre, grace, dry):
        """eviction.go addConditionAndDeletePod: the preconditions against the latest pod,
        its DisruptionTarget condition (not in a dry run), then the deletion."""
        m = cur["metadata"]
        name = m["name"]

        def pod_conflict(what, want, have, why):
            return ApiError(409, "Conflict", f'Operation cannot be fulfilled on Pod "{name}": the {what} in the precondition '
                                             f"({want}) does not match the {what} in record ({have}). {why}",
                            {"name": name, "kind": "Pod"})
        if pre.get("uid") and pre["uid"] != m["uid"]:
            if dry:
                raise conflict(PODS, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {m['uid']}")
            raise pod_conflict("UID", pre["uid"], m["uid"], "The object might have been deleted and then recreated")
        if pre.get("resourceVersion") and pre["resourceVersion"] != m["resourceVersion"]:
            if dry:
                raise conflict(PODS, name, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {m['resourceVersion']}")
            raise pod_conflict("ResourceVersion", pre["resourceVersion"], m["resourceVersion"],
                               "The object might have been modified")
        if not dry:
            cur = self.add_disruption_target(cur)
        self.delete_obj(PODS, cur, grace, dry)
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "code": 201}, status=201)

    def add_disruption_target(self, cur):
        """podutil.UpdatePodCondition with DisruptionTarget=True, through the status store
        (no managedFields entry, as the handler's field manager never sees it)."""
        obj = copy.deepcopy(cur)
        conds = obj.setdefault("status", {}).setdefault("conditions", [])
        new = {"type": "DisruptionTarget", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts(),
               "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}
        old = next((c for c in conds if isinstance(c, dict) and c.get("type") == "DisruptionTarget"), None)
        if old is None:
            conds.append(new)
        else:
            if old.get("status") == "True":
                new["lastTransitionTime"] = old.get("lastTransitionTime")
            if all(old.get(k) == new[k] for k in ("status", "reason", "message", "lastTransitionTime")):
                return cur
            conds[conds.index(old)] = new
        return self.store.commit(PODS, "MODIFIED", obj, cur)

    # -- the disruption controller (pkg/controller/disruption), in process ----------

    def after_commit(self, change):
        """Every change: a pod or PDB change queues its namespace's PDBs for a sync (as the
        controller's pod and PDB event handlers do); pods are the kubelet stand-ins' too."""
        if change.skey in (PODS.storage, PDBS.storage):
            self.pdb_dirty.add(change.ns)
            if not self.pdb_flush_scheduled:
                self.pdb_flush_scheduled = True
                asyncio.get_running_loop().call_soon(self.flush_pdbs)
        if change.skey == PODS.storage:
            self.kubelet_observe(change)

    def flush_pdbs(self):
        self.pdb_flush_scheduled = False
        dirty, self.pdb_dirty = self.pdb_dirty, set()
        for ns in sorted(dirty):
            self.sync_pdbs(ns)

    def sync_pdbs(self, ns):
        table = self.store.table(PDBS.storage)
        for key in sorted(k for k in table if k[0] == ns):
            if key in table:
                self.sync_pdb(table[key])

    def sync_pdb(self, pdb):
        """The controller's trySync (failSafe on its errors): status written by
        kube-controller-manager through the status subresource when it changed."""
        now = utcnow()
        ns, gen = pdb["metadata"]["namespace"], pdb["metadata"].get("generation") or 0
        reqs = selector_requirements(dig(pdb, "spec", "selector"))
        pods = [] if reqs is None else [p for (pns, _), p in sorted(self.store.table(PODS.storage).items())
                                        if pns == ns and labels_match(p, reqs)]
        old = pdb.get("status") or {}
        recheck = None
        try:
            expected, desired = self.expected_pod_count(pdb, pods)
        except SyncFailed as e:
            status = copy.deepcopy(old)
            status["disruptionsAllowed"] = 0
            set_pdb_condition(status, "False", "SyncFailed", str(e), status.get("observedGeneration"), now)
        else:
            # buildDisruptedPodMap: entries of pods that exist, are not terminating and
            # were approved less than DeletionTimeout ago
            disrupted = {}
            for p in pods:
                when = parse_ts((old.get("disruptedPods") or {}).get(p["metadata"]["name"]))
                if dig(p, "metadata", "deletionTimestamp") or when is None:
                    continue
                expires = when + datetime.timedelta(seconds=PDB_DELETION_TIMEOUT)
                if expires >= now:
                    disrupted[p["metadata"]["name"]] = old["disruptedPods"][p["metadata"]["name"]]
                    recheck = expires if recheck is None or expires < recheck else recheck
            current = sum(1 for p in pods if not dig(p, "metadata", "deletionTimestamp")
                          and p["metadata"]["name"] not in disrupted and pod_ready(p))
            allowed = current - desired
            if expected <= 0 or allowed <= 0:
                allowed = 0
            status = pdb_status(gen, disrupted, allowed, current, desired, expected,
                                copy.deepcopy(old.get("conditions")))
            update_disruption_allowed_condition(status, now)
        self.write_pdb_status(pdb, status, "kube-controller-manager")
        if recheck is not None:
            delay = (recheck - utcnow()).total_seconds() + 1
            asyncio.get_running_loop().call_later(max(delay, 0), self.queue_pdb_sync, ns)

    def queue_pdb_sync(self, ns):
        self.pdb_dirty.add(ns)
        self.flush_pdbs()

    def write_pdb_status(self, pdb, status, manager):
        if status == pdb.get("status"):
            return pdb
        new = copy.deepcopy(pdb)
        new["status"] = status
        try:
            return self.write(PDBS, pdb, new, manager, "status", False, "Update")[0]
        except ApiError:
            return pdb

    def expected_pod_count(self, pdb, pods):
        """getExpectedPodCount: (expectedCount, desiredHealthy). An integer minAvailable
        counts the selected pods; maxUnavailable and a percentage minAvailable count the
        scale of the pods' controllers (getExpectedScale)."""
        spec = pdb.get("spec") or {}
        mu, ma = spec.get("maxUnavailable"), spec.get("minAvailable")
        if mu is not None:
            expected = self.expected_scale(pdb, pods)
            return expected, max(expected - scaled_value(mu, expected), 0)
        if ma is not None:
            if isinstance(ma, int) and not isinstance(ma, bool):
                return len(pods), ma
            expected = self.expected_scale(pdb, pods)
            return expected, scaled_value(ma, expected)
        return 0, 0

    def expected_scale(self, pdb, pods):
        """getExpectedScale: the sum of the scales of the selected pods' controllers; pods
        without a controller reference (unmanaged) are left out."""
        scales = {}
        for p in pods:
            ref = controller_ref(p)
            if ref is None or ref.get("uid") in scales:
                continue
            found = self.controller_scale(ref, pdb["metadata"]["namespace"])
            if found is None:
                raise SyncFailed(f'found no controllers for pod "{p["metadata"]["name"]}"')
            scales[found[0]] = found[1]
        return sum(scales.values())

    def controller_scale(self, ref, ns):
        """The controller finders: (uid, scale) or None when no such controller exists.
        Of the controllers the real finders know, this fake stores Deployments only (their
        scale subresource answers spec.replicas); a ReplicationController, ReplicaSet or
        StatefulSet cannot exist here, so none is found; DaemonSets and Jobs have no scale
        subresource; any other kind is unknown to the RESTMapper."""
        api, kind = ref.get("apiVersion") or "", ref.get("kind")
        group = api.rpartition("/")[0]
        if (group, kind) == ("apps", "Deployment"):
            d = self.store.get(DEPLOYMENTS, ns, ref.get("name"))
            if d is None or d["metadata"]["uid"] != ref.get("uid"):
                return None
            return d["metadata"]["uid"], dig(d, "spec", "replicas", default=1)
        if (group, kind) == ("apps", "DaemonSet"):
            raise SyncFailed("daemonsets.apps does not implement the scale subresource")
        if (group, kind) == ("batch", "Job"):
            raise SyncFailed("jobs.batch does not implement the scale subresource")
        if (group, kind) in (("", "ReplicationController"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")):
            return None
        raise SyncFailed(f'no matches for kind "{kind}" in version "{api}"')

    # -- kubelet stand-ins ------------------------------------------------------------

    def kubelet_observe(self, change):
        uid = dig(change.obj, "metadata", "uid")
        if change.type == "DELETED":
            self.deletion_due.pop(uid, None)
            entry = self.kubelet_timers.pop(uid, None)
            if entry:
                entry[1].cancel()
            return
        self.kubelet_schedule(change.obj)

    def kubelet_schedule(self, pod):
        """A terminating pod on a node whose stand-in runs: its final deletion is due when
        its grace period ends."""
        m = pod["metadata"]
        node = dig(pod, "spec", "nodeName")
        if not m.get("deletionTimestamp") or node not in self.kubelets or m["uid"] in self.kubelet_timers:
            return
        due = self.deletion_due.get(m["uid"])
        if due is None:
            t = parse_ts(m["deletionTimestamp"])
            due = t.timestamp() if t else time.time()
        timer = asyncio.get_running_loop().call_later(max(due - time.time(), 0), self.kubelet_finish,
                                                      m.get("namespace"), m["name"], m["uid"])
        self.kubelet_timers[m["uid"]] = (node, timer)

    def kubelet_finish(self, ns, name, uid):
        """The kubelet's last word on a pod: DELETE with gracePeriodSeconds=0."""
        self.kubelet_timers.pop(uid, None)
        pod = self.store.get(PODS, ns, name)
        if pod is None or pod["metadata"]["uid"] != uid or not pod["metadata"].get("deletionTimestamp") \
                or dig(pod, "spec", "nodeName") not in self.kubelets:
            return
        try:
            self.delete_obj(PODS, pod, 0, False)
        except ApiError:
            pass

    async def delete(self, request, res, ns, name):
        text = await request.text()
        opts = {}
        if text.strip():
            try:
                opts = json.loads(text)
            except ValueError:
                try:
                    opts = yaml.safe_load(text) or {}
                except yaml.YAMLError as e:
                    raise bad_request(f"error decoding DeleteOptions: {e}") from None
        q = request.query
        grace = opts.get("gracePeriodSeconds")
        if q.get("gracePeriodSeconds") is not None:
            grace = int(q["gracePeriodSeconds"])
        dry = self.dry_run(request, opts)
        cur = self.get_obj(res, ns, name)
        pre = opts.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != cur["metadata"]["uid"]:
            raise conflict(res, name, f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {cur['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise conflict(res, name, f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, ResourceVersion in object meta: {cur['metadata']['resourceVersion']}")
        return self.delete_obj(res, cur, grace, dry)

    def delete_obj(self, res, cur, grace, dry):
        m = cur["metadata"]
        name = m["name"]
        obj = copy.deepcopy(cur)
        om = obj["metadata"]
        graceful = 0
        if res.plural == "pods" and dig(cur, "spec", "nodeName") and \
                dig(cur, "status", "phase") not in ("Succeeded", "Failed"):
            graceful = grace if grace is not None else dig(cur, "spec", "terminationGracePeriodSeconds", default=30)
            graceful = max(int(graceful or 0), 0)
        if res is NAMESPACES or res.storage == NAMESPACES.storage:
            if name in ("default", "kube-system", "kube-public"):
                raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                               {"name": name, "kind": "namespaces"})
            if dry:
                return obj, 200
            if not om.get("deletionTimestamp"):
                om["deletionTimestamp"] = ts()
                om["deletionGracePeriodSeconds"] = 0
                obj["status"] = {"phase": "Terminating"}
                self.store.commit(res, "MODIFIED", obj, cur)
                asyncio.get_running_loop().call_soon(self.finish_namespace, name)
            return copy.deepcopy(self.store.get(res, None, name)), 200
        if om.get("finalizers") or graceful > 0:
            if om.get("deletionTimestamp"):
                if graceful == 0 and om.get("deletionGracePeriodSeconds"):
                    om["deletionGracePeriodSeconds"] = 0
                    if not om.get("finalizers"):
                        return self.finish_delete(res, obj, cur, dry)
                    if not dry:
                        self.store.commit(res, "MODIFIED", obj, cur)
                return obj, 202
            now = utcnow()
            om["deletionTimestamp"] = ts(now + datetime.timedelta(seconds=graceful))
            om["deletionGracePeriodSeconds"] = graceful
            if res.generation:
                om["generation"] = om.get("generation", 1) + 1
            if dry:
                return obj, 202
            if res is PODS:
                self.deletion_due[om["uid"]] = now.timestamp() + graceful
            return self.store.commit(res, "MODIFIED", obj, cur), 202
        return self.finish_delete(res, obj, cur, dry)

    def finish_delete(self, res, obj, cur, dry):
        if not dry:
            self.store.commit(res, "DELETED", obj, cur)
        if res.return_deleted:
            return obj, 200
        m = obj["metadata"]
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": m["name"], "group": res.group, "kind": res.plural, "uid": m["uid"]}}, 200

    def finish_namespace(self, name):
        """The namespace controller, simplified: everything in it goes, then the namespace."""
        for skey, table in list(self.store.objs.items()):
            res = STORAGE_RES[skey]
            if not res.namespaced:
                continue
            for (ns, n), obj in sorted(table.items()):
                if ns == name:
                    self.store.commit(res, "DELETED", copy.deepcopy(obj), obj)
        cur = self.store.get(NAMESPACES, None, name)
        if cur is not None:
            self.store.commit(NAMESPACES, "DELETED", copy.deepcopy(cur), cur)

    async def delete_collection(self, request, res, ns):
        q = request.query
        lsel = parse_label_selector(q.get("labelSelector", ""))
        fsel = parse_field_selector(res, q.get("fieldSelector", ""))
        text = await request.text()
        opts = json.loads(text) if text.strip() else {}
        grace = opts.get("gracePeriodSeconds")
        dry = self.dry_run(request, opts)
        if not res.namespaced:
            ns = None
        deleted = []
        for key in sorted(self.store.table(res.storage)):
            obj = self.store.table(res.storage).get(key)
            if obj is None or (ns and key[0] != ns) or not (labels_match(obj, lsel) and fields_match(obj, fsel)):
                continue
            out, _ = self.delete_obj(res, obj, grace, dry)
            deleted.append(obj if out.get("kind") == "Status" else out)
        items = []
        for o in deleted:
            v = to_version(res, o)
            v.pop("apiVersion", None)
            v.pop("kind", None)
            items.append(v)
        return {"kind": f"{res.kind}List", "apiVersion": res.group_version,
                "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}


def invalid_simple(field, message):
    return ApiError(422, "Invalid", f"{field}: {message}", {"causes": [
        {"reason": "FieldValueInvalid", "message": message, "field": field}]})


def spec_of(obj):
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def strip_for_compare(obj):
    o = copy.deepcopy(obj)
    m = o.get("metadata", {})
    for f in ("managedFields", "resourceVersion"):
        m.pop(f, None)
    return o


def parse_path_soft(path):
    try:
        return parse_path(path)
    except ApiError:
        return None


def parse_path(path):
    """(res, namespace, name, subresource, legacy_watch) of a resource path, or None."""
    p = [x for x in path.split("/") if x]
    if len(p) >= 2 and p[0] == "api" and p[1] == "v1":
        group, version, rest = "", "v1", p[2:]
    elif len(p) >= 3 and p[0] == "apis":
        group, version, rest = p[1], p[2], p[3:]
    else:
        return None
    if (group, version) not in [(r.group, r.version) for r in RESOURCES]:
        return None
    watch_path = False
    if rest and rest[0] == "watch":
        watch_path, rest = True, rest[1:]
    if not rest:
        return None
    ns = None
    if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in BY_PATH \
            and BY_PATH[(group, version, rest[2])].namespaced:
        ns, rest = rest[1], rest[2:]
    res = BY_PATH.get((group, version, rest[0]))
    if res is None:
        raise path_not_found()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3 or (sub is not None and name is None):
        raise path_not_found()
    return res, ns, name, sub, watch_path


# ---------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------


def kubeconfig(tls_port, cert):
    """The fixtures' kubeconfig: the admin token over HTTPS (kubectl sends credentials
    over TLS only)."""
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n"
            f"    server: https://127.0.0.1:{tls_port}\n    certificate-authority: {cert}\n"
            f"users:\n- name: admin\n  user:\n    token: {ADMIN_TOKEN}\ncontexts:\n- name: fake\n  context:\n"
            f"    cluster: fake\n    user: admin\n    namespace: default\ncurrent-context: fake\n")


async def serve_tls(runner, host, state_dir):
    """HTTPS on a second port, with a self-signed certificate for 127.0.0.1 (clients
    trust it as their CA) in state_dir/tls.crt; returns the port."""
    cert, key = (os.path.join(state_dir, f) for f in ("tls.crt", "tls.key"))
    await (await asyncio.create_subprocess_exec(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-days", "2", "-subj", "/CN=kube-apiserver-fake", "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", key, "-out", cert, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)).wait()
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    tls_site = web.TCPSite(runner, host, 0, ssl_context=ctx, reuse_address=True)
    await tls_site.start()
    return tls_site._server.sockets[0].getsockname()[1]


async def main():
    ap = argparse.ArgumentParser(description="A faithful fake Kubernetes API server on loopback")
    ap.add_argument("port", type=int)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--state-dir")
    ap.add_argument("--history", type=int, default=10000, help="watch history kept (events); older: 410")
    ap.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds between watch bookmarks")
    ap.add_argument("--token", action="append", metavar="TOKEN=USER",
                    help="a bearer token and the user it authenticates (system:serviceaccount:NS:NAME); repeatable")
    args = ap.parse_args()
    server = Server(args)
    app = web.Application(middlewares=[server.middleware], client_max_size=16 * 1024 * 1024)
    app.router.add_route("*", "/fake/{tail:.*}", server.admin)
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=True)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    if args.state_dir:
        os.makedirs(args.state_dir, exist_ok=True)
        tls_port = await serve_tls(runner, args.host, args.state_dir)
        with open(os.path.join(args.state_dir, "tls-port"), "w") as f:
            f.write(f"{tls_port}\n")
        server.log_file = open(os.path.join(args.state_dir, "kube-apiserver.log"), "a")
        with open(os.path.join(args.state_dir, "kube-apiserver.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
        with open(os.path.join(args.state_dir, "kubeconfig"), "w") as f:
            f.write(kubeconfig(tls_port, os.path.join(args.state_dir, "tls.crt")))
        tmp = os.path.join(args.state_dir, ".port.tmp")
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.rename(tmp, os.path.join(args.state_dir, "port"))
    print(f"fake kube-apiserver listening on http://{args.host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.end_blackhole(server.blackhole_event)
    await runner.cleanup()
    if args.state_dir:
        for f in ("kube-apiserver.pid", "port"):
            try:
                os.remove(os.path.join(args.state_dir, f))
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    asyncio.run(main())
