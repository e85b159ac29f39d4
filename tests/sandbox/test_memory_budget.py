"""A sandbox's memory and processes are bounded as a whole, not per process: forking does not multiply them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from evalsi.cli.sandbox import app
from evalsi.sandbox import Isolation, Limits, Workspace, run
from evalsi.sandbox._cgroups import controllers
from evalsi.sandbox._rungs import RUNTIME_BYTES, TMPFS_BYTES

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(300)]

PY = "/usr/bin/python3"
GVISOR = pytest.param(
    "gvisor",
    marks=pytest.mark.skipif(shutil.which("runsc") is None, reason="gVisor is not installed (apt-get install runsc)"),
)
RUNG_NAMES = ["process", "namespaced", GVISOR]
CHILDREN, CHILD_BYTES = 7, 150 << 20
"""Children of the forking program, and what each allocates and touches: 1050 MiB together."""
FORKING = f"""
import os, select, struct, time
n, size = {CHILDREN}, {CHILD_BYTES}
r, w = os.pipe()
refused = 0
for _ in range(n):
    try:
        pid = os.fork()
    except OSError:  # the budget refused one more process (its memory, or its pids): held to it, as meant
        refused += 1
        continue
    if pid == 0:
        try:
            block = bytearray(size)
            for i in range(0, size, 4096):
                block[i] = 1
        except MemoryError:
            os._exit(3)
        os.write(w, struct.pack("i", os.getpid()))
        time.sleep(60)
        os._exit(0)
holding, ended = set(), set()

def reap():
    try:
        while True:
            pid = os.waitpid(-1, os.WNOHANG)[0]
            if not pid:
                return
            ended.add(pid)
    except ChildProcessError:
        pass

deadline = time.time() + 60
while len(holding | ended) + refused < n and time.time() < deadline:
    if select.select([r], [], [], 0.05)[0]:
        data = os.read(r, 4 * n)
        holding.update(struct.unpack(f"{{len(data) // 4}}i", data))
    reap()
time.sleep(0.5)
reap()
print(f"held={{len(holding - ended)}} ended={{len(ended)}} refused={{refused}}", flush=True)
"""
BUDGET = Limits(memory_bytes=256 << 20, max_processes=CHILDREN + 1, wall_time=90, cpu_time=90)


def held(stdout: str) -> int:
    """How many children held their memory together at the end (the program's report)."""
    return int(stdout.split("held=")[1].split()[0])


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This host as if it had no usable cgroup: the per-process fallback."""
    monkeypatch.setenv("EVALSI_SANDBOX_CGROUP", "off")
    controllers.cache_clear()
    yield
    monkeypatch.delenv("EVALSI_SANDBOX_CGROUP")
    controllers.cache_clear()


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_children_that_each_allocate_are_held_to_the_sandbox_wide_budget(rung: Isolation) -> None:
    result = run([PY, "-I", "-S", "-c", FORKING], limits=BUDGET, rung=rung)
    if result.reason == "memory":  # the runtime itself (gVisor's sentry holds its program's memory) was killed
        assert result.exit_code is None or result.exit_code < 0
        return
    assert result.reason == "exit" and "held=" in result.stdout, result  # the whole result, if it did not report
    # whatever the sandbox's own overhead (its memory filesystems, its runtime), far fewer than all 7 fit
    room = BUDGET.memory_bytes + TMPFS_BYTES + RUNTIME_BYTES
    assert held(result.stdout) * CHILD_BYTES <= room < CHILDREN * CHILD_BYTES, result.stdout


def test_the_same_program_within_a_large_enough_budget_holds_every_child() -> None:
    large = Limits(memory_bytes=2 << 30, max_processes=CHILDREN + 1, wall_time=90, cpu_time=90)
    result = run([PY, "-I", "-S", "-c", FORKING], limits=large, rung="namespaced")
    assert result.reason == "exit" and held(result.stdout) == CHILDREN, result


@pytest.mark.usefixtures("no_cgroup")
@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_without_a_cgroup_each_process_gets_the_budget_divided_across_the_processes_allowed(rung: Isolation) -> None:
    one = f"b = bytearray({(256 << 20) // (CHILDREN + 1) + (8 << 20)}); print('allocated')"
    assert run([PY, "-I", "-S", "-c", one], limits=BUDGET, rung=rung).reason == "memory"
    result = run([PY, "-I", "-S", "-c", FORKING], limits=BUDGET, rung=rung)
    assert result.reason == "exit" and held(result.stdout) == 0, result


def test_a_sandbox_cgroup_is_removed_when_it_closes() -> None:
    found = controllers()
    assert found.kind != "rlimit", found.detail  # this machine (as root) has cgroup v1 memory and pids
    mine = f"evalsi-sandbox-{os.getpid()}-"
    with Workspace("namespaced") as workspace:
        assert workspace.exec([PY, "-c", "print(1)"]).ok
        assert [n for n in os.listdir(found.memory_parent) if n.startswith(mine)]
    assert not [n for n in os.listdir(found.memory_parent) if n.startswith(mine)]
    assert not [n for n in os.listdir(found.pids_parent) if n.startswith(mine)]


def test_a_sandbox_runs_no_more_tasks_than_its_processes_allow() -> None:
    threads = "import threading, time\nfor _ in range(40): threading.Thread(target=time.sleep, args=(5,)).start()"
    result = run([PY, "-I", "-S", "-c", threads], limits=Limits(max_processes=8), rung="namespaced")
    assert result.exit_code != 0 and "can't start new thread" in result.stderr, result


def test_doctor_reports_the_memory_bound_in_force() -> None:
    result = CliRunner().invoke(app, ["doctor"], terminal_width=400)
    assert result.exit_code == 0, result.output
    assert f"memory bound: {controllers().describe()}" in result.output.replace("\n", "")


@pytest.mark.usefixtures("no_cgroup")
def test_doctor_reports_the_per_process_fallback() -> None:
    result = CliRunner().invoke(app, ["doctor"], terminal_width=400)
    assert "RLIMIT_AS = memory budget / max processes" in result.output.replace("\n", "")
