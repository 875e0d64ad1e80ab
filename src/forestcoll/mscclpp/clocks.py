"""Vector clocks of the MSCCL++ interpreter's race detector, in two representations with the same values.

A clock maps every agent (thread block, port-channel proxy, host) to the last segment of it that the clock's owner
is ordered after.  The detector only joins clocks (element-wise maximum), reads and raises single entries, and
gathers the entries of the agents that last touched the bytes an access touches; both classes here offer exactly
those operations, so the detector computes the same numbers with either:

* :class:`DenseClock` - one int32 array per clock, as long as the agents (the reference: what the detector held
  through session 19).  Memory: clocks x agents x 4 bytes, the square of the plan.
* :class:`SharedClock` - the same vector cut into fixed-size *parts* (``part`` entries each, a power of two near
  the square root of the agents); clocks share parts by reference and copy one only when they change an entry of
  it (copy on write).  A join compares part identities first (one vectorised comparison of two int64 arrays) and
  touches only the parts that differ; when the other clock's part already dominates, it is shared instead of
  copied.  Knowledge travels along the plan's synchronisation chains, so most parts of most clocks are shared:
  a clock costs ~17 bytes per part plus the parts it alone holds.

Frozen clocks (what a signal, a semaphore release, a barrier or a kernel start carries) are read-only snapshots:
:meth:`Backend.freeze`.
"""

from __future__ import annotations

import hashlib
import weakref

import numpy as np

from forestcoll.mscclpp.state import Interner

__all__ = ["BACKENDS", "Backend", "Clock", "DenseClock", "SharedClock", "backend", "part_size"]


class DenseClock:
    """One int32 entry per agent in a numpy array (read-only, possibly narrowed to uint8 / uint16, when frozen)."""

    __slots__ = ("v", "__weakref__")

    def __init__(self, v: np.ndarray) -> None:
        self.v = v

    def copy(self) -> DenseClock:
        """A writable int32 copy."""
        return DenseClock(self.v.astype(np.int32))

    def join(self, other: Clock) -> None:
        """Raise every entry to ``other``'s where that is larger (in place)."""
        np.maximum(self.v, other.v, out=self.v)  # type: ignore[union-attr]

    def joined(self, other: Clock) -> DenseClock:
        """A new clock: the element-wise maximum of the two."""
        return DenseClock(np.maximum(self.v, other.v))  # type: ignore[union-attr]

    def get(self, i: int) -> int:
        """Entry ``i``."""
        return int(self.v[i])

    def set(self, i: int, x: int) -> None:
        """Entry ``i`` := ``x``."""
        self.v[i] = x

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """The entries at the agents ``idx`` (an int array), as an array."""
        return self.v[idx]

    def values(self) -> np.ndarray:
        """The whole vector (int32; for tests)."""
        return self.v.astype(np.int32)


class SharedClock:
    """The vector in parts shared between clocks, copied on write (:mod:`forestcoll.mscclpp.clocks`)."""

    __slots__ = ("parts", "ids", "mine", "shift", "size", "frozen", "pool", "__weakref__")

    def __init__(self, parts: list[np.ndarray], ids: np.ndarray, mine: np.ndarray, shift: int, size: int,
                 frozen: bool, pool: Parts) -> None:
        self.parts, self.ids, self.mine, self.shift, self.size, self.frozen = parts, ids, mine, shift, size, frozen
        self.pool = pool

    @classmethod
    def zeros(cls, n: int, zero: np.ndarray, pool: Parts | None = None) -> SharedClock:
        """A clock of ``n`` zero entries, every part the shared read-only ``zero``; parts merged from two clocks are
        held once per content in ``pool``."""
        k = -(-n // len(zero))
        return cls([zero] * k, np.full(k, id(zero), np.int64), np.zeros(k, bool), len(zero).bit_length() - 1, n, False,
                   pool if pool is not None else Parts())

    def _release(self) -> None:
        """Give up ownership of every part (they become shared, read-only)."""
        owned = np.flatnonzero(self.mine)
        if owned.size:
            for k in owned.tolist():
                self.parts[k].flags.writeable = False
            self.mine[:] = False

    def copy(self) -> SharedClock:
        """A writable clock with the same values, sharing every part."""
        self._release()
        return SharedClock(list(self.parts), self.ids.copy(), np.zeros(len(self.ids), bool), self.shift, self.size,
                           False, self.pool)

    def snapshot(self) -> SharedClock:
        """A frozen clock with the same values (itself when already frozen)."""
        if self.frozen:
            return self
        c = self.copy()
        c.frozen = True
        return c

    def _own(self, k: int) -> np.ndarray:
        if self.frozen:
            raise ValueError("a frozen clock is read-only")
        if not self.mine[k]:
            p = self.parts[k].copy()
            self.parts[k] = p
            self.ids[k] = id(p)
            self.mine[k] = True
        return self.parts[k]

    def join(self, other: Clock) -> None:
        """Raise every entry to ``other``'s where that is larger (in place); parts ``other`` dominates are shared."""
        if self.frozen:
            raise ValueError("a frozen clock is read-only")
        oids = other.ids  # type: ignore[union-attr]
        diff = np.flatnonzero(self.ids != oids)
        if not diff.size:
            return
        parts, oparts, mine, ids = self.parts, other.parts, self.mine, self.ids  # type: ignore[union-attr]
        omine = other.mine  # type: ignore[union-attr]
        ks = diff.tolist()
        a = np.concatenate([parts[k] for k in ks]).reshape(len(ks), -1)
        b = np.concatenate([oparts[k] for k in ks]).reshape(len(ks), -1)
        bdom = (b >= a).all(axis=1)  # b holds all that a knows: share b's part
        adom = (a >= b).all(axis=1)  # a holds all that b knows: keep a's
        if bdom.any():
            take = diff[bdom]
            for k in take[omine[take]].tolist():
                oparts[k].flags.writeable = False
            omine[take] = False
            for k in take.tolist():
                parts[k] = oparts[k]
            ids[take] = oids[take]
            mine[take] = False
        both = ~(bdom | adom)
        if both.any():
            merged = np.maximum(a[both], b[both])
            intern = self.pool.intern
            for row, k in zip(merged, diff[both].tolist()):
                p = intern(row.copy())
                parts[k] = p
                ids[k] = id(p)
            mine[diff[both]] = False

    def joined(self, other: Clock) -> SharedClock:
        """A new clock: the element-wise maximum of the two."""
        c = self.copy()
        c.join(other)
        return c

    def get(self, i: int) -> int:
        """Entry ``i``."""
        return int(self.parts[i >> self.shift][i & ((1 << self.shift) - 1)])

    def set(self, i: int, x: int) -> None:
        """Entry ``i`` := ``x``."""
        self._own(i >> self.shift)[i & ((1 << self.shift) - 1)] = x

    def gather(self, idx: np.ndarray) -> np.ndarray:
        """The entries at the agents ``idx`` (an int array), as an array."""
        k = idx >> self.shift
        off = idx & ((1 << self.shift) - 1)
        lo, hi = int(k.min()), int(k.max())
        if lo == hi:
            return self.parts[lo][off]
        out = np.empty(idx.shape, np.int32)
        for kk in np.unique(k).tolist():
            sel = k == kk
            out[sel] = self.parts[kk][off[sel]]
        return out

    def values(self) -> np.ndarray:
        """The whole vector (int32; for tests)."""
        return np.concatenate(self.parts)[:self.size].astype(np.int32)


Clock = DenseClock | SharedClock


class Parts:
    """Read-only parts held once per content (a weak table keyed by a 128-bit blake2b digest, confirmed equal)."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[bytes, np.ndarray] = weakref.WeakValueDictionary()

    def intern(self, p: np.ndarray) -> np.ndarray:
        """The held part equal to ``p`` (a contiguous array no one else holds), or ``p`` itself, made read-only."""
        key = hashlib.blake2b(p.data, digest_size=16).digest()
        held = self._held.get(key)
        if held is not None and np.array_equal(held, p):
            return held
        p.flags.writeable = False
        self._held[key] = p
        return p


def part_size(agents: int) -> int:
    """Entries per part of a :class:`SharedClock`: the power of two at or above the square root of the agents (at
    least 64), so that a clock has about as many parts as a part has entries."""
    p = 64
    while p * p < agents:
        p *= 2
    return p


class Backend:
    """Makes and freezes the clocks of one run: ``kind`` "shared" (:class:`SharedClock`) or "dense" (the reference,
    :class:`DenseClock`, frozen through :class:`~forestcoll.mscclpp.state.Interner` as before)."""

    def __init__(self, kind: str, agents: int) -> None:
        if kind not in BACKENDS:
            raise ValueError(f"unknown clock representation {kind!r}; choose from {', '.join(BACKENDS)}")
        self.kind, self.agents = kind, agents
        self._interner = Interner()
        self._dense: weakref.WeakValueDictionary[int, DenseClock] = weakref.WeakValueDictionary()
        zero = np.zeros(part_size(agents), np.int32)
        zero.flags.writeable = False
        self._zero = zero
        self._parts = Parts()
        self._frozen: weakref.WeakValueDictionary[bytes, SharedClock] = weakref.WeakValueDictionary()

    def zeros(self) -> Clock:
        """A writable clock of zeros."""
        if self.kind == "dense":
            return DenseClock(np.zeros(self.agents, np.int32))
        return SharedClock.zeros(self.agents, self._zero, self._parts)

    def freeze(self, x: Clock | None) -> Clock | None:
        """A read-only clock with ``x``'s values (``x`` may be changed afterwards; the result never is)."""
        if x is None:
            return None
        if isinstance(x, SharedClock):
            return self._freeze_shared(x)
        v = self._interner.freeze(x.v)
        held = self._dense.get(id(v))
        if held is None or held.v is not v:
            held = DenseClock(v)
            self._dense[id(v)] = held
        return held

    def _freeze_shared(self, x: SharedClock) -> SharedClock:
        """``x``'s own parts interned by content, then one frozen clock per list of parts."""
        if x.frozen:
            return x
        owned = np.flatnonzero(x.mine)
        for k in owned.tolist():
            q = self._parts.intern(x.parts[k])
            x.parts[k] = q
            x.ids[k] = id(q)
        x.mine[:] = False
        key = hashlib.blake2b(x.ids.data, digest_size=16).digest()
        held = self._frozen.get(key)
        if held is not None and np.array_equal(held.ids, x.ids):
            return held
        snap = x.snapshot()
        self._frozen[key] = snap
        return snap

    def freeze_all(self, xs: tuple) -> tuple:
        """:meth:`freeze` of each clock of ``xs``."""
        return tuple(self.freeze(x) for x in xs)


BACKENDS = ("shared", "dense")


def backend(kind: str, agents: int) -> Backend:
    """The clock representation ``kind`` for a run with ``agents`` agents."""
    return Backend(kind, agents)
