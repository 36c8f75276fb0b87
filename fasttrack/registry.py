"""One registry for every pluggable part of fasttrack, keyed by kind and name.

A kind is a string (``check``, ``gate``, ``feature``, ``evidence``, ``launcher``, ``scheduler``,
``subcommand``); a name is unique within its kind. Built-in modules register their parts with
:func:`component` (or :func:`register`) when they are imported; :data:`BUILTIN_MODULES` names, per
kind, the modules to import before the kind is first read. Other packages add parts through the
``fasttrack`` entry-point group: each entry's value is a module (or ``module:attr``) that registers
its parts when imported, and every entry is loaded the first time any kind is read.

A name that is not registered is an error that lists what is (:class:`UnknownComponent`); a second
registration of a name with another object is an error too, unless ``replace=True``.

This module is layer 1: it imports nothing of fasttrack but :mod:`fasttrack.errors`, so the bundle
and the report can read the ``evidence`` kind without loading engines (the modules registered for
that kind must stay as light).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from importlib import metadata
from typing import Any, TypeVar

from fasttrack.errors import FasttrackError

ENTRY_POINT_GROUP = "fasttrack"
"""The entry-point group other packages declare their modules in (``[project.entry-points.fasttrack]``)."""

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


def register(kind: str, name: str, obj: T, *, source: str = "fasttrack", replace: bool = False) -> T:
    """Register ``obj`` as ``kind:name`` (``source``: the package it came from, as errors name it)."""
    if not kind or not name:
        raise ValueError(f"a registry entry needs a kind and a name, got {kind!r}:{name!r}")
    entries = _entries.setdefault(kind, {})
    old = entries.get(name)
    if old is not None and old is not obj and not replace:
        raise DuplicateComponent(
            f"{kind} {name!r} is registered twice: by {_sources.get((kind, name), '?')} ({_describe(old)}) "
            f"and by {source} ({_describe(obj)})",
            hint="Rename one of them; a name is unique within its kind.",
        )
    entries[name] = obj
    _sources[(kind, name)] = source
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


def load(kind: str) -> None:
    """Import the built-in modules of ``kind`` and every entry point of the ``fasttrack`` group, once."""
    global _entry_points_loaded
    if kind not in _loaded_kinds and kind not in _loading:
        _loading.add(kind)
        try:
            for mod in BUILTIN_MODULES.get(kind, ()):
                importlib.import_module(mod)
            _loaded_kinds.add(kind)
        finally:
            _loading.discard(kind)
    if not _entry_points_loaded:
        _entry_points_loaded = True
        for ep in entry_points():
            try:
                ep.load()
            except Exception as exc:  # an outside package that fails to import names itself
                _entry_points_loaded = False
                raise FasttrackError(
                    f"the fasttrack plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}",
                    hint="Fix or uninstall the package that declares it in the 'fasttrack' entry-point group.",
                ) from exc


def entry_points() -> Iterable[metadata.EntryPoint]:
    """The installed packages' entries in the ``fasttrack`` group."""
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def entries(kind: str) -> dict[str, Any]:
    """Everything registered as ``kind``, in registration order (built-ins first)."""
    load(kind)
    return dict(_entries.get(kind, {}))


def get(kind: str, name: str) -> Any:
    """The object registered as ``kind:name``; an unknown name is an error listing the registered ones."""
    load(kind)
    found = _entries.get(kind, {})
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise UnknownComponent(
            f"unknown {kind} {name!r}; registered: {known}",
            hint=f"A {kind} from another package is declared in its '{ENTRY_POINT_GROUP}' entry-point group.",
        )
    return found[name]


def source(kind: str, name: str) -> str:
    """The package that registered ``kind:name`` (``fasttrack`` for built-ins)."""
    get(kind, name)
    return _sources[(kind, name)]


def _describe(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__qualname__
