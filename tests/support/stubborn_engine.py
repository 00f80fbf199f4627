"""An engine stand-in that will not stop: it ignores SIGTERM, starts one child that ignores it too (as vLLM's
EngineCore would outlive a hung API server), writes both process ids to $STUBBORN_PIDS, and sleeps. Only SIGKILL
ends it. Used to drive the SageMaker supervision loop's kill path deterministically, whatever the machine's load.

Any arguments (an engine command line) are ignored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
if sys.argv[1:2] == ["--child"]:
    while True:
        time.sleep(60)
child = subprocess.Popen([sys.executable, __file__, "--child"])
pids = os.environ["STUBBORN_PIDS"]
with open(pids + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}\n")
os.rename(pids + ".tmp", pids)
while True:
    time.sleep(60)
