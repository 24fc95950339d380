"""A real SMTP server for Herald's e-mail tests: aiosmtpd (which nobody here wrote) with a few handlers.

    python3 smtp_peer.py PORT OUT_DIR SCRIPT

SCRIPT is a comma-separated list of steps, one per mail transaction (MAIL FROM), the last repeated:
  accept        250 after the end of DATA, "queued as Q<n>"
  mail:CODE     CODE (e.g. 421, 451, 550) to MAIL FROM
  rcpt:CODE     CODE to RCPT TO
  data:CODE     CODE after the end of DATA (the message is not kept)
  delay:SECS    keep the message, then wait SECS before answering 250 (the client times out first)
  drop          keep the message, then close the connection without answering
Every kept message is written to OUT_DIR/<n>.eml before any delay or drop, so the test can count what
the server really received. Prints READY when listening.
"""

import asyncio
import os
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
            f.write(envelope.original_content or envelope.content)
        os.rename(path + ".part", path)
        if step.startswith("delay:"):
            await asyncio.sleep(float(step[6:]))
        if step == "drop":
            server.transport.abort()
            return "250 never seen"
        return "250 2.0.0 Ok: queued as Q%d" % self.kept


def main():
    port, out_dir, script = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    controller = Controller(Scripted(out_dir, script), hostname="127.0.0.1", port=port)
    controller.start()
    print("READY", flush=True)
    try:
        sys.stdin.read()  # runs until the test closes our stdin (or kills us)
    finally:
        controller.stop()


if __name__ == "__main__":
    main()
