"""Static checks of an MSCCL algorithm file against the runtimes' parser rules and limits.

Two levels: the text (what the hand-written parser of msccl-executor-nccl and
RCCL accepts: no XML declaration, ``<algo>`` first, attributes in double
quotes on the element's line, no tabs, at most 16 attributes per element,
names and values up to 255 characters, at most 1,024 children per element and
4,096 elements per GPU), and the program (attributes, ids, channels, peers,
buffer offsets in range, cnt <= 71, steps per tb, tbs per GPU, dependencies
that point at real steps which set ``hasdep``, nop chains that end in a step
with its own dependency, and every connection's send and receive counts
matching in order).  Each finding names the line.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from forestcoll.msccl.ir import BUFFERS, COLLECTIVES, PROTOCOLS, READS, RECVS, SENDS, STEP_TYPES, WRITES, Algo
from forestcoll.msccl.semantics import buffer_sizes

__all__ = [
    "PARSER_CHECKS", "RUNTIMES", "Finding", "LintReport", "RuntimeLimits", "lint", "lint_algo", "lint_file",
    "lint_text", "memory_chunks",
]


@dataclass(frozen=True)
class RuntimeLimits:
    """What one runtime accepts (../shared/notes/msccl-xml.md)."""

    name: str
    steps_per_tb: int
    tbs_per_gpu: int
    channels: int
    algorithms: int
    max_cnt: int = 71
    max_depid: int = 127
    tbs_per_channel_direction: int = 32
    max_attrs: int = 16
    max_chars: int = 255
    max_children: int = 1024
    max_elements_per_gpu: int = 4096


RUNTIMES: dict[str, RuntimeLimits] = {
    "msccl-executor-nccl": RuntimeLimits("msccl-executor-nccl", steps_per_tb=64, tbs_per_gpu=1024, channels=32, algorithms=1024),
    "rccl": RuntimeLimits("rccl", steps_per_tb=64, tbs_per_gpu=64, channels=128, algorithms=1024),
}


@dataclass(frozen=True)
class Finding:
    line: int
    severity: str  # "error" or "warning"
    message: str

    def format(self, source: str) -> str:
        return f"{source}:{self.line}: {self.severity}: {self.message}"


_TAG = re.compile(r"<(?![!?/])([A-Za-z_][\w.-]*)([^>]*)>", re.S)
_ATTR = re.compile(r"([A-Za-z_][\w.-]*)\s*=\s*(\"[^\"]*\"|'[^']*')")


def lint_text(text: str, limits: RuntimeLimits) -> list[Finding]:
    """Checks the runtimes' hand-written parser imposes on the raw text."""
    out: list[Finding] = []

    starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line_of(pos: int) -> int:
        return bisect.bisect_right(starts, pos)

    if text.lstrip().startswith("<?xml") or "<?xml" in text:
        out.append(Finding(line_of(text.find("<?xml")), "error", "no <?xml ...?> declaration is allowed"))
    stripped = re.sub(r"<!--.*?-->", lambda m: " " * len(m.group(0)), text, flags=re.S)
    first = re.search(r"<([A-Za-z_][\w.-]*)", stripped)
    if first and first.group(1) != "algo":
        out.append(Finding(line_of(first.start()), "error", f"<algo> must be the first element, found <{first.group(1)}>"))
    if "\t" in stripped:
        out.append(Finding(line_of(stripped.find("\t")), "error", "tabs are not allowed (use spaces between elements)"))
    depth_children: list[int] = []
    gpu_elements = 0
    gpu_line = 0
    for m in re.finditer(r"<(/?)([A-Za-z_][\w.-]*)([^>]*?)(/?)>", stripped, re.S):
        closing, tag, body, selfclose = m.groups()
        line = line_of(m.start())
        if closing:
            if depth_children:
                count = depth_children.pop()
                if count > limits.max_children:
                    out.append(Finding(line, "error", f"<{tag}> has {count} children (at most {limits.max_children})"))
            if tag == "gpu" and gpu_elements > limits.max_elements_per_gpu:
                out.append(Finding(gpu_line, "error", f"a <gpu> holds {gpu_elements} elements (at most {limits.max_elements_per_gpu})"))
            continue
        if depth_children:
            depth_children[-1] += 1
        if "\n" in body or "\r" in body:
            out.append(Finding(line, "error", f"<{tag}>: all attributes must be on the element's first line"))
        attrs = _ATTR.findall(body)
        if any(v.startswith("'") for _, v in attrs):
            out.append(Finding(line, "error", f"<{tag}>: attribute values must be in double quotes"))
        if len(attrs) > limits.max_attrs:
            out.append(Finding(line, "error", f"<{tag}> has {len(attrs)} attributes (at most {limits.max_attrs})"))
        for k, v in attrs:
            if len(k) > limits.max_chars or len(v) - 2 > limits.max_chars:
                out.append(Finding(line, "error", f"<{tag}>: attribute {k} is longer than {limits.max_chars} characters"))
        if tag == "gpu":
            gpu_elements = 0
            gpu_line = line
        elif tag in ("tb", "step"):
            gpu_elements += 1
        if not selfclose:
            depth_children.append(0)
    return out


# Which offsets the runtime's parser checks against the declared chunk counts (offset only, not offset + cnt).
PARSER_CHECKS = {"s": "src", "r": "dst", "rcs": "dst", "rrs": "src", "rrc": "", "rrcs": "src dst", "cpy": "src dst", "re": "src dst"}


def memory_chunks(algo: Algo, gpu_index: int, buf: str) -> int:
    """Chunks a buffer really holds in a call: the user's input and output (by collective), the declared scratch."""
    n_in, n_out = buffer_sizes(algo)
    return {"i": n_in, "o": n_out, "s": algo.gpus[gpu_index].s_chunks}[buf]


def lint_algo(algo: Algo, limits: RuntimeLimits) -> list[Finding]:
    """Checks of the program itself."""
    out: list[Finding] = []

    def err(line: int, msg: str) -> None:
        out.append(Finding(line, "error", msg))

    def warn(line: int, msg: str) -> None:
        out.append(Finding(line, "warning", msg))

    if algo.proto not in PROTOCOLS:
        err(algo.line, f"proto {algo.proto!r} is not one of {', '.join(PROTOCOLS)}")
    if algo.coll not in COLLECTIVES:
        err(algo.line, f"coll {algo.coll!r} is not one of {', '.join(COLLECTIVES)}")
    if not 1 <= algo.nchannels <= limits.channels:
        err(algo.line, f"nchannels={algo.nchannels} is outside 1..{limits.channels} ({limits.name})")
    if algo.nchunksperloop < 1:
        err(algo.line, "nchunksperloop must be >= 1")
    if algo.inplace not in (0, 1) or algo.outofplace not in (0, 1) or not (algo.inplace or algo.outofplace):
        err(algo.line, "inplace / outofplace must be 0 or 1 and at least one of them 1")
    if algo.min_bytes < 0 or algo.max_bytes < 0 or (algo.max_bytes and algo.max_bytes < algo.min_bytes):
        err(algo.line, f"byte range minBytes={algo.min_bytes} maxBytes={algo.max_bytes} is empty or negative")
    if algo.ngpus != len(algo.gpus):
        err(algo.line, f"ngpus={algo.ngpus} but the file lists {len(algo.gpus)} <gpu> elements")
    first_line: dict[int, int] = {}
    for gpu in algo.gpus:  # the runtime picks each rank's <gpu> by id, so element order does not matter
        if not 0 <= gpu.id < algo.ngpus:
            err(gpu.line, f"gpu id {gpu.id} is outside 0..{algo.ngpus - 1}")
        elif gpu.id in first_line:
            err(gpu.line, f"a second <gpu id=\"{gpu.id}\"> (the first is on line {first_line[gpu.id]})")
        else:
            first_line[gpu.id] = gpu.line
    n_in, n_out = buffer_sizes(algo)
    for gpu in algo.gpus:
        held = {"i": n_in, "o": n_out, "s": gpu.s_chunks}  # memory_chunks: what each buffer holds in a call
        if min(gpu.i_chunks, gpu.o_chunks, gpu.s_chunks) < 0:
            err(gpu.line, f"gpu {gpu.id}: chunk counts must be >= 0")
        if len(gpu.tbs) > limits.tbs_per_gpu:
            err(gpu.line, f"gpu {gpu.id} has {len(gpu.tbs)} thread blocks ({limits.name} allows {limits.tbs_per_gpu})")
        sends: dict[tuple[int, int], int] = {}
        recvs: dict[tuple[int, int], int] = {}
        per_chan: dict[tuple[int, str], int] = defaultdict(int)
        for ti, tb in enumerate(gpu.tbs):
            where = f"gpu {gpu.id} tb {tb.id}"
            if tb.id != ti:
                err(tb.line, f"gpu {gpu.id}: tb ids must be contiguous from 0; found id {tb.id} at position {ti}")
            if not 0 <= tb.chan < algo.nchannels:
                err(tb.line, f"{where}: chan {tb.chan} is outside 0..{algo.nchannels - 1}")
            for peer, kind, table in ((tb.send, "send", sends), (tb.recv, "recv", recvs)):
                if peer == -1:
                    continue
                if not 0 <= peer < algo.ngpus or peer == gpu.id:
                    err(tb.line, f"{where}: {kind} peer {peer} is not another gpu")
                    continue
                if (peer, tb.chan) in table:
                    err(tb.line, f"{where}: a second tb with {kind}={peer} on channel {tb.chan} (tb {table[(peer, tb.chan)]} has it)")
                table[(peer, tb.chan)] = tb.id
                per_chan[(tb.chan, kind)] += 1
            if len(tb.steps) > limits.steps_per_tb:
                err(tb.line, f"{where} has {len(tb.steps)} steps ({limits.name} allows {limits.steps_per_tb})")
            after_nop_dep = False
            if tb.steps and tb.steps[-1].type == "nop" and any(x.depid >= 0 for x in tb.steps if x.type == "nop"):
                warn(tb.steps[-1].line, f"{where}: the dependencies of trailing nop steps are ignored by the runtime")
            for a_st, b_st in zip(tb.steps, tb.steps[1:]):
                if (a_st.type == b_st.type == "re" and b_st.depid < 0 and not a_st.hasdep and a_st.cnt != b_st.cnt
                        and (a_st.dstbuf, a_st.dstoff, a_st.srcbuf) == (b_st.dstbuf, b_st.dstoff, b_st.srcbuf)):
                    warn(b_st.line, f"{where} step {b_st.s}: the runtime fuses this re with the previous one and uses cnt "
                                    f"{b_st.cnt} for both (they differ)")
            for si, st in enumerate(tb.steps):
                sw = f"{where} step {st.s}"
                if st.s != si:
                    err(st.line, f"{where}: step numbers must run 0,1,2,...; found s={st.s} at position {si}")
                if st.type not in STEP_TYPES:
                    err(st.line, f"{sw}: unknown type {st.type!r}")
                    continue
                if st.hasdep not in (0, 1):
                    err(st.line, f"{sw}: hasdep must be 0 or 1")
                if st.type == "nop":
                    if st.depid >= 0:
                        after_nop_dep = True
                    else:
                        warn(st.line, f"{sw}: a nop without a dependency is dropped by the runtime's parser, which shifts "
                                      "the step numbers this tb's flags carry")
                else:
                    if after_nop_dep and st.depid < 0:
                        err(st.line, f"{sw}: follows nop dependencies but has no dependency of its own (the runtime requires one)")
                    after_nop_dep = False
                    if not 0 <= st.cnt <= limits.max_cnt:
                        err(st.line, f"{sw}: cnt {st.cnt} is outside 0..{limits.max_cnt}")
                    elif st.cnt == 0:
                        warn(st.line, f"{sw}: cnt 0 moves nothing")
                    if st.type in SENDS and tb.send < 0:
                        err(st.line, f"{sw}: type {st.type} sends but the tb has send=-1")
                    if st.type in RECVS and tb.recv < 0:
                        err(st.line, f"{sw}: type {st.type} receives but the tb has recv=-1")
                    declared = {"i": gpu.i_chunks, "o": gpu.o_chunks, "s": gpu.s_chunks}
                    checked = PARSER_CHECKS.get(st.type, "").split()
                    for used, buf, off, label in ((st.type in READS, st.srcbuf, st.srcoff, "src"),
                                                  (st.type in WRITES, st.dstbuf, st.dstoff, "dst")):
                        if not used:
                            continue
                        if buf not in BUFFERS:
                            err(st.line, f"{sw}: {label}buf {buf!r} is not i, o or s")
                            continue
                        if label in checked and not -1 <= off < declared[buf]:
                            err(st.line, f"{sw}: {label}off {off} is outside the {declared[buf]} chunk(s) gpu {gpu.id} declares "
                                         f"for buffer {buf} (the runtime refuses the file)")
                        size = held[buf]
                        if off < 0 or off + st.cnt > size:
                            err(st.line, f"{sw}: {label} chunks {off}..{off + st.cnt - 1} are outside buffer {buf} "
                                         f"({size} chunk(s) in a {algo.coll} call)")
                if st.depid >= 0:
                    if st.depid > limits.max_depid:
                        err(st.line, f"{sw}: depid {st.depid} does not fit in int8 (<= {limits.max_depid})")
                    if st.depid >= len(gpu.tbs):
                        err(st.line, f"{sw}: depends on tb {st.depid}, which does not exist")
                        continue
                    target = gpu.tbs[st.depid]
                    if not 0 <= st.deps < len(target.steps):
                        err(st.line, f"{sw}: depends on tb {st.depid} step {st.deps}, which does not exist")
                        continue
                    if st.depid == tb.id and st.deps >= si:
                        err(st.line, f"{sw}: waits on a later step of its own tb (it can never run)")
                    if target.steps[st.deps].hasdep != 1:
                        later = next((x.s for x in target.steps[st.deps:] if x.hasdep == 1 and x.type != "nop"), None)
                        if later is None:
                            err(st.line, f"{sw}: depends on tb {st.depid} step {st.deps}, which has hasdep=0 and no later step of "
                                         f"tb {st.depid} publishes a flag: in the last pipeline iteration it waits forever")
                        else:
                            warn(st.line, f"{sw}: depends on tb {st.depid} step {st.deps}, which has hasdep=0; it really waits for "
                                          f"step {later}, the next one that publishes a flag")
        for (chan, kind), count in per_chan.items():
            if count > limits.tbs_per_channel_direction:
                err(gpu.line, f"gpu {gpu.id}: {count} {kind} tbs on channel {chan} (at most {limits.tbs_per_channel_direction})")
    _match_connections(algo, err)
    return out


def _match_connections(algo: Algo, err) -> None:
    """The k-th send on (A -> B, channel c) pairs with the k-th receive of B's tb with recv=A on c: counts must match."""
    send_side: dict[tuple[int, int, int], tuple[int, list[tuple[int, int]]]] = {}
    recv_side: dict[tuple[int, int, int], tuple[int, list[tuple[int, int]]]] = {}
    for gpu in algo.gpus:
        for tb in gpu.tbs:
            if tb.send >= 0:
                send_side[(gpu.id, tb.send, tb.chan)] = (tb.line, [(st.cnt, st.line) for st in tb.steps if st.type in SENDS])
            if tb.recv >= 0:
                recv_side[(tb.recv, gpu.id, tb.chan)] = (tb.line, [(st.cnt, st.line) for st in tb.steps if st.type in RECVS])
    for key in sorted(set(send_side) | set(recv_side)):
        a, b, c = key
        s_line, sends = send_side.get(key, (0, []))
        r_line, recvs = recv_side.get(key, (0, []))
        if not sends and not recvs:
            continue
        if key not in recv_side and sends:
            err(s_line, f"gpu {a} sends {len(sends)} time(s) to gpu {b} on channel {c}, but gpu {b} has no tb receiving from {a} there")
            continue
        if key not in send_side and recvs:
            err(r_line, f"gpu {b} receives {len(recvs)} time(s) from gpu {a} on channel {c}, but gpu {a} has no tb sending to {b} there")
            continue
        if len(sends) != len(recvs):
            err(s_line or r_line, f"connection gpu {a} -> gpu {b} channel {c}: {len(sends)} send(s) but {len(recvs)} receive(s)")
        for n, ((sc, sl), (rc, rl)) in enumerate(zip(sends, recvs)):
            if sc != rc:
                err(rl, f"connection gpu {a} -> gpu {b} channel {c}: send #{n} moves cnt {sc} (line {sl}) but receive #{n} expects cnt {rc}")
                break


def lint(algo: Algo, text: str | None, runtime: str = "msccl-executor-nccl") -> list[Finding]:
    """All findings for ``algo`` (and its raw text, when given) under ``runtime``'s limits, sorted by line."""
    limits = RUNTIMES[runtime]
    findings = (lint_text(text, limits) if text is not None else []) + lint_algo(algo, limits)
    return sorted(findings, key=lambda f: (f.line, f.severity != "error", f.message))


@dataclass(frozen=True)
class LintReport:
    """The findings for one file under one runtime's rules; a result (:mod:`forestcoll.results`), ``ok`` when
    no finding is an error."""

    file: str
    runtime: str
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def message(self) -> str:
        errors = self.errors
        if errors:
            return errors[0].format(self.file)
        return f"{self.file}: {len(errors)} error(s), {len(self.findings) - len(errors)} warning(s) for {self.runtime}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "runtime": self.runtime, "ok": self.ok,
                "findings": [{"line": f.line, "severity": f.severity, "message": f.message} for f in self.findings]}


def lint_file(path: str, runtime: str = "msccl-executor-nccl") -> LintReport:
    """Read an MSCCL file and lint its text and program under ``runtime`` (what ``forestcoll msccl lint`` does)."""
    from forestcoll.msccl.ir import read_algo

    algo, text = read_algo(path)
    return LintReport(path, runtime, tuple(lint(algo, text, runtime)))

