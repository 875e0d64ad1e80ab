"""``mscclpp.semantics.wire`` pairs channel ends with a lookup of each peer's positions (once per list): the same
pairing as scanning the peer's list for every end."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from mscclpp_plans import gpu, parsed, plan

from forestcoll.mscclpp.semantics import wire


def _scanned(peers_of: dict[tuple[int, str], list[int]], pos: int, ctype: str) -> list[tuple[int, int, int | None]]:
    """(peer, m, partner) of each end of ``pos``'s ``ctype`` list by scanning the peer's whole list (the definition:
    the m-th end towards p pairs with p's m-th end towards ``pos``)."""
    seen: dict[int, int] = {}
    out = []
    for p in peers_of[(pos, ctype)]:
        m = seen.get(p, 0)
        seen[p] = m + 1
        back = [j for j, q in enumerate(peers_of.get((p, ctype), [])) if q == pos]
        out.append((p, m, back[m] if m < len(back) else None))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 5).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.lists(st.integers(0, n - 1), max_size=7), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(0, n - 1), max_size=7), min_size=n, max_size=n))))
def test_channel_ends_pair_as_a_scan_pairs_them(case):
    """Random channel lists (repeated peers, peers that list fewer ends back, self-loops): every end's peer, index
    among the ends towards that peer and partner position equal the scan's."""
    n, memory, port = case
    p = parsed(plan("allgather", [gpu(r, 1, n, 0, [], memory=memory[r] or None, port=port[r] or None)
                                  for r in range(n)]))
    w = wire(p)
    for ctype, lists in (("memory", memory), ("port", port)):
        peers_of = {(r, ctype): lists[r] for r in range(n)}
        for r in range(n):
            got = [(e.peer, e.index, e.ordinal, e.partner) for e in w.channels[(r, ctype)]]
            want = [(peer, i, m, partner) for i, (peer, m, partner) in enumerate(_scanned(peers_of, r, ctype))]
            assert got == want
