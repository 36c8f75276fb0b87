"""Engine arguments checked against the installed vLLM's own argument parser.

Each argument list is parsed by the parser vLLM's API server builds for itself
(``make_arg_parser`` of ``vllm.entrypoints.launchers.cli_args``, or of the older
``vllm.entrypoints.openai.cli_args``), under the engine's interpreter, in a subprocess:
no copy of vLLM's flags is kept here. A flag the parser does not know (removed or
misspelt) or a value it rejects is an :class:`ArgIssue` naming the flag and the vLLM
version; :func:`raise_for_issues` turns them into a scope error.

Importing vLLM takes tens of seconds on a small host, so verdicts are cached per
(interpreter, vLLM version and location, argument list) under the fasttrack cache
(``$FASTTRACK_CACHE/argcheck``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from pathlib import Path

from pydantic import Field

from fasttrack.engine.environment import probe_local_environment
from fasttrack.engine.procs import run_script
from fasttrack.errors import ScopeError
from fasttrack.modelbase import StrictModel

_MARK = "FASTTRACK-ARGCHECK:"
UNKNOWN = "unrecognized argument"

# Runs under the engine's interpreter; reads {"lists": {key: [args]}} on stdin.
_PROBE = r"""
import json, sys
req = json.load(sys.stdin)
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    where = "vllm.entrypoints.launchers.cli_args"
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    where = "vllm.entrypoints.openai.cli_args"
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm

class ParserError(Exception):
    pass

def error(message):
    raise ParserError(message)

results = {}
for key, args in req["lists"].items():
    parser = make_arg_parser(FlexibleArgumentParser(description="fasttrack argument check"))
    parser.error = error
    for action in parser._actions:
        for sub in getattr(action, "choices", None) or {}:
            if hasattr(sub, "error"):
                sub.error = error
    try:
        _, unknown = parser.parse_known_args(["--model", "fasttrack-argument-check", *args])
        results[key] = {"unknown": unknown}
    except ParserError as exc:
        results[key] = {"error": str(exc)}
    except SystemExit as exc:
        results[key] = {"error": f"the parser exited ({exc.code})"}
print("__MARK__" + json.dumps({"version": vllm.__version__, "parser": where, "results": results}))
""".replace("__MARK__", _MARK)


class ArgIssue(StrictModel):
    key: str
    """Which argument list: ``group/side`` (or a node's role)."""
    flag: str | None = None
    """The flag vLLM does not accept (None when the parser rejected a value)."""
    message: str


class ArgCheck(StrictModel):
    """The outcome of checking argument lists against one vLLM installation."""

    python: str
    vllm_version: str | None = None
    vllm_commit: str | None = None
    parser: str | None = None
    """The module whose ``make_arg_parser`` was used."""
    checked: list[str] = Field(default_factory=list)
    """Keys of the argument lists that were parsed (or found in the cache)."""
    issues: list[ArgIssue] = Field(default_factory=list)
    skipped: str | None = None
    """Why nothing could be checked (e.g. vLLM is not installed for this interpreter)."""

    @property
    def ok(self) -> bool:
        return self.skipped is None and not self.issues

    def lines(self) -> list[str]:
        """One line per issue, naming the flag and the vLLM version."""
        ver = f"vLLM {self.vllm_version}" if self.vllm_version else "the installed vLLM"
        out = []
        for i in self.issues:
            if i.flag and i.message == UNKNOWN:
                out.append(f"{i.key}: {ver} does not accept {i.flag} (an unknown or removed flag)")
            else:
                out.append(f"{i.key}: {ver} rejects the arguments: {i.message}")
        return out


def _cache_dir() -> Path:
    return Path(os.environ.get("FASTTRACK_CACHE", Path.home() / ".cache" / "fasttrack")) / "argcheck"


def _key(install: dict[str, object], args: list[str]) -> str:
    blob = json.dumps({"install": install, "args": args}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _issues_for(key: str, res: dict[str, object]) -> list[ArgIssue]:
    if "error" in res:
        msg = str(res["error"])
        flag = next((t.split("/")[0] for t in msg.replace(":", " ").split() if t.startswith("--")), None)
        return [ArgIssue(key=key, flag=flag, message=msg)]
    unknown = [str(u) for u in res.get("unknown", []) or []]  # type: ignore[attr-defined]  # JSON list
    flags = [u for u in unknown if u.startswith("-")]
    if flags:
        return [ArgIssue(key=key, flag=f.split("=", 1)[0], message=UNKNOWN) for f in flags]
    if unknown:
        return [ArgIssue(key=key, message=f"unrecognized arguments {unknown}")]
    return []


def check_arg_lists(
    lists: dict[str, list[str]],
    *,
    python: str | None = None,
    env: dict[str, str] | None = None,
    use_cache: bool = True,
    timeout: float = 600.0,
) -> ArgCheck:
    """Parse every list with the installed vLLM's own server parser (see the module docstring)."""
    exe = python or sys.executable
    facts = probe_local_environment(python=exe, env=env)
    version, commit = facts.get("vllm_version"), facts.get("vllm_commit")
    result = ArgCheck(python=exe, vllm_version=version, vllm_commit=commit)
    if not version:
        notes = "; ".join(facts.get("notes") or []) or "vLLM is not installed"
        result.skipped = f"vLLM is not importable by {exe}: {notes}"
        return result
    install = {"python": os.path.realpath(exe), "version": version, "commit": commit}
    cache = _cache_dir()
    todo: dict[str, list[str]] = {}
    for key, args in lists.items():
        hit = cache / f"{_key(install, args)}.json" if use_cache else None
        if hit is not None and hit.is_file():
            with contextlib.suppress(OSError, ValueError):
                cached = json.loads(hit.read_text())
                result.issues += _issues_for(key, cached["result"])
                result.parser = cached.get("parser")
                result.checked.append(key)
                continue
        todo[key] = [str(a) for a in args]
    if not todo:
        return result
    out = _run_probe(exe, todo, env, timeout)
    if isinstance(out, str):
        result.skipped = out
        return result
    result.parser = str(out.get("parser"))
    for key, res in out["results"].items():
        result.issues += _issues_for(key, res)
        result.checked.append(key)
        if use_cache:
            with contextlib.suppress(OSError):
                cache.mkdir(parents=True, exist_ok=True)
                payload = {"result": res, "parser": result.parser, "args": todo[key], "install": install}
                (cache / f"{_key(install, todo[key])}.json").write_text(json.dumps(payload))
    return result


def _run_probe(exe: str, todo: dict[str, list[str]], env: dict[str, str] | None, timeout: float) -> dict | str:
    proc = run_script(exe, _PROBE, stdin=json.dumps({"lists": todo}), env=env, timeout=timeout)
    if isinstance(proc, str):
        return f"the argument check {proc}"
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if proc.returncode != 0 or line is None:
        return f"the argument check failed under {exe} (exit {proc.returncode}): {proc.stderr.strip()[-400:]}"
    try:
        data: dict = json.loads(line[len(_MARK) :])
    except ValueError:
        return f"the argument check printed no JSON under {exe}"
    return data


def raise_for_issues(check: ArgCheck, *, scope_name: str, scope_path: str | os.PathLike[str] | None = None) -> None:
    """A :class:`~fasttrack.errors.ScopeError` naming every rejected flag, the vLLM version and the scope file
    that passes them (``scope_path``: the file the scope was read from, which need not be a shipped suite's)."""
    if not check.issues:
        return
    flags = sorted({i.flag for i in check.issues if i.flag})
    where = str(scope_path) if scope_path is not None else f"suites/{scope_name}/scope.yaml"
    raise ScopeError(
        f"scope {scope_name!r} ({where}) passes engine arguments that vLLM {check.vllm_version} ({check.python}) "
        f"does not accept:\n  " + "\n  ".join(check.lines()),
        hint=(
            f"Remove or rename {', '.join(flags)} in {where} (engine.*args, point_args)"
            if flags
            else f"Fix the engine arguments in {where}"
        )
        + "; `python -m vllm.entrypoints.launchers.api_server.entry --help` lists what this vLLM accepts.",
    )
