"""What the simulator charges a port channel's signal and flush (simulate/mscclpp.py ``port_signal`` /
``port_flushed``): through the NICs the proxy posts the signal on the put's queue pair at once, so it lands right
behind the put's data, and a flush returns once the peer's acknowledgement is back; over CUDA IPC both are copies on
one stream, so the signal follows the put's landing and the flush is their landing (docs/simulate.md, "Port
channels")."""

from __future__ import annotations

import pytest
from mscclpp_plans import NOP, allgather_put, op, parsed, rem

from forestcoll.simulate.mscclpp import simulate_plan
from forestcoll.simulate.network import build_network
from forestcoll.topology import load_topology

TWO_BOXES = """name: two-boxes
boxes:
- box:
    kind: one-gpu
    compute: [gpu]
    switches: [nic]
    links:
    - {between: [gpu, nic], bandwidth: 25GB/s, class: pcie}
    ports:
    - {node: nic, bandwidth: 200Gbps}
  count: 2
fabric: {type: switch}
"""

ONE_BOX = """name: one-box
box:
  kind: two-gpu
  compute: [g0, g1]
  switches: [nic]
  links:
  - {between: [g0, g1], bandwidth: 100GB/s, class: nvlink}
  - {between: [g0, nic], bandwidth: 25GB/s, class: pcie}
  - {between: [g1, nic], bandwidth: 25GB/s, class: pcie}
  ports:
  - {node: nic, bandwidth: 200Gbps}
"""


def _net(tmp_path, text: str):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    return build_network(load_topology(str(path)))


def _time(net, flush: bool, **kw) -> float:
    """One 64-byte call of two GPUs that put their slot into the peer's through a port channel and signal it (``put``
    then ``signal``; with ``flush``: ``pwsf``, which waits for its flush), then wait for the peer's signal."""
    return simulate_plan(net, parsed(allgather_put(port=True, handshake=False, flush=flush)), 64, **kw).time_s


def test_a_port_signal_through_the_nics_lands_right_behind_its_put(tmp_path):
    """Between boxes (one network latency L = 12 us, GPU-NIC-switch-NIC-GPU) the wait for the signal ends one L after
    the put left, not two (the proxy does not wait for the put to land before it posts the signal)."""
    net = _net(tmp_path, TWO_BOXES)
    lat = net.route(0, 1)[1]
    assert lat == pytest.approx(12e-6)
    assert _time(net, flush=False) == pytest.approx(lat, rel=1e-3)


def _put_then_flush() -> dict:
    """Each GPU puts its slot into the peer's through its port channel and flushes it: no signal, no wait."""
    d = allgather_put(port=True, handshake=False, flush=False)
    for r, g in enumerate(d["gpus"]):
        tb = g["threadblocks"][0]
        put = next(x for x in tb["ops"] if x["name"] == "put")
        tb["ops"] = [put, NOP, op("flush", channel_type="port", channel_ids=[0], dst=[rem(0, r)])]
    return d


def test_a_port_flush_through_the_nics_waits_for_the_acknowledgement(tmp_path):
    """A flush between boxes returns when the peer's acknowledgement of the put is back, one latency after it landed:
    two L in all (``pwsf`` likewise, whose signal lands with the put)."""
    net = _net(tmp_path, TWO_BOXES)
    lat = net.route(0, 1)[1]
    assert simulate_plan(net, parsed(_put_then_flush()), 64).time_s == pytest.approx(2 * lat, rel=1e-3)
    assert _time(net, flush=True) == pytest.approx(2 * lat, rel=1e-3)


def test_over_cuda_ipc_a_port_signal_follows_the_landed_put(tmp_path):
    """Inside a box (CUDA IPC: one stream) the signal's copy starts when the put's has landed: two in-box latencies;
    the flush (stream sync) returns when both have landed, which the wait needs anyway."""
    net = _net(tmp_path, ONE_BOX)
    ipc = net.route(0, 1)[1]
    assert _time(net, flush=False) == pytest.approx(2 * ipc, rel=1e-3)
    assert _time(net, flush=True) == pytest.approx(2 * ipc, rel=1e-3)
    assert simulate_plan(net, parsed(_put_then_flush()), 64).time_s == pytest.approx(ipc, rel=1e-3)
