"""Reading and writing files safely: whole-file atomic writes and friendly read errors."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from forestcoll.errors import ForestCollError

__all__ = ["FileKind", "atomic_write_bytes", "atomic_write_text", "check_output", "dump_json", "earlier_files",
           "ensure_directory", "file_kind", "output_directory", "is_plan", "kind_of", "load_json", "max_file_bytes", "parse_json", "read_bytes", "read_text", "sniff", "Output", "Stream", "wrong_kind"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Output, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename, so no partial file is ever left."""
    atomic_write_bytes(path, text.encode("utf-8"))


def check_output(path: Output, inputs: tuple[str | os.PathLike[str] | None, ...] = ()) -> Path:
    """Refuse, before any work, an output path that cannot take a whole file: an existing directory, a missing or
    unwritable directory, or one of the command's ``inputs`` (the same file under another name included)."""
    if isinstance(path, Stream) or str(path) == "-":
        return Path("-")  # a stream (atomic_write_bytes)
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


@contextmanager
def output_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The directory ``path`` for a run that writes several files into it, created (with its parents) if needed; when
    the run fails or is interrupted, the files it added and the directories it created are removed again, so a run
    leaves all its files or nothing new (a file it replaced stays replaced)."""
    target = Path(path)
    missing, up = [], target
    while not up.exists() and up != up.parent:
        missing.append(up)
        up = up.parent
    ensure_directory(target)
    before = set(os.listdir(target))
    try:
        yield target
    except BaseException:
        for name in sorted(set(os.listdir(target)) - before):
            try:
                if (target / name).is_file():
                    os.unlink(target / name)
            except OSError:
                pass
        for made in missing:  # deepest first; one another run has written into stays
            try:
                made.rmdir()
            except OSError:
                break
        raise


def earlier_files(directory: str | os.PathLike[str], written: Sequence[str | os.PathLike[str]]) -> list[str]:
    """The files in ``directory`` named as a per-size run names the ``written`` ones (``COLL-NN-NAME-...-LO-HI.ext``,
    the same collective and extension) that this run did not write: left by an earlier run, sorted."""
    names = {os.path.basename(w) for w in written}
    kinds = {(n.split("-", 1)[0], os.path.splitext(n)[1]) for n in names}
    found = []
    for name in sorted(os.listdir(directory)):
        for coll, ext in kinds:
            if name not in names and re.fullmatch(rf"{re.escape(coll)}-\d\d-.+-\d+-(\d+|any){re.escape(ext)}", name):
                found.append(name)
    return found


def _temporary(directory: str | os.PathLike[str], name: str) -> tuple[int, str]:
    """A new empty file ``.NAME.PID.N.tmp`` in ``directory``, created exclusively with mode 0600 (as
    tempfile.mkstemp makes one, without importing tempfile and with it random, shutil, bz2 and lzma: ~3 ms of
    every start): its descriptor and path."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
             | getattr(os, "O_BINARY", 0))
    for attempt in range(10_000):
        tmp = os.path.join(directory, f".{name}.{os.getpid()}.{attempt}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:  # left by an earlier process of the same id, or another writer: the next name
            continue
    raise FileExistsError(f"no free temporary name .{name}.{os.getpid()}.N.tmp in {directory}")


class Stream:
    """An output that is an open stream, not a file (the command line's ``-o -`` passes the real stdout as one): a
    writer given it as its path writes its bytes there in one write.  ``str()`` is ``-``, the name the user gave."""

    __slots__ = ("stream",)

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def __str__(self) -> str:
        return "-"

    def __repr__(self) -> str:
        return f"Stream({self.stream!r})"


Output = str | os.PathLike[str] | Stream  # where a writer puts its file: a path, or a Stream


def _write_stream(stream: Any, data: bytes) -> None:
    """``data`` written whole to ``stream``, as bytes where it takes them."""
    stream.flush()
    raw = getattr(stream, "buffer", None)
    if raw is not None:
        raw.write(data)
        raw.flush()
    else:
        stream.write(data.decode("utf-8"))
        stream.flush()


def atomic_write_bytes(path: Output, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and rename, so no partial file is ever left; every OS
    failure (directory missing or read-only, disk full, target a directory) is one ForestCollError and leaves
    an existing file untouched.  A :class:`Stream` (and the path ``-``: ``sys.stdout``) gets ``data`` in one write."""
    if isinstance(path, Stream) or str(path) == "-":
        import sys

        _write_stream(path.stream if isinstance(path, Stream) else sys.stdout, data)
        return
    target = check_output(path)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = _temporary(directory, target.name)
    except OSError as exc:
        raise ForestCollError(f"{target}: cannot write into directory {directory} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # made 0600; give the file the usual permissions
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise ForestCollError(f"{target}: cannot write ({exc.strerror or exc})") from None
        raise


def _a(what: str) -> str:
    """``what`` with its article: "a topology file", "an MSCCL file"."""
    return ("an " if what[:1].lower() in "aeio" or what.startswith(("MSCCL", "XML")) else "a ") + what


def max_file_bytes() -> int:
    """The most bytes forestcoll reads from one file: the environment variable ``FORESTCOLL_MAX_FILE_BYTES`` (bytes,
    or a size such as ``4GiB``) when set, else :data:`forestcoll.limits.MAX_FILE_BYTES`; a bad value is a one-line
    UsageError."""
    from forestcoll.limits import FILE_BYTES_ENV, MAX_FILE_BYTES

    text = os.environ.get(FILE_BYTES_ENV, "").strip()
    if not text:
        return MAX_FILE_BYTES
    from forestcoll.errors import UsageError
    from forestcoll.units import parse_size

    try:
        return parse_size(text)
    except UsageError as exc:
        raise UsageError(f"{FILE_BYTES_ENV}={text}: {exc}") from None


def _too_large(path: str | os.PathLike[str], what: str, size: int | None) -> ForestCollError:
    """The one-line error for a file past :func:`max_file_bytes` (``size`` None: a stream)."""
    from forestcoll.limits import FILE_BYTES_ENV

    said = f"{size:,} bytes, above" if size is not None else "gives more than"
    return ForestCollError(f"{path}: {said} forestcoll's limit of {max_file_bytes():,} bytes for {_a(what)} "
                           f"(set {FILE_BYTES_ENV} to raise it; see docs/limits.md)")


def read_bytes(path: str | os.PathLike[str], what: str = "file") -> bytes:
    """The bytes of the file at ``path``, never more than :func:`max_file_bytes`: a larger regular
    file is refused by its size before any byte is read, a pipe, FIFO or device once it gives more; any of them at
    the first MiB that holds a NUL byte (no text does: ``/dev/zero``, a sparse file).  A FIFO is read as ``cat``
    reads it: the open waits for a writer (Ctrl-C stops the wait), then it reads until every writer has closed it; one
    that gives nothing is refused. Every failure is one ForestCollError."""
    limit = max_file_bytes()
    try:  # blocking: `mkfifo f.json; forestcoll bound f.json & cat x > f.json` must not depend on who opens first
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise ForestCollError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise ForestCollError(f"{path}: is a directory, expected a {what}") from None
    except OSError as exc:
        raise ForestCollError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            raise ForestCollError(f"{path}: is a directory, expected a {what}")
        regular = stat.S_ISREG(mode)
        if regular and info.st_size > limit:
            raise _too_large(path, what, info.st_size)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise _too_large(path, what, total if regular else None)  # a regular file that grew
            if b"\0" in chunk:  # no text holds one: /dev/zero, a sparse or binary file stops at its first MiB
                kind = "a file" if regular else "a FIFO or pipe" if stat.S_ISFIFO(mode) else "a device"
                raise ForestCollError(f"{path}: {kind} of binary data (a NUL byte at byte {total - len(chunk) + chunk.index(0):,}), "
                                      f"not {_a(what)}")
            chunks.append(chunk)
    except OSError as exc:
        raise ForestCollError(f"{path}: cannot read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if not total and stat.S_ISFIFO(mode):
        raise ForestCollError(f"{path}: a FIFO or pipe with nothing written to it, expected {_a(what)}")
    return b"".join(chunks)


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """Read a UTF-8 text file (at most :func:`max_file_bytes`, see :func:`read_bytes`), turning OS
    errors into one-line ForestCollErrors; line ends are read as Python's text mode reads them (\\r\\n and \\r as \\n)."""
    data = read_bytes(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ForestCollError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


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


@dataclass(frozen=True)
class FileKind:
    """What a file holds, told by content: ``name`` (one of :data:`KINDS`), how to say it in a sentence, and the
    commands that read such a file (``{path}`` stands for the file)."""

    name: str
    label: str
    use: str = ""


KINDS: dict[str, FileKind] = {k.name: k for k in (
    FileKind("schedule", "a forestcoll schedule",
             "check it with `forestcoll verify {path}`, simulate it with `forestcoll simulate {path}`, lower it with "
             "`forestcoll export {path} -o FILE`"),
    FileKind("alltoall-schedule", "a forestcoll all-to-all schedule",
             "check it with `forestcoll verify {path}`, simulate it with `forestcoll simulate {path}`"),
    FileKind("topology", "a topology (nodes/links JSON)",
             "give it as the topology: `forestcoll bound {path}`, `forestcoll generate {path}`, `-t {path}`"),
    FileKind("topology-declarative", "a topology (boxes and fabric)",
             "give it as the topology: `forestcoll bound {path}`, `forestcoll generate {path}`, `-t {path}`"),
    FileKind("nccl-topology", "an NCCL/RCCL topology dump",
             "give it as the topology: `forestcoll topo import {path}`, `forestcoll bound {path}`, `-t {path}`"),
    FileKind("msccl", "an MSCCL algorithm XML",
             "run it with `forestcoll msccl run {path}`, check it with `forestcoll msccl lint {path}`, simulate it "
             "with `forestcoll simulate {path} -t TOPOLOGY`"),
    FileKind("mscclpp-plan", "an MSCCL++ execution plan",
             "run it with `forestcoll mscclpp run {path}`, check it with `forestcoll mscclpp lint {path}`, simulate "
             "it with `forestcoll simulate {path} -t TOPOLOGY`"),
    FileKind("xml", "an XML file of no kind forestcoll reads"),
    FileKind("json", "a JSON file of no kind forestcoll reads"),
    FileKind("text", "a file that is neither JSON nor XML"),
)}

_DECLARATIVE_KEYS = ("boxes", "box", "use", "import")


def kind_of(value: Any) -> FileKind:
    """The kind of parsed JSON / YAML by its top-level keys (see :class:`FileKind`)."""
    if not isinstance(value, dict):
        return KINDS["json"]
    if is_plan(value):
        return KINDS["mscclpp-plan"]
    if value.get("format") == "forestcoll-schedule" or ("collective" in value and ("trees" in value or "flows" in value)):
        return KINDS["alltoall-schedule" if value.get("collective") == "alltoall" else "schedule"]
    if "links" in value and "nodes" in value:
        return KINDS["topology"]
    if any(key in value for key in _DECLARATIVE_KEYS):
        return KINDS["topology-declarative"]
    return KINDS["json"]


def _xml_root(text: str) -> str:
    """The first element's tag of XML text (after declarations and comments), lower case; '' when none."""
    import re

    body = re.sub(r"<!--.*?-->|<\?.*?\?>|<!DOCTYPE[^>]*>", "", text[:65536], flags=re.S)
    found = re.search(r"<\s*([A-Za-z_][\w.-]*)", body)
    return found.group(1).lower() if found else ""


def file_kind(path: str | os.PathLike[str], text: str | None = None) -> FileKind:
    """What the file at ``path`` holds, told by its content (not its name): a schedule, a topology (plain JSON,
    boxes/fabric JSON or YAML), an NCCL/RCCL topology dump, an MSCCL XML, an MSCCL++ plan, or none of these.
    Unreadable files are one-line ForestCollErrors (as :func:`read_text`)."""
    text = read_text(path) if text is None else text
    if text.lstrip().startswith("<"):
        root = _xml_root(text)
        return KINDS["msccl" if root == "algo" else "nccl-topology" if root == "system" else "xml"]
    try:
        return kind_of(json.loads(text, parse_float=Decimal))
    except (ValueError, RecursionError):
        pass
    if str(path).lower().endswith((".yaml", ".yml")):
        try:
            import yaml

            return kind_of(yaml.safe_load(text))
        except Exception:
            return KINDS["text"]
    return KINDS["text"]


def wrong_kind(path: str | os.PathLike[str], expected: str, found: FileKind | None = None) -> ForestCollError | None:
    """The one-line error for a file of another kind than ``expected`` (e.g. "a schedule JSON"): what was given,
    what was expected and which commands read the given kind; None when the file's kind is not one forestcoll
    reads (the caller's own parse error says more then)."""
    kind = found or file_kind(path)
    if not kind.use:
        return None
    return ForestCollError(f"{path} is {kind.label}, not {expected}; {kind.use.format(path=path)}")


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": ")).encode  # one line, as json.dumps writes it
_STRING = json.encoder.encode_basestring  # a str as that encoder writes it (C when available)
WIDTH = 110  # a container stays on one line when its one-line form fits in WIDTH - its indent


def _scalar(obj: Any) -> str:
    """A non-container (or a tuple, which JSON writes as a list but the layout keeps on one line) on one line."""
    kind = type(obj)
    if kind is str:
        return _STRING(obj)
    if kind is int:
        return int.__repr__(obj)
    return _ENCODE(obj)


def _key(key: Any) -> tuple[str, str]:
    """A dict key as the one-line form writes it (JSON turns 1 into "1") and as the indented form does."""
    if type(key) is str:
        text = _STRING(key)
        return text, text
    return _ENCODE({key: None})[1:-7], json.dumps(key, ensure_ascii=False)


def _flat(obj: Any) -> bool:
    """A non-container or a list of non-containers: always one line."""
    if isinstance(obj, list):
        return all(not isinstance(x, (dict, list)) for x in obj)
    return not isinstance(obj, dict)


def _layout(obj: Any, depth: int, seen: dict[tuple[int, int], tuple[str, bool]] | None = None) -> tuple[str, bool]:
    """``obj`` laid out at ``depth`` and whether that is its one-line form.

    One pass, bottom up: a container's one-line form is its items' one-line forms joined, so each value is
    written once (a parent fits only if every item fits one level deeper).  ``seen``: small flat dicts already
    laid out, by (id, depth): a dict object that appears many times in ``obj`` (a tree edge the trees share) is
    encoded once."""
    if isinstance(obj, dict):
        if not obj:
            return "{}", True
        if len(obj) <= WIDTH // 3 and all(_flat(v) for v in obj.values()):
            if seen is not None:
                done = seen.get((id(obj), depth))
                if done is not None:
                    return done
            text = _ENCODE(obj)  # a small dict of scalars and flat lists (a tree edge): one encoder call
            if len(text) <= WIDTH - depth:
                if seen is not None:
                    seen[(id(obj), depth)] = (text, True)
                return text, True
        items = [(_key(k), _layout(v, depth + 1, seen)) for k, v in obj.items()]
        if all(one for _, (_, one) in items):
            text = "{" + ", ".join(f"{key}: {t}" for (key, _), (t, _) in items) + "}"
            if len(text) <= WIDTH - depth:
                return text, True
        inner = " " * (depth + 1)
        return "{\n" + ",\n".join(f"{inner}{key}: {t}" for (_, key), (t, _) in items) + "\n" + " " * depth + "}", False
    if isinstance(obj, list):
        if _flat(obj):
            return _ENCODE(obj), True  # a list of names or numbers stays on one line
        rows = [_layout(v, depth + 1, seen) for v in obj]
        if all(one for _, one in rows):
            text = "[" + ", ".join(t for t, _ in rows) + "]"
            if len(text) <= WIDTH - depth:
                return text, True
        inner = " " * (depth + 1)
        return "[\n" + ",\n".join(inner + t for t, _ in rows) + "\n" + " " * depth + "]", False
    return _scalar(obj), True


def dump_json(data: Any) -> str:
    """Deterministic JSON text: a container whose one-line form fits in 110 characters less its indent (one space
    a level) stays on one line, as does a list of non-containers; the rest are indented.  One pass: each value is encoded once."""
    return _layout(data, 0, {})[0] + "\n"  # the ids stay valid: ``data`` holds every object during the call
