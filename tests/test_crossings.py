"""Parent swaps between packed trees (trees/crossings.py): every arc keeps its units, trees stay spanning trees no
higher than before, and the most box crossings on a chain never grows (it shrinks where a swap exists)."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.trees.crossings import fewer_crossings
from forestcoll.trees.packing import Tree


def crossings_and_height(tree, crosses):
    """(most crossings on a root-leaf chain, height in hops); checks the arcs form a spanning out-tree from the root,
    parents first."""
    depth, crossed = {tree.root: 0}, {tree.root: 0}
    for x, y in tree.arcs:
        assert x in depth and y not in depth  # parents first, one parent each
        depth[y] = depth[x] + 1
        crossed[y] = crossed[x] + crosses(x, y)
    return max(crossed.values()), max(depth.values())


@st.composite
def forests(draw):
    """Random trees on n nodes in a few boxes, multiplicities 1-2 (so partners exist)."""
    n = draw(st.integers(3, 9))
    box = [draw(st.integers(0, 3)) for _ in range(n)]
    trees = []
    for _ in range(draw(st.integers(1, 8))):
        root = draw(st.integers(0, n - 1))
        order = [root] + draw(st.permutations([v for v in range(n) if v != root]))
        arcs = tuple((order[draw(st.integers(0, i - 1))], order[i]) for i in range(1, n))
        trees.append(Tree(root, draw(st.integers(1, 2)), arcs))
    return box, trees


@settings(max_examples=200, deadline=None)
@given(forests())
def test_swaps_keep_units_trees_and_heights(inst):
    box, trees = inst

    def crosses(u, v):
        return box[u] != box[v]

    out, swaps = fewer_crossings(trees, crosses)
    assert len(out) == len(trees)

    def units(ts):
        c = Counter()
        for t in ts:
            for a in t.arcs:
                c[a] += t.multiplicity
        return c

    assert units(out) == units(trees)  # link loads, capacities, optimality: unchanged
    before = [crossings_and_height(t, crosses) for t in trees]
    after = [crossings_and_height(t, crosses) for t in out]
    assert [(t.root, t.multiplicity) for t in out] == [(t.root, t.multiplicity) for t in trees]
    assert max(h for _, h in after) <= max(h for _, h in before)
    assert max(c for c, _ in after) <= max(c for c, _ in before)
    if not swaps:
        assert out == trees


def test_three_crossings_in_a_row_become_two():
    """H100 x 4 (rail) in small: root 0 in box 0; ranks 1, 2, 3 alone in boxes 1, 2, 3.  Tree A chains 0 -> 1 -> 3
    -> 2 (three crossings), tree B of the same root and multiplicity is a star.  Swapping the parents of 2 gives
    A 0 -> 2 and B 3 -> 2: both cross at most twice on a chain, neither higher than A was."""
    box = [0, 1, 2, 3]

    def crosses(u, v):
        return box[u] != box[v]

    a = Tree(0, 1, ((0, 1), (1, 3), (3, 2)))
    b = Tree(0, 1, ((0, 1), (0, 2), (0, 3)))
    out, swaps = fewer_crossings([a, b], crosses)
    assert swaps == 1
    assert [crossings_and_height(t, crosses)[0] for t in out] == [2, 2]
    assert sorted(out[0].arcs) == [(0, 1), (0, 2), (1, 3)] and sorted(out[1].arcs) == [(0, 1), (0, 3), (3, 2)]
