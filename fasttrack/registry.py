"""One registry for every pluggable part of fasttrack, keyed by kind and name.

A kind is a string (:data:`KINDS`: ``check``, ``gate``, ``feature``, ``evidence``, ``launcher``,
``scheduler``, ``subcommand``, ``schema``); a name is unique within its kind. Built-in modules register
their parts with :func:`component` (or :func:`register`) when they are imported. :data:`OWNERS` names,
per kind, the package that owns it: it is imported first, and fills :data:`BUILTIN_MODULES` (the modules
imported before the kind is first read). Other packages add parts through the ``fasttrack`` entry-point
group (``[project.entry-points.fasttrack]``): each entry's value is a module (or ``module:attr``) that
registers its parts when imported. Every entry is loaded the first time a kind is listed (:func:`entries`) or a
name is looked up that no built-in part has (:func:`get`).

Built-in parts come first in :func:`entries`, in the order of their modules in :data:`BUILTIN_MODULES`, then
the other packages' in the order they registered, whatever was imported or read first. A kind nothing
declares, or a name that is not registered, is an error that lists what is (:class:`UnknownComponent`;
pluggy's rule: an undeclared hook is an error); a second registration of a name with another object is an
error too, unless ``replace=True``. A part an entry point registers names that entry's distribution as its
source, in errors and in :func:`source`.

This module is layer 1: it imports nothing of fasttrack but :mod:`fasttrack.errors`, so the bundle and the
report can read the ``evidence`` kind without loading engines. The modules registered for that kind must
stay as light. An outside package's module is imported as it is: verifying a bundle that holds its check's
rows imports it, with what it imports (a serving feature's base class brings the engine client along).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any, TypeVar

from fasttrack.errors import FasttrackError

ENTRY_POINT_GROUP = "fasttrack"
"""The entry-point group other packages declare their modules in (``[project.entry-points.fasttrack]``)."""

BUILTIN = "fasttrack"
"""The source of the built-in parts."""

KINDS: dict[str, str] = {
    "check": "a kind of evidence a run collects and judges (fasttrack.checks.base.Check)",
    "gate": "a check's section of the scope's gates (fasttrack.scope.gates.CheckGate), by check name",
    "feature": "a serving feature the features check probes (fasttrack.checks.features.ServingFeature)",
    "evidence": "a check's typed result rows and how verify re-judges them, by check name",
    "launcher": "how a multi-node engine starts its node processes (fasttrack.engine.launchers.Launcher)",
    "scheduler": "a cluster scheduler that runs a plan's shards (fasttrack.executors.scheduler.Scheduler)",
    "subcommand": "a `fasttrack` subcommand group: a function that adds its commands to the typer app",
    "schema": "a JSON Schema checked in under schemas/: a function returning it, by file name",
}
"""Every kind, with what its parts are (errors quote it)."""

OWNERS: dict[str, str] = {
    "check": "fasttrack.checks",
    "gate": "fasttrack.scope.gates",
    "feature": "fasttrack.checks.features",
    "evidence": "fasttrack.evidence",
    "launcher": "fasttrack.engine.launchers",
    "scheduler": "fasttrack.executors",
    "subcommand": "fasttrack.cli",
    "schema": "fasttrack.schemas",
}
"""Per kind, the package that owns it: imported before the kind is first read, it fills :data:`BUILTIN_MODULES`."""

BUILTIN_MODULES: dict[str, tuple[str, ...]] = {}
"""Per kind, the built-in modules imported before the kind is first read (filled by the packages that own
the kind, e.g. ``BUILTIN_MODULES["check"] = ("fasttrack.checks.isolation", ...)``)."""

T = TypeVar("T")


class UnknownComponent(FasttrackError, KeyError):
    """A kind or name that nothing registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return FasttrackError.__str__(self)


class DuplicateComponent(FasttrackError, ValueError):
    """Two different objects registered under one kind and name."""


_entries: dict[str, dict[str, Any]] = {}
_sources: dict[tuple[str, str], str] = {}
_loaded_kinds: set[str] = set()
_entry_points_loaded = False
_loading: set[str] = set()
_loading_source: list[str] = []
"""The distribution whose entry point is being loaded (its registrations name it as their source)."""


def register(kind: str, name: str, obj: T, *, source: str | None = None, replace: bool = False) -> T:
    """Register ``obj`` as ``kind:name``. ``source``: the package it came from, as errors name it (default: the
    distribution whose entry point is loading, else fasttrack). ``replace``: take the place of another object."""
    if not kind or not name or not isinstance(name, str):
        raise ValueError(f"a registry entry needs a kind and a name, got {kind!r}:{name!r}")
    _known_kind(kind)
    src = source or (_loading_source[-1] if _loading_source else BUILTIN)
    entries = _entries.setdefault(kind, {})
    old = entries.get(name)
    if old is not None and old is not obj and not replace:
        raise DuplicateComponent(
            f"{kind} {name!r} is registered twice: by {_sources.get((kind, name), '?')} ({_describe(old)}) "
            f"and by {src} ({_describe(obj)})",
            hint="Rename one of them; a name is unique within its kind.",
        )
    if old is not None and old is not obj:
        del entries[name]  # a replacement takes the registration order of its own registration
    entries[name] = obj
    _sources[(kind, name)] = src
    return obj


def component(kind: str, name: str | None = None, **kw: Any) -> Callable[[T], T]:
    """Decorator: register the decorated object as ``kind:name`` (``name`` defaults to its ``name``
    attribute, else its ``__name__``)."""

    def deco(obj: T) -> T:
        n = name or getattr(obj, "name", None) or getattr(obj, "__name__", None)
        if not isinstance(n, str) or not n:
            raise TypeError(f"{obj!r}: give the {kind} a name")
        return register(kind, n, obj, **kw)

    return deco


def unregister(kind: str, name: str) -> None:
    """Remove ``kind:name`` (nothing happens if it is absent)."""
    _entries.get(kind, {}).pop(name, None)
    _sources.pop((kind, name), None)


def load(kind: str, *, outside: bool = True) -> None:
    """Import the owner and the built-in modules of ``kind``, once; with ``outside``, every entry point of the
    ``fasttrack`` group too (once)."""
    _known_kind(kind)
    if kind not in _loaded_kinds and kind not in _loading:
        _loading.add(kind)
        try:
            owner = OWNERS.get(kind)
            if owner is not None:
                importlib.import_module(owner)
            for mod in BUILTIN_MODULES.get(kind, ()):
                importlib.import_module(mod)
            _loaded_kinds.add(kind)
        finally:
            _loading.discard(kind)
    if outside:
        _load_entry_points()


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points():
        dist = getattr(ep, "dist", None)
        try:
            load_plugin(ep.value, source=f"{dist.name} (entry point {ep.name!r})" if dist is not None else ep.name)
        except FasttrackError:
            _entry_points_loaded = False
            raise


def load_plugin(value: str, *, source: str) -> Any:
    """Import one plugin module (``module`` or ``module:attr``) as its entry point is loaded: what it registers
    names ``source``; a module that fails to import is an error naming it. Returns the module (or attribute)."""
    _loading_source.append(source)
    try:
        return metadata.EntryPoint(name=source, value=value, group=ENTRY_POINT_GROUP).load()
    except Exception as exc:  # an outside package that fails to import names itself
        raise FasttrackError(
            f"the fasttrack plugin {source} ({value}) failed to load: {type(exc).__name__}: {exc}",
            hint=f"Fix or uninstall the package that declares it in the '{ENTRY_POINT_GROUP}' entry-point group.",
        ) from exc
    finally:
        _loading_source.pop()


def entry_points() -> Iterable[metadata.EntryPoint]:
    """The installed packages' entries in the ``fasttrack`` group."""
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def entries(kind: str, *, outside: bool = True) -> dict[str, Any]:
    """Everything registered as ``kind``: the built-in parts first, in the order of their modules in
    :data:`BUILTIN_MODULES` (whichever was imported first), then the other packages', in registration order.
    ``outside=False``: without loading the entry points (the parts they registered already are listed)."""
    load(kind, outside=outside)
    found = _entries.get(kind, {})
    mods = BUILTIN_MODULES.get(kind, ())

    def rank(name: str) -> int:
        if _sources.get((kind, name)) != BUILTIN:
            return len(mods) + 1
        mod = getattr(found[name], "__module__", "") or ""
        return next((i for i, m in enumerate(mods) if mod == m or mod.startswith(m + ".")), len(mods))

    return {n: found[n] for n in sorted(found, key=rank)}


def names(kind: str) -> list[str]:
    """The names registered as ``kind``, in the order of :func:`entries`."""
    return list(entries(kind))


def get(kind: str, name: str) -> Any:
    """The object registered as ``kind:name``; an unknown name is an error listing the registered ones. The entry
    points are loaded only for a name the built-in parts do not have (verifying a bundle of built-in checks
    imports no other package)."""
    load(kind, outside=False)
    if name not in _entries.get(kind, {}):
        load(kind)
    found = _entries.get(kind, {})
    if name not in found:
        raise UnknownComponent(
            f"unknown {kind} {name!r}; registered: {', '.join(names(kind)) or 'none'}",
            hint=f"A {kind} from another package is declared in its '{ENTRY_POINT_GROUP}' entry-point group.",
        )
    return found[name]


def peek(kind: str, name: str) -> Any | None:
    """What is registered as ``kind:name`` so far, or None, loading nothing (for a registration that must look
    at an earlier one while modules are still being imported)."""
    return _entries.get(kind, {}).get(name)


def source(kind: str, name: str) -> str:
    """The package that registered ``kind:name`` (``fasttrack`` for built-ins)."""
    get(kind, name)
    return _sources[(kind, name)]


def _known_kind(kind: str) -> None:
    if kind not in KINDS:
        raise UnknownComponent(
            f"unknown registry kind {kind!r}; kinds: {', '.join(KINDS)}",
            hint="A part registers under one of these kinds (fasttrack.registry.KINDS says what each holds).",
        )


def _describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__
