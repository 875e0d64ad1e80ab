"""Progressive filling compiled (numba): :func:`forestcoll.simulate.engine.max_min_rates`' floats, bit for bit.

The engine solves a large component of active classes (more than ``SMALL_COMPONENT``) with ``max_min_rates``:
about 15 numpy calls per filling level, ~55 levels a solve on the 128-GPU files (~0.75 ms a solve, numpy's
per-call floor).  :func:`fill` is the same progressive filling as scalar loops, compiled by numba when it is
installed: the same floating-point operations on the same values in the same order, so the same rates bit for
bit (tests/test_simulate_fill_jit.py holds it to ``max_min_rates``), ~7x faster a solve.  Why each operation
matches numpy's:

* loads: ``np.bincount(links, weights)`` adds the entries' weights to 0.0 in entry order; entries are laid out
  flow by flow, so adding flow by flow, each flow's links in order, is the same sums;
* each level: ``cap / load`` where ``load > floor`` (else inf), the level its minimum (NaN wins, as in numpy's
  ``min``), a link full when its share is at most ``level * (1 + 1e-9)``, a flow frozen when one of its links
  is full, its rate ``weight * level``;
* the frozen flows' weights are summed per link in entry order (ascending flow, then its links: ``bincount`` of
  the entries gone), ``cap - removed * level`` clamped at 0 as ``np.maximum(cap, 0)`` (NaN kept), ``load -
  removed``; a link no frozen flow crosses is left alone, as ``x - 0.0 * level`` and ``x - 0.0`` leave it.

``FORESTCOLL_JIT=0`` in the environment, or no numba, leaves the engine on numpy (:func:`compiled` returns None).

numba is imported only once it pays (:class:`Filling`): importing it and loading the cached compiled code cost
~0.4 s CPU, while a large solve on numpy costs 0.02-0.03 ms on 16-32 GPU fabrics (the README's ``simulate`` of
dgx-a100:nodes=2 solves 28 large components: 1 ms) and ~0.75 ms on the 128-GPU files.  So the engine solves on
numpy until this process has spent ``PAYBACK_S`` in large numpy solves, then switches (the rent-or-buy rule: at
most ~2x the better choice's cost); the rates are the same floats either way, so the switch changes no output.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np

__all__ = ["PAYBACK_S", "Filling", "compiled", "fill"]

_TOL = 1e-9  # the engine's: shares within this (relative) of the level fill together
_state: dict[str, Callable | None] = {}
PAYBACK_S = 0.4  # seconds of large numpy solves in this process before numba is imported (about what importing costs)
_spent = [0.0]  # seconds this process has spent in large numpy solves so far


def fill(ptr: np.ndarray, idx: np.ndarray, active: np.ndarray, weight: np.ndarray,
         capacity: np.ndarray) -> np.ndarray:
    """``max_min_rates(ptr, idx, active, weight, capacity)`` as scalar loops (int64 ``ptr``, ``idx``, ``active``;
    float64 ``weight``, ``capacity``): the rates of the active flows, the same floats."""
    nf = len(active)
    nl = len(capacity)
    rates = np.full(nf, np.inf)
    first = np.zeros(nf + 1, np.int64)  # the flows' entries, flow by flow
    for f in range(nf):
        a = active[f]
        first[f + 1] = first[f] + (ptr[a + 1] - ptr[a])
    total = first[nf]
    if total == 0:
        return rates
    links = np.empty(total, np.int64)
    load = np.zeros(nl)
    for f in range(nf):
        start, w = ptr[active[f]] - first[f], weight[f]
        for e in range(first[f], first[f + 1]):
            links[e] = idx[start + e]
            load[links[e]] += w
    cap = np.empty(nl)
    for i in range(nl):
        cap[i] = capacity[i]
    on = np.zeros(nl + 1, np.int64)  # link -> its flows (CSR over the entries)
    for e in range(total):
        on[links[e] + 1] += 1
    for i in range(nl):
        on[i + 1] += on[i]
    at = on[:nl].copy()
    flows = np.empty(total, np.int64)
    for f in range(nf):
        for e in range(first[f], first[f + 1]):
            flows[at[links[e]]] = f
            at[links[e]] += 1
    most = weight[0]
    for f in range(1, nf):
        if weight[f] > most:
            most = weight[f]
    floor = 1e-12 * (1.0 if 1.0 > most else most)  # numpy's: 1e-12 * max(float(weight.max()), 1.0)
    share = np.empty(nl)
    state = np.zeros(nf, np.int8)  # 0 unfrozen, 1 frozen at this level, 2 frozen before
    removed = np.zeros(nl)
    touched = np.zeros(nl, np.bool_)
    grow = 1 + _TOL
    while total:
        level = np.inf
        for i in range(nl):
            x = load[i]
            if x > floor:
                y = cap[i] / x
                share[i] = y
                if y < level or y != y:
                    level = y
            else:
                share[i] = np.inf
        if not np.isfinite(level):
            break
        limit = level * grow
        for i in range(nl):
            if share[i] <= limit:
                for j in range(on[i], on[i + 1]):
                    if state[flows[j]] == 0:
                        state[flows[j]] = 1
        for f in range(nf):
            if state[f] == 1:
                state[f] = 2
                w = weight[f]
                rates[f] = w * level
                for e in range(first[f], first[f + 1]):
                    removed[links[e]] += w
                    touched[links[e]] = True
                total -= first[f + 1] - first[f]
        for i in range(nl):
            if touched[i]:
                r = removed[i]
                c = cap[i] - r * level
                cap[i] = c if (c >= 0.0 or c != c) else 0.0
                load[i] -= r
                removed[i] = 0.0
                touched[i] = False
    return rates


def compiled() -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None:
    """:func:`fill` compiled by numba (cached on disk beside this module, or in numba's user cache when that is
    read-only; not cached when neither can be written), or None without numba, with ``FORESTCOLL_JIT=0``, or when
    it does not compile: the engine then stays on numpy, with the same results.  Decided once per process."""
    if "fill" not in _state:
        _state["fill"] = None
        if os.environ.get("FORESTCOLL_JIT", "1") != "0":
            try:
                import numba
            except ImportError:
                return None
            for cache in (True, False):
                jit = numba.njit(cache=cache, nogil=True)(fill)
                try:  # compiles now, for the engine's argument types (int64 CSR and ids, float64 weights, capacities)
                    one = np.zeros(1, dtype=np.int64)
                    jit(np.arange(2, dtype=np.int64), one, one, np.ones(1), np.ones(1))
                except Exception:  # an accelerator that fails leaves the engine on numpy, never the run
                    continue
                _state["fill"] = jit
                break
    return _state["fill"]


class Filling:
    """One engine's solver of large components: ``share_fn`` (numpy's ``max_min_rates``) until this process has spent
    ``PAYBACK_S`` in such solves or has compiled :func:`fill` already, then :func:`compiled` when there is one (the same
    floats; decided once per engine from then on)."""

    def __init__(self, share_fn: Callable[..., np.ndarray], capacity: np.ndarray) -> None:
        self.share_fn, self.capacity = share_fn, capacity
        self.fn: Callable[..., np.ndarray] | None = None  # None: still on numpy, timing it
        self.cap = capacity

    def __call__(self, ptr: np.ndarray, idx: np.ndarray, active: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """The rates of the ``active`` classes of weights ``weight`` (``max_min_rates``' contract)."""
        fn = self.fn
        if fn is None:
            if "fill" not in _state and _spent[0] < PAYBACK_S:
                t0 = time.perf_counter()
                rates = self.share_fn(ptr, idx, active, weight, self.capacity)
                _spent[0] += time.perf_counter() - t0
                return rates
            jit = compiled()
            if jit is None:
                self.fn = fn = self.share_fn
            else:
                self.fn, self.cap = fn, _ = jit, np.ascontiguousarray(self.capacity, dtype=np.float64)
        return fn(ptr, idx, active, weight, self.cap)
