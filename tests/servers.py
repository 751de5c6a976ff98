"""A ``zoo serve`` app run by uvicorn in a thread of the test process, on a free port of
127.0.0.1, for as long as a test module needs it."""

from __future__ import annotations

import threading
import time


class Running:
    """``app`` served on 127.0.0.1 (a free port) until :meth:`close`; ``url`` is its
    address, ``server`` the app's :class:`zoo.serve.app.Server`."""

    def __init__(self, app) -> None:
        import uvicorn

        self.app = app
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                timeout_graceful_shutdown=5)
        self.uvicorn = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.uvicorn.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        port = self.uvicorn.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    @property
    def server(self):
        return self.app.app.state.server

    def close(self) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(30)
