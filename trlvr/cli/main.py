"""`trlvr` command line: dispatch, and the one place where a command's failure becomes one line.

Each command lives in its own module with `make_parser(subparsers)` and `main(args) -> int`,
imported lazily so `trlvr --help` is fast.

How a command ends (`failure_line` says it in one line on stderr; `--verbose` anywhere on the
command line, or its alias `--debug`, keeps the traceback instead):
    0    done
    2    the user's mistake: a `UserError` (bad file, row, field, key, flag, setting), a bad flag
         or a value its kind refuses (argparse with `trlvr.kinds`; `main` returns argparse's code
         rather than raising SystemExit), or a path that cannot be used (a file where a directory is needed or
         above it, a directory where a file is needed, a missing file)
    74   the machine refused (sysexits' EX_IOERR): permission denied, a read-only or full file
         system, a quota, an I/O error, out of memory
    130  interrupted (Ctrl-C; a command run inside another, e.g. a study's stage, passes the
         KeyboardInterrupt on, so Ctrl-C stops the whole study rather than one stage)
    1    stdout was closed (`trlvr compare A B | head -1`): quiet, as Python's docs recipe for
         SIGPIPE does (stdout goes to /dev/null so the exit flush cannot fail again)
Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import re
import sys

# command name -> module under trlvr.cli
COMMANDS = {
    "train": "train_cmd",
    "eval": "eval_cmd",
    "compare": "compare_cmd",
    "report": "report_cmd",
    "demo": "demo_cmd",
    "toy": "toy_cmd",
    "data": "data_cmd",
    "select": "select_cmd",
    "study": "study_cmd",
    "smoke": "smoke_cmd",
    "recipes": "recipes_cmd",
    "env": "env_cmd",
}
VERBOSE_FLAGS = ("--verbose", "--debug")  # --debug: the older name
EXIT_REFUSED, EXIT_INTERRUPTED, EXIT_CLOSED_STDOUT = 74, 130, 1
_running = [0]  # commands running in this process (a study runs its stages through `main`)

# errno -> what it means for the user, and whether it is their path (2) or the machine's refusal (74)
_PATH_ERRORS = {
    errno.ENOTDIR: "a file is in the way where a directory is needed",
    errno.EEXIST: "a file is in the way where a directory is needed",
    errno.EISDIR: "a directory is in the way where a file is needed",
    errno.ENOENT: "no such file or directory",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many symbolic links",
}
_REFUSALS = {
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EIO: "an input/output error",
    errno.EFBIG: "the file is too large",
    errno.EMFILE: "too many open files",
    errno.ENFILE: "too many open files on the system",
    errno.ENOMEM: "out of memory",
}
_RUST_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")  # std::io::Error from Rust libraries


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line (and the command's --help), exit 2; an unknown flag
    before a missing one (a misspelt `--senior` is named, not reported as missing), with a "did you mean"."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        if (
            args is not None
            and not self._subparsers
            and not any(a.nargs == argparse.REMAINDER for a in self._actions)
        ):
            known = [o for o in self._option_string_actions if o.startswith("--")]
            unknown = []
            for arg in args:
                if arg == "--":
                    break
                flag = arg.split("=")[0]
                if flag.startswith("--") and not any(
                    o == flag or (self.allow_abbrev and o.startswith(flag)) for o in known
                ):
                    close = difflib.get_close_matches(flag, known, n=1)
                    unknown.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
            if unknown:
                self.error(f"unrecognized arguments: {', '.join(unknown)}")
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    import trlvr  # the package itself (its version), not a layer

    parser = _Parser(
        prog="trlvr",
        description="Tandem RLVR: train and evaluate tandem seniors.",
        epilog=(
            "New here? `trlvr demo --out runs/demo` trains and evaluates the toy pair on a CPU (minutes). "
            "`trlvr recipes` lists the shipped configs and studies; "
            "`trlvr env` prints versions for a bug report."
        ),
    )
    parser.add_argument("--version", action="version", version=f"trlvr {trlvr.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        importlib.import_module(f"trlvr.cli.{module}").make_parser(sub)
    return parser


def _errno_of(e: BaseException) -> int | None:
    if isinstance(e, OSError) and e.errno is not None:
        return e.errno
    m = _RUST_OS_ERROR.search(str(e))
    return int(m.group(1) or m.group(2)) if m else None


def _file_in_the_way(path) -> str | None:
    """The path itself or the first folder above it that exists and is not a directory."""
    from pathlib import Path

    p = Path(os.fsdecode(path))
    return next((str(q) for q in (p, *p.parents) if q.exists() and not q.is_dir()), None)


def _os_line(e: BaseException, code: int, meaning: str) -> str:
    paths = [p for p in (getattr(e, "filename", None), getattr(e, "filename2", None)) if p is not None]
    where = f"{' -> '.join(map(os.fsdecode, paths))}: " if paths else ""
    told = getattr(e, "strerror", None) or " ".join(str(e).split())
    if code in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((b for b in map(_file_in_the_way, paths) if b), None)
        if blocker is None and code == errno.EEXIST:
            meaning = "it already exists"
        elif blocker is not None:
            meaning = f"{blocker} is a file, where a directory is needed"
    return f"{where}{told} ({meaning})" if meaning.lower() != str(told).lower() else f"{where}{told}"


def failure_line(e: BaseException) -> tuple[str, int] | None:
    """(one line, exit code) for a user-facing failure; None for a bug (it keeps its traceback).
    Looks through the exception's causes, so a library's wrapper of an OSError counts too."""
    from trlvr.errors import EXIT_BAD_INPUT, UserError

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError):
            return str(e), EXIT_BAD_INPUT
        if isinstance(e, KeyboardInterrupt):
            return "interrupted", EXIT_INTERRUPTED
        if isinstance(e, MemoryError) or any(c.__name__ == "OutOfMemoryError" for c in type(e).__mro__):
            return (
                f"out of memory: {' '.join(str(e).split())[:300] or type(e).__name__}",
                EXIT_REFUSED,
            )  # torch's too
        code = _errno_of(e)
        if code in _PATH_ERRORS:
            return _os_line(e, code, _PATH_ERRORS[code]), EXIT_BAD_INPUT
        if code in _REFUSALS:
            return _os_line(e, code, _REFUSALS[code]), EXIT_REFUSED
        e = e.__cause__ or e.__context__
    return None


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (so a BrokenPipeError came from it)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's capture)
        return False


def _quiet_stdout() -> None:
    """Python's SIGPIPE recipe: point stdout at /dev/null so the interpreter's exit flush succeeds."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed too: the exit code is all that is left
        pass


def _split_verbose(argv: list[str]) -> tuple[list[str], bool]:
    """(argv without the traceback switches, verbose). `train` and `smoke` keep --verbose: it is also their
    own option (the libraries' console output; train's is read by TRL's parser)."""
    verbose = any(a in VERBOSE_FLAGS for a in argv)
    keep = ("--verbose",) if argv[:1] in (["train"], ["smoke"]) else ()
    return [a for a in argv if a not in VERBOSE_FLAGS or a in keep], verbose


# commands that share their work among the processes of a launch (torchrun / accelerate launch), one
# engine per process, rank 0 writing (`trlvr.ranks`; training is TRL's and accelerate's own)
SHARED_COMMANDS = ("eval", "select")


def main(argv: list[str] | None = None) -> int:
    """Run one command; its user-facing failure is one line on stderr and an exit code (module docstring)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    argv, verbose = _split_verbose(argv)
    if (
        argv[:1] and argv[0] in SHARED_COMMANDS
    ):  # launched N times: each process its own device, pinned before
        from trlvr.ranks import pin_local_device  # parsing, whose kinds (--device cuda:1) already ask CUDA

        try:
            pin_local_device()
        except Exception as e:  # a UserError (more processes than GPUs): one line, as below
            found = failure_line(e)
            if found is None or verbose:
                raise
            _say(f"trlvr {argv[0]}: error: {found[0]}")
            return found[1]
    if argv[:1] == ["train"]:  # `train` hands its arguments to TRL's own parser (trlvr.config)
        args = argparse.Namespace(command="train", rest=argv[1:])
    else:
        try:
            args = build_parser().parse_args(argv)
        except (
            SystemExit
        ) as e:  # argparse said it in one line (a bad flag, or a value its kind refuses; --help: 0)
            return e.code if isinstance(e.code, int) else 2
    _running[0] += 1
    try:
        code = int(importlib.import_module(f"trlvr.cli.{COMMANDS[args.command]}").main(args) or 0)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        if verbose or not _stdout_closed():
            raise
        _quiet_stdout()
        return EXIT_CLOSED_STDOUT
    except (Exception, KeyboardInterrupt) as e:
        found = failure_line(e)
        if found is None or verbose or (isinstance(e, KeyboardInterrupt) and _running[0] > 1):
            raise
        line, code = found
        _say(f"trlvr {args.command}: error: {line}")
        return code
    finally:
        _running[0] -= 1


if __name__ == "__main__":
    sys.exit(main())
