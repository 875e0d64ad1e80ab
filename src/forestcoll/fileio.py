"""Reading and writing files safely: whole-file atomic writes and friendly read errors."""

from __future__ import annotations

import json
import os
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

from forestcoll.errors import ForestCollError

__all__ = ["atomic_write_bytes", "atomic_write_text", "dump_json", "load_json", "read_text"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so no partial file is ever left."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename, so no partial file is ever left."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise ForestCollError(f"{target}: directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """Read a UTF-8 text file, turning OS errors into one-line ForestCollErrors."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ForestCollError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise ForestCollError(f"{path}: is a directory, expected a {what}") from None
    except UnicodeDecodeError as exc:
        raise ForestCollError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ForestCollError(f"{path}: cannot read ({exc.strerror})") from None


def load_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Parse a JSON file exactly: non-integer numbers become Decimal (never float)."""
    text = read_text(path, what)
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as exc:
        raise ForestCollError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise ForestCollError(f"{path}: JSON nested too deeply") from None


def _compact(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def _pretty(obj: Any, indent: str) -> str:
    if not isinstance(obj, (dict, list)) or not obj:
        return _compact(obj)
    if isinstance(obj, list) and all(not isinstance(x, (dict, list)) for x in obj):
        return _compact(obj)  # a list of names or numbers stays on one line
    text = _compact(obj)
    if len(text) + len(indent) <= 110:
        return text
    inner = indent + " "
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    items = [inner + _pretty(v, inner) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + indent + "]"


def dump_json(data: Any) -> str:
    """Deterministic JSON text: containers that fit on a line stay on one, the rest are indented."""
    return _pretty(data, "") + "\n"
