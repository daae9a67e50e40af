"""Workspace confinement: every path a tool touches resolves inside the workspace (or an allowed read root).

Symlinks are judged by their target, whether the path was given by the agent, derived by a tool
(`tests/`, `.mltriage/runs`) or found by listing a directory. A path to read must be a regular file:
opening a FIFO without a writer, or reading a device node, would hang the tool.
"""

import errno
import fcntl
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tools.errors import TriageError

_SHOWN = 160  # characters of a rejected path quoted back; a 1 MB path must not become a 1 MB error


def _show(raw: str | os.PathLike) -> str:
    s = str(raw)
    return repr(s if len(s) <= _SHOWN else s[:_SHOWN] + "...")


def _inside(p: Path, roots: Iterable[Path]) -> bool:
    return any(p == r or p.is_relative_to(r) for r in roots)


def resolve(path: str | os.PathLike, base: Path) -> Path:
    """`path` (relative to `base`) with every symlink followed, or a TriageError an agent can act on."""
    raw = str(path)
    if not raw.strip():
        raise TriageError("empty path", "Pass a path relative to the workspace, e.g. 'logs/train.log'")
    if "\x00" in raw:
        raise TriageError("path contains a NUL byte", "Pass a plain file path")
    try:
        p = Path(raw).expanduser()
        return (p if p.is_absolute() else base / p).resolve()
    except RuntimeError:  # Path.resolve raises RuntimeError on a symlink loop
        raise TriageError(f"{_show(raw)} is a symlink loop", "Pass the real file, not a link that points to itself")
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise TriageError(f"path {_show(raw)} is too long ({len(raw)} characters)", "Pass a shorter path")
        raise TriageError(f"{_show(raw)} cannot be resolved: {e.strerror}", "Pass an existing path in the workspace")


def kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: Path, shown: str | os.PathLike | None = None) -> Path:
    """`path` if it is a regular file; else a TriageError saying what it is (stat only: never opens it)."""
    shown = _show(path if shown is None else shown)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TriageError(f"{shown} does not exist (looked at {path})", "Check the path; paths are relative to the workspace")
    except OSError as e:
        raise TriageError(f"{shown} cannot be read: {e.strerror}", "Check the path and its permissions")
    if stat.S_ISDIR(st.st_mode):
        raise TriageError(f"{shown} is a directory, not a file", "Pass the file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise TriageError(f"{shown} is {kind(st.st_mode)}, not a regular file; reading it could block forever",
                          "Pass a regular file (copy the data into a file first)")
    return path


def open_regular(path: Path, shown: str | os.PathLike | None = None):
    """Open `path` for binary reading only if it is a regular file, checked on the open descriptor.

    Opened non-blocking, so a FIFO swapped in after a check cannot hang the open; the check is
    `fstat` of what was actually opened. Blocking mode is restored for the caller.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        regular_file(path, shown)  # says why in words when it can (missing, a directory, ...)
        raise TriageError(f"{_show(path if shown is None else shown)} cannot be opened: {e.strerror}",
                          "Check its permissions") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise TriageError(f"{_show(path if shown is None else shown)} is {kind(mode)}, not a regular file; "
                              "reading it could block forever", "Pass a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def walk(top: Path, suffixes: tuple[str, ...] = (), within: Iterable[Path] | None = None,
         recursive: bool = True) -> list[Path]:
    """The regular files under `top` (sorted), never following a link out of `within` (default: `top`).

    Symlinked directories are not entered; a symlinked file is kept only if its target lies inside
    `within`; FIFOs, sockets and device nodes are skipped. Paths are returned as found under `top`.
    """
    top = Path(top)
    roots = [Path(r).resolve() for r in (within if within is not None else [top])]
    real_top = top.resolve()
    if not _inside(real_top, roots):
        return []
    out = []
    for here, dirs, names in os.walk(top, followlinks=False):
        dirs.sort()
        if not recursive:
            dirs.clear()
        for name in sorted(names):
            if suffixes and not name.endswith(suffixes):
                continue
            f = Path(here) / name
            try:
                real = f.resolve(strict=True)
                ok = _inside(real, roots) and stat.S_ISREG(os.stat(real).st_mode)
            except (OSError, RuntimeError):  # dangling link, loop, vanished file
                continue
            if ok:
                out.append(f)
    return out


@dataclass
class Workspace:
    root: Path
    allow_read: list[Path] = field(default_factory=list)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.allow_read = [Path(p).resolve() for p in self.allow_read]

    @property
    def read_roots(self) -> list[Path]:
        return [self.root, *self.allow_read]

    def _resolve(self, path: str | os.PathLike, roots: list[Path], verb: str) -> Path:
        # resolve() follows symlinks, so a link that points outside is judged by its target
        resolved = resolve(path, self.root)
        if not _inside(resolved, roots):
            where = ", ".join(str(r) for r in roots)
            raise TriageError(
                f"{_show(path)} resolves to {_show(resolved)}, outside the {verb} roots ({where})",
                "Use a path inside the workspace" + (
                    " or start the server with --allow-read DIR for logs kept elsewhere" if verb == "read" else ""),
            )
        return resolved

    def read_path(self, path: str | os.PathLike) -> Path:
        return self._resolve(path, self.read_roots, "read")

    def write_path(self, path: str | os.PathLike) -> Path:
        """A path to create or write inside the workspace; an existing FIFO, socket or device is refused."""
        p = self._resolve(path, [self.root], "write")
        try:
            mode = os.stat(p).st_mode
        except OSError:
            return p
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise TriageError(f"{_show(path)} is {kind(mode)}; writing to it could block or reach a device",
                              "Pass a regular file path")
        return p

    def existing_file(self, path: str | os.PathLike) -> Path:
        """A readable regular file inside the read roots, or a TriageError saying what is wrong."""
        p = self.read_path(path)
        regular_file(p, path)
        if not os.access(p, os.R_OK):
            raise TriageError(f"{_show(path)} is not readable (permission denied)",
                              "Fix its permissions or copy it into the workspace")
        return p

    def directory(self, path: str | os.PathLike, create: bool = False, mode: int = 0o777) -> Path:
        """A directory inside the workspace (e.g. the derived `tests/` or `.mltriage/runs`), resolved.

        With `create`, missing components are made one at a time and each is checked after it
        exists, so a symlink anywhere on the way that leads out of the workspace is refused rather
        than written through.
        """
        target = self._resolve(path, [self.root], "write")
        if create:
            here = self.root
            for part in target.relative_to(self.root).parts:
                nxt = here / part
                try:
                    os.mkdir(nxt, mode)
                except FileExistsError:
                    pass
                except OSError as e:
                    raise TriageError(f"cannot create {_show(nxt)}: {e.strerror}", "Check the workspace's permissions")
                here = self._resolve(nxt, [self.root], "write")
            target = here
        try:
            st_mode = os.stat(target).st_mode
        except FileNotFoundError:
            raise TriageError(f"{_show(path)} does not exist (looked at {target})", "Check the path")
        if not stat.S_ISDIR(st_mode):
            raise TriageError(f"{_show(path)} is {kind(st_mode)}, not a directory", "Move it away or pass another path")
        return target

    def walk(self, path: str | os.PathLike, suffixes: tuple[str, ...] = (), recursive: bool = True) -> list[Path]:
        """The regular files under a directory of the read roots (or that one file), links out skipped."""
        top = self.read_path(path)
        if top.is_file():
            return [regular_file(top, path)]
        return walk(top, suffixes, within=self.read_roots, recursive=recursive)
