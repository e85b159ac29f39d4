"""The rung interface: run a program with stdin, files and limits; status, output, timing and why it stopped."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from evalsi.errors import SandboxUnavailableError
from evalsi.sandbox import RUNGS, Limits, Sandbox, best_available, doctor, require, run
from evalsi.sandbox._host import PROBE_SLOT, running_as_root, sandbox_python, sandbox_uid
from tests.sandbox._helpers import without_runsc  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(120)]
PY = sandbox_python(sandbox_uid(PROBE_SLOT)) or sys.executable
GVISOR = pytest.param(
    "gvisor",
    marks=pytest.mark.skipif(shutil.which("runsc") is None, reason="gVisor is not installed (apt-get install runsc)"),
)
RUNG_NAMES = ["process", "namespaced", GVISOR]


def test_doctor_reports_every_rung_with_a_reason():
    found = {a.rung: a for a in doctor()}
    assert list(found) == ["process", "namespaced", "gvisor"]
    assert found["namespaced"].ok, found["namespaced"].detail  # CI installs bubblewrap
    assert found["process"].ok
    assert found["gvisor"].ok == (shutil.which("runsc") is not None), found["gvisor"]
    assert best_available() == ("gvisor" if found["gvisor"].ok else "namespaced")


@pytest.mark.usefixtures("without_runsc")
def test_doctor_says_what_is_missing_and_how_to_install_it():
    gvisor = doctor()[-1]
    assert not gvisor.ok
    assert "runsc" in gvisor.detail and "apt-get install runsc" in gvisor.fix
    assert best_available() == "namespaced"


@pytest.mark.usefixtures("without_runsc")
def test_min_isolation_is_a_floor_never_lowered():
    assert require("process") == "process"
    assert require("namespaced") == "namespaced"
    with pytest.raises(SandboxUnavailableError, match="runsc"):
        require("gvisor")


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_stdin_files_and_exit_status(rung):
    program = "import sys; print(open('data.txt').read().strip(), input()[::-1]); sys.exit(3)"
    result = run([PY, "-c", program], stdin="abc\n", files={"data.txt": "hello\n"}, rung=rung)
    assert result.stdout == "hello cba\n"
    assert result.exit_code == 3
    assert result.reason == "exit"
    assert result.wall_time > 0 and result.cpu_time > 0


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_wall_timeout_kills_and_says_so(rung):
    result = run([PY, "-c", "import time; time.sleep(30)"], limits=Limits(wall_time=0.5), rung=rung)
    assert result.reason == "timeout"
    assert result.wall_time < 30


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_cpu_limit(rung):
    result = run([PY, "-c", "while True: pass"], limits=Limits(wall_time=20, cpu_time=1), rung=rung)
    assert result.reason == "cpu"


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_memory_limit(rung):
    program = "x = bytearray(400 * 1024 * 1024); print('allocated')"
    result = run([PY, "-c", program], limits=Limits(memory_bytes=128 << 20), rung=rung)
    assert result.reason == "memory"
    assert "allocated" not in result.stdout


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_output_is_truncated_and_marked(rung):
    program = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    result = run([PY, "-c", program], limits=Limits(max_output_bytes=100_000, wall_time=10), rung=rung)
    assert result.reason == "output"
    assert result.stdout_truncated
    assert len(result.stdout) == 100_000


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_file_size_limit(rung):
    program = "open('big', 'wb').write(b'x' * (8 << 20))"
    result = run([PY, "-c", program], limits=Limits(max_file_bytes=1 << 20), rung=rung)
    assert result.exit_code != 0
    assert "File too large" in result.stderr or result.exit_code == -25


@pytest.mark.parametrize("rung", RUNG_NAMES)
def test_process_limit_stops_a_fork_bomb(rung):
    program = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 500:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print('stopped at', n, e.errno)\n"
    )
    result = run([PY, "-c", program], limits=Limits(max_processes=8, wall_time=10), rung=rung)
    assert result.stdout.startswith("stopped at"), result
    assert int(result.stdout.split()[2]) <= 8 + 4  # the server, init and tester count too


CHECKOUT = str(Path(__file__).resolve().parents[2])
"""The project checkout these tests run from (it exists on the host, so the sandbox must not show it)."""


def test_namespaced_runs_unprivileged_without_capabilities_network_or_host_files():
    program = (
        "import os, socket, errno\n"
        "print('uid', os.getuid(), os.getgid())\n"
        f"for path in ('/etc/shadow', '/root', {CHECKOUT!r}, '/proc/1/environ'):\n"
        "    print(path, os.path.exists(path))\n"
        "print('env', sorted(os.environ))\n"
        "try:\n"
        "    os.setuid(0)\n"
        "    print('setuid ok')\n"
        "except OSError:\n"
        "    print('setuid denied')\n"
        "try:\n"
        "    os.chroot('/work')\n"
        "    print('chroot ok')\n"
        "except OSError:\n"
        "    print('chroot denied')\n"
    )
    result = run([PY, "-I", "-c", program], rung="namespaced")
    lines = result.stdout.splitlines()
    assert lines[0] == "uid 1000 1000"
    assert lines[1:5] == ["/etc/shadow False", "/root False", f"{CHECKOUT} False", "/proc/1/environ False"]
    assert set(eval(lines[5][4:])) <= {"HOME", "LANG", "LC_CTYPE", "PATH", "TMPDIR"}  # nothing from the host
    assert lines[6:] == ["setuid denied", "chroot denied"]


def test_namespaced_system_is_read_only_and_work_dir_private():
    program = (
        "import os\n"
        "for path in ('/usr/evil', '/evil', '/dev/shm/evil', '/work/ok', '/tmp/ok2'):\n"
        "    try:\n"
        "        open(path, 'w').write('x'); print(path, 'written')\n"
        "    except OSError as e:\n"
        "        print(path, 'refused')\n"
    )
    result = run([PY, "-c", program], rung="namespaced")
    assert result.stdout.splitlines() == [
        "/usr/evil refused",
        "/evil refused",
        "/dev/shm/evil refused",
        "/work/ok written",
        "/tmp/ok2 written",
    ]
    assert not os.path.exists("/usr/evil") and not os.path.exists("/evil")


def test_process_rung_work_dir_is_removed_and_nothing_survives():
    sandbox = Sandbox(RUNGS["process"])
    other = Sandbox(RUNGS["process"])
    assert other.slot != sandbox.slot  # live sandboxes never share a uid
    sandbox.start()
    assert sandbox._launch is not None
    workdir = sandbox._launch.cwd
    assert workdir is not None and os.path.isdir(workdir)
    if running_as_root():
        assert os.stat(workdir).st_uid == sandbox_uid(sandbox.slot) != 0
    sandbox.close()
    assert not os.path.exists(workdir)
