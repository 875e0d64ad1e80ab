"""generate --buffsize's cost: lazy choices for the buffers not kept, and the faster MSCCL program builder; neither
may change a file, a note or a simulated time."""

from __future__ import annotations

import math

import pytest

from forestcoll.errors import UsageError
from forestcoll.msccl.buffer import AUTO_BUFFSIZES, buffered_msccl
from forestcoll.msccl.ir import RECVS, SENDS, MscclError
from forestcoll.msccl.semantics import by_rank, compile_tb
from forestcoll.pieces import slices_for
from forestcoll.simulate.engine import ProgramBuilder
from forestcoll.simulate.msccl import channel_routes


def _reference_program(algo, net, size, slice_bytes, max_slices, source="algo.xml", slice_cost_s=0.0):
    """msccl_program as it was before it planned each block once (commit 0cac983): every dependency searched, every
    receive counted, every transfer through ProgramBuilder.transfer, per transmission and iteration."""
    algo = by_rank(algo, source)
    if algo.ngpus != len(net.ranks):
        raise UsageError(f"{source} is for {algo.ngpus} GPUs but the topology has {len(net.ranks)} compute nodes")
    chunk = size / algo.nchunksperloop  # nccl-tests size = count x sizeMultiplier x element size
    iterations = slices_for(chunk, slice_bytes, max_slices, rule="ring")
    piece = chunk / iterations
    tbs = {(g.id, tb.id): (tb, compile_tb(tb, g.id, source)) for g in algo.gpus for tb in g.tbs}
    prog = ProgramBuilder()
    routes: dict[tuple[int, int], list[tuple[tuple[int, ...], float]]] = {}
    done: dict[tuple[int, int, int, int], int] = {}  # (gpu, tb, iteration, transmission) -> completion marker
    sends: dict[tuple[int, int, int, int], list[int]] = {}  # (src, dst, channel, iteration) -> transfers in order
    flag_steps = {key: [(i, t.step) for i, t in enumerate(trans) if t.hasdep] for key, (_tb, trans) in tbs.items()}

    def dep_marker(g: int, d: int, s: int, it: int) -> int | None:
        """Completion of the step of block d that first publishes a flag >= (it, s)."""
        for i, step in flag_steps.get((g, d), []):
            if step >= s:
                return done.get((g, d, it, i))
        return None  # never published in this iteration: the interpreter reports such files

    # blocks are built iteration by iteration in an order where every dependency already exists:
    # repeat passes over the blocks, advancing each while its dependencies are built
    pos = {key: (0, 0) for key in tbs}  # (iteration, transmission index) to build next
    remaining = sum(len(trans) * iterations for _tb, trans in tbs.values())
    while remaining:
        progress = False
        for key, (tb, trans) in tbs.items():
            g, tid = key
            while True:
                it, i = pos[key]
                if it == iterations or not trans:
                    break
                t = trans[i]
                deps = []
                ok = True
                for d, s in t.deps:
                    if (g, d) not in tbs:
                        raise MscclError(f"{source}:{t.line}: gpu {g} tb {tid} depends on tb {d}, which does not exist")
                    owner = next((j for j, step in flag_steps[(g, d)] if step >= s), None)
                    if owner is not None and (g, d, it, owner) not in done:
                        ok = False
                        break
                    m = dep_marker(g, d, s, it)
                    if m is not None:
                        deps.append(m)
                prev = done.get((g, tid, it, i - 1)) if i else (done.get((g, tid, it - 1, len(trans) - 1)) if it else None)
                incoming = None
                if t.type in RECVS:
                    lst = sends.get((tb.recv, g, tb.chan, it), [])
                    idx = sum(1 for x in trans[:i] if x.type in RECVS)  # the k-th receive meets the k-th send
                    if idx >= len(lst):
                        ok = False  # the matching send is not built yet
                    else:
                        incoming = lst[idx]
                if not ok:
                    break
                before = [x for x in (prev, *deps) if x is not None]
                out = None
                if t.type in SENDS:
                    spread = channel_routes(net, routes, g, tb.send, tb.chan)
                    conn = (g, tb.send, tb.chan)
                    after = before + ([incoming] if incoming is not None else [])
                    ids = [prog.transfer(links, t.cnt * piece / len(spread), lat + slice_cost_s, after_delivered=after,
                                         stream=(conn, i) if len(spread) > 1 else conn)
                           for i, (links, lat) in enumerate(spread)]
                    out = ids[0] if len(ids) == 1 else prog.marker(after_delivered=ids)
                    sends.setdefault((g, tb.send, tb.chan, it), []).append(out)
                    marker = (prog.transfer((), 0.0, slice_cost_s, after_sent=ids) if slice_cost_s > 0
                              else prog.marker(after_sent=ids))
                elif incoming is not None:
                    marker = prog.marker(after_delivered=[*before, incoming])
                else:
                    marker = prog.marker(after_delivered=before)
                done[(g, tid, it, i)] = marker
                remaining -= 1
                progress = True
                pos[key] = (it, i + 1) if i + 1 < len(trans) else (it + 1, 0)
        if not progress:
            raise MscclError(f"{source}: the steps wait on each other in a cycle; run `forestcoll msccl run` to see where")
    return prog


def _program_rows(prog):
    return (prog._links, [x.hex() for x in prog._bytes], [x.hex() for x in prog._lat], prog._deps, prog._stream)


@pytest.mark.parametrize("topo_name, coll, k, opts, size, slice_bytes, cost", [
    ("ring:n=4", "allgather", 2, {"split": 4, "max_cnt": 1}, 64 << 20, 128 << 10, 1e-6),
    ("mi250", "allgather", 2, {"order": "latency", "runtime": "rccl"}, 64 << 20, 128 << 10, 1e-6),
    ("mi250", "allreduce", 2, {}, 1 << 20, 1 << 20, 0.0),
    ("mi250", "allgather", 3, {"runtime": "rccl"}, 3 << 20, 256 << 10, 0.0),
])
def test_program_builder_is_the_reference(topo_name, coll, k, opts, size, slice_bytes, cost):
    """The planned builder makes the reference's program transfer for transfer: links, bytes and latencies bit for
    bit, dependencies and streams (so every simulated time is the same)."""
    from forestcoll.generate import generate
    from forestcoll.msccl.export import ExportOptions, export_msccl
    from forestcoll.simulate.msccl import msccl_program
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology

    topo = load_topology(topo_name)
    net = build_network(topo)
    algo = export_msccl(generate(topo, coll, k=k), ExportOptions(**opts)).algo
    new = msccl_program(algo, net, float(size), float(slice_bytes), None, slice_cost_s=cost)
    ref = _reference_program(algo, net, float(size), float(slice_bytes), None, slice_cost_s=cost)
    assert len(new) == len(ref) > 0
    assert _program_rows(new) == _program_rows(ref)


def test_program_builder_keeps_its_errors():
    """A missing block and a cycle are reported as before."""
    from msccl_files import broadcast3, deadlock2

    from forestcoll.msccl.ir import parse_algo
    from forestcoll.simulate.msccl import msccl_program
    from forestcoll.simulate.network import build_network
    from forestcoll.topology import load_topology

    net = build_network(load_topology("ring:n=2"))
    with pytest.raises(MscclError, match="cycle"):
        msccl_program(parse_algo(deadlock2()), net, 1 << 20, 1 << 20, None)
    bad = broadcast3().replace('depid="0"', 'depid="5"', 1)
    net3 = build_network(load_topology("ring:n=3"))
    with pytest.raises(MscclError, match="tb 5, which does not exist"):
        msccl_program(parse_algo(bad), net3, 1 << 20, 1 << 20, None)


class _Rates:
    """A FileRate stand-in that simulates nothing: made-up rates by file, size and buffer, with a shared store,
    ``race`` (exact when the store has the file or it reaches ``best``, else an upper bound below ``best``),
    ``promise`` and ``bound``, as simulate.msccl.FileRate's; ``log`` counts the rates worked out."""

    def __init__(self, seed, slice_bytes, cost, shared, log):
        self.seed, self.sl, self.cost, self.shared, self.log = seed, slice_bytes or (1 << 20), cost, shared, log
        self.shared.setdefault("promised", set())

    def _key(self, algo, size):
        # at 1 GiB a buffer cuts some files' chunks in its own slices (others alike, as fine chunks are: shared)
        return id(algo), size, self.sl if size >= 1 << 30 and (algo.nchunksperloop + self.seed) % 3 else 0, self.cost

    def _exact(self, algo, size):  # a function of the key: a shared simulation has one rate
        _id, _size, sl, cost = self._key(algo, size)
        h = (algo.nchunksperloop * 7919 + len(algo.name) * 104729 + sl // 4096 * 31 + size // (1 << 20)
             + self.seed * 1299709 + int(cost * 1e7))
        return 100.0 + (h * 2654435761 % 1000003) % 97

    def __call__(self, algo, size):
        key = self._key(algo, size)
        if key not in self.shared:
            self.log.append(key)
            self.shared[key] = (algo, self._exact(algo, size))
        return self.shared[key][1]

    def bound(self, algo, size):
        return self._exact(algo, size) * 1.05

    def race(self, algo, size, best):
        key = self._key(algo, size)
        if key in self.shared or key in self.shared["promised"] or not best > 0:
            return self(algo, size), True
        got = self._exact(algo, size)
        if got >= best:
            return self(algo, size), True
        return min(got * 1.01, math.nextafter(best, 0.0)), False

    def promise(self, algo, size):
        self.shared["promised"].add(self._key(algo, size))


@pytest.mark.parametrize("seed", [*range(6), 8, *(pytest.param(s, marks=pytest.mark.slow) for s in (6, 7, 9, 10, 11))])
def test_lazy_choices_write_what_the_full_choices_write(seed):
    """--buffsize auto with lazy choices for the buffers (the kept one's notes made again) writes the file and the
    notes the full choices write, with no more rates worked out (made-up rates: many orders of the files; seed 8
    fails without the promises, seeds 0, 1 and 4 without the replayed races)."""
    from forestcoll.generate import generate
    from forestcoll.msccl.ir import write_algo
    from forestcoll.topology import load_topology

    topo = load_topology("mi250")
    sched = generate(topo, "allgather")
    got = {}
    for lazy in (False, True):
        shared, log = {}, []
        _s, result = buffered_msccl(topo, sched, None, AUTO_BUFFSIZES, 1e-6,
                                    lambda sl, cost, shared=shared, log=log: _Rates(seed, sl, cost, shared, log), lazy=lazy)
        got[lazy] = (write_algo(result.algo), list(result.notes), len(log))
    assert got[True][:2] == got[False][:2]
    assert got[True][2] <= got[False][2]
