"""One ``@playwright/mcp --isolated`` worker, started with the router's own template
(``playwright_argv(isolated=True)``) and reached straight, with no router in between: many MCP
sessions on it, each its own browser context of the worker's one browser. What its process tree
holds (browsers, renderers) is read from /proc. ``isolated=False`` starts the router's usual
one-session worker (a profile on disk) instead, for comparison (scripts/isolated_memory.py)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import httpx

from tests.support.client import RawClient, initialize_body, text_of
from tests.support.procs import renderers_of
from tests.support.roots_client import ProjectStream
from tests.support.worker_process import WorkerProcess, without_pair
from workers.browser import browsers_of
from workers.ports import spare_port
from workers.spec import WorkerSpec, default_cli_path, playwright_argv, sandbox_possible

SAMPLER_JOIN_TIMEOUT: Final = 5.0
MARKER_SESSION: Final = "isolated-worker"
PROTOCOL_VERSION: Final = "2025-06-18"
OUTPUT_DIR_ARGS: Final = ("--output-dir", "{output_dir}")


class ToolError(AssertionError):
    """A tool answered with ``isError``: its text is the message."""


class Session(RawClient):
    """One MCP session on the worker, spoken by hand (a GET stream only when it declares roots)."""

    def initialize(self, *, roots: bool = False, **kw: Any) -> httpx.Response:
        """``roots``: the client declares roots (answered on a GET stream of its own)."""
        body = initialize_body(version=PROTOCOL_VERSION, **kw)
        if roots:
            body["params"]["capabilities"] = {"roots": {}}
        response = self.post(body)
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        assert self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
        self.http.headers["mcp-protocol-version"] = PROTOCOL_VERSION
        return response

    def __enter__(self) -> Session:
        return self

    def tool(self, name: str, **arguments: Any) -> str:
        """The tool's text; ToolError when it answered with an error."""
        answer = self.call(name, **arguments)
        assert "result" in answer, answer
        if answer["result"].get("isError"):
            raise ToolError(text_of(answer))
        return text_of(answer)

    def evaluate(self, function: str) -> str:
        """What ``function`` returned in the current tab, as the worker prints it (JSON)."""
        text = self.tool("browser_evaluate", function=function)
        return text.split("### Result\n", 1)[1].split("\n###", 1)[0].strip()

    def end(self) -> int:
        """DELETE of the session; its status."""
        status = self.delete().status_code
        self.session_id = None
        return status


class IsolatedWorker(WorkerProcess):
    def __init__(
        self,
        base: Path,
        browser: str,
        extra_args: Sequence[str] = (),
        *,
        isolated: bool = True,
        output_dir: bool = True,
    ) -> None:
        """``output_dir=False``: no ``--output-dir``, so each session's files go under its first
        root (``<root>/.playwright-mcp``), or the worker's cwd when it declares none."""
        self.port = spare_port()
        self.output_dir = base / "out"
        self.output_dir.mkdir(parents=True, exist_ok=True)
        template = playwright_argv(isolated=isolated, sandbox=sandbox_possible(), extra_args=extra_args)
        spec = WorkerSpec(argv_template=template if output_dir else without_pair(template, OUTPUT_DIR_ARGS))
        argv = spec.render(
            port=self.port,
            output_dir=self.output_dir,
            profile_dir=base / "profile",  # unused when isolated
            browser=browser,
            cli=str(default_cli_path()),
        )
        # The router's cwd for a worker: relative file names land beside the output.
        super().__init__(
            argv,
            url=f"http://localhost:{self.port}/mcp",
            state_dir=base,
            marker_session=MARKER_SESSION,
            cwd=self.output_dir,
        )

    def __enter__(self) -> IsolatedWorker:
        super().__enter__()
        return self

    @contextlib.contextmanager
    def session(self, project: Path | None = None) -> Iterator[Session]:
        """An initialized session, DELETEd at the end unless the test ended it. ``project``: the
        session declares roots and answers the worker's roots/list with this directory."""
        with Session(self.url, token=None) as session:
            session.initialize(roots=project is not None)
            stream = None
            if project is not None:
                assert session.session_id is not None
                stream = ProjectStream(self.url, session.session_id, project).start()
            try:
                yield session
            finally:
                if session.session_id is not None:
                    session.end()
                if stream is not None:
                    stream.join()

    @contextlib.contextmanager
    def sessions(self, count: int) -> Iterator[list[Session]]:
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(self.session()) for _ in range(count)]

    def browsers(self) -> list[int]:
        """The browser processes (not their helpers) under the worker's node."""
        return browsers_of(self.pid)

    def browser(self) -> int:
        """The worker's one browser; fails when there is none or more than one."""
        found = self.browsers()
        assert len(found) == 1, f"browsers under the worker: {found}"
        return found[0]

    def renderers(self) -> set[int]:
        return {pid for browser in self.browsers() for pid in renderers_of(browser)}


class BrowserWatch:
    """Every browser pid seen under a worker while it runs, sampled in a thread: a second browser
    launched and closed again between two looks at the end still shows here."""

    def __init__(self, worker: IsolatedWorker, interval: float = 0.01) -> None:
        self.worker = worker
        self.interval = interval
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.seen.update(self.worker.browsers())
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> BrowserWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=SAMPLER_JOIN_TIMEOUT)
        self.seen.update(self.worker.browsers())
