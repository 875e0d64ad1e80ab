"""The compiled progressive filling (simulate/fill_jit.py) gives max_min_rates' floats bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.simulate import fill_jit
from forestcoll.simulate.engine import ProgramBuilder, _ComponentShares, max_min_rates, run

CAPS = [1.0, 1 + 1e-10, 2.5, 3.0, 3 - 1e-10, 1e9, 25e9, 100e9 / 3, 7.0, 0.0]
WEIGHTS = [1.0, 2.0, 3.0, 11.0, 1e6, 1048576.0 * 5, 1 / 3, 1e-13]


def _csr(paths: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(paths) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in paths], out=ptr[1:])
    return ptr, np.asarray([i for p in paths for i in p], dtype=np.int64)


@st.composite
def _cases(draw):
    nlinks = draw(st.integers(1, 10))
    caps = draw(st.lists(st.sampled_from(CAPS), min_size=nlinks, max_size=nlinks))
    paths = draw(st.lists(st.lists(st.integers(0, nlinks - 1), min_size=0, max_size=4, unique=True),
                          min_size=1, max_size=30))
    active = draw(st.lists(st.integers(0, len(paths) - 1), min_size=1, max_size=len(paths), unique=True))
    weights = draw(st.lists(st.sampled_from(WEIGHTS), min_size=len(active), max_size=len(active)))
    counts = draw(st.lists(st.integers(1, 5), min_size=len(active), max_size=len(active)))
    return caps, paths, active, [w * k for w, k in zip(weights, counts)]


def _both(fn, case) -> tuple[bytes, bytes]:
    caps, paths, active, weights = case
    ptr, idx = _csr(paths)
    args = (ptr, idx, np.asarray(active, dtype=np.int64), np.asarray(weights, dtype=float), np.asarray(caps, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return max_min_rates(*args).tobytes(), fn(*args).tobytes()


@settings(max_examples=400, deadline=None)
@given(case=_cases())
def test_the_scalar_filling_gives_the_same_floats(case):
    # the loops as plain Python (no compiler): numpy's operations in numpy's order; near-ties (1e-10), links of
    # capacity 0, flows without links, tiny weights (below the load floor) included
    want, got = _both(fill_jit.fill, case)
    assert got == want


@settings(max_examples=400, deadline=None)
@given(case=_cases())
def test_the_compiled_filling_gives_the_same_floats(case):
    jit = fill_jit.compiled()
    if jit is None:
        pytest.skip("numba is not installed (or FORESTCOLL_JIT=0): the engine uses numpy")
    want, got = _both(jit, case)
    assert got == want


def _ring_program(n: int, rounds: int) -> tuple[object, np.ndarray]:
    """A program whose active classes form one component of more than SMALL_COMPONENT classes: each of n flows
    crosses links i and i+1 of a ring, in rounds of different sizes, so filling takes many levels."""
    prog = ProgramBuilder()
    last: list[int | None] = [None] * n
    for r in range(rounds):
        for i in range(n):
            last[i] = prog.transfer((i, (i + 1) % n), 1e6 * (1 + (i * 7 + r) % 5), 1e-6, after_sent=[last[i]],
                                    stream=(i, r % 3))
    caps = np.asarray([25e9 * (1 + (i % 4)) for i in range(n)])
    return prog.build("weighted"), caps


def test_the_engine_gives_the_same_times_with_and_without_the_compiled_filling(monkeypatch):
    monkeypatch.setattr(fill_jit, "PAYBACK_S", 0.0)  # compiled from the first large solve
    program, caps = _ring_program(40, 6)
    with_jit = run(program, caps)
    monkeypatch.setattr(fill_jit, "compiled", lambda: None)
    without = run(program, caps)
    assert with_jit.time.hex() == without.time.hex()
    assert with_jit.delivered.tobytes() == without.delivered.tobytes()
    assert with_jit.sent.tobytes() == without.sent.tobytes()


def test_large_components_use_the_compiled_filling(monkeypatch):
    # the engine hands components above SMALL_COMPONENT classes to the compiled solver when there is one
    calls = []

    def spy(*args):
        calls.append(len(args[2]))
        return max_min_rates(*args)
    monkeypatch.setattr(fill_jit, "compiled", lambda: spy)
    monkeypatch.setattr(fill_jit, "PAYBACK_S", 0.0)
    program, caps = _ring_program(40, 2)
    run(program, caps)
    assert calls and max(calls) > 24
    shares = _ComponentShares(program, caps, max_min_rates)
    assert shares.fast is None  # looked up at the first large solve only


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("FORESTCOLL_JIT", "0")
    monkeypatch.setattr(fill_jit, "_state", {})
    assert fill_jit.compiled() is None


def test_a_compiler_that_fails_leaves_the_engine_on_numpy(monkeypatch):
    numba = pytest.importorskip("numba")

    def broken(**_kw):
        def wrap(fn):
            def fails(*_a):
                raise RuntimeError("cannot cache function: no locator available")
            return fails
        return wrap
    monkeypatch.setattr(numba, "njit", broken)
    monkeypatch.setattr(fill_jit, "_state", {})
    monkeypatch.delenv("FORESTCOLL_JIT", raising=False)
    assert fill_jit.compiled() is None
    program, caps = _ring_program(40, 2)
    assert run(program, caps).time > 0


def test_numba_waits_until_the_numpy_solves_have_cost_its_import(monkeypatch):
    """audit18: the README's `simulate` of dgx-a100:nodes=2 imported numba (~0.4 s CPU) to save ~1 ms of 28 solves;
    now the large solves run on numpy until they have cost PAYBACK_S in this process, then compiled, same floats."""
    calls = []

    def spy(*args):
        calls.append(1)
        return max_min_rates(*args)
    monkeypatch.setattr(fill_jit, "compiled", lambda: spy)
    monkeypatch.setattr(fill_jit, "_state", {})
    monkeypatch.setattr(fill_jit, "_spent", [0.0])
    program, caps = _ring_program(40, 2)
    monkeypatch.setattr(fill_jit, "PAYBACK_S", 1e9)
    on_numpy = run(program, caps)
    assert not calls and fill_jit._spent[0] > 0  # numpy, timed
    monkeypatch.setattr(fill_jit, "PAYBACK_S", fill_jit._spent[0] / 2)  # paid back halfway through the same run
    switched = run(program, caps)
    assert calls
    assert on_numpy.time.hex() == switched.time.hex() and on_numpy.delivered.tobytes() == switched.delivered.tobytes()


def test_a_small_simulation_does_not_import_numba(tmp_path):
    import subprocess
    import sys

    code = ("import sys, io, contextlib\nfrom forestcoll.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main(['generate', 'dgx-a100:nodes=2', '-o', {str(tmp_path / 's.json')!r}]) == 0\n"
            f"    assert main(['simulate', {str(tmp_path / 's.json')!r}]) == 0\n"
            "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "FORESTCOLL_JIT": "1"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"
