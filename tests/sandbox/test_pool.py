"""The sandbox pool and the warm fork server: spreading, reuse, recycling, recovery, large programs."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from evalsi.sandbox import RUNGS, Case, Limits, Sandbox, SandboxPool

pytestmark = [pytest.mark.sandbox, pytest.mark.timeout(120)]
LIMITS = Limits(wall_time=5)


def test_programs_spread_over_every_sandbox_of_the_pool():
    pool = SandboxPool("namespaced", size=2)
    try:
        programs = ["import time; time.sleep(0.3); print(input())"] * 6
        results = pool.map(lambda p: pool.run(p, [Case("stdio", stdin="hi")], LIMITS), programs)
        assert [r[0].run.stdout for r in results] == ["hi\n"] * 6
        sandboxes = list(pool._idle.queue)
        assert len(sandboxes) == 2 and all(s.alive for s in sandboxes)
        assert sum(s.programs_run for s in sandboxes) == 6
    finally:
        pool.close()


MARKS = "import os\nprint(input(), os.path.exists('mark'))\nopen('mark', 'w').close()\n"
"""Prints its input, and whether an earlier case of the program ran in the same sandbox (its work dir)."""


def test_one_programs_cases_are_split_in_order_over_idle_sandboxes():
    pool = SandboxPool("namespaced", size=2)
    try:
        outcomes = pool.run(MARKS, [Case("stdio", stdin=f"{i}\n") for i in range(5)], LIMITS)
        # two runs of consecutive cases (3 then 2), each in a sandbox of its own, outcomes in the cases' order
        assert [o.run.stdout for o in outcomes] == ["0 False\n", "1 True\n", "2 True\n", "3 False\n", "4 True\n"]
        assert [s.programs_run for s in pool._idle.queue] == [1, 1]
        asserts = [Case("call", payload={"kind": "asserts", "code": f"assert sq({i}) == {i * i}"}) for i in range(6)]
        asserts.append(Case("call", payload={"kind": "asserts", "code": "assert sq(2) == 5"}))
        verdicts = pool.run("def sq(x):\n    return x * x\n", asserts, LIMITS)
        assert [o.verdict is not None and o.verdict["passed"] for o in verdicts] == [True] * 6 + [False]
    finally:
        pool.close()


def test_small_programs_and_full_batches_keep_one_sandbox_per_program():
    pool = SandboxPool("namespaced", size=2)
    try:
        two = pool.run(MARKS, [Case("stdio", stdin="a"), Case("stdio", stdin="b")], LIMITS)
        assert [o.run.stdout for o in two] == ["a False\n", "b True\n"]
        assert sorted(s.programs_run for s in pool._idle.queue) == [0, 1]
        cases = [Case("stdio", stdin=str(i)) for i in range(6)]
        batch = pool.map(lambda p: pool.run(p, cases, LIMITS), [MARKS, MARKS + "# another\n"])
        for outcomes in batch:
            assert [o.run.stdout for o in outcomes] == ["0 False\n"] + [f"{i} True\n" for i in range(1, 6)]
    finally:
        pool.close()


def test_a_share_whose_sandbox_dies_fails_alone_and_the_pool_recovers():
    pool = SandboxPool("namespaced", size=2)
    program = "import os, signal\nn = int(input())\nif n == 0:\n    os.kill(os.getppid(), signal.SIGKILL)\nprint(n)\n"
    try:
        outcomes = pool.run(program, [Case("stdio", stdin=str(i)) for i in range(4)], LIMITS)
        assert [o.run.reason for o in outcomes[:2]] == ["sandbox", "sandbox"]
        assert [o.run.stdout for o in outcomes[2:]] == ["2\n", "3\n"]
        again = pool.run(program, [Case("stdio", stdin=str(i)) for i in range(1, 5)], LIMITS)
        assert [o.run.stdout for o in again] == ["1\n", "2\n", "3\n", "4\n"]
    finally:
        pool.close()


def test_one_sandbox_serves_many_programs_with_a_wiped_work_dir():
    sandbox = Sandbox(RUNGS["namespaced"])
    try:
        first = sandbox.run("open('left', 'w').write('x'); print('ok')", [Case("stdio")], LIMITS)
        second = sandbox.run("import os; print(sorted(os.listdir('.')))", [Case("stdio")], LIMITS)
        assert first[0].run.stdout == "ok\n"
        assert second[0].run.stdout == "[]\n"  # the previous program's files are gone
        assert sandbox.programs_run == 2 and sandbox.alive
    finally:
        sandbox.close()
    assert not sandbox.alive


def test_a_dead_server_is_restarted_for_the_next_program():
    sandbox = Sandbox(RUNGS["namespaced"])
    try:
        killed = sandbox.run("import os, signal; os.kill(os.getppid(), signal.SIGKILL)", [Case("stdio")], LIMITS)
        assert killed[0].run.reason == "sandbox"
        again = sandbox.run("print(6 * 7)", [Case("stdio")], LIMITS)
        assert again[0].run.stdout == "42\n"
    finally:
        sandbox.close()


def test_recycled_after_so_many_programs():
    pool = SandboxPool("namespaced", size=1, recycle_after=2)
    try:
        for _ in range(3):
            assert pool.run("print(1)", [Case("stdio")], LIMITS)[0].run.stdout == "1\n"
        (sandbox,) = list(pool._idle.queue)
        assert sandbox.programs_run == 1  # restarted before the third program
    finally:
        pool.close()


def test_more_call_cases_than_one_message_can_carry():
    sandbox = Sandbox(RUNGS["namespaced"])
    try:
        cases = [Case("call", payload={"kind": "asserts", "code": f"assert sq({i}) == {i * i}"}) for i in range(230)]
        outcomes = sandbox.run("def sq(x):\n    return x * x\n", cases, LIMITS)
        assert len(outcomes) == 230
        assert all(o.verdict is not None and o.verdict["passed"] for o in outcomes)
    finally:
        sandbox.close()


def test_compile_errors_fail_every_case_without_running_anything():
    sandbox = Sandbox(RUNGS["process"])
    try:
        outcomes = sandbox.run("def broken(:\n", [Case("stdio"), Case("stdio")], LIMITS)
        assert [o.run.detail for o in outcomes] == ["compile error"] * 2
        assert "SyntaxError" in outcomes[0].run.stderr
    finally:
        sandbox.close()


def test_a_program_that_locks_its_files_cannot_leave_them_to_the_next():
    sandbox = Sandbox(RUNGS["namespaced"])
    try:
        lock = (
            "import os\n"
            "os.mkdir('locked')\n"
            "open('locked/secret', 'w').write('x')\n"
            "os.chmod('locked', 0)\n"
            "os.chmod('.', 0o500)\n"
        )
        sandbox.run(lock, [Case("stdio")], LIMITS)
        after = sandbox.run("import os; print(sorted(os.listdir('.')))", [Case("stdio")], LIMITS)
        assert after[0].run.stdout == "[]\n"
    finally:
        sandbox.close()


def test_a_sandbox_left_open_gives_its_slot_back_quietly_when_dropped_and_at_exit():
    from evalsi.sandbox import _host

    sandbox = Sandbox(RUNGS["namespaced"])
    slot = sandbox.slot
    assert slot in _host._slots_in_use
    del sandbox
    gc.collect()
    assert slot not in _host._slots_in_use
    program = (
        "from evalsi.sandbox import RUNGS, Case, Limits, Sandbox\n"
        "kept = Sandbox(RUNGS['namespaced'])\n"
        "print(kept.run('print(1)', [Case('stdio')], Limits(wall_time=5))[0].run.stdout, end='')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    assert "Exception ignored" not in done.stderr and "Error" not in done.stderr, done.stderr
