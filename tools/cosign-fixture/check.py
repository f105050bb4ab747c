#!/usr/bin/env python3
"""Check the committed signatures of tests/fixtures/cosign with another crypto
stack than sigstore-rs's RustCrypto one: pyca/cryptography (OpenSSL). Each
signature image's simple-signing layer: its blob's sha256 is the layer digest,
its base64 `dev.cosignproject.cosign/signature` annotation is an ECDSA P-256
SHA-256 (ASN.1) signature of the blob with cosign.pub.

    python3 tools/cosign-fixture/check.py tests/fixtures/cosign
"""
import base64, hashlib, json, pathlib, sys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

fixtures = pathlib.Path(sys.argv[1])
key = serialization.load_pem_public_key((fixtures / "cosign.pub").read_bytes())
for image in ("sigstore-rs-signed", "tend-signed"):
    layer = json.loads((fixtures / image / "manifest.json").read_bytes())["layers"][0]
    payload = (fixtures / image / "blobs" / layer["digest"].replace(":", "-", 1)).read_bytes()
    assert "sha256:" + hashlib.sha256(payload).hexdigest() == layer["digest"], image
    signature = base64.b64decode(layer["annotations"]["dev.cosignproject.cosign/signature"])
    key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))  # raises if it does not verify
    print(f"{image}: verified with cosign.pub by cryptography: {payload.decode()}")
    try:
        key.verify(signature, payload.replace(b'"type"', b'"Type"'), ec.ECDSA(hashes.SHA256()))
        sys.exit(f"{image}: an altered payload verified")
    except InvalidSignature:
        print(f"{image}: the altered payload does not verify")
