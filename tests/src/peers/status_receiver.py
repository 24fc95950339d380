"""A status-event receiver for Herald's tests (issue 46): verifies every request with the official
`standardwebhooks` package (an implementation nobody here wrote) and records it.

    status_receiver.py serve SECRET LOG     listens on 127.0.0.1 (a free port, printed as the first line of
                                            stdout); every request is verified and appended to LOG as one
                                            JSON line: id, timestamp, verified, error, payload, answered.
                                            A verified request is answered from the queue of statuses set by
                                            POST /_answers (a body such as "503,503,200"; "always:503" for
                                            every request), 204 when the queue is empty; an unverified one
                                            gets 401.
    status_receiver.py verify SECRET        reads {"headers": {...}, "body": "..."} on stdin and prints
                                            "ok" or "refused: <why>" (the negative controls).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError


def verify(secret, headers, body):
    try:
        return Webhook(secret).verify(body, headers), None
    except WebhookVerificationError as error:
        return None, str(error)


def serve(secret, log_path):
    lock = threading.Lock()
    state = {"queue": [], "always": None}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            if self.path == "/_answers":
                text = body.decode().strip()
                with lock:
                    if text.startswith("always:"):
                        state["always"] = int(text.split(":", 1)[1])
                        state["queue"] = []
                    else:
                        state["always"] = None
                        state["queue"] = [int(s) for s in text.split(",") if s.strip()]
                self.send_response(204)
                self.end_headers()
                return
            headers = {k: v for (k, v) in self.headers.items()}
            payload, error = verify(secret, headers, body)
            with lock:
                if error is not None:
                    answer = 401
                elif state["always"] is not None:
                    answer = state["always"]
                elif state["queue"]:
                    answer = state["queue"].pop(0)
                else:
                    answer = 204
                record = {
                    "id": headers.get("webhook-id"),
                    "timestamp": headers.get("webhook-timestamp"),
                    "signature": headers.get("webhook-signature"),
                    "verified": error is None,
                    "error": error,
                    "payload": payload,
                    "body": body.decode("utf-8", "replace"),
                    "answered": answer,
                }
                with open(log_path, "a", encoding="utf-8") as log:
                    log.write(json.dumps(record) + "\n")
            self.send_response(answer)
            self.send_header("Content-Length", "0")
            self.end_headers()

    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def main():
    if sys.argv[1] == "serve":
        serve(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "verify":
        request = json.load(sys.stdin)
        _, error = verify(sys.argv[2], request["headers"], request["body"].encode())
        print("ok" if error is None else f"refused: {error}")
    else:
        sys.exit(f"unknown command {sys.argv[1]}")


if __name__ == "__main__":
    main()
