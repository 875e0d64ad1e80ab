"""An event-driven flow simulator: transfers over paths of links, max-min fair sharing, dependencies.

A *program* is a list of transfers.  Transfer t moves ``nbytes[t]`` bytes over
the links of its path (all at once, like a cut-through route through
switches), then its data arrives ``latency[t]`` seconds later.  It may start
once every dependency it names has happened; a dependency is another
transfer's *sent* event (its last byte left: used to keep one sender's
transfers in order) or *delivered* event (its data arrived: used for data
dependencies, store-and-forward), always one built earlier, so a program can
never wait in a cycle.  A transfer with no links or no bytes is a marker: it
happens the moment it may start.

While transfers are active, each gets its weighted max-min fair share of
bandwidth (progressive filling: raise every rate together in proportion to its
weight, freeze the transfers on a link as it fills).  A transfer's weight is
the volume of its stream (all the bytes of the tree edge, ring channel, ... it
belongs to), so a tree carrying 11 chunks gets 11/13 of a link it shares with a
2-chunk tree: the rates of the fluid schedule behind the bound.  ``equal``
sharing gives every transfer the same weight.

Rates change only when the set of active transfers changes, and only through
the *classes* of the transfers (same path, same weight): when one slice of a
stream ends and the next begins, nothing is recomputed.  The shares of active
classes that share no link (directly or through others) do not depend on each
other, so only the connected components of the active classes that a change
touches are solved again, and a component seen before (same classes, same
counts) reuses its rates: pipelines and symmetric fabrics repeat the same few.
Events closer than a relative 1e-9 are handled together; a transfer whose bytes left take less time than the
clock can resolve (``now + left / rate == now``) is done at once.  The floating-point operations are those of
the engine at commit 05a23b7 ("land10"), in its order (the model is sensitive to the last bit on symmetric fabrics:
docs/simulate.md), so the times are that engine's bit for bit (tests/test_simulate_engine_golden.py holds it to
that engine's recorded results).
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from forestcoll import limits
from forestcoll.errors import SimulationTooLarge
from forestcoll.progress import Progress, report
from forestcoll.simulate import fill_jit

__all__ = ["EngineResult", "Program", "ProgramBuilder", "refuse_transfers", "link_bound", "link_loads", "link_share_rates", "lower_bound",
           "max_min_rates", "max_min_rates_small", "path_bound", "run"]

SENT, DELIVERED = 0, 1
_TOL = 1e-9
SMALL_COMPONENT = 24  # components of at most this many classes: max_min_rates_small
_min, _any = np.minimum.reduce, np.logical_or.reduce  # without the ndarray methods' Python wrappers


def refuse_transfers(count: int) -> None:
    """The simulation guard (:data:`forestcoll.limits.MAX_SIM_TRANSFERS`): a one-line UsageError (a
    :class:`~forestcoll.errors.SimulationTooLarge`, which a race counts as a loss) when a program is
    sure to build ``count`` transfers and that is over the limit. Program builders call it with their count before
    building (a count that is never above the real one: no simulation that fits is refused), and the builder
    itself when it reaches the limit."""
    if count > limits.MAX_SIM_TRANSFERS:
        raise SimulationTooLarge(f"the simulation needs more than {limits.MAX_SIM_TRANSFERS:,} transfers (slices moved over "
                         "paths), above forestcoll's limit; pass a smaller --size, or a larger --slice or a "
                         "--max-slices cap (see docs/limits.md)")


class ProgramBuilder:
    """Collects transfers; ``transfer`` returns the id used to name it in later dependencies."""

    def __init__(self) -> None:
        self._links: list[tuple[int, ...]] = []
        self._bytes: list[float] = []
        self._lat: list[float] = []
        self._deps: list[list[int]] = []
        self._stream: list[object] = []

    def __len__(self) -> int:
        return len(self._bytes)

    def transfer(self, links: Sequence[int], nbytes: float, latency: float = 0.0,
                 after_sent: Iterable[int | None] = (), after_delivered: Iterable[int | None] = (),
                 stream: object = None) -> int:
        """A transfer of ``nbytes`` over ``links``; it starts after the given sent / delivered events.
        Transfers of one ``stream`` share a weight: the bytes the stream moves in all."""
        tid = len(self._bytes)
        deps = [(d << 1) | SENT for d in after_sent if d is not None]
        deps += [(d << 1) | DELIVERED for d in after_delivered if d is not None]
        if deps and (min(deps) < 0 or max(deps) >= 2 * tid):  # some (e >> 1) outside 0 .. tid - 1
            raise ValueError(f"transfer {tid} depends on a transfer that is not built before it")
        return self.add(tuple(links), float(nbytes), float(latency), deps, stream)

    def add(self, links: tuple[int, ...], nbytes: float, latency: float, deps: list[int], stream: object) -> int:
        """:meth:`transfer` for program builders in a hurry: ``links`` a tuple, ``nbytes`` and ``latency`` floats,
        ``deps`` already encoded as events (``(tid << 1) | SENT`` or ``| DELIVERED``, of transfers built before:
        not checked)."""
        tid = len(self._bytes)
        if tid >= limits.MAX_SIM_TRANSFERS:
            refuse_transfers(tid + 1)
        self._stream.append(stream if stream is not None else ("#", tid))
        self._links.append(links)
        self._bytes.append(nbytes)
        self._lat.append(latency)
        self._deps.append(deps)
        return tid

    def marker(self, after_sent: Iterable[int | None] = (), after_delivered: Iterable[int | None] = ()) -> int:
        """An instant event that happens when all its dependencies have."""
        return self.transfer((), 0.0, 0.0, after_sent, after_delivered)

    def spread(self, routes: Sequence[tuple[tuple[int, ...], float]], nbytes: float, deps: list[int],
               stream: object) -> tuple[int, int]:
        """``nbytes`` after the events ``deps`` (as :meth:`add`) split evenly over ``routes`` (links, latency): one
        transfer per route, of stream ``(stream, j)`` (None stays None), then a marker of all sent and one of all
        delivered; returns those two ids (the one transfer's id twice for one route)."""
        if len(routes) == 1:
            links, lat = routes[0]
            tid = self.add(links, nbytes, float(lat), deps, stream)
            return tid, tid
        share = nbytes / len(routes)
        ids = [self.add(links, share, float(lat), list(deps), None if stream is None else (stream, j))
               for j, (links, lat) in enumerate(routes)]
        left = self.add((), 0.0, 0.0, [x << 1 | SENT for x in ids], None)
        return left, self.add((), 0.0, 0.0, [x << 1 | DELIVERED for x in ids], None)

    def rows(self) -> Iterator[tuple[tuple[int, ...], float, float, list[int], object]]:
        """Each transfer as built: its links, bytes, latency, encoded dependencies and stream (None: its own)."""
        for t, stream in enumerate(self._stream):
            yield self._links[t], self._bytes[t], self._lat[t], self._deps[t], None if stream == ("#", t) else stream

    def link_time(self, capacity: Sequence[float]) -> float:
        """Seconds the busiest link needs for the bytes the transfers put on it (``capacity`` in bytes/s), plus the
        longest latency of one transfer: a lower bound on the program's time, whatever the order of its transfers."""
        load = [0.0] * len(capacity)
        for links, nbytes in zip(self._links, self._bytes):
            for i in links:
                load[i] += nbytes
        busiest = max((b / c for b, c in zip(load, capacity) if c > 0), default=0.0)
        return busiest + max(self._lat, default=0.0) if busiest > 0 else 0.0

    def build(self, sharing: str = "weighted") -> Program:
        """The compressed program; ``sharing`` "weighted" (by stream volume) or "equal"."""
        n = len(self._bytes)
        volume: dict[object, float] = {}
        for key, b in zip(self._stream, self._bytes):
            volume[key] = volume.get(key, 0.0) + b
        classes: dict[tuple, int] = {}
        cls = np.empty(n, dtype=np.int64)
        class_links: list[tuple[int, ...]] = []
        class_weight: list[float] = []
        for t in range(n):
            w = 1.0 if sharing == "equal" else max(volume[self._stream[t]], 1.0)
            key = (self._links[t], w)
            c = classes.get(key)
            if c is None:
                c = classes[key] = len(class_links)
                class_links.append(self._links[t])
                class_weight.append(w)
            cls[t] = c
        counts = np.fromiter((len(x) for x in class_links), dtype=np.int64, count=len(class_links))
        ptr = np.zeros(len(class_links) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        idx = np.fromiter((i for x in class_links for i in x), dtype=np.int64, count=int(ptr[-1]))
        return Program(np.asarray(self._bytes), np.asarray(self._lat), self._deps, cls, ptr, idx,
                       np.asarray(class_weight, dtype=float))


@dataclass
class Program:
    """Transfers in compressed form (see :class:`ProgramBuilder`); transfers of one class share path and weight."""

    nbytes: np.ndarray
    latency: np.ndarray
    deps: list[list[int]]
    cls: np.ndarray  # class of each transfer
    class_ptr: np.ndarray  # links of each class (CSR)
    class_idx: np.ndarray
    class_weight: np.ndarray

    @property
    def size(self) -> int:
        return len(self.nbytes)


@dataclass
class EngineResult:
    time: float  # when the last transfer was delivered
    sent: np.ndarray  # per transfer
    delivered: np.ndarray
    events: int  # event times processed
    recomputes: int  # max-min recomputations
    stopped: bool = False  # run(stop_at=...) gave up: the program would end after stop_at (``time`` is a lower bound)


def max_min_rates(ptr: np.ndarray, idx: np.ndarray, active: np.ndarray, weight: np.ndarray,
                  capacity: np.ndarray) -> np.ndarray:
    """Weighted max-min fair rates of the ``active`` flows with links ``idx[ptr[a]:ptr[a+1]]`` and the given
    weights: progressive filling, every unfrozen flow at ``weight x level``, freezing the flows of each
    link as it fills."""
    starts = ptr[active]
    counts = ptr[active + 1] - starts
    total = int(counts.sum())
    nf = len(active)
    rates = np.full(nf, np.inf)
    if total == 0:
        return rates
    owner = np.repeat(np.arange(nf), counts)
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    links = idx[np.arange(total) + offsets]
    nl = len(capacity)
    cap = capacity.astype(float)
    wown = weight[owner]  # each link entry's flow weight, compressed with the entries
    load = np.bincount(links, weights=wown, minlength=nl)
    floor = 1e-12 * max(float(weight.max()), 1.0)
    share = np.empty(nl)
    frozen = np.empty(nf, dtype=bool)
    while total:
        share.fill(np.inf)  # a link with no load left (at most the floor) never fills
        np.divide(cap, load, out=share, where=load > floor)
        level = share.min()
        if not np.isfinite(level):
            break
        full = share <= level * (1 + _TOL)
        frozen.fill(False)
        frozen[owner[full[links]]] = True
        np.copyto(rates, weight * level, where=frozen)
        gone = frozen[owner]
        removed = np.bincount(links[gone], weights=wown[gone], minlength=nl)
        cap -= removed * level
        load -= removed
        np.maximum(cap, 0, out=cap)
        keep = ~gone
        links, owner, wown = links[keep], owner[keep], wown[keep]
        total = len(links)
    return rates


def max_min_rates_small(paths: Sequence[Sequence[int]], weights: Sequence[float],
                        capacity: Sequence[float]) -> list[float]:
    """:func:`max_min_rates` in plain Python for a few flows (flow f over links ``paths[f]``): the same
    operations in the same order, so the same floats, without numpy's per-call cost."""
    load: dict[int, float] = {}
    for path, w in zip(paths, weights):
        for i in path:
            load[i] = load.get(i, 0.0) + w
    cap = {i: float(capacity[i]) for i in load}
    floor = 1e-12 * max(max(weights, default=0.0), 1.0)
    rates = [np.inf] * len(paths)
    unfrozen = [f for f, path in enumerate(paths) if path]
    while unfrozen:
        level = np.inf
        share: dict[int, float] = {}
        for i, x in load.items():
            if x > floor:
                share[i] = y = cap[i] / x
                if y < level:
                    level = y
        if level == np.inf:
            break
        limit = level * (1 + _TOL)
        full = {i for i, y in share.items() if y <= limit}
        removed: dict[int, float] = {}
        keep = []
        for f in unfrozen:
            path = paths[f]
            if full.isdisjoint(path):
                keep.append(f)
                continue
            w = weights[f]
            rates[f] = w * level
            for i in path:
                removed[i] = removed.get(i, 0.0) + w
        for i, x in removed.items():
            c = cap[i] - x * level
            cap[i] = c if c > 0 else 0.0
            load[i] -= x
        unfrozen = keep
    return rates


def link_share_rates(ptr: np.ndarray, idx: np.ndarray, active: np.ndarray, weight: np.ndarray,
                     capacity: np.ndarray) -> np.ndarray:
    """Processor sharing on every link: each link splits its capacity among its flows in proportion to
    their weights, and a flow runs at its smallest share along its path (one pass, not work-conserving)."""
    starts = ptr[active]
    counts = ptr[active + 1] - starts
    total = int(counts.sum())
    nf = len(active)
    if total == 0:
        return np.full(nf, np.inf)
    owner = np.repeat(np.arange(nf), counts)
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    links = idx[np.arange(total) + offsets]
    load = np.bincount(links, weights=weight[owner], minlength=len(capacity))
    per_weight = capacity[links] / load[links]
    first = np.cumsum(counts) - counts
    return weight * np.minimum.reduceat(per_weight, first)


def link_loads(program: Program, nlinks: int) -> np.ndarray:
    """Bytes each link carries over the whole program."""
    counts = program.class_ptr[1:] - program.class_ptr[:-1]
    per_class = np.bincount(program.cls, weights=program.nbytes, minlength=len(counts))
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(program.class_idx, weights=per_class[owner], minlength=nlinks)


def link_bound(program: Program, capacity: np.ndarray) -> float:
    """A lower bound on :func:`run`'s time: the busiest link's bytes over its capacity (no transfer
    ever gets more than a link's capacity, whatever the sharing)."""
    loads = link_loads(program, len(capacity))
    return float((loads / capacity).max()) if len(loads) else 0.0


def path_bound(program: Program, capacity: np.ndarray) -> float:
    """A lower bound on :func:`run`'s time: the longest chain of dependencies, each transfer taking at least
    its bytes over its path's slowest link (alone on the fabric) and then its latency."""
    counts = program.class_ptr[1:] - program.class_ptr[:-1]
    slowest = np.full(len(counts), np.inf)
    if len(program.class_idx):
        owner = np.repeat(np.arange(len(counts)), counts)
        np.minimum.at(slowest, owner, capacity[program.class_idx])
    fastest = np.where(counts[program.cls] > 0, program.nbytes / slowest[program.cls], 0.0).tolist()
    lat = program.latency.tolist()
    sent = [0.0] * program.size
    done = [0.0] * program.size
    for t, deps in enumerate(program.deps):
        start = 0.0
        for ev in deps:
            at = done[ev >> 1] if ev & 1 else sent[ev >> 1]
            if at > start:
                start = at
        sent[t] = start + fastest[t]
        done[t] = sent[t] + lat[t]
    return max(done, default=0.0)


def lower_bound(program: Program, capacity: np.ndarray) -> float:
    """The larger of :func:`link_bound` and :func:`path_bound`: :func:`run` never finishes sooner, under either
    fairness (both bounds hold for any sharing that never exceeds a link's capacity)."""
    return max(link_bound(program, capacity), path_bound(program, capacity))


class _ComponentShares:
    """The rate of each active transfer, by class, kept up to date one connected component at a time.

    Two active classes are connected when they share a link; the fair shares of one component depend only on
    its own classes and their counts (progressive filling and per-link sharing never look across), so when
    the mix changes only the components that hold a changed class are solved again, and each component's
    answer is cached by its classes and counts (pipelines and symmetric fabrics repeat the same few)."""

    def __init__(self, program: Program, capacity: np.ndarray, share_fn, split: bool = True) -> None:
        self.program, self.capacity, self.share_fn, self.split = program, capacity, share_fn, split
        ptr, idx = program.class_ptr.tolist(), program.class_idx.tolist()
        self.paths = [idx[ptr[c]:ptr[c + 1]] for c in range(len(ptr) - 1)]
        self.on_link: list[set[int]] = [set() for _ in range(len(capacity))]  # active classes on each link
        self.count = [0] * len(self.paths)  # active transfers per class
        self.rate = np.zeros(len(self.paths))  # rate of each active transfer of the class (bytes/s)
        self.cache: dict[tuple[int, ...], tuple] = {}
        self.recomputes = 0
        self.small = share_fn is max_min_rates  # components of a few classes: the plain-Python solver
        self.fast = None  # the solver of larger components: share_fn, or fill_jit.Filling (numpy, then compiled)
        # link -> [its component's classes, sorted; the component's links]: a class that starts joins the components of
        # its links (_started), one that stops leaves its component unless that splits it, then forgotten (_stopped),
        # and counts that move change nothing (the components depend on which classes are active, not on their counts)
        self.components: dict[int, list] = {}
        self.weight = program.class_weight.tolist()
        self.cap_list = capacity.tolist()

    def update(self, delta: dict[int, int]) -> None:
        """Apply the net change of active transfers per class and solve the components it touched."""
        count, on_link, paths = self.count, self.on_link, self.paths
        seeds: list[int] = []
        components = self.components
        for c, d in delta.items():
            if not d:
                continue
            before = count[c]
            count[c] = after = before + d
            if not before:
                self._started(c)
            elif not after:
                for link in paths[c]:
                    on_link[link].discard(c)
                self._stopped(c)
            seeds += paths[c]
        if not self.split:  # the reference: the whole mix at once
            if seeds:
                self._solve([c for c, k in enumerate(count) if k])
            return
        seen: set[int] = set()
        for link in seeds:
            if link in seen:
                continue
            known = components.get(link)
            if known is not None:  # the same component as the last time it was searched: the same solve, in the same order
                seen |= known[1]
                self._solve(known[0])
                continue
            members: set[int] = set()
            reached: set[int] = set()
            stack = [link]
            while stack:
                here = stack.pop()
                if here in reached:
                    continue
                reached.add(here)
                for c in on_link[here]:
                    if c not in members:
                        members.add(c)
                        stack += paths[c]
            seen |= reached
            if members:
                found = [sorted(members), reached]
                for here in reached:
                    components[here] = found
                self._solve(found[0])

    def _started(self, c: int) -> None:
        """Class ``c`` became active: the remembered components its links are in, joined with ``c``, are its
        component (the same classes and links a search finds), unless one of its links holds active classes whose
        component is not remembered; then the remembered ones it joins are forgotten, to be searched again."""
        components, path = self.components, self.paths[c]
        joined: list[tuple[list[int], set[int]]] = []
        whole = True
        for link in path:
            known = components.get(link)
            if known is None:
                whole = whole and not self.on_link[link]
            elif not any(known is j for j in joined):
                joined.append(known)
        for link in path:
            self.on_link[link].add(c)
        if not whole:
            for known in joined:
                for here in known[1]:
                    del components[here]
            return
        if len(joined) == 1:
            members = joined[0][0].copy()
            bisect.insort(members, c)
        else:
            members = sorted({c}.union(*(j[0] for j in joined)))
        found = [members, set(path).union(*(j[1] for j in joined))]
        for here in found[1]:
            components[here] = found

    def _stopped(self, c: int) -> None:
        """Class ``c`` stopped (already off its links): its remembered component without ``c`` and its links that
        no active class crosses now, when the links of ``c`` that still carry classes are joined without ``c`` (the
        same classes and links a search finds; a short search tells); else it may split and is forgotten."""
        components, on_link, path = self.components, self.on_link, self.paths[c]
        known = components.get(path[0])
        if known is None:
            return
        left = [link for link in path if on_link[link]]
        if left and self._joined(left):
            members = known[0].copy()
            del members[bisect.bisect_left(members, c)]
            known[0] = members  # a new list: the cache may hold the old one
            for link in path:
                if not on_link[link]:
                    known[1].discard(link)
                    del components[link]
            return
        for here in known[1]:
            del components[here]

    def _joined(self, links: list[int]) -> bool:
        """Whether the active classes join ``links`` (a search from the first that stops once it reached them all)."""
        want = set(links[1:])
        if not want:
            return True
        on_link, paths = self.on_link, self.paths
        reached = {links[0]}
        classes: set[int] = set()
        queue = deque(reached)  # breadth first: the links of c are near each other
        while queue:
            for k in on_link[queue.popleft()]:
                if k not in classes:
                    classes.add(k)
                    for link in paths[k]:
                        if link not in reached:
                            reached.add(link)
                            want.discard(link)
                            if not want:
                                return True
                            queue.append(link)
        return False

    def _solve(self, members: list[int]) -> None:
        count = self.count
        counts = [count[c] for c in members]
        key = (*members, -1, *counts)
        found = self.cache.get(key)
        if found is None:
            if self.small and len(members) <= SMALL_COMPONENT:
                weight = self.weight
                rates = max_min_rates_small([self.paths[c] for c in members],
                                            [weight[c] * k for c, k in zip(members, counts)], self.cap_list)
                found = (members, [r / k for r, k in zip(rates, counts)])
            else:
                where = np.asarray(members, dtype=np.int64)
                per = np.asarray(counts, dtype=float)
                program = self.program
                if self.fast is None:  # numpy, then the compiled filling once it pays (the same floats; fill_jit)
                    self.fast = (fill_jit.Filling(self.share_fn, self.capacity) if self.small
                                 else lambda p, i, a, w, f=self.share_fn, c=self.capacity: f(p, i, a, w, c))
                found = (where, self.fast(program.class_ptr, program.class_idx, where,
                                          program.class_weight[where] * per) / per)
            if len(self.cache) < 200_000:
                self.cache[key] = found
            self.recomputes += 1
        where, rates = found
        if isinstance(where, list):
            rate = self.rate
            for c, r in zip(where, rates):
                rate[c] = r
        else:
            self.rate[where] = rates

def run(program: Program, capacity: np.ndarray, fairness: str = "max-min", stop_at: float = np.inf,
        progress: Progress | None = None, split: bool = True) -> EngineResult:
    """Simulate ``program`` on links of the given capacities (bytes per second); ``fairness`` is
    "max-min" (weighted progressive filling) or "link" (per-link processor sharing, faster).  Once the next
    event lies after ``stop_at`` seconds the run stops (``stopped``; the program cannot end sooner than that).
    ``progress`` (:mod:`forestcoll.progress`) hears the transfers delivered, every 0.1 s.  ``split`` (default)
    solves the shares one connected component of the active classes at a time; False solves the whole mix at
    every change (the reference the tests hold the split run to: same times within 1e-9 relative).  A transfer over a
    link of capacity 0 never gets bandwidth: its time to finish is infinite (no warning) and it is left undelivered."""
    if not (np.asarray(capacity) > 0).all():  # only here can a rate be 0: rem / 0 = inf says "never" (numpy warns)
        with np.errstate(divide="ignore"):
            return _run(program, capacity, fairness, stop_at, progress, split)
    return _run(program, capacity, fairness, stop_at, progress, split)


def _run(program: Program, capacity: np.ndarray, fairness: str, stop_at: float, progress: Progress | None,
         split: bool) -> EngineResult:
    """:func:`run`, warning (numpy) if a rate is 0 outside the errstate :func:`run` sets for links of capacity 0."""
    share_fn = max_min_rates if fairness == "max-min" else link_share_rates
    n = program.size
    need = [len(d) for d in program.deps]
    waiting: list[list[int] | None] = [None] * (2 * n)  # event -> transfers that wait for it
    for t, deps in enumerate(program.deps):
        for ev in deps:
            if (some := waiting[ev]) is None:
                waiting[ev] = [t]
            else:
                some.append(t)
    sent = np.full(n, np.nan)
    delivered = np.full(n, np.nan)
    nbytes = program.nbytes.tolist()
    cls = program.cls.tolist()
    has_links = ((program.class_ptr[1:] - program.class_ptr[:-1]) > 0).tolist()
    # the active transfers, and aligned with them their classes, bytes left and "done" thresholds
    act = np.zeros(0, dtype=np.int64)
    act_cls = np.zeros(0, dtype=np.int64)
    rem = np.zeros(0)
    done_at = np.zeros(0)
    added: list[int] = []  # started during this event, not yet in ``act``
    deliveries: list[tuple[float, int]] = []
    now = 0.0
    events = 0
    lat = program.latency.tolist()

    heappush, heappop = heapq.heappush, heapq.heappop

    def finish(t: int, at: float, ready: list[int]) -> None:
        sent[t] = at
        for w in waiting[t << 1] or ():
            need[w] -= 1
            if not need[w]:
                ready.append(w)
        if lat[t] > 0:
            heappush(deliveries, (at + lat[t], t))
        else:
            delivered[t] = at
            for w in waiting[(t << 1) | DELIVERED] or ():
                need[w] -= 1
                if not need[w]:
                    ready.append(w)

    delta: dict[int, int] = {}  # net change of active transfers per class during one event
    shares = _ComponentShares(program, capacity, share_fn, split)

    def start(ts: list[int], at: float) -> None:
        """Start transfers; markers and empty ones complete at once."""
        while ts:
            t = ts.pop()
            c = cls[t]
            if has_links[c] and nbytes[t] > 0:
                added.append(t)
                delta[c] = delta.get(c, 0) + 1
                continue
            finish(t, at, ts)

    start([t for t in range(n) if not need[t]][::-1], 0.0)
    next_report = 0.0
    rates = np.zeros(0)
    stale = True  # ``rates`` (the active transfers' rates) needs gathering: the shares or the active set changed
    while added or len(act) or deliveries:
        if progress is not None and (clock := time.monotonic()) >= next_report:
            next_report = clock + 0.1
            report(progress, "simulating transfers", int(np.count_nonzero(~np.isnan(delivered))), n)
        if delta:
            shares.update(delta)  # the mix of active classes changed: new shares where it changed
            delta.clear()
            stale = True  # every change of ``act`` (started, finished) left an entry in ``delta``
        if added:
            new = np.asarray(added, dtype=np.int64)
            added.clear()
            act = np.concatenate((act, new))
            act_cls = np.concatenate((act_cls, program.cls[new]))
            fresh = program.nbytes[new]
            rem = np.concatenate((rem, fresh))
            done_at = np.concatenate((done_at, np.maximum(fresh, 1.0) * _TOL * 10))
        t_done = np.inf
        if len(act):
            if stale:
                rates = shares.rate[act_cls]
                stale = False
            t_done = now + float(_min(rem / rates))
        t_deliver = deliveries[0][0] if deliveries else np.inf
        target = min(t_done, t_deliver)
        if not np.isfinite(target):
            break  # only transfers that can never get bandwidth: reported as unfinished by the caller
        if target > stop_at:
            return EngineResult(target, sent, delivered, events, shares.recomputes, stopped=True)
        dt = target - now
        if len(act):
            rem -= rates * dt
        now = target
        events += 1
        ready: list[int] = []
        if len(act) and t_done <= target * (1 + _TOL) + 1e-18:
            done_mask = rem <= done_at
            if dt == 0 and not _any(done_mask):  # bytes left that the clock cannot resolve (now + rem / rate == now):
                done_mask = now + rem / rates <= now  # done now, else the loop would never advance
            if _any(done_mask):
                finished = act[done_mask].tolist()
                keep = ~done_mask
                act, act_cls, rem, done_at = act[keep], act_cls[keep], rem[keep], done_at[keep]
                for t in finished:
                    c = cls[t]
                    delta[c] = delta.get(c, 0) - 1
                    finish(t, now, ready)
        while deliveries and deliveries[0][0] <= now * (1 + _TOL) + 1e-18:
            t = heappop(deliveries)[1]
            delivered[t] = now
            for w in waiting[(t << 1) | DELIVERED] or ():
                need[w] -= 1
                if not need[w]:
                    ready.append(w)
        if ready:
            start(ready, now)
    end = float(np.nanmax(delivered)) if n and not np.isnan(delivered).all() else 0.0
    return EngineResult(end, sent, delivered, events, shares.recomputes)
