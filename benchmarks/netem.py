"""forestcoll.torch on an emulated fabric: Linux network namespaces, bridges, veth pairs, tc rate limits.

Builds BOXES x PER_BOX ranks, each in its own network namespace with one veth
port into its box's bridge (``--intra`` each way); the box bridges are joined in
a chain by veth uplinks (``--uplink`` each way), so traffic between boxes
shares one slow link, as in a cluster whose boxes have fast local links and a
thin network.  Every rank runs in its namespace (gloo over TCP), and the script
compares, per size: forestcoll's all_reduce (optimal k and k = 1 on the
asynchronous executor, optimal k on the synchronous rounds), gloo's own
all_reduce, and the simulator's predictions for the same fabric; then a matrix
product fused with its all-reduce (``matmul_all_reduce``) against
compute-then-communicate.  Needs root, ``ip`` and ``tc`` (iproute2); not in CI.
Everything it creates carries the prefix ``fcb`` and is removed at the end.

    sudo .venv/bin/python benchmarks/netem.py                 # table
    sudo .venv/bin/python benchmarks/netem.py --markdown      # for the README
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from fractions import Fraction

PREFIX = "fcb"
PAYLOAD = Fraction(1448, 1514)  # TCP payload bytes per frame tc counts: MTU 1500 - IP 20 - TCP 32 (timestamps); + 14
SUBNET = "10.213.0"
PORT = 29517
# the executor's pipeline slicing, also given to the simulator: the prediction is of the plan the ranks run
SLICING = {"slice_bytes": 1 << 20, "max_slices": None}


# ----- the fabric ---------------------------------------------------------------------------

def rate_gbps(text: str) -> Fraction:
    """tc-style rate ('800mbit', '2gbit') in GB/s, exact."""
    t = text.strip().lower()
    for unit, mult in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if t.endswith(unit):
            return Fraction(t[: -len(unit)]) * mult / 8 / 10**9
    raise SystemExit(f"netem.py: error: rate {text!r}: use e.g. 800mbit or 2gbit")


def topology(boxes: int, per_box: int, intra: Fraction, uplink: Fraction, latency_us: Fraction):
    """The same fabric as a forestcoll topology (bridges are switches)."""
    from forestcoll import TopologyBuilder

    b = TopologyBuilder(f"netem-{boxes}x{per_box}")
    for i in range(boxes):
        b.switch(f"box{i}")
    for r in range(boxes * per_box):
        b.compute(f"r{r}")
    links = []
    for r in range(boxes * per_box):
        links.append((f"r{r}", f"box{r // per_box}", intra))
    for i in range(boxes - 1):
        links.append((f"box{i}", f"box{i + 1}", uplink))
    for a, c, bw in links:
        b.link(a, c, bw, cls="eth", latency_us=latency_us)
        b.link(c, a, bw, cls="eth", latency_us=latency_us)
    return b.build()


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def shape(ns: str, dev: str, rate: str) -> None:
    """Token bucket on ``dev``'s egress; the bucket holds a few 64 KB GSO segments."""
    bits = float(rate_gbps(rate)) * 8e9
    burst = max(256 * 1024, int(bits / 8 / 250))
    sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
       "burst", str(burst), "latency", "100ms")


def build(boxes: int, per_box: int, intra: str, uplink: str) -> list[str]:
    """Create the namespaces; returns their names (for cleanup)."""
    fab = f"{PREFIX}-fab"
    made = [fab]
    sh("ip", "netns", "add", fab)
    sh("ip", "-n", fab, "link", "set", "lo", "up")
    for i in range(boxes):
        sh("ip", "-n", fab, "link", "add", f"br{i}", "type", "bridge")
        sh("ip", "-n", fab, "link", "set", f"br{i}", "up")
    for i in range(boxes - 1):
        a, c = f"up{i}a", f"up{i}b"
        sh("ip", "-n", fab, "link", "add", a, "type", "veth", "peer", "name", c)
        sh("ip", "-n", fab, "link", "set", a, "master", f"br{i}", "up")
        sh("ip", "-n", fab, "link", "set", c, "master", f"br{i + 1}", "up")
        shape(fab, a, uplink)
        shape(fab, c, uplink)
    for r in range(boxes * per_box):
        ns = f"{PREFIX}-r{r}"
        made.append(ns)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", f"{PREFIX}p{r}", "type", "veth", "peer", "name", f"{PREFIX}h{r}")
        sh("ip", "link", "set", f"{PREFIX}p{r}", "netns", fab)
        sh("ip", "link", "set", f"{PREFIX}h{r}", "netns", ns)
        sh("ip", "-n", ns, "link", "set", f"{PREFIX}h{r}", "name", "fc0")
        sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{r + 1}/24", "dev", "fc0")
        sh("ip", "-n", ns, "link", "set", "fc0", "up")
        sh("ip", "-n", fab, "link", "set", f"{PREFIX}p{r}", "master", f"br{r // per_box}", "up")
        shape(ns, "fc0", intra)
        shape(fab, f"{PREFIX}p{r}", intra)
    return made


TCP_COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts", "TcpExtTCPLossProbes", "TcpExtDelayedACKs")


def net_counters(world: int) -> dict[str, int]:
    """What the fabric did to the ranks' TCP: the ranks' retransmissions, timeouts, loss probes and delayed
    ACKs (summed over their namespaces) and the packets every tc queue dropped (``tc_dropped``)."""
    total = dict.fromkeys(TCP_COUNTERS, 0)
    for r in range(world):
        out = subprocess.run(["ip", "netns", "exec", f"{PREFIX}-r{r}", "nstat", "-asz", *TCP_COUNTERS],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in total:
                total[parts[0]] += int(parts[1])
    dropped = 0
    for ns in [f"{PREFIX}-fab"] + [f"{PREFIX}-r{r}" for r in range(world)]:
        out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show"], capture_output=True,
                             text=True).stdout
        words = out.replace(",", " ").split()
        dropped += sum(int(words[i + 1]) for i, w in enumerate(words[:-1]) if w == "dropped")
    total["tc_dropped"] = dropped
    return total


def cleanup(namespaces: list[str]) -> None:
    for ns in reversed(namespaces):
        subprocess.run(["ip", "netns", "del", ns], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


# every millisecond, the bytes sent so far on each uplink end (run inside the fabric's namespace); SIGINT writes them
SAMPLER = """
import glob, json, sys, time
devs = sorted(p.split("/")[4] for p in glob.glob("/sys/class/net/up*"))
files = [open(f"/sys/class/net/{d}/statistics/tx_bytes") for d in devs]
rows = []
try:
    while True:
        row = [time.perf_counter()]
        for f in files:
            f.seek(0)
            row.append(int(f.read()))
        rows.append(row)
        time.sleep(0.001)
except KeyboardInterrupt:
    pass
with open(sys.argv[1], "w") as out:
    json.dump({"devices": devs, "rows": rows}, out)
"""


# ----- one rank -----------------------------------------------------------------------------

def worker(args: argparse.Namespace) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    import forestcoll.torch as fct

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{SUBNET}.1:{PORT}", rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=300))
    rank, world = args.rank, args.world
    slicing = dict(SLICING, max_slices=args.max_slices)
    comms = {name: fct.Communicator(path, mode="rounds" if name.endswith("-rounds") else "async",
                                    threads=not name.endswith("-inorder"), **slicing)
             for name, path in json.loads(args.schedules).items()}

    cpu: dict[str, float] = {}  # label -> CPU s per call, summed over the ranks (all threads)

    def timed(fn, reps: int, label: str | None = None) -> float:
        """Median over ``reps`` of the slowest rank's time for ``fn`` (after a warm-up); with ``label``, the
        ranks' CPU seconds per call (process time of all threads, summed over ranks) go to ``cpu[label]``."""
        fn()
        times, spent = [], 0.0
        for _ in range(reps):
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            t1, c1 = time.perf_counter(), time.process_time()
            spent += c1 - c0
            dt = torch.tensor([t1 - t0], dtype=torch.float64)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            times.append(dt.item())
        if label is not None:
            total = torch.tensor([spent / reps], dtype=torch.float64)
            dist.all_reduce(total)
            cpu[label] = total.item()
        return sorted(times)[len(times) // 2]

    out: dict = {"allreduce": [], "p2p": [], "overlap": []}
    # links as the ranks see them: one message rank 0 -> 1 (inside a box) and 0 -> last (across the uplink)
    probe = torch.ones(4 << 20, dtype=torch.float32)  # 16 MiB
    for peer in (1, world - 1):
        def send_recv(peer=peer):
            if rank == 0:
                dist.send(probe, peer)
            elif rank == peer:
                dist.recv(probe, 0)
        out["p2p"].append({"peer": peer, "bytes": probe.numel() * 4, "time_s": timed(send_recv, 2)})
    for size in args.sizes:
        x = torch.ones(size // 4, dtype=torch.float32)
        row = {"size_bytes": size}
        for name, comm in comms.items():
            row[name] = timed(lambda comm=comm, x=x: comm.all_reduce(x), args.reps, name)
            row[f"{name} cpu"] = cpu[name]
        row["gloo"] = timed(lambda x=x: dist.all_reduce(x), args.reps, "gloo")
        row["gloo cpu"] = cpu["gloo"]
        out["allreduce"].append(row)
    # overlap: (M x K) @ (K x N), then all-reduce of the M x N product
    if args.trace:  # one traced call per rank at the largest size: the executor's timeline (see --trace)
        x = torch.ones(args.sizes[-1] // 4, dtype=torch.float32)
        comm = comms["forestcoll"]
        comm.all_reduce(x)
        dist.barrier()
        comm.trace = []
        comm.all_reduce(x)
        trace, comm.trace = comm.trace, None
        ops = comm.async_plan_ops("allreduce", x.numel(), x.dtype)
        with open(os.path.join(args.trace, f"rank{rank}.json"), "w") as f:
            json.dump({"rank": rank, "events": trace,
                       "ops": [{"kind": o.kind, "peer": o.message.peer, "round": o.round, "bytes": o.message.numel * 4,
                                "after": list(o.after)} for o in ops]}, f)
    if args.quick:
        if rank == 0:
            with open(args.out, "w") as f:
                json.dump(out, f)
        dist.destroy_process_group()
        return
    m, k, n = args.matmul
    g = torch.Generator().manual_seed(rank)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    comm = comms["forestcoll"]
    compute = timed(lambda: a @ b, args.reps)
    serial = timed(lambda: comm.all_reduce(a @ b), args.reps)
    fused = {blocks: timed(lambda blocks=blocks: fct.matmul_all_reduce(a, b, comm, blocks=blocks), args.reps)
             for blocks in (2, 4, 8)}
    communicate = timed(lambda: comm.all_reduce(torch.ones(m * n)), args.reps)
    out["overlap"] = {"shape": [m, k, n], "compute_s": compute, "communicate_s": communicate,
                      "serial_s": serial, "fused_s": {str(b_): t for b_, t in fused.items()}}
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


# ----- driver -------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boxes", type=int, default=2)
    ap.add_argument("--per-box", type=int, default=4)
    ap.add_argument("--intra", default="800mbit", help="rate of every rank's port, each way (tc syntax)")
    ap.add_argument("--uplink", default="200mbit", help="rate of the link between boxes, each way")
    ap.add_argument("--latency-us", default="60", help="per-hop latency the simulator assumes (us)")
    ap.add_argument("--sizes", default="1MiB,4MiB,16MiB")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--matmul", default="2048,1024,1024", help="M,K,N of the overlap test")
    ap.add_argument("--max-slices", type=int, default=SLICING["max_slices"], help="cap on the slices per piece, for "
                    "the ranks and the prediction alike (default: none, as the simulator)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--variants", default="k1,rounds,inorder", help="forestcoll variants besides the asynchronous "
                    "executor on the optimal schedule: k1 (a k = 1 schedule), rounds (synchronous executor), inorder "
                    "(threads=False); comma-separated, may be empty")
    ap.add_argument("--quick", action="store_true", help="no overlap test and no variants unless --variants is given "
                    "(for measuring a change to the executor)")
    ap.add_argument("--trace", metavar="DIR", help="write each rank's timeline of one asynchronous all-reduce at the "
                    "largest size (rankR.json) and the uplink's bytes over time (uplink.json) into DIR")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--schedules", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.matmul = [int(v) for v in str(args.matmul).split(",")]
    if args.max_slices is not None and args.max_slices < 1:
        ap.error(f"--max-slices must be >= 1, got {args.max_slices}")
    if args.quick and "--variants" not in sys.argv:
        args.variants = ""
    if args.worker:
        args.sizes = [int(v) for v in args.sizes.split(",")]
        worker(args)
        return
    if os.geteuid() != 0:
        raise SystemExit("netem.py: error: needs root (network namespaces and tc); run it with sudo")
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            raise SystemExit(f"netem.py: error: {tool} not found; install iproute2")
    from forestcoll.units import format_size, parse_size

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    world = args.boxes * args.per_box

    from rich.console import Console
    from tables import show

    import forestcoll
    from forestcoll.schedule import schedule_to_dict
    from forestcoll.simulate import build_network, simulate

    topo = topology(args.boxes, args.per_box, rate_gbps(args.intra), rate_gbps(args.uplink), Fraction(args.latency_us))
    slicing = dict(SLICING, max_slices=args.max_slices)
    tmp = tempfile.mkdtemp(prefix="fcb-")
    scheds = {"forestcoll": forestcoll.generate(topo, "allreduce")}
    if scheds["forestcoll"].k != 1:
        scheds["forestcoll-k1"] = forestcoll.generate(topo, "allreduce", k=1)
    paths = {}
    for name, s in scheds.items():
        paths[name] = os.path.join(tmp, f"{name}.json")
        with open(paths[name], "w") as f:
            json.dump(schedule_to_dict(s), f)
    variants = {v.strip() for v in args.variants.split(",") if v.strip()}
    if variants - {"k1", "rounds", "inorder"}:
        raise SystemExit(f"netem.py: error: --variants: unknown {sorted(variants - {'k1', 'rounds', 'inorder'})}; "
                         f"use k1, rounds, inorder")
    if "k1" not in variants:
        scheds.pop("forestcoll-k1", None)
        paths.pop("forestcoll-k1", None)
    if "rounds" in variants:
        paths["forestcoll-rounds"] = paths["forestcoll"]  # the same schedule on the synchronous executor
        scheds["forestcoll-rounds"] = scheds["forestcoll"]
    if "inorder" in variants:
        paths["forestcoll-inorder"] = paths["forestcoll"]  # asynchronous, receives waited in order by the main thread
        scheds["forestcoll-inorder"] = scheds["forestcoll"]
    namespaces: list[str] = []

    def stop(*_a: object) -> None:
        cleanup(namespaces)
        raise SystemExit(130)

    signal.signal(signal.SIGTERM, stop)
    result_path = os.path.join(tmp, "result.json")
    trace_dir = os.path.abspath(args.trace) if args.trace else None
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    sampler = None
    cleanup([f"{PREFIX}-fab"] + [f"{PREFIX}-r{r}" for r in range(world)])  # leftovers of an interrupted run
    try:
        namespaces = build(args.boxes, args.per_box, args.intra, args.uplink)
        if trace_dir:
            sampler = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-fab", sys.executable, "-c", SAMPLER,
                                        os.path.join(trace_dir, "uplink.json")])
        procs = []
        load_before, started = os.getloadavg()[0], time.perf_counter()
        env = dict(os.environ, GLOO_SOCKET_IFNAME="fc0", OMP_NUM_THREADS="1")
        for r in range(world):
            cmd = ["ip", "netns", "exec", f"{PREFIX}-r{r}", sys.executable, os.path.abspath(__file__), "--worker",
                   "--rank", str(r), "--world", str(world), "--schedules", json.dumps(paths),
                   "--sizes", ",".join(map(str, sizes)), "--reps", str(args.reps), "--out", result_path,
                   "--matmul", ",".join(map(str, args.matmul))] + (["--trace", trace_dir] if trace_dir else []) + \
                (["--quick"] if args.quick else []) + (["--max-slices", str(args.max_slices)] if args.max_slices else [])
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait(timeout=3600) for p in procs]
        wall, load_after = time.perf_counter() - started, os.getloadavg()[0]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = usage.ru_utime + usage.ru_stime
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(timeout=60)
        counters = net_counters(world)
        if any(codes):
            raise SystemExit(f"netem.py: error: ranks exited with {codes}")
    finally:
        cleanup(namespaces)
    with open(result_path) as f:
        res = json.load(f)
    shutil.rmtree(tmp, ignore_errors=True)

    net = build_network(topo)
    # the fabric the emulation provides: tc tbf counts whole frames, TCP moves payload bytes
    payload_topo = topology(args.boxes, args.per_box, rate_gbps(args.intra) * PAYLOAD, rate_gbps(args.uplink) * PAYLOAD,
                            Fraction(args.latency_us))
    payload_net = build_network(payload_topo)
    bound = scheds["forestcoll"].bound_algbw
    print(f"fabric: {args.boxes} boxes x {args.per_box} ranks, ports {args.intra} each way, uplink {args.uplink} "
          f"each way; forestcoll allreduce k={scheds['forestcoll'].k} ({len(scheds['forestcoll'].trees)} trees), "
          f"exact bound {float(bound) * 1000:.1f} MB/s algbw; simulator latency {args.latency_us} us per hop")
    print(f"payload rate: ports {float(rate_gbps(args.intra) * PAYLOAD) * 1000:.1f} MB/s, uplink "
          f"{float(rate_gbps(args.uplink) * PAYLOAD) * 1000:.1f} MB/s = line rate x 1448/1514 (TCP payload per "
          f"1514-byte frame at MTU 1500; tc tbf counts the frame); 'payload' predictions simulate that fabric, "
          f"'line' ones the nominal rates")
    cap = "no cap" if slicing["max_slices"] is None else f"at most {slicing['max_slices']} per piece"
    print(f"slicing (ranks and predictions): {slicing['slice_bytes']} B slices, {cap}")
    for p in res["p2p"]:
        print(f"link check: rank 0 -> {p['peer']}: {p['bytes'] / p['time_s'] / 1e6:.1f} MB/s measured")
    print(f"ranks: {cpu:.1f} CPU s in {wall:.1f} s wall (all 8 ranks, whole run); load average {load_before:.2f} "
          f"before, {load_after:.2f} after ({os.cpu_count()} cores)")
    print("network (whole run, all ranks): " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    extra = [n for n in scheds if n != "forestcoll"]
    header = ["size", "forestcoll s", *[f"{n} s" for n in extra], "gloo s", "gloo / forestcoll",
              "CPU s per call (forestcoll / gloo, 8 ranks)",
              "predicted s (payload)", "measured / predicted (payload)", "predicted s (line)",
              "measured / predicted (line)", "ring predicted s (payload)", "gloo / ring predicted"]
    rows = []
    for row in res["allreduce"]:
        size = row["size_bytes"]
        pred = simulate(payload_net, scheds["forestcoll"], "allreduce", size, **slicing).time_s
        line = simulate(net, scheds["forestcoll"], "allreduce", size, **slicing).time_s
        ring = simulate(payload_net, "ring", "allreduce", size).time_s
        rows.append([format_size(size), f"{row['forestcoll']:.3f}", *[f"{row[n]:.3f}" for n in extra], f"{row['gloo']:.3f}",
                     f"{row['gloo'] / row['forestcoll']:.2f}x",
                     f"{row['forestcoll cpu']:.3f} / {row['gloo cpu']:.3f}", f"{pred:.3f}", f"{row['forestcoll'] / pred:.2f}",
                     f"{line:.3f}", f"{row['forestcoll'] / line:.2f}", f"{ring:.3f}", f"{row['gloo'] / ring:.2f}"])
    show(Console(), "", header, rows, args.markdown, 1)
    ov = res["overlap"]
    if not ov:
        return
    m, k, n = ov["shape"]
    print(f"\noverlap: ({m} x {k}) @ ({k} x {n}) float32 then all-reduce of the {m * n * 4 / 2**20:.0f} MiB product")
    orow = [["compute alone", f"{ov['compute_s']:.3f}", ""], ["all-reduce alone", f"{ov['communicate_s']:.3f}", ""],
            ["compute, then all-reduce", f"{ov['serial_s']:.3f}", "-"]]
    for blocks, t in ov["fused_s"].items():
        hidden = (ov["serial_s"] - t) / max(1e-9, min(ov["compute_s"], ov["communicate_s"]))
        orow.append([f"matmul_all_reduce, {blocks} blocks", f"{t:.3f}", f"{hidden * 100:.0f}% of the shorter part hidden"])
    show(Console(), "", ["variant", "time s", "overlap"], orow, args.markdown, 1)


if __name__ == "__main__":
    main()
