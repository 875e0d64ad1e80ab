"""The buffers an interpreted MSCCL run works on (:mod:`forestcoll.msccl.interpreter`): inputs of small integers
(exact in every dtype), outputs and scratch blank (NaN, or a sentinel for integer types), and the check of the
outputs against the collective computed directly: concatenation for allgather, the reduction for allreduce, and
so on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from forestcoll.errors import UsageError
from forestcoll.msccl.ir import RECVS, SENDS, Algo
from forestcoll.msccl.run_result import RunResult
from forestcoll.msccl.semantics import buffer_sizes

__all__ = ["OPS", "Memory", "allocate", "check_outputs"]

OPS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_INT_SENTINEL = -99


def _fill(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, op: str, ngpus: int) -> np.ndarray:
    if op == "prod":
        return rng.choice(np.array([-1, 1], dtype=dtype), size=shape)
    if op in ("max", "min"):
        return rng.integers(0, 100, size=shape).astype(dtype)
    top = 3
    limit = {"float16": 2048, "int8": 127}.get(dtype)
    if limit is not None:
        top = max(1, min(3, limit // max(ngpus, 1)))
    return rng.integers(0, top + 1, size=shape).astype(dtype)


def _blank(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype.startswith("float"):
        return np.full(shape, np.nan, dtype=dtype)
    return np.full(shape, _INT_SENTINEL, dtype=dtype)


@dataclass
class Memory:
    """An interpreted run's buffers: the inputs it started from, each rank's views, and where each view lives."""

    inputs: list[np.ndarray]  # initial inputs (copies), per rank
    bufs: list[dict[str, np.ndarray]]  # i / o / s views per rank
    alias: list[dict[str, tuple[str, int]]]  # buffer -> (memory it lives in, first row there), per rank


def allocate(algo: Algo, mode: str, chunk: int, dtype: str, op: str, seed: int) -> Memory:
    """``algo``'s buffers for a ``mode`` call of ``chunk`` elements per chunk: inputs of small integers from
    ``seed`` (exact under ``op`` in ``dtype``), outputs and scratch blank, in-place views as the runtime aliases them."""
    rng = np.random.default_rng(seed)
    n_in, n_out = buffer_sizes(algo)
    g = algo.ngpus
    inputs, bufs, alias = [], [], []
    for r, gpu in enumerate(algo.gpus):
        data = _fill(rng, (n_in, chunk), dtype, op, g)
        scratch = _blank((max(gpu.s_chunks, 0), chunk), dtype)
        where = {"i": ("i", 0), "o": ("o", 0), "s": ("s", 0)}
        if mode == "out-of-place":
            i = data.copy()
            o = _blank((n_out, chunk), dtype)
        elif algo.coll == "allgather":
            o = _blank((n_out, chunk), dtype)
            i = o[r * n_in:(r + 1) * n_in]
            i[...] = data
            where.update(i=("o", r * n_in))
        elif algo.coll == "reducescatter":
            i = data.copy()
            o = i[r * n_out:(r + 1) * n_out]
            where.update(o=("i", r * n_out))
        else:
            i = data.copy()
            o = i
            where.update(o=("i", 0))
        inputs.append(data)
        bufs.append({"i": i, "o": o, "s": scratch})
        alias.append(where)
    return Memory(inputs, bufs, alias)


def _reference(inputs: list[np.ndarray], op: str) -> np.ndarray:
    stacked = np.stack(inputs)
    return OPS[op].reduce(stacked, axis=0)


def _first_difference(got: np.ndarray, want: np.ndarray) -> tuple[int, int, Any, Any] | None:
    same = (got == want) | (np.isnan(got) & np.isnan(want) if got.dtype.kind == "f" else False)
    if bool(np.all(same)):
        return None
    row, col = np.argwhere(~same)[0]
    return int(row), int(col), got[row, col], want[row, col]


def _infer_root(algo: Algo, types: frozenset[str]) -> list[int]:
    return [r for r, gpu in enumerate(algo.gpus) if not any(st.type in types for tb in gpu.tbs for st in tb.steps)]


def check_outputs(algo: Algo, mem: Memory, mode: str, op: str, root: int | None, result: RunResult) -> None:
    """Compare the outputs in ``mem`` with ``algo``'s collective computed directly from its inputs (and, out of place,
    the inputs with what they were), adding an error to ``result`` per wrong rank."""
    g = algo.ngpus
    n_in, n_out = buffer_sizes(algo)
    outs = [b["o"] for b in mem.bufs]
    expect: dict[int, np.ndarray] = {}
    coll = algo.coll
    if coll == "allgather":
        full = np.concatenate(mem.inputs)
        expect = {r: full for r in range(g)}
    elif coll == "allreduce":
        red = _reference(mem.inputs, op)
        expect = {r: red for r in range(g)}
    elif coll == "reducescatter":
        red = _reference(mem.inputs, op)
        expect = {r: red[r * n_out:(r + 1) * n_out] for r in range(g)}
    elif coll == "alltoall":
        blk = n_in // g
        expect = {r: np.concatenate([mem.inputs[j][r * blk:(r + 1) * blk] for j in range(g)]) for r in range(g)}
    elif coll in ("broadcast", "reduce"):
        if root is None:
            cands = _infer_root(algo, RECVS if coll == "broadcast" else SENDS)
            if len(cands) != 1:
                result.errors.append(f"cannot tell the {coll} root from the file (candidates: {cands or 'none'}); pass --root")
                return
            root = cands[0]
        if not 0 <= root < g:
            raise UsageError(f"root {root} is not a gpu of this {g}-gpu algorithm")
        result.root = root
        if coll == "broadcast":
            expect = {r: mem.inputs[root] for r in range(g)}
        else:
            expect = {root: _reference(mem.inputs, op)}
    else:
        return
    result.checked = True
    for r in sorted(expect):
        diff = _first_difference(outs[r], expect[r])
        if diff is not None:
            row, col, got, want = diff
            never = " (never written)" if (isinstance(got, float | np.floating) and np.isnan(got)) or got == _INT_SENTINEL else ""
            bad = int(np.sum(outs[r] != expect[r]))
            result.errors.append(f"gpu {r} output chunk {row} element {col}: got {got}, expected {want}{never}; "
                                 f"{bad} of {outs[r].size} output elements wrong")
    if mode == "out-of-place":
        for r, b in enumerate(mem.bufs):
            diff = _first_difference(b["i"], mem.inputs[r])
            if diff is not None:
                result.errors.append(f"gpu {r} overwrote its input buffer (chunk {diff[0]}) in an out-of-place call")
