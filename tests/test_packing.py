"""Edmonds' theorem, constructively: packed trees span, respect capacities and meet every demand."""

from collections import defaultdict

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forestcoll.trees.packing import Packer, pack_trees
from forestcoll.trees.symmetric import SymmetricPacker, pack_trees_symmetric


def check_packing(n, caps, demand, trees):
    load = defaultdict(int)
    count = defaultdict(int)
    for t in trees:
        count[t.root] += t.multiplicity
        reached = {t.root}
        for x, y in t.arcs:
            assert x in reached and y not in reached  # parents first, one parent each
            reached.add(y)
            load[(x, y)] += t.multiplicity
        assert reached == set(range(n))
    assert all(count[r] == demand[r] for r in range(n) if demand[r])
    assert all(l <= caps.get(a, 0) for a, l in load.items())


@st.composite
def edmonds_instances(draw):
    """Random digraphs with demands that Edmonds' condition admits (checked by max-flow)."""
    n = draw(st.integers(2, 6))
    caps = {}
    for u in range(n):
        for v in range(n):
            if u != v and draw(st.booleans()):
                caps[(u, v)] = draw(st.integers(1, 12))
    for u in range(n):  # a ring keeps it strongly connected
        caps[(u, (u + 1) % n)] = caps.get((u, (u + 1) % n), 0) + draw(st.integers(1, 6))
    g = nx.DiGraph()
    for (u, v), c in caps.items():
        g.add_edge(u, v, capacity=c)
    demand = [draw(st.integers(0, 3)) for _ in range(n)]
    if sum(demand) == 0:
        demand[0] = 1
    for r in range(n):
        g.add_edge("s", r, capacity=demand[r])
    # shrink the demand until the condition holds
    while min(nx.maximum_flow_value(g, "s", v) for v in range(n)) < sum(demand):
        r = max(range(n), key=lambda i: demand[i])
        demand[r] -= 1
        g["s"][r]["capacity"] = demand[r]
        if sum(demand) == 0:
            demand[r] = 1
            g["s"][r]["capacity"] = 1
            for key in caps:
                caps[key] += 5
                g[key[0]][key[1]]["capacity"] = caps[key]
    return n, caps, demand


@given(edmonds_instances())
def test_packer_meets_edmonds(instance):
    n, caps, demand = instance
    trees = pack_trees(n, caps, demand).trees
    check_packing(n, caps, demand, trees)


def test_ring_needs_paths():
    # a one-way ring can carry exactly one tree per node: the paths around it
    caps = {(i, (i + 1) % 5): 5 for i in range(5)}
    trees = pack_trees(5, caps, [1] * 5).trees
    check_packing(5, caps, [1] * 5, trees)
    assert all(len(t.arcs) == 4 for t in trees)


def rotation_group(n):
    return [[(v + g) % n for v in range(n)] for g in range(n)]


@pytest.mark.parametrize("n, offsets, cap, k", [(6, (1, 5), 5, 2), (8, (1, 2, 7), 3, 1), (5, (1, 3), 4, 2), (7, (1,), 6, 1)])
def test_symmetric_packer_on_circulants(n, offsets, cap, k):
    caps = {(v, (v + o) % n): cap for v in range(n) for o in offsets}
    g = nx.DiGraph()
    for (u, v), c in caps.items():
        g.add_edge(u, v, capacity=c)
    for r in range(n):
        g.add_edge("s", r, capacity=k)
    if min(nx.maximum_flow_value(g, "s", v) for v in range(n)) < k * n:
        pytest.skip("demand not feasible")
    result = pack_trees_symmetric(n, caps, [k] * n, rotation_group(n))
    check_packing(n, caps, [k] * n, result.trees)
    if result.stats["symmetric_trees"] == len(result.trees):
        # every tree is the rotation of a tree rooted at node 0
        base = [t for t in result.trees if t.root == 0]
        shapes = {tuple(sorted(((x - t.root) % n, (y - t.root) % n) for x, y in t.arcs)) for t in result.trees}
        assert len(shapes) <= len(base)


def test_symmetric_fallback_finishes_from_a_valid_state():
    # a 1-way ring of 4 with capacity 1: the only trees are the 4 paths; symmetric packing finds them,
    # and the plain packer continuing from any valid state must too
    n = 4
    caps = {(i, (i + 1) % n): 3 for i in range(n)}
    sym = SymmetricPacker(n, caps, [1] * n, rotation_group(n))
    trees, done = sym.run()
    rest = Packer(n, sym.residual(), [int(p) for p in sym.pool])
    all_trees = trees + rest.run().trees
    check_packing(n, caps, [1] * n, all_trees)


def test_check_with_one_source_per_image_class_equals_one_per_element():
    # Z_2 x Z_4 acting freely on 8 ranks (rank = 4a + b): V = {0, 1, 2, 3} is fixed by the Z_4 part, so the
    # check merges its 8 sources s_g into 2; every answer (violated slack and minimal min cut) must stay the same
    n = 8
    group = [[4 * ((r // 4 + a) % 2) + (r % 4 + b) % 4 for r in range(n)] for a in range(2) for b in range(4)]
    caps = {(r, s): 2 + (r + s) % 3 for r in range(n) for s in range(n) if r != s}
    for verts, batch in (([0, 1, 2], [(0, 3)]), ([0, 1], [(1, 2)]), (list(range(7)), [(3, 7)])):
        answers = []
        for free, blocks in ((True, []), (False, []), (False, [[r // 2 for r in range(n)]]), (True, [[r % 4 for r in range(n)]])):
            sym = SymmetricPacker(n, caps, [3] * n, group, blocks)
            sym.free = free  # False: no merging (one source per element); blocks: whole blocks fed through one node
            sym.FEED_BLOCKS_FROM = 0  # weigh the blocks however few the arcs
            tree = [(verts[0], v) for v in verts[1:]]
            for c in (1, 2, 3):
                found = sym._check(verts[0], tree, batch, verts + [y for _, y in batch], 3, c)
                answers.append(None if found is None else [(s, m.tolist()) for s, m in found])
        assert answers[:3] == answers[3:6] == answers[6:9] == answers[9:]
    assert len(SymmetricPacker(n, caps, [3] * n, group)._image_classes([0, 1, 2, 3])) == 2


def test_check_through_block_nodes_equals_plain_check():
    # Z_16 rotations; V = 12 consecutive ranks: most images hold whole blocks of 4, so the check feeds them
    # through block nodes; answers must equal the plain check's
    n = 16
    group = rotation_group(n)
    caps = {(r, s): 1 + (r * 3 + s) % 4 for r in range(n) for s in range(n) if r != s}
    verts, batch = list(range(11)), [(0, 11)]
    tree = [(0, v) for v in verts[1:]]
    answers = []
    for blocks in ([], [[r // 4 for r in range(n)]]):
        sym = SymmetricPacker(n, caps, [2] * n, group, blocks)
        sym.FEED_BLOCKS_FROM = 0  # weigh the blocks however few the arcs
        if blocks:
            images = sym.G[sym._image_classes(verts + [11])[:, 0]][:, list(range(12))]
            assert sym._feeds(images, n + 1)[2] > n + 1 + len(images)  # block nodes were used
        for c in (1, 2):
            found = sym._check(0, tree, batch, verts + [11], 2, c)
            answers.append(None if found is None else [(s, m.tolist()) for s, m in found])
    assert answers[:2] == answers[2:] and any(answers)


@given(st.integers(2, 24), st.integers(0, 2**24 - 1), st.integers(0, 7), st.sampled_from([1 << 22, 8, 16]))
def test_learned_set_columns_are_the_images_by_rank(n, bits, shift, block):
    # column v of a learned set X holds bit g iff G[g, v] lies in X; the layer loop's slack from those bits
    # equals the slack counted on the boolean images directly (block 8 / 16: the ranks packed a block at a time)
    import numpy as np

    caps = {(r, s): 1 + (r + s + shift) % 3 for r in range(n) for s in range(n) if r != s}
    sym = SymmetricPacker(n, caps, [2] * n, rotation_group(n))
    sym.COLUMN_BLOCK = block
    sink = np.array([(bits >> ((v + shift) % 24)) & 1 == 1 for v in range(n)])
    images = sink[sym.G]
    columns = sym._columns(sink)
    assert [[(columns[v] >> g) & 1 == 1 for v in range(n)] for g in range(sym.h)] == images.tolist()
    verts = list(range(0, n, 2))
    met = 0
    for v in verts:
        met |= columns[v]
    missed = int(np.count_nonzero(~images[:, verts].any(axis=1)))
    rho = int(sym.res[~sink[sym.tails] & sink[sym.heads]].sum())
    assert sym._slack(met, 3, *sym._cut(sink)) == rho - int(sym.pool[~sink].sum()) - 3 * missed


def _flow_answer(packer, x, y, mult):
    """admissible's answer from the max-flow alone (no shortcut)."""
    c = min(mult, packer.res.get((x, y), 0))
    if c <= 0:
        return 0
    caps = packer.capvec.copy()
    caps[len(packer.arc_slots) + x] = packer.big
    return max(0, min(c, packer.net.value(caps, packer.n, y) - packer.pool_total))


@given(edmonds_instances(), st.integers(0, 5), st.integers(1, 4))
def test_admissible_shortcut_agrees_with_the_max_flow(instance, grown, mult):
    # the test answers from res(x, y) + pool[y] when that covers the pool: the same as the max-flow, in any
    # state (after some trees, with the next root's units taken out of the pool)
    n, caps, demand = instance
    packer = Packer(n, caps, demand)
    roots = [r for r in range(n) if demand[r] > 0]
    for r in roots[:grown]:
        packer.grow(r)
    left = [r for r in range(n) if packer.pool[r] > 0]
    if left:
        packer._rebuild()
        packer._set_pool(left[0], packer.pool[left[0]] - min(mult, packer.pool[left[0]]))
    else:
        packer._rebuild()
    for x in range(n):
        for y in range(n):
            if x != y:
                assert packer.admissible(x, y, mult) == _flow_answer(packer, x, y, mult)
