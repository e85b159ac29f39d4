"""ANTLR's prediction cache (the parser's DFA) kept on disk, so a new worker does not learn it again.

latex2sympy's parser predicts each decision with ANTLR's adaptive prediction, which caches what it works out in
a DFA per decision. A fresh process starts with empty DFAs, and the first parses of each shape of answer cost
several times a warm parse: over a few hundred symbolic comparisons, about half of a cold worker's time is spent
filling this cache, and every worker fills its own.

Here a worker writes the DFA it has built to a file under the user's cache directory (now and then, after a
comparison, outside its CPU budget), and the pool's template process loads it before the workers are forked from
it, so they all start with the predictions earlier processes made. The DFA is a cache of a deterministic
computation: a state loaded here is the state the parser would have built, and the parse trees are the same.

A write re-encodes only the states learnt since the load: the loaded states keep the rows they were read from
(their configurations never change, only their edges do), so a worker's first write after loading the bundled DFA
costs about half of encoding every state again (0.13–0.17 s of CPU instead of 0.30–0.33 s).

The file is plain JSON of integers (never pickle), keyed on the versions of ANTLR and latex2sympy and on the
grammar's serialized ATN; it is written atomically, and a file that is unreadable, for another grammar or
malformed in any way is ignored (the parser then starts with empty DFAs, as it always did).

evalsi ships a DFA of the same format (gzip-compressed, :data:`BUNDLED`), learnt by ``scripts/build_math_dfa.py``
from generated answers of many shapes: when the user's cache directory holds no usable file (a machine's first
run), the template loads that one, so a first run starts with most predictions made. It carries the same key and
is ignored under any other version of ANTLR, latex2sympy or the grammar.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import json
import os
import re
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

FORMAT = 1
"""The file layout's version; part of the key."""
MAX_STATES = 4_000
"""A DFA with more states than this is not written (loading it would cost more than it saves)."""
SAVE_SHARE = 0.1
"""The most of a worker's CPU time spent writing the cache: after a write that took t seconds, the next waits
until the worker has used t / SAVE_SHARE more seconds of CPU (a write costs about 0.15 ms per DFA state)."""
MIN_GROWTH = 16
"""New states since the last write that make a worker write again (a few states cost less to learn again)."""

BUNDLED = Path(__file__).with_name("data") / "antlr-dfa.json.gz"
"""The DFA shipped with evalsi, loaded when the user's cache holds none (rebuilt by ``scripts/build_math_dfa.py``)."""

_HEAD = 256
_STATES = re.compile(rb'^\{"key":"[0-9a-f]{64}","states":(\d{1,9}),')
"""The state count a file written by :meth:`PredictionCache.save` starts with, after its key."""

_NONE, _PREDICATE, _PRECEDENCE = 0, 1, 2
_ERROR = -1
"""An edge to ANTLR's error state (no alternative is viable)."""


class _Skip(Exception):
    """A decision whose DFA holds something this format does not store; it is left out of the file."""


def cache_dir() -> Path:
    """Where evalsi keeps caches: ``$EVALSI_CACHE_DIR``, else ``$XDG_CACHE_HOME/evalsi`` (``~/.cache/evalsi``)."""
    configured = os.environ.get("EVALSI_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "evalsi"


class PredictionCache:
    """Loads and saves the DFA of one ANTLR parser class (latex2sympy's ``PSParser``).

    ``grammar`` (the runtime's and the grammar package's versions, the serialized ATN) keys the file.
    """

    def __init__(self, parser_class: Any, grammar: list[Any], directory: Path, bundled: Path | None = None) -> None:
        self.parser = parser_class
        self.key = hashlib.sha256(json.dumps([FORMAT, *grammar]).encode()).hexdigest()
        self.path = directory / "math-equiv" / f"antlr-dfa-{self.key[:16]}.json"
        self.bundled = bundled
        self.source = ""
        """Where the loaded DFA came from: ``"disk"``, ``"bundled"`` or ``""`` (nothing loaded)."""
        self.saved_states = 0
        self.saved_at = 0.0
        self.save_cost = 0.0
        self.known: _Known | None = None
        """The rows the installed states were read from, reused by :meth:`save` (None before a load)."""

    def states(self) -> int:
        """How many DFA states the parser holds now."""
        return sum(len(dfa._states) for dfa in self.parser.decisionsToDFA)

    def load(self) -> int:
        """Install the saved DFA (else the bundled one) into decisions that have none yet; the states loaded."""
        decoded = self._read(self.path, compressed=False)
        self.source = "disk"
        if decoded is None and self.bundled is not None:
            decoded = self._read(self.bundled, compressed=True)
            self.source = "bundled"
        if decoded is None:
            self.source = ""
            return 0
        loaded = 0
        known = _Known(decoded.entries, decoded.contexts)
        for decision, dfa, contexts, rows in decoded.decisions:
            if not self.parser.decisionsToDFA[decision]._states:
                self.parser.decisionsToDFA[decision] = dfa
                loaded += len(dfa._states)
                for context in contexts:
                    self.parser.sharedContextCache.add(context)
                known.rows.update((id(state), (state, row)) for state, row in rows)
        self.known = known
        self.saved_states = self.states()
        return loaded

    def _read(self, path: Path, compressed: bool) -> _Decoded | None:
        """The decisions saved in ``path`` for this key, or None when it is missing, foreign or malformed.

        The garbage collector is paused meanwhile: decoding allocates some hundred thousand objects, none of them
        garbage, and the collections they would set off cost a third of the load.
        """
        collecting = gc.isenabled()
        gc.disable()
        try:
            body = path.read_bytes()
            data = json.loads(gzip.decompress(body) if compressed else body)
            if not isinstance(data, dict) or data.get("key") != self.key:
                return None
            return _decode(self.parser, data)
        except Exception:  # unreadable, truncated, malformed or for another grammar: start empty, as always
            return None
        finally:
            if collecting:
                gc.enable()

    def save(self) -> bool:
        """Write the parser's DFA (atomically); False when it is too large or cannot be written."""
        from evalsi._util.atomic import atomic_writer

        count = self.states()
        started = time.process_time()
        self.saved_states = count
        try:
            if count > MAX_STATES:
                return False
            body = json.dumps(_encode(self.parser, self.key, known=self.known), separators=(",", ":")).encode()
            with atomic_writer(self.path) as handle:
                handle.write(body)
        except Exception:  # a read-only or full disk: the cache is an optimisation
            return False
        finally:
            self.saved_at = time.process_time()
            self.save_cost = self.saved_at - started
        return True

    def export(self, path: Path, keep: Callable[[Any], bool] | None = None) -> int:
        """Write the parser's DFA to ``path``, gzip-compressed and byte-for-byte reproducible (as :data:`BUNDLED`).

        Args:
            path: The file to write.
            keep: Which DFA states to write (each decision's start states always are); all when None.

        Returns:
            How many DFA states were written.

        """
        data = _encode(self.parser, self.key, keep)
        body = json.dumps(data, separators=(",", ":")).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(body, compresslevel=9, mtime=0))
        return int(data["states"])

    def save_if_grown(self) -> bool:
        """Save when the DFA grew by :data:`MIN_GROWTH` states, keeping to :data:`SAVE_SHARE` of the CPU time.

        Several workers write the same file, the last write replacing the others: a worker whose DFA holds no more
        states than the file does now leaves it alone, so a larger DFA another worker wrote is not replaced by a
        smaller one (the next template loads the largest, and the workers forked from it add to it).
        """
        count = self.states()
        if count < self.saved_states + MIN_GROWTH:
            return False
        if time.process_time() - self.saved_at < self.save_cost / SAVE_SHARE:
            return False
        if count <= self.file_states():
            self.saved_states = count
            return False
        return self.save()

    def file_states(self) -> int:
        """How many DFA states the file on disk holds now, from its first bytes (0 when none or unreadable)."""
        try:
            with self.path.open("rb") as handle:
                head = handle.read(_HEAD)
        except OSError:
            return 0
        found = _STATES.search(head)
        return int(found.group(1)) if found else 0


class _Known:
    """What a load read, for the next write to reuse.

    The context table (its JSON entries and the contexts built from them, in step) and, by ``id``, each installed
    DFA state with the row it was read from.
    """

    def __init__(self, entries: list[Any], contexts: list[Any]) -> None:
        self.entries = entries
        self.contexts = contexts
        self.rows: dict[int, tuple[Any, list[Any]]] = {}


class _Decoded:
    """A file's decoded content.

    Its context table (JSON entries and contexts) and each decision's DFA, with the contexts its states use and
    each state beside the row it was read from.
    """

    def __init__(self, entries: list[Any], contexts: list[Any]) -> None:
        self.entries = entries
        self.contexts = contexts
        self.decisions: list[tuple[int, Any, list[Any], list[tuple[Any, list[Any]]]]] = []


def _encode(
    parser: Any, key: str, keep: Callable[[Any], bool] | None = None, known: _Known | None = None
) -> dict[str, Any]:
    """The parser's DFAs as JSON-ready integers: a shared table of contexts, then each decision's states.

    With ``keep``, only the states it accepts (and each decision's start states) are written, with the edges
    between them: a prediction that reaches a state left out is computed again, as on an empty DFA. With
    ``known``, the loaded context table is written first, as it was read, and a loaded state's row is written as
    it was read (a state's configurations never change once it is in a DFA); only the edges are encoded again.
    """
    from antlr4.atn.ATNSimulator import ATNSimulator
    from antlr4.PredictionContext import PredictionContext, SingletonPredictionContext

    contexts: list[Any] = [None]  # entry 0 is the empty context
    numbered: dict[int, int] = {id(PredictionContext.EMPTY): 0}
    rows: dict[int, tuple[Any, list[Any]]] = {}
    if known is not None:
        contexts = list(known.entries)
        numbered.update((id(context), index) for index, context in enumerate(known.contexts) if index)
        rows = known.rows

    def context_index(context: Any) -> int:
        if context is None:
            return -1
        index = numbered.get(id(context))
        if index is not None:
            return index
        if isinstance(context, SingletonPredictionContext):
            entry: Any = [context.returnState, context_index(context.parentCtx)]
        else:
            entry = [list(context.returnStates), [context_index(parent) for parent in context.parents]]
        numbered[id(context)] = len(contexts)
        contexts.append(entry)
        return len(contexts) - 1

    def semantic(context: Any) -> list[int]:
        from antlr4.atn.SemanticContext import PrecedencePredicate, Predicate, SemanticContext

        if context is SemanticContext.NONE:
            return [_NONE]
        if type(context) is Predicate:
            return [_PREDICATE, context.ruleIndex, context.predIndex, int(context.isCtxDependent)]
        if type(context) is PrecedencePredicate:
            return [_PRECEDENCE, context.precedence]
        raise _Skip

    decisions = []
    for dfa in parser.decisionsToDFA:
        if not dfa._states:
            continue
        try:
            starts = [s for s in (dfa.s0.edges if dfa.precedenceDfa else [dfa.s0]) or () if s is not None]
            if keep is None:
                kept = list(dfa._states)
            else:
                first = {id(s) for s in starts}
                kept = [state for state in dfa._states if id(state) in first or keep(state)]
            order = {id(state): index for index, state in enumerate(kept)}
            states = []
            edges: list[int] = []
            for state in kept:
                reused = rows.get(id(state))
                if reused is not None and reused[0] is state:
                    row = reused[1]
                    states.append([*row[:9], row[9].tolist(), *row[10:]])
                    _edges(state, order, ATNSimulator.ERROR, edges)
                    continue
                configs = state.configs
                flat: list[int] = []
                for config in configs.configs:
                    flat += [config.state.stateNumber, config.alt, context_index(config.context)]
                    flat += [config.reachesIntoOuterContext, int(config.precedenceFilterSuppressed)]
                    flat += semantic(config.semanticContext)
                predicates = None
                if state.predicates is not None:
                    predicates = [[p.alt, *semantic(p.pred)] for p in state.predicates]
                conflicting = sorted(configs.conflictingAlts) if configs.conflictingAlts is not None else None
                states.append(
                    [
                        state.stateNumber,
                        int(state.isAcceptState),
                        state.prediction,
                        int(state.requiresFullContext),
                        int(configs.fullCtx),
                        configs.uniqueAlt,
                        conflicting,
                        int(configs.hasSemanticContext),
                        int(configs.dipsIntoOuterContext),
                        flat,
                        predicates,
                    ]
                )
                _edges(state, order, ATNSimulator.ERROR, edges)
            if dfa.precedenceDfa:
                start: Any = [[p, order[id(s)]] for p, s in enumerate(dfa.s0.edges) if s is not None]
            else:
                start = order[id(dfa.s0)] if dfa.s0 is not None else -1
        except (_Skip, KeyError):
            continue
        decisions.append({"decision": dfa.decision, "states": states, "edges": edges, "start": start})
    total = sum(len(decision["states"]) for decision in decisions)
    return {"key": key, "states": total, "contexts": contexts, "decisions": decisions}


def _edges(state: Any, order: dict[int, int], error: Any, edges: list[int]) -> None:
    """Append ``state``'s edges to states in ``order`` (and to ``error``, ANTLR's error state) to ``edges``."""
    source = order[id(state)]
    for symbol, target in enumerate(state.edges or ()):
        if target is error:
            edges += [source, symbol, _ERROR]
        elif target is not None and id(target) in order:
            edges += [source, symbol, order[id(target)]]


def _integers(values: list[Any], high: int) -> None:
    """Raise ``ValueError`` unless every one of ``values`` is an integer in ``[0, high)`` (checked in bulk)."""
    if values and (not set(map(type, values)) <= {int} or min(values) < 0 or max(values) >= high):
        raise ValueError("a configuration holds something other than an integer in range")


def _int(value: Any, low: int, high: int) -> int:
    """``value`` when it is an integer in ``[low, high)``; raises ``ValueError`` otherwise."""
    if type(value) is not int or not low <= value < high:
        raise ValueError(f"{value!r} is not an integer in [{low}, {high})")
    return value


def _decode(parser: Any, data: dict[str, Any]) -> _Decoded:
    """Each saved decision's DFA, rebuilt and checked against the grammar; raises on anything malformed."""
    from antlr4.atn.ATNConfig import ATNConfig
    from antlr4.atn.ATNConfigSet import ATNConfigSet
    from antlr4.atn.ATNSimulator import ATNSimulator
    from antlr4.atn.SemanticContext import PrecedencePredicate, Predicate, SemanticContext
    from antlr4.dfa.DFA import DFA
    from antlr4.dfa.DFAState import DFAState, PredPrediction
    from antlr4.PredictionContext import ArrayPredictionContext, PredictionContext, SingletonPredictionContext

    atn = parser.atn
    atn_states, new, none = atn.states, ATNConfig.__new__, SemanticContext.NONE
    big = 1 << 31
    contexts: list[Any] = [PredictionContext.EMPTY]
    for entry in data["contexts"][1:]:
        if type(entry[0]) is list:
            returns = [_int(r, 0, big) for r in entry[0]]
            parents = [None if p == -1 else contexts[_int(p, 0, len(contexts))] for p in entry[1]]
            if not returns or len(returns) != len(parents):
                raise ValueError("malformed context")
            contexts.append(ArrayPredictionContext(parents, returns))
        else:
            parent = None if entry[1] == -1 else contexts[_int(entry[1], 0, len(contexts))]
            contexts.append(SingletonPredictionContext(parent, _int(entry[0], 0, big)))
    decoded = _Decoded(data["contexts"], contexts)

    def semantic(flat: list[Any], at: int) -> tuple[Any, int]:
        kind = flat[at]
        if kind == _NONE:
            return SemanticContext.NONE, at + 1
        if kind == _PREDICATE:
            return Predicate(_int(flat[at + 1], 0, big), _int(flat[at + 2], 0, big), bool(flat[at + 3])), at + 4
        if kind == _PRECEDENCE:
            return PrecedencePredicate(_int(flat[at + 1], 0, big)), at + 2
        raise ValueError(f"unknown semantic context {kind!r}")

    for saved in data["decisions"]:
        decision = _int(saved["decision"], 0, len(atn.decisionToState))
        dfa = DFA(atn.decisionToState[decision], decision)
        states: list[Any] = []
        used: dict[int, None] = {}  # the contexts this decision's configurations use, in order of first use
        for number, accept, prediction, full, full_ctx, unique, conflicting, has_sem, dips, flat, preds in saved[
            "states"
        ]:
            configs = ATNConfigSet(fullCtx=bool(full_ctx))
            _integers(flat, big)
            append = configs.configs.append
            at = 0
            while at < len(flat):  # every entry is an integer in [0, big): an index out of range raises IndexError
                config = new(ATNConfig)
                config.state = atn_states[flat[at]]
                config.alt = flat[at + 1]
                used[flat[at + 2]] = None
                config.context = contexts[flat[at + 2]]
                config.reachesIntoOuterContext = flat[at + 3]
                config.precedenceFilterSuppressed = bool(flat[at + 4])
                if flat[at + 5] == _NONE:
                    config.semanticContext = none
                    at += 6
                else:
                    config.semanticContext, at = semantic(flat, at + 5)
                append(config)
            configs.uniqueAlt = _int(unique, 0, big)
            configs.conflictingAlts = None if conflicting is None else {_int(a, 0, big) for a in conflicting}
            configs.hasSemanticContext = bool(has_sem)
            configs.dipsIntoOuterContext = bool(dips)
            configs.setReadonly(True)
            state = DFAState(_int(number, 0, big), configs)
            state.isAcceptState = bool(accept)
            state.prediction = _int(prediction, 0, big)
            state.requiresFullContext = bool(full)
            if preds is not None:
                state.predicates = [PredPrediction(semantic(p, 1)[0], _int(p[0], 0, big)) for p in preds]
            dfa._states[state] = state
            states.append(state)
        if len(dfa._states) != len(states):
            raise ValueError("duplicate DFA states")
        edges = saved["edges"]
        width = atn.maxTokenType + 2
        for at in range(0, len(edges), 3):
            source = states[_int(edges[at], 0, len(states))]
            target = ATNSimulator.ERROR if edges[at + 2] == _ERROR else states[_int(edges[at + 2], 0, len(states))]
            if source.edges is None:
                source.edges = [None] * width
            source.edges[_int(edges[at + 1], 0, width)] = target
        start = saved["start"]
        if dfa.precedenceDfa:
            for precedence, index in start:
                dfa.setPrecedenceStartState(_int(precedence, 0, 1 << 16), states[_int(index, 0, len(states))])
        elif start != -1:
            dfa.s0 = states[_int(start, 0, len(states))]
        # Each row is kept with its configurations packed, 4 bytes an integer rather than an object each: the rows
        # of the shipped DFA take 10 MB, not 26.
        rows = [
            (state, [*row[:9], array("i", row[9]), *row[10:]])
            for state, row in zip(states, saved["states"], strict=True)
        ]
        decoded.decisions.append((decision, dfa, [contexts[index] for index in used], rows))
    return decoded


_cache: PredictionCache | None = None


def load() -> int:
    """Load the saved DFA into latex2sympy's parser (once per process); the states loaded (0 when none).

    Returns:
        How many DFA states were loaded.

    """
    global _cache
    if _cache is not None:
        return 0
    try:
        _cache = installed_cache(cache_dir())
    except Exception:  # latex2sympy or ANTLR missing, or a layout this module does not know
        return 0
    return _cache.load()


def installed_cache(directory: Path) -> PredictionCache:
    """The cache of latex2sympy's installed parser, keyed on the installed versions, with the bundled DFA.

    Args:
        directory: The cache directory its file lives under.

    Returns:
        The cache (nothing loaded yet).

    Raises:
        ImportError: latex2sympy or ANTLR is not installed.

    """
    from importlib.metadata import version

    from latex2sympy2_extended.antlr_parser import PSParser

    grammar = [version("antlr4-python3-runtime"), version("latex2sympy2_extended"), _serialized_atn(PSParser)]
    return PredictionCache(PSParser, grammar, directory, BUNDLED)


def _serialized_atn(parser_class: Any) -> list[int]:
    module = __import__(parser_class.__module__, fromlist=["serializedATN"])
    return list(module.serializedATN())


def save_if_grown() -> None:
    """In a worker, between comparisons: write the DFA when it grew enough since the last write (never raises)."""
    if _cache is not None:
        with contextlib.suppress(Exception):
            _cache.save_if_grown()
