"""A package's public names, imported from their modules on first use (so the CLI starts fast).

``lazy_exports(__name__, {"generate": "forestcoll.generate", ...})`` at the end of a package's
``__init__`` makes ``package.generate`` import ``forestcoll.generate`` and return its attribute
``generate`` the first time it is read; ``from package import generate`` and ``package.__all__``
work as with eager imports.  A public name that is also a submodule's name (``forestcoll.generate``,
``forestcoll.verify``) keeps meaning the exported object after the submodule is imported, exactly as
an eager ``from forestcoll.generate import generate`` in ``__init__`` would leave it.  Assigning the
name (a test's ``monkeypatch.setattr``) replaces the object as usual.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Mapping

__all__ = ["lazy_exports"]

_UNSET = object()


class _Export:
    """Data descriptor on the package's class: the object ``name`` of ``module``, imported when first read."""

    def __init__(self, package: str, name: str, module: str) -> None:
        self.package, self.name, self.module = package, name, module
        self.value = _UNSET

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        if self.value is _UNSET:
            self.value = getattr(importlib.import_module(self.module), self.name)
        return self.value

    def __set__(self, obj, value) -> None:
        # the import system sets package.<submodule> when the submodule of the same name loads: keep the export
        if isinstance(value, types.ModuleType) and value.__name__ == f"{self.package}.{self.name}":
            obj.__dict__[self.name] = value
            return
        self.value = value

    def __delete__(self, obj) -> None:
        self.value = _UNSET


def lazy_exports(package: str, exports: Mapping[str, str]) -> None:
    """Make each ``name`` of ``exports`` (name -> module) an attribute of ``package`` imported on first read."""
    module = sys.modules[package]
    names = dict(exports)

    def __dir__(self) -> list[str]:
        return sorted(set(self.__dict__) | set(names))

    attrs = {name: _Export(package, name, source) for name, source in names.items()}
    attrs["__dir__"] = __dir__
    module.__class__ = type("LazyPackage", (types.ModuleType,), attrs)
