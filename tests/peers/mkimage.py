#!/usr/bin/env python3
"""Build a single-layer OCI image archive (an oci-layout tar, for `ctr images import`
or `skopeo copy oci-archive:...`) from local files. Deterministic: the same files give
the same digests. Prints the manifest digest.
usage: mkimage.py OUT.tar NAME:TAG ENTRYPOINT_JSON SRC:DEST[:MODE] ...
(tests/peers/containerd.sh; adapted from the shared recipe mkimage.py)"""
import gzip
import hashlib
import io
import json
import sys
import tarfile

out, ref, entrypoint = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
files = [a.split(':') for a in sys.argv[4:]]


def tinfo(name, **kw):
    ti = tarfile.TarInfo(name)
    ti.mtime = 0
    ti.uid = ti.gid = 0
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode='w', format=tarfile.PAX_FORMAT) as t:
    dirs = set()
    for f in files:
        parts = f[1].strip('/').split('/')[:-1]
        for i in range(1, len(parts) + 1):
            d = '/'.join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                t.addfile(tinfo(d, type=tarfile.DIRTYPE, mode=0o755))
        with open(f[0], 'rb') as src:
            data = src.read()
        mode = int(f[2], 8) if len(f) > 2 else 0o755
        t.addfile(tinfo(f[1].strip('/'), size=len(data), mode=mode), io.BytesIO(data))
layer = raw.getvalue()
diff_id = 'sha256:' + hashlib.sha256(layer).hexdigest()
blobs = {}


def blob(b):
    d = hashlib.sha256(b).hexdigest()
    blobs[d] = b
    return 'sha256:' + d, len(b)


# Level 1: the big layer is incompressible, and level 9 would take seconds.
layer_digest, layer_size = blob(gzip.compress(layer, compresslevel=1, mtime=0))
config = {
    "architecture": "amd64", "os": "linux",
    "config": {"Entrypoint": entrypoint,
               "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
               "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    "history": [{"created_by": "mkimage.py"}],
}
config_digest, config_size = blob(json.dumps(config, separators=(',', ':')).encode())
manifest = {
    "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
               "digest": config_digest, "size": config_size},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest, "size": layer_size}],
}
manifest_digest, manifest_size = blob(json.dumps(manifest, separators=(',', ':')).encode())
index = {"schemaVersion": 2, "manifests": [{
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": manifest_digest, "size": manifest_size,
    "annotations": {"io.containerd.image.name": ref,
                    "org.opencontainers.image.ref.name": ref.rsplit(':', 1)[1]},
}]}
with tarfile.open(out, 'w') as t:
    def add(name, data=None):
        if data is None:
            t.addfile(tinfo(name, type=tarfile.DIRTYPE, mode=0o755))
        else:
            t.addfile(tinfo(name, size=len(data), mode=0o644), io.BytesIO(data))
    add('oci-layout', json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
    add('index.json', json.dumps(index).encode())
    add('blobs')
    add('blobs/sha256')
    for d, b in blobs.items():
        add('blobs/sha256/' + d, b)
print(manifest_digest)
