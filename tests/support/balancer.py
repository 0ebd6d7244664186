"""Debian's nginx in front of router nodes on loopback, with deploy/cluster/nginx.conf as shipped:
only the nodes' addresses, the listening port and the log path are swapped. nginx runs in the
foreground (``daemon off``) under a temporary prefix, as a child reaped on the way out."""

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

from tests.support.routers import ROOT, free_port
from tests.support.wait import wait_for

CLUSTER_CONF: Final = ROOT / "deploy" / "cluster" / "nginx.conf"
# The example addresses of the shipped file, in node order ("a", "b"), and what else is swapped.
EXAMPLE_NODES: Final = ("10.0.0.11:4000", "10.0.0.12:4000")
EXAMPLE_LISTEN: Final = "listen 8080;"
EXAMPLE_LOG: Final = "/var/log/nginx/mcp-router-cluster.log"
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
class Nginx:
    port: int
    prefix: Path
    proc: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/mcp"

    def access_log(self) -> str:
        path = self.prefix / "access.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def cluster_conf(node_ports: Sequence[int], port: int, prefix: Path) -> str:
    text = CLUSTER_CONF.read_text()
    for example, node_port in zip(EXAMPLE_NODES, node_ports, strict=True):
        assert example in text, f"{CLUSTER_CONF} no longer names {example}"
        text = text.replace(example, f"127.0.0.1:{node_port}")
    for example, real in ((EXAMPLE_LISTEN, f"listen 127.0.0.1:{port};"), (EXAMPLE_LOG, str(prefix / "access.log"))):
        assert example in text, f"{CLUSTER_CONF} no longer has {example!r}"
        text = text.replace(example, real)
    return text


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def nginx_cluster(node_ports: Sequence[int], prefix: Path) -> Iterator[Nginx]:
    """nginx on a free loopback port, routing to the nodes at ``node_ports`` ("a", "b")."""
    binary = find_binary("nginx", DEBIAN_NGINX)
    prefix.mkdir(parents=True, exist_ok=True)
    port = free_port()
    (prefix / "cluster.conf").write_text(cluster_conf(node_ports, port, prefix))
    conf = prefix / "nginx.conf"
    conf.write_text(MAIN_CONF.format(prefix=prefix))
    argv = [binary, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    check = subprocess.run([*argv, "-t"], capture_output=True, text=True, timeout=START_TIMEOUT, check=False)
    assert check.returncode == 0, check.stderr
    # Its own process group: the master and its worker go together, whatever happens.
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    server = Nginx(port, prefix, proc)
    try:
        wait_for(lambda: proc.poll() is not None or _listening(port), timeout=START_TIMEOUT)
        assert proc.poll() is None, f"nginx exited with {proc.returncode}:\n{server.error_log()}"
        yield server
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # fast shutdown: held SSE streams are cut
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
