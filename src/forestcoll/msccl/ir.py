"""MSCCL algorithm programs: the data model, a parser that keeps line numbers, and the XML writer.

The model mirrors the file (``<algo>`` / ``<gpu>`` / ``<tb>`` / ``<step>``, see
../shared/notes/msccl-xml.md and docs/msccl.md).  The writer stays inside what
the runtimes' hand-written parser accepts: no XML declaration, ``<algo>``
first, every element's attributes on one line in double quotes, only spaces
and newlines between elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forestcoll.errors import ForestCollError
from forestcoll.xmltree import Elem, parse_tree

__all__ = [
    "ALGO_ATTRS", "BUFFERS", "COLLECTIVES", "PROTOCOLS", "READS", "RECVS", "REDUCES", "SENDS", "STEP_ATTRS",
    "STEP_TYPES", "WRITES", "Algo", "Gpu", "MscclError", "Step", "ThreadBlock", "parse_algo", "parse_raw",
    "read_algo", "write_algo",
]

STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})  # step types that push to the tb's send peer
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})  # step types that pop from the tb's recv peer
REDUCES = frozenset({"rrs", "rrc", "rrcs", "re"})
READS = frozenset({"s", "rrs", "rrc", "rrcs", "cpy", "re"})  # step types that read their src chunks
WRITES = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})  # step types that write their dst chunks
BUFFERS = ("i", "o", "s")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "alltoallv", "broadcast", "reduce",
               "send", "recv", "gather", "scatter")
PROTOCOLS = ("Simple", "LL", "LL128")
STEP_ATTRS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
ALGO_ATTRS = ("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace", "minBytes", "maxBytes")


class MscclError(ForestCollError):
    """A malformed MSCCL file (one line naming the file and line)."""


@dataclass
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: int = 0
    line: int = 0


@dataclass
class ThreadBlock:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[Step] = field(default_factory=list)
    line: int = 0


@dataclass
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: list[ThreadBlock] = field(default_factory=list)
    line: int = 0


@dataclass
class Algo:
    """One MSCCL algorithm: attributes of ``<algo>`` and its GPUs."""

    name: str
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    coll: str
    inplace: int
    outofplace: int
    min_bytes: int = 0
    max_bytes: int = 0
    gpus: list[Gpu] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)  # attributes the model does not interpret
    comments: list[str] = field(default_factory=list)
    line: int = 0


# ----- parsing -----------------------------------------------------------------------------------


def parse_raw(text: str, source: str) -> tuple[Elem, list[str]]:
    """Parse XML into elements with line numbers, and the comments outside ``<algo>``."""
    return parse_tree(text, source, MscclError, "algo")


def _int(elem: Elem, key: str, source: str, default: int | None = None) -> int:
    if key not in elem.attrs:
        if default is not None:
            return default
        raise MscclError(f"{source}:{elem.line}: <{elem.tag}> is missing attribute {key!r}")
    raw = elem.attrs[key].strip()
    try:
        return int(raw)
    except ValueError:
        raise MscclError(f"{source}:{elem.line}: <{elem.tag}> attribute {key}={raw!r} is not an integer") from None


def _str(elem: Elem, key: str, source: str, default: str | None = None) -> str:
    if key not in elem.attrs:
        if default is not None:
            return default
        raise MscclError(f"{source}:{elem.line}: <{elem.tag}> is missing attribute {key!r}")
    return elem.attrs[key]


def parse_algo(text: str, source: str = "algo.xml") -> Algo:
    """Build an :class:`Algo` from XML text.  Structural problems raise :class:`MscclError`;
    the finer rules are :func:`forestcoll.msccl.lint.lint`'s job."""
    root, comments = parse_raw(text, source)
    if root.tag != "algo":
        raise MscclError(f"{source}:{root.line}: the first element must be <algo>, found <{root.tag}>")
    known = set(ALGO_ATTRS)
    algo = Algo(
        name=_str(root, "name", source, ""),
        proto=_str(root, "proto", source),
        nchannels=_int(root, "nchannels", source),
        nchunksperloop=_int(root, "nchunksperloop", source),
        ngpus=_int(root, "ngpus", source),
        coll=_str(root, "coll", source),
        inplace=_int(root, "inplace", source, 0),
        outofplace=_int(root, "outofplace", source, 0),
        min_bytes=_int(root, "minBytes", source, 0),
        max_bytes=_int(root, "maxBytes", source, 0),
        extra={k: v for k, v in root.attrs.items() if k not in known},
        comments=comments,
        line=root.line,
    )
    for g in root.children:
        if g.tag != "gpu":
            raise MscclError(f"{source}:{g.line}: <algo> may only contain <gpu>, found <{g.tag}>")
        gpu = Gpu(_int(g, "id", source), _int(g, "i_chunks", source), _int(g, "o_chunks", source),
                  _int(g, "s_chunks", source), line=g.line)
        for t in g.children:
            if t.tag != "tb":
                raise MscclError(f"{source}:{t.line}: <gpu> may only contain <tb>, found <{t.tag}>")
            tb = ThreadBlock(_int(t, "id", source), _int(t, "send", source), _int(t, "recv", source),
                             _int(t, "chan", source), line=t.line)
            for st in t.children:
                if st.tag != "step":
                    raise MscclError(f"{source}:{st.line}: <tb> may only contain <step>, found <{st.tag}>")
                tb.steps.append(
                    Step(
                        s=_int(st, "s", source),
                        type=_str(st, "type", source),
                        srcbuf=_str(st, "srcbuf", source),
                        srcoff=_int(st, "srcoff", source),
                        dstbuf=_str(st, "dstbuf", source),
                        dstoff=_int(st, "dstoff", source),
                        cnt=_int(st, "cnt", source),
                        depid=_int(st, "depid", source),
                        deps=_int(st, "deps", source),
                        hasdep=_int(st, "hasdep", source),
                        line=st.line,
                    )
                )
            gpu.tbs.append(tb)
        algo.gpus.append(gpu)
    return algo


def read_algo(path: str, text: str | None = None) -> tuple[Algo, str]:
    """Read and parse an MSCCL XML file (``text``: what was already read from ``path``, not read again); returns the
    model and the raw text (for lint)."""
    from forestcoll.fileio import file_kind, read_text, wrong_kind

    text = read_text(path, "MSCCL file") if text is None else text
    kind = file_kind(path, text)
    if kind.name != "msccl" and (wrong := wrong_kind(path, "an MSCCL algorithm XML", kind)):
        raise MscclError(str(wrong))
    return parse_algo(text, str(path)), text


# ----- writing -----------------------------------------------------------------------------------


def _comment_safe(text: str) -> str:
    """XML comments may not hold ``--`` (nor end in ``-``): names such as ``gpu--0`` are written ``gpu-~-0``."""
    while "--" in text:
        text = text.replace("--", "-~-")
    return text + " " if text.endswith("-") else text


def write_algo(algo: Algo) -> str:
    """XML text of ``algo`` in the layout the runtimes' parser expects."""
    out = [f"<!-- {_comment_safe(c)} -->" for c in algo.comments]
    head = {
        "name": algo.name,
        "proto": algo.proto,
        "nchannels": algo.nchannels,
        "nchunksperloop": algo.nchunksperloop,
        "ngpus": algo.ngpus,
        "coll": algo.coll,
        "inplace": algo.inplace,
        "outofplace": algo.outofplace,
        "minBytes": algo.min_bytes,
        "maxBytes": algo.max_bytes,
    }
    head.update(algo.extra)
    out.append("<algo " + " ".join(f'{k}="{v}"' for k, v in head.items()) + ">")
    for gpu in algo.gpus:
        out.append(f'  <gpu id="{gpu.id}" i_chunks="{gpu.i_chunks}" o_chunks="{gpu.o_chunks}" s_chunks="{gpu.s_chunks}">')
        for tb in gpu.tbs:
            out.append(f'    <tb id="{tb.id}" send="{tb.send}" recv="{tb.recv}" chan="{tb.chan}">')
            for st in tb.steps:
                out.append(
                    f'      <step s="{st.s}" type="{st.type}" srcbuf="{st.srcbuf}" srcoff="{st.srcoff}" '
                    f'dstbuf="{st.dstbuf}" dstoff="{st.dstoff}" cnt="{st.cnt}" depid="{st.depid}" '
                    f'deps="{st.deps}" hasdep="{st.hasdep}"/>'
                )
            out.append("    </tb>")
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"
