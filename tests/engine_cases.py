"""Programs the event engine is held to, and their recorded results (tests/data/engine_golden.json).

The engine's floating-point operations are part of its contract (docs/simulate.md: the max-min model is sensitive
to the last bit on symmetric fabrics), so a rewrite must give the same floats, not close ones.  Each case builds a
program (catalog trees, baselines, MSCCL files, random programs from fixed seeds) and records two digests: of the
program (so a change in how programs are built is told apart from a change in the engine) and of the result
(time, events, recomputes, every sent and delivered time, bit for bit).  The records were made by the engine of
commit 05a23b7 and checked against the engine of 1c3e9fc.

Update after a deliberate change of a program builder (never to make an engine rewrite pass)::

    python tests/engine_cases.py --update [--slow]
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

MiB = 1 << 20
GOLDEN = Path(__file__).with_name("data") / "engine_golden.json"

# (spec, what, collective): what is k (None: optimal), a baseline name, or "msccl" (the k=1 file)
CATALOG = [
    ("dgx-a100:nodes=2", None, "allreduce"),
    ("dgx-a100:nodes=2", 1, "allgather"),
    ("mi250", None, "allreduce"),
    ("mi250", 2, "allgather"),
    ("mi250:nodes=2", 1, "allreduce"),
    ("dgx-a100:nodes=2", "ring", "allreduce"),
    ("mi250", "ring", "allgather"),
    ("dgx-a100:nodes=2", "double-binary-tree", "allreduce"),
    ("dgx-a100:nodes=2", "hierarchical", "allreduce"),
    ("dgx-a100", "direct", "allreduce"),
    ("dgx-a100:nodes=2", "msccl", "allreduce"),
    ("mi250", "msccl", "allgather"),
]
SLOW_CATALOG = {("mi250:nodes=2", 1, "allreduce")}  # slow at every size
AT_1GIB = [
    ("dgx-a100:nodes=2", 13, "allreduce"),  # the README's `simulate sched.json --size 1GiB`
    ("dgx-a100:nodes=2", None, "allgather"),
    ("mi250:nodes=2", 8, "allreduce"),
    ("mi250:nodes=2", "ring", "allreduce"),
    ("mi250:nodes=2", "double-binary-tree", "allreduce"),
    ("dgx-a100:nodes=2", "msccl", "allreduce"),
]
RANDOM_SEEDS = list(range(48))  # fairness and sharing taken from the seed: every pair 12 times


def catalog_program(spec: str, what, collective: str, size: int):
    """(program, link capacities) of one catalog case at ``size`` bytes, sliced by the default rule."""
    from forestcoll.generate import generate
    from forestcoll.simulate import baselines
    from forestcoll.simulate.core import DEFAULT_MAX_SLICES, DEFAULT_SLICE
    from forestcoll.simulate.network import build_network
    from forestcoll.simulate.trees import tree_program
    from forestcoll.topology import load_topology

    topo = load_topology(spec)
    net = build_network(topo)
    slicing = (float(DEFAULT_SLICE), DEFAULT_MAX_SLICES)
    if what == "msccl":
        from forestcoll.msccl.export import export_msccl
        from forestcoll.simulate.msccl import msccl_program

        algo = export_msccl(generate(topo, collective, k=1)).algo
        return msccl_program(algo, net, float(size), *slicing).build(), net.capacity
    if isinstance(what, str):
        return baselines.BASELINES[what](net, collective, float(size), slicing).build(), net.capacity
    return tree_program(generate(topo, collective, k=what), net, float(size), *slicing).build(), net.capacity


def random_program(seed: int, sizes: list[float]):
    """Streams of slices over a few shared links: data dependencies, latencies, markers, empty transfers, ties."""
    from forestcoll.simulate.engine import ProgramBuilder

    rng = np.random.default_rng(seed)
    nlinks = int(rng.integers(1, 16))
    caps = rng.choice([1e9, 2.5e9, 25e9, 100e9 / 3, 50e9], nlinks)
    prog = ProgramBuilder()
    last: dict[int, int] = {}
    for t in range(int(rng.integers(1, 200))):
        stream = int(rng.integers(0, 10))
        dep = [int(rng.integers(0, t))] if t and rng.random() < 0.6 else []
        if rng.random() < 0.1:
            last[stream] = prog.marker(after_sent=[last.get(stream)], after_delivered=dep)
            continue
        links = rng.choice(nlinks, int(rng.integers(1, min(nlinks, 4) + 1)), replace=False).tolist()
        nbytes = float(rng.choice([*sizes, float(rng.integers(sizes[1], 1 << 22))]))
        last[stream] = prog.transfer(links, nbytes, float(rng.choice([0.0, 1e-6, 5e-6])),
                                     after_sent=[last.get(stream)], after_delivered=dep, stream=stream)
    sharing = ("weighted", "equal")[seed % 2]
    return prog.build(sharing), caps


RANDOM_SIZES = [0.0, 4096.0, 65536.0, 524288.0, 1 << 20]


def random_fairness(seed: int) -> str:
    return ("max-min", "link")[(seed // 2) % 2]


def program_digest(program, capacity) -> str:
    """sha256 of everything the engine reads: the program's arrays, its dependencies and the capacities."""
    h = hashlib.sha256()
    for a in (program.nbytes, program.latency, program.cls, program.class_ptr, program.class_idx,
              program.class_weight, np.asarray(capacity, dtype=float)):
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    for deps in program.deps:
        h.update(np.asarray(deps, dtype=np.int64).tobytes())
        h.update(b";")
    return h.hexdigest()


def result_digest(res) -> str:
    """sha256 of the end time (hex float), the event and recompute counts, and every sent and delivered time."""
    h = hashlib.sha256(f"{float(res.time).hex()} {res.events} {res.recomputes} {res.stopped}".encode())
    h.update(np.ascontiguousarray(res.sent).tobytes())
    h.update(np.ascontiguousarray(res.delivered).tobytes())
    return h.hexdigest()


def case_ids(slow: bool) -> list[str]:
    """Every case id; the slow ones only when ``slow``."""
    ids = []
    for spec, what, coll in CATALOG:
        for size in (1 * MiB, 16 * MiB):
            if slow or (size == MiB and (spec, what, coll) not in SLOW_CATALOG):
                ids.append(f"{spec}|{what}|{coll}|{size}")
    if slow:
        ids += [f"{spec}|{what}|{coll}|{1 << 30}" for spec, what, coll in AT_1GIB]
    ids += [f"mix|{fairness}|{split}" for fairness in ("max-min", "link") for split in (True, False)]
    ids += [f"random|{seed}" for seed in RANDOM_SEEDS]
    return ids


def is_slow(case: str) -> bool:
    return case not in case_ids(slow=False)


def build(case: str):
    """(program, capacity, run keyword arguments) of a case id."""
    kind, *rest = case.split("|")
    if kind == "random":
        seed = int(rest[0])
        program, caps = random_program(seed, RANDOM_SIZES)
        return program, caps, {"fairness": random_fairness(seed)}
    if kind == "mix":
        program, caps = catalog_program("mi250", None, "allreduce", 4 * MiB)
        return program, caps, {"fairness": rest[0], "split": rest[1] == "True"}
    what = rest[0]
    what = None if what == "None" else int(what) if what.isdigit() else what
    program, caps = catalog_program(kind, what, rest[1], int(rest[2]))
    return program, caps, {}


def load() -> dict[str, dict[str, str]]:
    return json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def main(argv: list[str]) -> int:
    from forestcoll.simulate.engine import run

    if "--update" not in argv:
        print(__doc__)
        return 2
    records = load()
    for case in case_ids(slow="--slow" in argv):
        program, caps, kwargs = build(case)
        records[case] = {"program": program_digest(program, caps), "result": result_digest(run(program, caps,
                                                                                              **kwargs))}
        print(case, records[case]["result"][:12], flush=True)
    GOLDEN.parent.mkdir(exist_ok=True)
    tmp = GOLDEN.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1, sort_keys=True) + "\n")
    tmp.replace(GOLDEN)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
