"""Trees kept inside their boxes (msccl/inbox.py): a leaf-spine fabric whose NICs have room left gets optimal trees
that join GPUs of one box through the leaf switch; the packing without such turns keeps the rate and runs faster."""

from __future__ import annotations

from collections import Counter

from forestcoll.generate import generate
from forestcoll.msccl.inbox import INBOX, inbox_candidates, inbox_packing, network_turns, without_turns
from forestcoll.schedule import read_schedule, write_schedule
from forestcoll.simulate.core import simulate
from forestcoll.simulate.network import build_network
from forestcoll.simulate.select import candidate_schedules
from forestcoll.topology import fingerprint, load_topology
from forestcoll.verify import verify

FABRIC = "dgx-h100:nodes=2,fabric=leaf-spine,leaf_ports=8,oversub=2"  # uplinks (2 x 100 GB/s per leaf) bound it


def test_without_turns_keeps_every_link_and_its_capacity():
    topo = load_topology(FABRIC)
    bare = without_turns(topo)
    assert bare is not None and bare.name == topo.name
    renamed = Counter((link.src.split("~")[0], link.dst.split("~")[0], link.bandwidth) for link in bare.links)
    inside = Counter((s, d, bw) for (s, d, bw), n in renamed.items() for _ in range(n) if s == d)
    assert renamed - inside == Counter((link.src, link.dst, link.bandwidth) for link in topo.links)
    assert without_turns(load_topology("dgx-a100:nodes=1")) is None  # one box, no network switch


def test_inbox_packing_keeps_the_optimum_without_turns(tmp_path):
    topo = load_topology(FABRIC)
    for collective in ("allreduce", "allgather"):
        opt = generate(topo, collective)
        assert network_turns(topo, opt) > 0  # the packer fills the NICs' spare room with turns at the leaf
        found = inbox_packing(topo, opt)
        assert found is not None and network_turns(topo, found) == 0
        assert found.algbw == opt.algbw == found.bound_algbw
        assert verify(found, topo).ok
        assert found.record.fingerprint == fingerprint(topo)
        path = tmp_path / f"{collective}.json"
        write_schedule(found, str(path))
        assert verify(read_schedule(str(path)), topo).ok
        assert all("~" not in x for t in found.trees for e in t.edges for x in e.path)


def test_inbox_candidate_beats_the_double_binary_tree_at_16mib():
    topo = load_topology(FABRIC)
    net = build_network(topo)
    cands = candidate_schedules(topo, net, "allreduce", ks=[], height=False, ring=False)
    assert "forestcoll" + INBOX in cands
    size = 16 << 20
    ours = simulate(net, cands["forestcoll" + INBOX], "allreduce", size).algbw_gbps
    dbt = simulate(net, "double-binary-tree", "allreduce", size).algbw_gbps
    assert ours > dbt > simulate(net, cands["forestcoll"], "allreduce", size).algbw_gbps


def test_no_candidate_where_trees_make_no_turn():
    topo = load_topology("dgx-a100:nodes=2")
    opt = generate(topo, "allreduce")
    assert network_turns(topo, opt) == 0
    assert inbox_candidates(topo, {"forestcoll": opt}) == {}
