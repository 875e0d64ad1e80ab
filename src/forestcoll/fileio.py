"""Reading and writing files safely: whole-file atomic writes and friendly read errors."""

from __future__ import annotations

import json
import os
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

from forestcoll.errors import ForestCollError

__all__ = ["atomic_write_bytes", "atomic_write_text", "check_output", "dump_json", "ensure_directory", "is_plan", "load_json",
           "parse_json", "read_text", "sniff"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so no partial file is ever left."""
    atomic_write_bytes(path, text.encode("utf-8"))


def check_output(path: str | os.PathLike[str], inputs: tuple[str | os.PathLike[str] | None, ...] = ()) -> Path:
    """Refuse, before any work, an output path that cannot take a whole file: an existing directory, a missing or
    unwritable directory, or one of the command's ``inputs`` (the same file under another name included)."""
    target = Path(path)
    if not str(path).strip():
        raise ForestCollError("the output file name is empty")
    if target.is_dir():
        raise ForestCollError(f"{target}: is a directory; give a file name to write")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.exists():
        raise ForestCollError(f"{target}: directory {directory} does not exist")
    if not directory.is_dir():
        raise ForestCollError(f"{target}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ForestCollError(f"{target}: cannot write into directory {directory} (permission denied)")
    if target.exists() and not os.access(target, os.W_OK):
        raise ForestCollError(f"{target}: the file is read-only; not replacing it")
    for source in inputs:
        if source is None or not os.path.exists(source):
            continue
        if target.exists() and os.path.samefile(source, target):
            raise ForestCollError(f"{target}: is also an input of this command; not overwriting it (choose another -o)")
    return target


def ensure_directory(path: str | os.PathLike[str]) -> Path:
    """Create the output directory ``path`` (and its parents) if needed; one ForestCollError when it cannot be."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise ForestCollError(f"{target}: exists and is not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ForestCollError(f"{target}: cannot create the directory ({exc.strerror or exc})") from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise ForestCollError(f"{target}: cannot write into the directory (permission denied)")
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename, so no partial file is ever left; every OS
    failure (directory missing or read-only, disk full, target a directory) is one ForestCollError and leaves
    an existing file untouched."""
    target = check_output(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise ForestCollError(f"{target}: cannot write into directory {directory} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ForestCollError(f"{target}: cannot write ({exc.strerror or exc})") from None
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


def parse_json(text: str, path: str | os.PathLike[str], invalid: str = "invalid JSON", *, parse_float: Any = Decimal,
               error: type[ForestCollError] = ForestCollError) -> Any:
    """JSON text parsed (non-integer numbers as Decimal unless ``parse_float`` says otherwise); every failure
    (syntax, an integer past Python's digit limit, nesting) a one-line ``error``."""
    try:
        return json.loads(text, parse_float=parse_float)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: {invalid} at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except ValueError:  # an integer beyond Python's 4300-digit conversion limit
        raise error(f"{path}: a number has too many digits (see docs/limits.md)") from None
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply") from None


def load_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Parse a JSON file exactly: non-integer numbers become Decimal (never float)."""
    return parse_json(read_text(path, what), path)


def sniff(path: str | os.PathLike[str], what: str = "file") -> tuple[str, Any]:
    """What a file holds, by content: ``("xml", text)`` for XML, ``("json", value)`` for JSON (read exactly, as
    :func:`load_json` does); anything else is a one-line ForestCollError."""
    text = read_text(path, what)
    if text.lstrip().startswith("<"):
        return "xml", text
    return "json", parse_json(text, path, "neither JSON nor XML: invalid JSON")


def is_plan(value: Any) -> bool:
    """Whether parsed JSON is an MSCCL++ execution plan (``gpus`` and ``protocol`` at the top level) rather than a
    forestcoll schedule."""
    return isinstance(value, dict) and "gpus" in value and "protocol" in value


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
