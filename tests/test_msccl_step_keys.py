"""The MSCCL lowering's step keys hold each piece's progress as its rank among the pieces' progress values (ints
compare faster than Fractions when thread blocks sort their steps): the same order, so the same files."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import forestcoll.msccl.export as export_mod
from forestcoll.generate import generate
from forestcoll.msccl.export import export_msccl
from forestcoll.msccl.ordering import _progress
from forestcoll.topology import load_topology


def _lowered(monkeypatch, spec: str, collective: str, **options):
    """(pieces, operations) of the last :func:`_build_ops` call of ``export_msccl`` on ``spec``'s optimal trees."""
    seen = []
    real = export_mod._build_ops

    def spy(sched, pieces, *args, **kwargs):
        ops, scratch = real(sched, pieces, *args, **kwargs)
        seen.append((pieces, ops))
        return ops, scratch
    monkeypatch.setattr(export_mod, "_build_ops", spy)
    export_msccl(generate(load_topology(spec), collective), **options)
    return seen[-1]


@pytest.mark.parametrize(("spec", "collective", "options"), [
    ("hypercube:dim=3", "allreduce", {}),
    ("hypercube:dim=3", "allgather", {"outofplace": True, "inplace": False}),
    ("dgx-a100:nodes=2", "allreduce", {"order": "latency"}),
    ("mi250", "reduce_scatter", {"order": "tail"}),
    ("torus:dims=3x3", "allgather", {"per_tree": None}),
])
def test_step_keys_order_the_steps_as_the_progress_fractions_do(monkeypatch, spec, collective, options):
    """Every key's progress is an int, the rank of its piece's Fraction; sorting the operations by the keys with
    the Fraction put back gives the same sequence (a stable sort: equal keys stay equal)."""
    pieces, ops = _lowered(monkeypatch, spec, collective, **options)
    prog = _progress(pieces)
    by_piece = {(pc.root, pc.start): prog[id(pc)] for pc in pieces}
    assert len(by_piece) == len(pieces)
    values = sorted(set(prog.values()))
    assert all(type(op.key[1]) is int for op in ops)

    def old(op):
        if op.kind == "local":  # the root's copy: (instance, -1, root, start), below every progress
            return op.key
        assert values[op.key[1]] == by_piece[(op.key[6], op.key[7])]
        return (op.key[0], by_piece[(op.key[6], op.key[7])], *op.key[2:])
    assert [id(op) for op in sorted(ops, key=old)] == [id(op) for op in sorted(ops, key=lambda op: op.key)]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["ring:n=5", "hypercube:dim=3", "fully-connected:n=4", "switch:n=4"]),
       st.sampled_from(["allgather", "allreduce", "reduce_scatter", "broadcast"]),
       st.sampled_from(["progress", "latency", "tail"]))
def test_step_keys_on_small_fabrics(spec, collective, order):
    """The same on small fabrics, every collective with trees in both directions and every progress order."""
    with pytest.MonkeyPatch.context() as mp:
        test_step_keys_order_the_steps_as_the_progress_fractions_do(mp, spec, collective, {"order": order})
