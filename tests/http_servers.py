"""Test web servers on 127.0.0.1 that the http and GCS store tests share: `send_file` (a real file, served honestly)
and `serve` (a handler class in a thread, until the block ends)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from pathlib import Path
from typing import Iterator


def send_file(handler: http.server.BaseHTTPRequestHandler, path: Path, body: bool) -> None:
    """The file at `path` as a plain 200 with its length (404 when missing): what the test servers serve honestly."""
    if not path.is_file():
        handler.send_error(404)
        return
    data = path.read_bytes()
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if body:
        handler.wfile.write(data)


@contextlib.contextmanager
def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` on a threading server at 127.0.0.1 (a free port); yields its base URL, shuts it down after."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
