"""Independent cross-check of Herald's VAPID header (RFC 8292) with Python's `cryptography`.

Reads {"authorization": "vapid t=…, k=…", "audience": "http://host:port"} as JSON on stdin; verifies the
JWT's ES256 signature with the key k, and checks alg, aud, exp and sub. Prints "ok sub=<sub>" or fails.
"""

import base64
import json
import sys
import time

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils


def b64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def main():
    request = json.load(sys.stdin)
    scheme, _, params = request["authorization"].partition(" ")
    assert scheme == "vapid", scheme
    fields = dict(part.strip().split("=", 1) for part in params.split(","))
    key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), b64(fields["k"]))
    header, claims, signature = fields["t"].split(".")
    raw = b64(signature)
    assert len(raw) == 64, len(raw)
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    key.verify(der, (header + "." + claims).encode(), ec.ECDSA(hashes.SHA256()))
    header, claims = json.loads(b64(header)), json.loads(b64(claims))
    assert header["alg"] == "ES256", header
    assert claims["aud"] == request["audience"], claims
    assert time.time() < claims["exp"] <= time.time() + 24 * 3600, claims
    print("ok sub=" + claims["sub"])


if __name__ == "__main__":
    main()
