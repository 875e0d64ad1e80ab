"""The GPU a fabric's ranks are: its vendor (which MSCCL runtime its users run) and its SMs / CUs.

A :class:`Gpu` is recorded on a :class:`~forestcoll.topology.model.Topology` (``topo.gpu``) by whoever builds the
fabric: the box families of :mod:`forestcoll.topology.builtins` (:data:`GPUS`), the NCCL / RCCL dump importer
(:func:`gpu_of_dump`: NVIDIA by compute capability ``sm``, AMD by ``gcn`` with the CU count RCCL writes into
``sm``), the JSON file (``"gpu": {...}``) and the cluster builder (the boxes' common GPU; mixed boxes: none).
Nothing guesses it from names.  Data flows one way: the fabric says what it is; the exporters ask
(:func:`default_runtime`, :func:`resident_blocks`) and fall back to today's figures (msccl-executor-nccl, an
A100's 108 SMs) when the fabric does not say.

``units``: SMs (NVIDIA) or CUs (AMD), the thread blocks of one kernel the GPU keeps resident at once (one per
SM / CU, the MSCCL and MSCCL++ kernels' blocks being large); every block of such a kernel must be resident, since
blocks wait on each other.  Public figures (docs/catalog.md, "GPUs"): V100 80 SMs, A100 108, H100 SXM5 132,
B200 148; MI250 208 CUs in two GCDs (104 each; MI250X 110 each), MI300X 304.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from forestcoll.errors import TopologyError

__all__ = ["GPUS", "VENDORS", "Gpu", "common_gpu", "default_runtime", "gpu_from_dict", "gpu_of_dump", "resident_blocks"]

VENDORS = ("nvidia", "amd")
RUNTIME_OF_VENDOR = {"nvidia": "msccl-executor-nccl", "amd": "rccl"}  # the MSCCL executor each vendor's users run
DEFAULT_RUNTIME = "msccl-executor-nccl"  # a fabric that does not say its GPU
DEFAULT_RESIDENT = 108  # an A100's SMs: the figure every fabric used before the GPU was recorded


@dataclass(frozen=True)
class Gpu:
    """One GPU model: ``name`` (A100, MI250 GCD, ...), ``vendor`` (nvidia | amd), ``units`` (SMs or CUs; None when
    unknown) and ``arch`` (sm80, gfx90a, ...; "" when unknown)."""

    name: str
    vendor: str
    units: int | None = None
    arch: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``units`` and ``arch`` only when known)."""
        return {"name": self.name, "vendor": self.vendor, **({"units": self.units} if self.units else {}),
                **({"arch": self.arch} if self.arch else {})}

    def describe(self) -> str:
        """``MI300X (amd gfx942, 304 CUs)``."""
        unit = "CUs" if self.vendor == "amd" else "SMs"
        parts = [self.vendor] + ([self.arch] if self.arch else [])
        return f"{self.name} ({' '.join(parts)}" + (f", {self.units} {unit})" if self.units else ")")


GPUS: dict[str, Gpu] = {
    "V100": Gpu("V100", "nvidia", 80, "sm70"),
    "A100": Gpu("A100", "nvidia", 108, "sm80"),
    "H100": Gpu("H100", "nvidia", 132, "sm90"),
    "B200": Gpu("B200", "nvidia", 148, "sm100"),
    "MI250 GCD": Gpu("MI250 GCD", "amd", 104, "gfx90a"),
    "MI300X": Gpu("MI300X", "amd", 304, "gfx942"),
}

# NVIDIA dumps: compute capability -> the data-centre GPU of that generation (its SMs; other parts of the same
# generation may have fewer, e.g. H100 PCIe 114, so the name says which figure is assumed)
_BY_SM = {70: GPUS["V100"], 80: GPUS["A100"], 90: GPUS["H100"], 100: GPUS["B200"]}
# AMD dumps: (architecture, CUs) -> a name; any other pair is named by its architecture
_AMD_NAMES = {("gfx90a", 104): "MI250 GCD", ("gfx90a", 110): "MI250X GCD", ("gfx942", 304): "MI300X",
              ("gfx942", 228): "MI300A", ("gfx908", 120): "MI100", ("gfx906", 60): "MI50", ("gfx906", 64): "MI60"}


def gpu_of_dump(sm: str, gcn: str | None, arch: str | None) -> Gpu | None:
    """The GPU of one ``<gpu>`` of an NCCL / RCCL dump: AMD when it has ``gcn`` (``arch``: gfx90a, ...), whose
    ``sm`` is then its CU count (RCCL src/graph/xml.cc: ``sm`` set to multiProcessorCount); NVIDIA otherwise, ``sm``
    its compute capability.  None when ``sm`` is not a number."""
    sm = sm.strip()
    value = int(sm) if sm.isdigit() else None
    if gcn is not None:
        name = arch or gcn.strip()
        return Gpu(_AMD_NAMES.get((name, value), name), "amd", value or None, name)
    if value is None:
        return None
    known = _BY_SM.get(value)
    return known if known is not None else Gpu(f"sm{value}", "nvidia", None, f"sm{value}")


def common_gpu(gpus) -> Gpu | None:
    """The GPU every one of ``gpus`` is, or None when they differ (a mixed cluster) or one is unknown."""
    found = set(gpus)
    return found.pop() if len(found) == 1 else None


def default_runtime(gpu: Gpu | None) -> str:
    """The MSCCL runtime a fabric of ``gpu`` runs: rccl on AMD, msccl-executor-nccl on NVIDIA and when unknown."""
    return RUNTIME_OF_VENDOR.get(gpu.vendor, DEFAULT_RUNTIME) if gpu is not None else DEFAULT_RUNTIME


def resident_blocks(gpu: Gpu | None, default: int = DEFAULT_RESIDENT) -> int:
    """The thread blocks ``gpu`` keeps resident at once (its SMs / CUs), or ``default`` when it does not say."""
    return gpu.units if gpu is not None and gpu.units else default


def gpu_from_dict(data: Any, source: str = "topology") -> Gpu:
    """A :class:`Gpu` from its JSON form; a bad one is one line naming ``source``."""
    if not isinstance(data, Mapping) or set(data) - {"name", "vendor", "units", "arch"}:
        raise TopologyError(f"{source}: 'gpu' must be an object with 'name', 'vendor' and optionally 'units', 'arch'")
    name, vendor, units, arch = data.get("name"), data.get("vendor"), data.get("units"), data.get("arch", "")
    if not isinstance(name, str) or not name.strip():
        raise TopologyError(f"{source}: gpu 'name' must be a non-empty string")
    if vendor not in VENDORS:
        raise TopologyError(f"{source}: gpu 'vendor' must be one of {', '.join(VENDORS)}, got {vendor!r}")
    if units is not None and (isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= 100_000):
        raise TopologyError(f"{source}: gpu 'units' (SMs or CUs) must be an integer from 1 to 100000, got {units!r}")
    if not isinstance(arch, str):
        raise TopologyError(f"{source}: gpu 'arch' must be a string")
    return Gpu(name, vendor, units, arch)
