"""Mailpit stand-in for ``make compose-check``: SMTP on :1025, Mailpit's API subset on :8025.

Keeps every message in memory. ``GET /api/v1/messages`` answers like Mailpit's
(``total`` and ``messages`` with ``From``, ``To``, ``Subject``, ``Snippet``);
``GET /livez`` is its liveness route. Listens on ``SINK_ADDRESS`` (127.0.0.1).
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import threading
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

ADDRESS = os.environ.get("SINK_ADDRESS", "127.0.0.1")
MESSAGES: list[dict[str, Any]] = []
LOCK = threading.Lock()


def summary(number: int, envelope: Any) -> dict[str, Any]:
    """One message as Mailpit's message list shows it."""
    message = email.message_from_bytes(envelope.content, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    body = message.get_body(preferencelist=("plain", "html"))
    text = "" if body is None else str(body.get_content())
    return {
        "ID": str(number),
        "From": {"Address": envelope.mail_from},
        "To": [{"Address": rcpt} for rcpt in envelope.rcpt_tos],
        "Subject": str(message.get("Subject", "")),
        "Snippet": " ".join(text.split())[:500],
    }


class Handler:
    """aiosmtpd handler: accept and keep every message."""

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with LOCK:
            MESSAGES.append(summary(len(MESSAGES) + 1, envelope))
        return "250 Message accepted for delivery"


class Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/livez":
            self._send(200, {"status": "ok"})
        elif self.path.split("?")[0] == "/api/v1/messages":
            with LOCK:
                messages = list(reversed(MESSAGES))  # Mailpit lists the newest first
            self._send(200, {"total": len(messages), "messages": messages})
        else:
            self._send(404, {"error": "not found"})

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    smtp = Controller(Handler(), hostname=ADDRESS, port=1025)
    smtp.start()
    print(f"smtp sink: SMTP {ADDRESS}:1025, API http://{ADDRESS}:8025/api/v1/messages", flush=True)
    try:
        ThreadingHTTPServer((ADDRESS, 8025), Api).serve_forever()
    finally:
        smtp.stop()


if __name__ == "__main__":
    main()
