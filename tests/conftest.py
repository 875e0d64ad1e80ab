"""Shared fixtures and hypothesis strategies for forestcoll's tests."""

from __future__ import annotations

import json
import os
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from forestcoll.topology import Link, Node, make_topology

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FORESTCOLL_SHARED", ROOT.parent / "shared"))


def cli(*args) -> tuple[int, str, str]:
    """Run the forestcoll command line in this process: (exit status, stdout, stderr).

    The same ``main`` the console script calls, without a new interpreter per call (a few tests in
    test_cli.py still start real processes, for the exit status and stderr a shell sees)."""
    import contextlib
    import io

    from forestcoll.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's --help / --version
            code = exc.code if isinstance(exc.code, int) else 0
    return code, out.getvalue(), err.getvalue()


def real_msccl_files(big: int = 500_000) -> list:
    """The real MSCCL files under ../shared/data/msccl-xml as test parameters; files over ``big`` bytes are
    marked slow (the fast tier keeps the small ones)."""
    folder = SHARED / "data" / "msccl-xml"
    paths = sorted(folder.glob("*.xml")) if folder.is_dir() else []
    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.stat().st_size > big else []) for p in paths]


def benchmark(name: str):
    """The module benchmarks/NAME.py, imported as its script imports its siblings (``tables``): with benchmarks/
    first on sys.path for the import only."""
    import importlib
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


def program_link_bytes(prog, links: int) -> list[float]:
    """Bytes a built simulator program moves over each of ``links`` links (its transfers' bytes, summed per link)."""
    moved = [0.0] * links
    for on, nbytes in zip(prog._links, prog._bytes):
        for i in on:
            moved[i] += nbytes
    return moved


def shared_file(*parts: str) -> Path:
    """A file under ../shared, or skip the test when the folder is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(scope="session")
def reference_results() -> dict:
    return json.loads(shared_file("reference", "reference-results.json").read_text())


@pytest.fixture(scope="session")
def paper_topologies() -> dict:
    return json.loads(shared_file("reference", "paper-topologies.json").read_text())


# ----- brute force ---------------------------------------------------------------------------


def brute_force_rate(topo, weights) -> Fraction:
    """min over node sets S with w(S) > 0 and some compute node outside of B+(S)/w(S), by enumeration."""
    n = len(topo.nodes)
    compute = {i for i in range(n) if topo.is_compute[i]}
    best = None
    for size in range(1, n):
        for subset in combinations(range(n), size):
            s = set(subset)
            w = sum(weights[i] for i in s)
            if w == 0 or compute <= s:
                continue
            out = sum((bw for u, v, bw in topo.arcs if u in s and v not in s), Fraction(0))
            ratio = out / w
            if best is None or ratio < best:
                best = ratio
    return best


# ----- strategies ----------------------------------------------------------------------------

bandwidths = st.one_of(
    st.integers(1, 40).map(Fraction),
    st.builds(Fraction, st.integers(1, 60), st.integers(1, 6)),
)


@st.composite
def fabrics(draw, max_compute: int = 5, max_switches: int = 3, symmetric_links: bool | None = None):
    """Random small fabrics: compute nodes and switches, one-way and two-way links, always connected."""
    nc = draw(st.integers(2, max_compute))
    ns = draw(st.integers(0, max_switches))
    names = [f"c{i}" for i in range(nc)] + [f"s{i}" for i in range(ns)]
    nodes = [Node(f"c{i}", "compute") for i in range(nc)] + [Node(f"s{i}", "switch") for i in range(ns)]
    two_way = draw(st.booleans()) if symmetric_links is None else symmetric_links
    links = []

    def add(a, b):
        bw = draw(bandwidths)
        links.append(Link(a, b, bw))
        if two_way:
            links.append(Link(b, a, bw))

    # a backbone cycle through every compute node, some hops routed through a switch
    order = draw(st.permutations(list(range(nc))))
    for i in range(nc):
        a, b = f"c{order[i]}", f"c{order[(i + 1) % nc]}"
        if nc == 2 and i == 1 and two_way:
            break
        if ns and draw(st.booleans()):
            sw = f"s{draw(st.integers(0, ns - 1))}"
            add(a, sw)
            add(sw, b)
        else:
            add(a, b)
    extra = draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(names)), max_size=8))
    for a, b in extra:
        if a != b:
            add(a, b)
    # switches left unattached get one link each way to a compute node
    used = {lk.src for lk in links} | {lk.dst for lk in links}
    for name in names[nc:]:
        if name not in used:
            c = f"c{draw(st.integers(0, nc - 1))}"
            bw = draw(bandwidths)
            links.append(Link(c, name, bw))
            links.append(Link(name, c, bw))
    return make_topology(nodes, links, "random")


@st.composite
def symmetric_fabrics(draw):
    """Fabrics with a declared rotation symmetry: circulant links, optionally boxes on a shared switch."""
    n = draw(st.integers(2, 6))
    offsets = draw(st.lists(st.integers(1, max(1, n - 1)), min_size=1, max_size=3, unique=True))
    nodes = [Node(f"p{i}", "compute") for i in range(n)]
    links = []
    for off in offsets:
        bw = draw(bandwidths)
        for i in range(n):
            links.append(Link(f"p{i}", f"p{(i + off) % n}", bw))
    if 1 not in offsets:  # keep it connected
        bw = draw(bandwidths)
        for i in range(n):
            links.append(Link(f"p{i}", f"p{(i + 1) % n}", bw))
    rotation = {f"p{i}": f"p{(i + 1) % n}" for i in range(n)}
    if draw(st.booleans()):
        nodes.append(Node("hub", "switch"))
        # a switch must receive at least what it sends (it cannot copy)
        up, down = sorted((draw(bandwidths), draw(bandwidths)), reverse=True)
        for i in range(n):
            links.append(Link(f"p{i}", "hub", up))
            links.append(Link("hub", f"p{i}", down))
    return make_topology(nodes, links, "circulant", [rotation])


def refused_for_imbalance(exc: Exception) -> bool:
    """True for the one refusal a random fabric may earn: a switch that sends more than it receives."""
    from forestcoll.errors import TopologyError

    return isinstance(exc, TopologyError) and "can send more than it receives" in str(exc)
