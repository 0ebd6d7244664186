"""A stand-in worker tree: this process plus a grandchild in the same process group.

Usage: fake_group_child.py PIDFILE [--ignore-term] [--clean-env]
--clean-env starts the grandchild without our environment, like Chromium's zygote children whose
/proc/<pid>/environ no longer shows the marker.
Writes "<own pid> <grandchild pid>" to PIDFILE once both run, then sleeps until killed.
"""

import os
import signal
import subprocess
import sys
import time

pidfile = sys.argv[1]
if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"],
    stdin=subprocess.DEVNULL,
    stdout=subprocess.DEVNULL,
    env={} if "--clean-env" in sys.argv else None,
)
with open(pidfile + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {grandchild.pid}")
os.replace(pidfile + ".tmp", pidfile)
sys.stderr.write("fake worker tree up\n")
sys.stderr.flush()
while True:
    time.sleep(1)
