"""A real SMTP server for Herald's e-mail tests: aiosmtpd (which nobody here wrote) with a few handlers.

    python3 smtp_peer.py PORT OUT_DIR SCRIPT [TLS]

SCRIPT is a comma-separated list of steps, one per mail transaction (MAIL FROM), the last repeated:
  accept        250 after the end of DATA, "queued as Q<n>"
  mail:CODE     CODE (e.g. 421, 451, 550) to MAIL FROM
  rcpt:CODE     CODE to RCPT TO
  data:CODE     CODE after the end of DATA (the message is not kept)
  delay:SECS    keep the message, then wait SECS before answering 250 (the client times out first)
  drop          keep the message, then close the connection without answering
Every kept message is written to OUT_DIR/<n>.eml before any delay or drop, so the test can count what
the server really received, with the TLS version the session used (X-Peer-Tls). Prints READY when listening.

TLS is "none" (default), "starttls" (offered and required before MAIL) or "implicit" (TLS from the first
byte). With TLS, a certificate authority is made for this run and written to OUT_DIR/ca.pem, and the
server's certificate (for 127.0.0.1 and localhost) is signed by it: the client must be told to trust it.
"""

import asyncio
import datetime
import ipaddress
import os
import ssl
import sys

from aiosmtpd.controller import Controller


class Scripted:
    def __init__(self, out_dir, script):
        self.out_dir = out_dir
        self.steps = script.split(",")
        self.transactions = 0
        self.kept = 0

    def _next(self):
        index = min(self.transactions, len(self.steps) - 1)
        self.transactions += 1
        return self.steps[index]

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        # Per session: transactions of concurrent sessions each follow their own step.
        session.herald_step = step = self._next()
        if step.startswith("mail:"):
            return step[5:] + " scripted refusal at MAIL"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        step = session.herald_step
        if step.startswith("rcpt:"):
            return step[5:] + " scripted refusal at RCPT"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        step = session.herald_step
        if step.startswith("data:"):
            return step[5:] + " scripted refusal after DATA"
        self.kept += 1
        path = os.path.join(self.out_dir, "%d.eml" % self.kept)
        with open(path + ".part", "wb") as f:
            f.write(b"X-Peer-Rcpt: " + ",".join(envelope.rcpt_tos).encode() + b"\r\n")
            f.write(b"X-Peer-Mail-From: " + (envelope.mail_from or "").encode() + b"\r\n")
            tls = server.transport.get_extra_info("ssl_object")
            f.write(b"X-Peer-Tls: " + (tls.version() if tls else "none").encode() + b"\r\n")
            f.write(envelope.original_content or envelope.content)
        os.rename(path + ".part", path)
        if step.startswith("delay:"):
            await asyncio.sleep(float(step[6:]))
        if step == "drop":
            server.transport.abort()
            return "250 never seen"
        return "250 2.0.0 Ok: queued as Q%d" % self.kept


def tls_context(out_dir):
    """A CA for this run (OUT_DIR/ca.pem) and a server certificate it signed, as a server SSLContext."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Herald test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])).issuer_name(ca_name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                    x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    with open(os.path.join(out_dir, "server.pem"), "wb") as f:
        f.write(cert.public_bytes(pem))
    with open(os.path.join(out_dir, "server.key"), "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with open(os.path.join(out_dir, "ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(os.path.join(out_dir, "server.pem"), os.path.join(out_dir, "server.key"))
    return context


def main():
    port, out_dir, script = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    tls = sys.argv[4] if len(sys.argv) > 4 else "none"
    handler = Scripted(out_dir, script)
    if tls == "starttls":
        controller = Controller(handler, hostname="127.0.0.1", port=port, tls_context=tls_context(out_dir),
                                require_starttls=True)
    elif tls == "implicit":
        controller = Controller(handler, hostname="127.0.0.1", port=port, ssl_context=tls_context(out_dir))
    else:
        controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    print("READY", flush=True)
    try:
        sys.stdin.read()  # runs until the test closes our stdin (or kills us)
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
