"""Hostile programs: each gets no undeserved reward and leaves the host as it was. Every test stops by itself."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import time

import pytest

from evalsi.sandbox import Case, Isolation, Limits, close_shared_pools, shared_pool
from evalsi.sandbox import _sandbox as sandbox_module
from evalsi.sandbox._host import sandbox_uid
from tests.sandbox._helpers import process_command, sandbox_processes, score

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(90)]
FAST = {"timeout": 2}
SUM_TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
ADD_ASSERTS = ["assert add(1, 2) == 3", "assert add(5, 5) == 10"]
ADD_CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n"


def all_formats(program: str) -> list[float | bool | None]:
    """The program's score under stdin/stdout tests, MBPP asserts and a HumanEval check."""
    return [
        score(program, FAST, tests=SUM_TESTS).value,
        score(program, FAST, test_list=ADD_ASSERTS).value,
        score(program, FAST, test=ADD_CHECK, entry_point="add").value,
    ]


def stdio_run(program: str, stdin: str = "", limits: Limits | None = None, rung: Isolation = "namespaced"):
    """How one stdin/stdout case of ``program`` ended, on the shared pool of ``rung``."""
    (outcome,) = shared_pool(rung).run(program, [Case("stdio", stdin=stdin)], limits or Limits(wall_time=5))
    return outcome.run


def test_an_honest_program_passes_every_format():
    program = (
        "import sys\n"
        "def add(a, b):\n"
        "    return a + b\n"
        "if __name__ == '__main__':\n"
        "    print(sum(map(int, sys.stdin.read().split())))\n"
    )
    assert all_formats(program) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit"])
def test_early_exit_earns_nothing(exit_call):
    program = f"{exit_call}\ndef add(a, b):\n    return a + b\n"
    assert all_formats(program) == [0.0, 0.0, 0.0]


def test_forged_markers_and_guessed_nonces_earn_nothing():
    guesses = ["", "0" * 32, secrets.token_hex(16), "nonce", "None"]
    program = (
        "import json, os, struct, sys\n"
        f"guesses = {guesses!r}\n"
        "for g in guesses:\n"
        "    for body in ({'nonce': g, 'passed': True}, {'op': 'results', 'nonce': g, 'results': []}):\n"
        "        data = json.dumps(body).encode()\n"
        "        frame = struct.pack('>I', len(data)) + data\n"
        "        print(json.dumps(body)); print('PASSED', g); print('ok', file=sys.stderr)\n"
        "        for fd in range(0, 1024):\n"
        "            try:\n"
        "                os.write(fd, frame)\n"
        "            except OSError:\n"
        "                pass\n"
        "os._exit(0)\n"
    )
    assert all_formats(program) == [0.0, 0.0, 0.0]


def test_objects_equal_to_everything_earn_nothing():
    program = (
        "class Anything:\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "class Sneaky(int):\n"
        "    def __eq__(self, other): return True\n"
        "def add(a, b):\n"
        "    return Anything() if a == 1 else Sneaky(0)\n"
    )
    assert score(program, FAST, test_list=ADD_ASSERTS).value == 0.0
    assert score(program, FAST, test=ADD_CHECK, entry_point="add").value == 0.0
    result = score(program, FAST, inputs=[[1, 2]], outputs=[3], fn_name="add")
    assert result.value == 0.0
    assert "not plain data" in str(result.reason)


def test_monkeypatched_builtins_and_shadowing_names_earn_nothing():
    program = (
        "import builtins\n"
        "builtins.AssertionError = type('Nothing', (Exception,), {})\n"
        "builtins.isinstance = lambda *a: True\n"
        "builtins.abs = lambda x: 0\n"
        "builtins.print = lambda *a, **k: None\n"
        "def abs(x):\n"
        "    return 0\n"
        "def round(*a):\n"
        "    return 3\n"
        "def add(a, b):\n"
        "    return -1\n"
    )
    tests = ["assert abs(add(1, 2) - 3) < 1e-9", "assert round(add(1, 2)) == 3", "assert isinstance(add(1, 2), str)"]
    assert score(program, FAST, test_list=tests).value == 0.0


def test_expected_outputs_are_nowhere_the_program_can_look():
    token = "expected-" + secrets.token_hex(8)
    program = (
        "import gc, os, sys\n"
        "found = []\n"
        "for obj in gc.get_objects():\n"
        "    for s in (obj if isinstance(obj, (list, tuple)) else [obj]):\n"
        "        if isinstance(s, str) and s.startswith('expected-') and len(s) > 9:\n"
        "            found.append(s)\n"
        "found += [v for v in os.environ.values() if 'expected-' in v]\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if root.startswith(('/usr', '/proc', '/sys', '/dev')):\n"
        "        dirs[:] = []\n"
        "        continue\n"
        "    for name in files:\n"
        "        try:\n"
        "            text = open(os.path.join(root, name), errors='ignore').read(1 << 20)\n"
        "        except OSError:\n"
        "            continue\n"
        "        found += [w for w in text.split() if w.startswith('expected-')]\n"
        "print(found[0] if found else 'nothing')\n"
    )
    tests = [{"input": "", "output": token}]
    assert score(program, {"timeout": 10}, tests=tests).value == 0.0
    asserts = [f"assert add(1, 2) == {token!r}"]
    assert score(program + "def add(a, b):\n    return 'nothing'\n", {"timeout": 10}, test_list=asserts).value == 0.0
    assert stdio_run(program, limits=Limits(wall_time=10)).stdout == "nothing\n"


@pytest.mark.parametrize("kill", ["os.kill(os.getppid(), signal.SIGKILL)", "os.kill(-1, signal.SIGKILL)"])
def test_killing_the_parent_earns_nothing_and_the_next_program_is_fine(kill):
    program = f"import os, signal, sys\nprint(sum(map(int, sys.stdin.read().split())))\nsys.stdout.flush()\n{kill}\n"
    assert score(program, FAST, tests=SUM_TESTS).value == 0.0
    asserts = f"import os, signal\ndef add(a, b):\n    {kill}\n    return a + b\n"
    assert score(asserts, FAST, test_list=ADD_ASSERTS).value == 0.0
    assert score("print(sum(map(int, input().split())))", FAST, tests=SUM_TESTS).value == 1.0


def test_fork_bomb_is_contained():
    program = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = score(program, {"timeout": 2, "max_processes": 16}, tests=SUM_TESTS)
    assert result.value == 0.0
    assert score("print(sum(map(int, input().split())))", FAST, tests=SUM_TESTS).value == 1.0


def test_memory_bomb_is_contained():
    program = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))\n"
    result = score(program, {"timeout": 5, "memory_mb": 128}, tests=SUM_TESTS)
    assert result.value == 0.0
    assert result.details is not None and result.details["first_failure"]["reason"] == "memory limit"


def test_output_flood_is_truncated():
    program = "while True:\n    print('x' * 100000)\n"
    result = score(program, {"timeout": 5, "max_output_kb": 64}, tests=SUM_TESTS)
    assert result.value == 0.0
    assert result.details is not None and result.details["first_failure"]["reason"] == "output limit"


def test_sleeping_past_the_timeout_is_stopped():
    program = "import time\ntime.sleep(60)\nprint(3)\n"
    started = time.monotonic()
    result = score(program, {"timeout": 1}, tests=SUM_TESTS[:1])
    assert result.value == 0.0
    assert result.details is not None and result.details["first_failure"]["reason"] == "timeout"
    assert time.monotonic() - started < 60  # it did not wait for the sleep


def test_background_processes_do_not_outlive_their_case():
    program = (
        "import os, time\n"
        "if os.path.exists('started'):\n"
        "    time.sleep(1.0)\n"
        "    print('alive' if os.path.exists('bg') else 'clean')\n"
        "else:\n"
        "    open('started', 'w').close()\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(0.3)\n"
        "            open('bg', 'w').close()\n"
        "            time.sleep(60)\n"
        "        os._exit(0)\n"
        "    print('clean')\n"
    )
    tests = [{"input": "", "output": "clean"}, {"input": "", "output": "clean"}]
    result = score(program, {"timeout": 5}, tests=tests)
    assert result.value == 1.0, result.reason  # case 2 saw no file from case 1's orphan: it was killed


def test_network_connections_fail_immediately():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    program = (
        "import errno, socket\n"
        f"for address in (('127.0.0.1', {port}), ('10.255.255.1', 9), ('::1', {port})):\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=20)\n"
        "        print(address[0], 'connected')\n"
        "    except OSError as e:\n"
        "        print(address[0], errno.errorcode.get(e.errno, e.errno))\n"
    )
    try:
        result = stdio_run(program, limits=Limits(wall_time=10))
        lines = result.stdout.splitlines()
        assert len(lines) == 3, result
        for line in lines:
            assert line.split()[1] in ("EAFNOSUPPORT", "ENETUNREACH", "ECONNREFUSED"), line
        assert result.reason == "exit"  # failed at once: no 20 s connect timeout was reached
        with pytest.raises(TimeoutError):
            listener.accept()  # nothing reached the host's loopback
        assert score(program.replace("print(address[0], 'connected')", "print(3)"), FAST, tests=SUM_TESTS).value == 0
    finally:
        listener.close()


def test_writes_outside_the_work_dir_do_not_reach_the_host():
    token = secrets.token_hex(6)
    targets = [f"/tmp/evalsi-hostile-{token}", f"/work/main/evalsi-hostile-{token}", f"/evalsi-hostile-{token}"]
    targets.append(f"/usr/evalsi-hostile-{token}")
    program = (
        "for path in " + repr(targets) + ":\n"
        "    try:\n"
        "        open(path, 'w').write('pwned')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(3)\n"
    )
    assert score(program, FAST, tests=SUM_TESTS[:1]).value == 1.0  # an honest answer, whatever else it tried
    for path in targets:
        assert not os.path.exists(path), path


def test_host_secrets_and_environment_are_not_visible(monkeypatch):
    secret = "host-secret-" + secrets.token_hex(6)
    monkeypatch.setenv("EVALSI_HOSTILE_SECRET", secret)
    close_shared_pools()  # sandboxes started after the variable was set
    program = (
        "import os\n"
        "out = [repr(dict(os.environ))]\n"
        "for path in ('/etc/shadow', '/etc/passwd', '/root/.bash_history', '/proc/1/environ',\n"
        "             '/proc/self/environ', '/work/main/pyproject.toml', '/home'):\n"
        "    try:\n"
        "        out.append(path + ':' + open(path).read(200))\n"
        "    except OSError as e:\n"
        "        out.append(path + ':' + type(e).__name__)\n"
        "print('\\n'.join(out))\n"
    )
    result = stdio_run(program)
    assert secret not in result.stdout
    for line in result.stdout.splitlines()[1:]:
        assert line.endswith(("FileNotFoundError", "IsADirectoryError", "PermissionError")), line


def test_nothing_the_sandboxes_started_survives_them(monkeypatch: pytest.MonkeyPatch):
    close_shared_pools()  # fresh sandboxes, so every uid this test's programs run as is recorded below
    used: set[int] = set()
    real_acquire = sandbox_module.acquire_slot  # type: ignore[attr-defined]

    def acquire() -> int:
        slot = real_acquire()
        used.add(sandbox_uid(slot))
        return slot

    monkeypatch.setattr(sandbox_module, "acquire_slot", acquire)
    orphan = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nprint(3)"
    score(orphan, FAST, tests=SUM_TESTS[:1])
    details = score(orphan, {**FAST, "min_isolation": "process"}, tests=SUM_TESTS[:1]).details
    assert details is not None and details["isolation"] == "process"
    close_shared_pools()
    assert used
    deadline = time.monotonic() + 10
    while sandbox_processes(used) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {pid: process_command(pid) for pid in sandbox_processes(used)} == {}


def test_process_rung_case_cannot_read_the_server_or_take_its_fds():
    program = (
        "import os\n"
        "parent = os.getppid()\n"
        "for path in (f'/proc/{parent}/mem', f'/proc/{parent}/environ', f'/proc/{parent}/fd/0'):\n"
        "    try:\n"
        "        open(path, 'rb').read(1); print(path, 'read')\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__)\n"
        "try:\n"
        "    os.listdir(f'/proc/{parent}/fd'); print('fds listed')\n"
        "except OSError as e:\n"
        "    print('fds', type(e).__name__)\n"
    )
    (outcome,) = shared_pool("process").run(program, [Case("stdio")], Limits(wall_time=5))
    lines = outcome.run.stdout.splitlines()
    assert len(lines) == 4, outcome
    assert all(line.endswith("PermissionError") for line in lines), lines


@pytest.mark.skipif(shutil.which("runsc") is None, reason="gVisor is not installed (apt-get install runsc)")
def test_gvisor_rung_contains_the_same_hostile_programs():
    token = secrets.token_hex(6)
    program = (
        "import os, socket\n"
        "out = []\n"
        "for path in ('/etc/shadow', '/root', '/work/main/pyproject.toml'):\n"
        "    out.append(path + (' visible' if os.path.exists(path) else ' hidden'))\n"
        "try:\n"
        "    open(f'/proc/{os.getppid()}/environ', 'rb').read(); out.append('server memory readable')\n"
        "except OSError:\n"
        "    out.append('server protected')\n"
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "out.append('ptrace ' + str(libc.ptrace(16, 1, 0, 0) == -1 and ctypes.get_errno()))\n"
        "try:\n"
        "    socket.create_connection(('10.255.255.1', 9), timeout=20); out.append('net open')\n"
        "except OSError as e:\n"
        "    out.append('net closed')\n"
        f"for path in ('/evil-{token}', '/usr/evil-{token}'):\n"
        "    try:\n"
        "        open(path, 'w'); out.append('wrote ' + path)\n"
        "    except OSError:\n"
        "        out.append('refused')\n"
        "out.append('EVALSI_HOSTILE' in ''.join(os.environ))\n"
        "print('\\n'.join(map(str, out)))\n"
    )
    result = stdio_run(program, rung="gvisor", limits=Limits(wall_time=20))
    assert result.stdout.splitlines() == [
        "/etc/shadow hidden",
        "/root hidden",
        "/work/main/pyproject.toml hidden",
        "server protected",
        "ptrace 1",
        "net closed",
        "refused",
        "refused",
        "False",
    ], result
    assert not os.path.exists(f"/evil-{token}") and not os.path.exists(f"/usr/evil-{token}")
    forged = "import os, sys\nprint('PASSED')\nos._exit(0)\ndef add(a, b):\n    return a + b\n"
    params = {"timeout": 10, "min_isolation": "gvisor"}
    assert score(forged, params, tests=SUM_TESTS).value == 0.0
    assert score(forged, params, test_list=ADD_ASSERTS).value == 0.0
    honest = "def add(a, b):\n    return a + b\n"
    assert score(honest, params, test_list=ADD_ASSERTS).value == 1.0
