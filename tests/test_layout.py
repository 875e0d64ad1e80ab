"""docs/design.md's module map is the code's: every module listed, layers respected, no module too long."""

import ast
import re

from conftest import ROOT

SRC = ROOT / "src" / "forestcoll"
MAX_LINES = 700


def _modules() -> dict[str, str]:
    """Dotted module name -> path relative to src/forestcoll (package __init__ files included)."""
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).as_posix()
        name = "forestcoll." + rel[:-3].replace("/", ".")
        out[name.removesuffix(".__init__")] = rel
    return out


def _layers() -> dict[str, int]:
    """Relative path -> layer, from the module table of docs/design.md (later names in a cell share the
    first name's folder)."""
    layers = {}
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        m = re.match(r"^\| (\d+) \| (.+?) \| ", line)
        if not m:
            continue
        folder = ""
        for name in re.findall(r"`([^`]+\.py)`", m.group(2)):
            if "/" in name:
                folder = name.rsplit("/", 1)[0] + "/"
                layers[name] = int(m.group(1))
            else:
                layers[folder + name] = int(m.group(1))
    return layers


def _imports(path) -> set[str]:
    """Every forestcoll module or package a file imports, at the top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("forestcoll"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("forestcoll"))
    return found


def test_the_module_table_lists_every_module():
    modules = {rel for rel in _modules().values() if not rel.endswith("/__init__.py")}
    assert set(_layers()) == modules


def test_imports_only_go_down_the_layers():
    modules, layers = _modules(), _layers()

    def layer(name: str) -> int | None:
        rel = modules.get(name)
        if rel is None:
            return None
        if rel in layers:
            return layers[rel]
        folder = rel.rsplit("/", 1)[0] + "/"  # a package: as high as its highest module
        return max(v for k, v in layers.items() if k.startswith(folder))

    bad = []
    for name, rel in modules.items():
        own = layer(name)
        for dep in _imports(SRC / rel):
            other = layer(dep)
            if other is not None and dep != name and other > own and not name.startswith(dep + "."):
                bad.append(f"{rel} (layer {own}) imports {dep} (layer {other})")
    assert bad == []


def test_no_module_is_too_long():
    long = {rel: n for rel in _modules().values() if (n := len((SRC / rel).read_text().splitlines())) > MAX_LINES}
    assert long == {}
