"""Spawn, watch and end one worker process per session."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import anyio.to_thread

from . import node, orphans
from ._exceptions import ReadyTimeout, SpawnError, SupervisorNotRunning
from .ports import LOOPBACK, PortAllocator, accepts
from .process import ChildProcess, group_listens_on
from .scratch import Scratch
from .spec import WorkerSpec, new_host_name

__all__ = ["ExitListener", "Supervisor", "Worker"]

log = logging.getLogger(__name__)

READY_POLL = 0.025
SHUTDOWN_BUDGET = 10.0  # every worker ended within this at run() exit, however many there are
SWEEP_GRACE = 1.0  # Chromium normally follows node within ~0.1 s; past this it is stuck
SPAWN_ATTEMPTS = 2  # one retry, only when the worker lost its port in a bind race
_PORT_IN_USE_HINTS = ("eaddrinuse", "address already in use")  # matched lower-cased


class Worker:
    """A live child, read-only for the router."""

    def __init__(
        self,
        session_id: str,
        port: int,
        child: ChildProcess,
        output_dir: Path,
        profile_dir: Path,
        *,
        host_header: str | None = None,
        cache_dir: Path | None = None,
        temp_dir: Path | None = None,
    ) -> None:
        self.session_id = session_id
        self.port = port
        self.pid = child.pid
        self.pgid = child.pgid
        self.output_dir = output_dir
        self.profile_dir = profile_dir
        self.cache_dir = cache_dir
        self.temp_dir = temp_dir
        self.url = f"http://{LOOPBACK}:{port}/mcp"
        # The Host to send: the worker's secret name when it has one (it answers 403 to any
        # other), else the name local servers accept (@playwright/mcp refuses 127.0.0.1:<port>).
        self.host_header = host_header or f"localhost:{port}"
        self.stopping = False  # True once the supervisor asked it to end (stop / shutdown)
        self._child = child
        self._finished = anyio.Event()  # exit handled: port released, listeners called

    def __repr__(self) -> str:
        return f"<Worker {self.session_id!r} port={self.port} pid={self.pid} rc={self.returncode}>"

    @property
    def returncode(self) -> int | None:
        return self._child.returncode

    def alive(self) -> bool:
        return self._child.alive()

    def stderr_tail(self) -> str:
        return self._child.stderr_tail()

    async def exits_within(self, seconds: float) -> bool:
        """True when the process has exited or does within ``seconds`` (its exit may not have
        been handled yet). A killed process resets its sockets one by one while still holding
        its listener, so a reset alone does not tell a dying worker from a live one."""
        with anyio.move_on_after(seconds):
            await self._child.wait()
        return not self._child.alive()

    async def wait_exited(self) -> int:
        """The returncode, once the exit has been fully handled (listeners already called)."""
        await self._finished.wait()
        rc = self._child.returncode
        assert rc is not None
        return rc


ExitListener = Callable[[Worker, int], None]


class Supervisor:
    def __init__(
        self,
        *,
        spec: WorkerSpec,
        state_dir: Path,
        browser: str,
        cli: str,
        ports: PortAllocator | None = None,
    ) -> None:
        self.spec = spec
        self.state_dir = state_dir.resolve()
        self.browser = browser
        self.cli = cli
        self._ports = ports if ports is not None else PortAllocator()
        self._workers: dict[str, Worker] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._listeners: list[ExitListener] = []
        self._tg: anyio.abc.TaskGroup | None = None
        self._scratch = Scratch(self.state_dir)

    # -- life cycle ----------------------------------------------------------------------------

    @asynccontextmanager
    async def run(self) -> AsyncIterator[Supervisor]:
        """Ends orphans of this state dir first; ends every worker on the way out."""
        ended = await anyio.to_thread.run_sync(orphans.end_orphans, self.state_dir)
        if ended:
            log.warning("ended %d orphan worker process(es) of %s", len(ended), self.state_dir)
        await anyio.to_thread.run_sync(self._scratch.open)
        await anyio.to_thread.run_sync(node.make_compile_cache_dir, self.state_dir)
        try:
            async with self._run_workers():
                yield self
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._scratch.close)

    @asynccontextmanager
    async def _run_workers(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                self._tg = None
                with anyio.CancelScope(shield=True), anyio.move_on_after(SHUTDOWN_BUDGET):
                    await self._stop_all()
                tg.cancel_scope.cancel()
        # Last resort for anything that outlived the budget; cheap when there is nothing.
        left = orphans.processes_for(self.state_dir)
        if left:
            orphans.end_processes(left, grace=0)

    async def _stop_all(self) -> None:
        async with anyio.create_task_group() as tg:
            for session_id in list(self._workers):
                tg.start_soon(self.stop, session_id)

    # -- queries -------------------------------------------------------------------------------

    def get(self, session_id: str) -> Worker | None:
        worker = self._workers.get(session_id)
        return worker if worker is not None and worker.alive() and not worker.stopping else None

    def workers(self) -> list[Worker]:
        return [w for w in self._workers.values() if w.alive() and not w.stopping]

    @property
    def live_count(self) -> int:
        return len(self.workers())

    def add_exit_listener(self, cb: ExitListener) -> None:
        self._listeners.append(cb)

    def remove_exit_listener(self, cb: ExitListener) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(cb)

    def session_dir(self, session_id: str) -> Path:
        return self.state_dir / "sessions" / session_id

    def output_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "out"

    def profile_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "profile"

    # -- spawn / stop --------------------------------------------------------------------------

    def _lock(self, session_id: str) -> anyio.Lock:
        return self._locks.setdefault(session_id, anyio.Lock())

    async def spawn(self, session_id: str) -> Worker:
        """A ready worker for ``session_id``; the live one if there is one. Raises SpawnError."""
        if self._tg is None:
            raise SupervisorNotRunning("spawn() needs `async with supervisor.run()`")
        async with self._lock(session_id):
            previous = self._workers.get(session_id)
            if previous is not None:
                if previous.alive() and not previous.stopping:
                    return previous
                # Its clean-up sweeps by session marker: let it finish before a new child exists.
                await previous._finished.wait()
            tried: set[int] = set()
            for attempt in range(SPAWN_ATTEMPTS):
                port = self._ports.allocate(session_id, exclude=tried)
                try:
                    return await self._start(session_id, port)
                except SpawnError as exc:
                    self._ports.release(port)
                    tried.add(port)
                    lost_port = any(h in exc.stderr_tail.lower() for h in _PORT_IN_USE_HINTS)
                    if not lost_port or attempt + 1 == SPAWN_ATTEMPTS:
                        raise
                    log.info("worker for %s lost port %d in a bind race; retrying", session_id, port)
                except BaseException:
                    self._ports.release(port)
                    raise
        raise AssertionError("unreachable")

    def worker_env(self, session_id: str, *, host_name: str | None, cache_dir: Path, temp_dir: Path) -> dict[str, str]:
        """The environment of the session's next worker: ours, the spec's, then what is the
        worker's own (its secret host name, its cache and temp dirs) and the orphan marker. The
        node compile cache, shared by all workers, goes under ours: an operator's setting wins."""
        defaults = {node.COMPILE_CACHE_ENV: str(node.compile_cache_dir(self.state_dir))}
        own = {"XDG_CACHE_HOME": str(cache_dir), "TMPDIR": str(temp_dir)}
        if host_name is not None and self.spec.allowed_hosts_env:
            own[self.spec.allowed_hosts_env] = host_name
        return {**defaults, **os.environ, **self.spec.env, **own, **orphans.marker_env(self.state_dir, session_id)}

    async def _start(self, session_id: str, port: int) -> Worker:
        output_dir, profile_dir = self.output_dir(session_id), self.profile_dir(session_id)
        output_dir.mkdir(parents=True, exist_ok=True)
        profile_dir.mkdir(parents=True, exist_ok=True)
        cache_dir = self._scratch.cache_dir(self.session_dir(session_id))
        temp_dir = self._scratch.temp_dir(session_id)
        host_name = new_host_name() if self.spec.allowed_hosts_env else None
        argv = self.spec.render(
            port=port, output_dir=output_dir, profile_dir=profile_dir, browser=self.browser, cli=self.cli
        )
        env = self.worker_env(session_id, host_name=host_name, cache_dir=cache_dir, temp_dir=temp_dir)
        try:
            child = await ChildProcess.start(argv, env=env, cwd=output_dir)
        except OSError as exc:
            self._scratch.remove(session_id)
            raise SpawnError(f"cannot start {argv[0]!r}: {exc}", session_id=session_id) from exc
        tg = self._tg
        if tg is None:  # run() ended while we were starting
            await self._discard(child, session_id)
            raise SupervisorNotRunning("supervisor stopped during spawn")
        tg.start_soon(child.pump_stderr)
        orphans.write_pid_file(self.state_dir, session_id, pid=child.pid, pgid=child.pgid, port=port)
        try:
            await self._wait_ready(session_id, child, port)
        except BaseException:
            await self._discard(child, session_id)
            orphans.remove_pid_file(self.state_dir, session_id)
            raise
        if self._tg is not tg:  # run() ended while we waited: nothing would watch this child
            await self._discard(child, session_id)
            orphans.remove_pid_file(self.state_dir, session_id)
            raise SupervisorNotRunning("supervisor stopped during spawn")
        worker = Worker(
            session_id,
            port,
            child,
            output_dir,
            profile_dir,
            host_header=host_name,
            cache_dir=cache_dir,
            temp_dir=temp_dir,
        )
        self._workers[session_id] = worker
        tg.start_soon(self._watch, worker)
        return worker

    async def _wait_ready(self, session_id: str, child: ChildProcess, port: int) -> None:
        with anyio.move_on_after(self.spec.ready_timeout):
            while True:
                if not child.alive():
                    await child.drain_stderr()
                    raise SpawnError(
                        f"worker for {session_id} exited with {child.returncode} before it was ready",
                        session_id=session_id,
                        stderr_tail=child.stderr_tail(),
                        returncode=child.returncode,
                    )
                if await accepts(port) and group_listens_on(child.pgid, port):
                    return
                await anyio.sleep(READY_POLL)
        raise ReadyTimeout(
            f"worker for {session_id} did not listen on {port} within {self.spec.ready_timeout:g} s",
            session_id=session_id,
            stderr_tail=child.stderr_tail(),
        )

    async def _discard(self, child: ChildProcess, session_id: str) -> None:
        """Kill a child that never became a Worker, and everything below it."""
        with anyio.CancelScope(shield=True):
            await child.terminate(0)
            await child.drain_stderr()
            await child.aclose()
            await anyio.to_thread.run_sync(self._scratch.remove, session_id)

    async def stop(self, session_id: str) -> None:
        """End the session's worker (group SIGTERM → grace → SIGKILL); idempotent.

        Returns once the exit has been handled: port released, listeners called.
        """
        worker = self._workers.get(session_id)
        if worker is None:
            return
        worker.stopping = True
        with anyio.CancelScope(shield=True):
            await worker._child.terminate(self.spec.stop_grace)
            await worker._finished.wait()

    async def forget(self, session_id: str) -> None:
        """Stop the worker and delete the session's files (profile included)."""
        await self.stop(session_id)
        async with self._lock(session_id):
            if session_id not in self._workers:
                await anyio.to_thread.run_sync(
                    lambda: shutil.rmtree(self.session_dir(session_id), ignore_errors=True)
                )
                self._locks.pop(session_id, None)

    async def _watch(self, worker: Worker) -> None:
        """Exit detection at once: runs for the worker's whole life, handles its end once.

        If our task group is cancelled (the caller of run() was), the worker is ended here: the
        exit bookkeeping must never run for a child that is still alive.
        """
        child = worker._child
        cancelled: BaseException | None = None
        try:
            await child.wait()
        except anyio.get_cancelled_exc_class() as exc:
            cancelled = exc
            worker.stopping = True
        with anyio.CancelScope(shield=True):
            try:
                returncode = await child.terminate(self.spec.stop_grace) if cancelled else await child.wait()
                await child.drain_stderr()
                # node is gone; Chromium normally follows within ~0.1 s. Whatever did not, goes.
                await anyio.to_thread.run_sync(self._sweep, worker.session_id)
                await child.aclose()
                # Its sockets and temp files, even after a SIGKILL that left them all behind.
                await anyio.to_thread.run_sync(self._scratch.remove, worker.session_id)
            finally:
                if self._workers.get(worker.session_id) is worker:
                    del self._workers[worker.session_id]
                self._ports.release(worker.port)
                orphans.remove_pid_file(self.state_dir, worker.session_id)
                worker._finished.set()
            if not worker.stopping:
                log.warning("worker %s exited on its own with %s", worker.session_id, returncode)
            for cb in list(self._listeners):
                try:
                    cb(worker, returncode)
                except Exception:  # a listener's bug must not stop exit handling for the others
                    log.exception("exit listener %r failed", cb)
        if cancelled is not None:
            raise cancelled

    def _sweep(self, session_id: str) -> None:
        left = orphans.processes_for(self.state_dir, session_id)
        if left:
            orphans.end_processes(left, grace=SWEEP_GRACE)
