"""Debian's nginx or HAProxy in front of router nodes on loopback, with deploy/cluster/nginx.conf
or haproxy.cfg as shipped: only the nodes' addresses, the listening port and the log path are
swapped. Each runs in the foreground under a temporary directory, as a child reaped on the way
out (its own process group, killed if it does not stop)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from tests.support.routers import ROOT, spare_port
from tests.support.serve import OnLoopback
from tests.support.wait import wait_for

DEPLOY: Final = ROOT / "deploy" / "cluster"
CLUSTER_CONF: Final = DEPLOY / "nginx.conf"
HAPROXY_CONF: Final = DEPLOY / "haproxy.cfg"
# The example addresses of the shipped files, in node order ("a", "b"), and what else is swapped.
EXAMPLE_NODES: Final = ("10.0.0.11:4000", "10.0.0.12:4000")
EXAMPLE_LISTEN: Final = "listen 8080;"
EXAMPLE_BIND: Final = "bind :8080"
EXAMPLE_LOG: Final = "/var/log/nginx/mcp-router-cluster.log"
DEBIAN_HAPROXY: Final = "/usr/sbin/haproxy"
START_TIMEOUT: Final = 15.0
STOP_TIMEOUT: Final = 10.0
DEBIAN_NGINX: Final = "/usr/sbin/nginx"

MAIN_CONF: Final = """\
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log notice;
events {{ worker_connections 1024; }}
http {{
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/cluster.conf;
}}
"""


def find_binary(name: str, debian_path: str) -> str:
    """The binary, or a skip outside CI (scripts/setup --test installs it); in CI it must be there."""
    found = shutil.which(name) or (debian_path if Path(debian_path).exists() else None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not installed: scripts/setup --test installs it (apt-get install {name})")
        pytest.skip(f"{name} is not installed (scripts/setup --test installs it with apt-get)")
    return found


@dataclass
class Balancer(OnLoopback):
    port: int
    prefix: Path
    proc: subprocess.Popen[bytes]

    def access_log(self) -> str:
        path = self.prefix / "access.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def shipped_conf(path: Path, node_ports: Sequence[int], swaps: dict[str, str]) -> str:
    """The shipped file with the nodes on loopback and ``swaps`` made; each must be there."""
    text = path.read_text()
    swaps = {**{example: f"127.0.0.1:{port}" for example, port in zip(EXAMPLE_NODES, node_ports, strict=True)},
             **swaps}  # fmt: skip
    for example, real in swaps.items():
        assert example in text, f"{path} no longer has {example!r}"
        text = text.replace(example, real)
    return text


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def nginx_argv(node_ports: Sequence[int], port: int, prefix: Path) -> list[str]:
    binary = find_binary("nginx", DEBIAN_NGINX)
    swaps = {EXAMPLE_LISTEN: f"listen 127.0.0.1:{port};", EXAMPLE_LOG: str(prefix / "access.log")}
    (prefix / "cluster.conf").write_text(shipped_conf(CLUSTER_CONF, node_ports, swaps))
    conf = prefix / "nginx.conf"
    conf.write_text(MAIN_CONF.format(prefix=prefix))
    argv = [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    check = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=START_TIMEOUT, check=False)
    assert check.returncode == 0, check.stderr
    return argv


def haproxy_argv(node_ports: Sequence[int], port: int, prefix: Path) -> list[str]:
    binary = find_binary("haproxy", DEBIAN_HAPROXY)
    conf = prefix / "haproxy.cfg"
    conf.write_text(shipped_conf(HAPROXY_CONF, node_ports, {EXAMPLE_BIND: f"bind 127.0.0.1:{port}"}))
    return [binary, "-db", "-f", str(conf)]  # -db: foreground, no daemon


BALANCERS: Final = {"nginx": nginx_argv, "haproxy": haproxy_argv}


@contextmanager
def balancer_cluster(kind: str, node_ports: Sequence[int], prefix: Path) -> Iterator[Balancer]:
    """nginx or HAProxy on a free loopback port, routing to the nodes at ``node_ports`` ("a", "b")."""
    prefix.mkdir(parents=True, exist_ok=True)
    port = spare_port()
    argv = BALANCERS[kind](node_ports, port, prefix)
    log = prefix / "stderr.log"
    with log.open("ab") as sink:
        # Its own process group: the master and its workers go together, whatever happens.
        proc = subprocess.Popen(argv, stdout=sink, stderr=sink, start_new_session=True)
    server = Balancer(port, prefix, proc)
    try:
        wait_for(lambda: proc.poll() is not None or _listening(port), timeout=START_TIMEOUT)
        assert proc.poll() is None, f"{kind} exited with {proc.returncode}:\n{log.read_text()}{server.error_log()}"
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # both: fast shutdown, held SSE streams are cut
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
