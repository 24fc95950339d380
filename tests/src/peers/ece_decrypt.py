"""Independent cross-check of Herald's Web Push encryption: Python's http_ece (PyPI) decrypts a body.

Reads one JSON object from stdin: {"body": b64url, "private_key": b64url of the 32-byte P-256 scalar,
"auth": b64url of the 16-byte auth secret}; prints the plaintext (UTF-8) on stdout.
"""

import base64
import json
import sys

import http_ece
from cryptography.hazmat.primitives.asymmetric import ec


def b64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def main():
    request = json.load(sys.stdin)
    private_key = ec.derive_private_key(int.from_bytes(b64(request["private_key"]), "big"), ec.SECP256R1())
    plaintext = http_ece.decrypt(
        b64(request["body"]),
        private_key=private_key,
        auth_secret=b64(request["auth"]),
        version="aes128gcm",
    )
    sys.stdout.write(plaintext.decode("utf-8"))


if __name__ == "__main__":
    main()
