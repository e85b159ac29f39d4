"""Pathological answers never hang or exhaust a batch: every test here is bounded by pytest-timeout only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from evalsi.evaluators import Score, ScoreContext, get_evaluator
from evalsi.evaluators.rl.math_equiv import MathEquiv
from evalsi.evaluators.rl.math_equiv._pool import shared_pool
from evalsi.records import Record

CTX = ScoreContext(component="math")


@pytest.fixture(scope="module")
def math_equiv() -> Iterator[MathEquiv]:
    evaluator = get_evaluator("math-equiv")
    assert isinstance(evaluator, MathEquiv)
    yield evaluator
    evaluator.close()


def batch(evaluator: MathEquiv, pairs: list[tuple[str, str]], **params: object) -> list[Score]:
    records = [Record(completion=completion, reference=reference) for completion, reference in pairs]
    return evaluator.score_batch(records, evaluator.parse_params(params), CTX)


@pytest.mark.timeout(240)  # the module's first batch also starts the worker pool (imports and warm-up)
def test_huge_powers_are_refused_and_slow_answers_time_out(math_equiv: MathEquiv) -> None:
    scores = batch(
        math_equiv,
        [
            ("\\boxed{2^{2^{2^{30}}}}", "5"),
            ("\\boxed{10^{10^{10}}}", "7"),
            ("So the answer is 10^(10^10).", "7"),
            ("\\boxed{(1000000!)^{1000000!}}", "5"),
        ],
        timeout=1,
    )
    for result in scores:
        assert (result.status, result.value) == ("ok", False)
    for result in scores[:3]:
        assert "holds a power of about 10^" in (result.reason or "")
    assert "timed out after 1s" in (scores[3].reason or "")  # (10^6!)^(10^6!) has no bounded evaluation


@pytest.mark.timeout(60)
def test_a_timed_out_worker_is_replaced_and_the_batch_completes(math_equiv: MathEquiv) -> None:
    pairs = [
        ("\\boxed{(1000000!)^{1000000!}}", "3"),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1"),
        ("\\boxed{(1200000!)^{1200000!}}", "x"),
        ("\\boxed{\\frac{1}{\\sqrt{3}}}", "\\frac{\\sqrt{3}}{3}"),
    ]
    scores = batch(math_equiv, pairs, timeout=1)
    assert [s.value for s in scores] == [False, True, True, False, True]
    # After the kills, the pool still serves comparisons.
    assert batch(math_equiv, [("\\boxed{\\sqrt{12}}", "2\\sqrt{3}")], timeout=1)[0].value is True


@pytest.mark.timeout(60)
def test_a_timed_out_answer_is_memoised(math_equiv: MathEquiv) -> None:
    params = math_equiv.parse_params({"timeout": 0.5})
    pair = [("\\boxed{(1100000!)^{1100000!}}", "1")]
    first = batch(math_equiv, pair, timeout=0.5)[0]
    assert "timed out" in (first.reason or "")
    assert math_equiv.judge(params).memo.get(("1", "(1100000!)^{1100000!}")) is not None


@pytest.mark.timeout(30)
def test_deep_nesting_is_refused_before_parsing(math_equiv: MathEquiv) -> None:
    deep_parens = "(" * 5000 + "1" + ")" * 5000
    deep_braces = "{" * 5000 + "1" + "}" * 5000
    deep_frac = "\\frac{1}{" * 2000 + "2" + "}" * 2000
    scores = batch(
        math_equiv,
        [(f"\\boxed{{{deep_parens}}}", "1"), (f"\\boxed{{{deep_braces}}}", "1"), (f"\\boxed{{{deep_frac}}}", "1")],
        max_answer_chars=100_000,
    )
    for result in scores:
        assert (result.status, result.value) == ("ok", False)
        assert "nested" in (result.reason or "")


@pytest.mark.timeout(30)
def test_megabyte_strings(math_equiv: MathEquiv) -> None:
    megabyte_answer = "\\boxed{" + "9" * 1_000_000 + "}"
    filler = "lorem ipsum " * 90_000  # about a megabyte without an answer
    scores = batch(
        math_equiv,
        [
            (megabyte_answer, "9"),
            (filler, "4"),
            (filler + " so the answer is \\boxed{4}", "4"),
            ("{" * 1_000_000, "1"),
            ("\\boxed{" * 200_000, "1"),
        ],
    )
    assert (scores[0].value, scores[1].value, scores[2].value) == (False, False, True)
    assert "characters long" in (scores[0].reason or "")
    assert scores[2].details is not None and scores[2].details["truncated"] is True
    assert all(s.status == "ok" and s.value is False for s in scores[3:])


@pytest.mark.timeout(60)
def test_huge_reference_is_refused_not_parsed(math_equiv: MathEquiv) -> None:
    result = batch(math_equiv, [("\\boxed{x}", "x+" * 5000 + "1")])[0]
    assert (result.status, result.value) == ("ok", False)
    assert "reference is" in (result.reason or "")


@pytest.mark.timeout(120)
def test_scoring_from_many_threads(math_equiv: MathEquiv) -> None:
    pairs = [
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
        ("#### 41", "42"),
        ("\\boxed{(x-2)(x+2)}", "x^2-4"),
        ("\\boxed{1300000!}", "1"),
    ]
    barrier = threading.Barrier(4)

    def work(offset: int) -> list[bool | float | None]:
        barrier.wait()
        shifted = [(c, r) for c, r in pairs[offset:] + pairs[:offset]]
        return [s.value for s in batch(math_equiv, shifted, timeout=1, rel_tol=offset * 1e-12)]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    expected = [True, False, True, False]
    for offset, values in enumerate(results):
        assert values == expected[offset:] + expected[:offset]


@pytest.mark.timeout(60)
def test_a_dead_worker_is_an_error_not_a_verdict(math_equiv: MathEquiv) -> None:
    params = math_equiv.parse_params({})
    judge = math_equiv.judge(params)
    future = shared_pool(params.workers, params.worker_memory_mb).submit(os._exit, (3,), timeout=5)
    same, note = judge._collect(future)
    assert same is None
    assert "worker failed" in note
    # and the pool keeps working afterwards
    assert batch(math_equiv, [("\\boxed{\\sqrt{4}}", "2")])[0].value is True


@pytest.mark.timeout(60)
def test_close_stops_workers_and_scoring_restarts_them() -> None:
    evaluator = MathEquiv()
    params = evaluator.parse_params({"workers": 1})
    record = Record(completion="\\boxed{\\sqrt{9}}", reference="3")
    assert evaluator.score(record, params, CTX).value is True
    pool = shared_pool(1, params.worker_memory_mb)
    assert pool._pool is not None and pool._pool.active
    evaluator.close()
    assert pool._pool is None
    assert evaluator.score(record, params, CTX).value is True
    evaluator.close()


def test_missing_backend_is_an_error_with_the_install_hint(
    math_equiv: MathEquiv, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evalsi.evaluators.rl.math_equiv import _decide

    monkeypatch.setitem(_decide._backends, "sympy", "missing")
    evaluator = MathEquiv()
    result = batch(evaluator, [("\\boxed{2\\sqrt{2}}", "\\sqrt{8}")], backend="sympy")[0]
    assert result.status == "error"
    assert "evalsi[math]" in (result.reason or "")
    # decided cases do not need the backend
    assert batch(evaluator, [("\\boxed{0.5}", "1/2")], backend="sympy")[0].value is True


@pytest.mark.timeout(240)  # two template starts (imports and warm-up), each tens of seconds on a busy machine
def test_a_dead_template_is_restarted(math_equiv: MathEquiv) -> None:
    import signal

    from evalsi.evaluators.rl.math_equiv import _pool

    assert batch(math_equiv, [("\\boxed{\\sqrt{16}}", "4")])[0].value is True
    template = _pool._server._forkserver_pid  # type: ignore[attr-defined]
    assert template is not None
    os.kill(template, signal.SIGKILL)
    # A timeout kills a worker; its replacement must come from a new template.
    scores = batch(math_equiv, [("\\boxed{1400000!}", "2"), ("\\boxed{\\sqrt{25}}", "5")], timeout=1)
    assert [s.value for s in scores] == [False, True]
    assert batch(math_equiv, [("\\boxed{(x+2)(x-2)}", "x^2-4")], timeout=1)[0].value is True


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie (our reaper may be a PID 1 that does not reap)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.timeout(90)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_scoring_process_leaves_no_workers_behind() -> None:
    script = textwrap.dedent(
        """
        import sys, threading
        from evalsi.evaluators import ScoreContext, get_evaluator
        from evalsi.records import Record
        from evalsi.evaluators.rl.math_equiv import _pool
        m = get_evaluator("math-equiv")
        params = m.parse_params({"timeout": 60})
        print(m.score(Record(completion="\\\\boxed{\\\\sqrt{4}}", reference="2"), params, ScoreContext()).value)
        template = _pool._server._forkserver_pid
        print(template, flush=True)
        # keep a worker busy on a runaway comparison, then wait to be killed
        threading.Thread(target=m.score, args=(Record(completion="\\\\boxed{3000000!}", reference="1"),
                         params, ScoreContext()), daemon=True).start()
        sys.stdin.read()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "True"
        template = int(child.stdout.readline())
        workers: set[int] = set()
        while len(workers) < 1:  # the pool's workers are the template's children
            for task in os.listdir(f"/proc/{template}/task"):
                with open(f"/proc/{template}/task/{task}/children") as children:
                    workers |= {int(pid) for pid in children.read().split()}
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
    while _alive(template) or any(_alive(pid) for pid in workers):
        time.sleep(0.1)  # bounded by the test's timeout: they must all go


@pytest.mark.timeout(90)
def test_spawn_fallback_for_other_pythons(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    from evalsi.evaluators.rl.math_equiv import _pool
    from evalsi.evaluators.rl.math_equiv._symbolic import compare

    monkeypatch.setattr(_pool, "_mp_context", lambda: multiprocessing.get_context("spawn"))
    pool = _pool.SymbolicPool(1, 2048)
    try:
        verdict = pool.submit(compare, ("math-verify", "\\sqrt{8}", "2\\sqrt{2}", 6), 30).result()
        assert verdict == (True, "exact (40 digits)")
        with pytest.raises(TimeoutError):
            pool.submit(compare, ("math-verify", "1", "9^{9^{9^{9}}}", 6), 1).result()
        assert pool.submit(compare, ("sympy", "x^2-1", "(x-1)(x+1)", 6), 30).result()[0] is True
    finally:
        pool.close()


def spin_python(seconds: float) -> str:
    """Burn CPU in Python bytecode for ``seconds`` of this process's CPU time (a comparison that overruns)."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
    return "finished"


@pytest.mark.timeout(120)
def test_the_budget_is_cpu_time_so_a_busy_machine_does_not_change_a_verdict() -> None:
    from evalsi.evaluators.rl.math_equiv import _pool

    pool = _pool.SymbolicPool(1, 2048)
    try:
        # Waiting (a worker starved of CPU by a busy machine) spends wall time, not CPU time: within budget.
        assert pool.submit(time.sleep, (2.0,), 0.5).result() is None
        # Spending the CPU time is over budget, and told apart from a worker that failed.
        with pytest.raises(TimeoutError, match=r"0\.5s of CPU time"):
            pool.submit(spin_python, (30.0,), 0.5).result()
        # The worker that ran over is still usable.
        assert pool.submit(spin_python, (0.01,), 5).result() == "finished"
    finally:
        pool.close()
