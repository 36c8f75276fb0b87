"""Every resource limit on untrusted input, in one place.

Bundles come from contributors, scopes from pull requests, key files and shard
specifications from the command line. Each limit below bounds what one such input may
make fasttrack read, unpack, allocate or recurse into; crossing it is a user error (one
paragraph, exit code 2) or, while verifying, a failed item. The README's security
section lists them with what the tool does at each.

The figures that justify the bundle limits: a synthetic bundle of the demo target or of
Kimi K3 (``tests/synthetic``, every check with tables, artifacts and logs)
holds 18 files and 60-80 KB (20-25 KB packed), its manifest is 22-38 KB and nests 8
deep; the shipped scopes are 1-8 KB of YAML with at most 602 nodes, 7 aliases and 5
levels. The limits leave room for real runs that are thousands of times larger (per-sample
eval outputs, per-request timings and engine logs of a full tier) and still stop a
decompression bomb, a member flood or a nesting attack within seconds.

The helpers here only measure; callers raise their own error types.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate, repeat
from pathlib import Path
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# --------------------------------------------------------------------------- bundle tarballs

BUNDLE_MAX_MEMBERS = 10_000
"""Members (files and directories) of one bundle tarball at most."""
BUNDLE_MAX_MEMBER_BYTES = 2 * GiB
"""Unpacked bytes of one member at most (from its tar header, before it is inflated)."""
BUNDLE_MAX_TOTAL_BYTES = 8 * GiB
"""Unpacked bytes of all members together at most (from the headers, before inflating)."""
BUNDLE_MAX_RATIO = 200
"""Unpacked bytes per packed byte at most, once more than ``BUNDLE_RATIO_FLOOR`` is unpacked:
text and Parquet compress 3-20x, a gzip bomb about 1000x."""
BUNDLE_RATIO_FLOOR = 64 * MiB
"""Unpacked bytes below which the compression ratio is not checked."""
BUNDLE_MAX_NAME_CHARS = 1024
"""Characters of one member name at most."""
TAR_MAX_READ = 16 * MiB
"""Bytes of one read from the decompressed stream at most (caps pax and GNU long-name headers)."""
TAR_MAX_HEADER_BYTES_PER_MEMBER = 64 * KiB
"""Bytes of tar headers (pax records, long names) per member at most, on average."""
TAR_MAX_TRAILER = 1 * MiB
"""Bytes of zero padding allowed after the tar end-of-archive marker."""

# --------------------------------------------------------------------------- bundle contents

MANIFEST_MAX_BYTES = 16 * MiB
"""Bytes of ``manifest.json`` (and of ``attestation.dsse.json``) at most."""
TABLE_KEEP_BYTES = 256 * MiB
"""Bytes of one result table kept in memory while verifying; a larger table fails the ``tables`` item."""
TABLES_KEEP_TOTAL_BYTES = 1 * GiB
"""Bytes of all result tables kept in memory while verifying; tables past it fail the ``tables`` item."""
JSON_MAX_DEPTH = 64
"""Nesting of arrays and objects in any JSON a bundle carries (manifest, attestation
payload, JSON cells of result tables) at most."""
SERVE_MAX_MEMBER_BYTES = 256 * MiB
"""Bytes of one bundle file that ``dashboard serve`` sends at most."""

# --------------------------------------------------------------------------- result rows (decoding a table)

TABLE_MAX_COLUMNS = 512
"""Columns of one result table at most (the widest shipped table has 66)."""
TABLE_MAX_ROW_GROUPS = 4096
"""Row groups of one result table at most (the bundle layer writes one per million rows)."""
TABLE_DECODED_MAX_BYTES = 256 * MiB
"""Bytes one result table may decompress to (its column chunks' uncompressed size, from the Parquet footer): what
reading one table holds at most beside the file."""
TABLE_CELL_MAX_BYTES = 64 * MiB
"""Bytes of text in one cell at most (a run's per-chunk timings as JSON are a few MB)."""
BUNDLE_DECODED_MAX_BYTES = 1 * GiB
"""Bytes of text all the result tables of one bundle may decode to together (a value repeated through a
dictionary counts once per row that uses it): what ``merge`` holds at most of one merged bundle's rows."""
BUNDLE_DECODED_MAX_ROWS = 1_000_000
"""Rows all the result tables of one bundle may hold together (each row is validated by its model)."""
DECODE_SLICE_BYTES = 16 * MiB
"""Bytes of text turned into Python objects at once while decoding a table."""
KEPT_TEXT_CHARS = 1024
"""Characters of a text field a re-judging rule keeps of each row (it reads whether the text is empty), and that
the report keeps of a cell (it shows fewer)."""
KEPT_LIST_ITEMS = 1000
"""Items of a list-valued cell the report keeps (it draws no raw samples)."""
EVAL_SAMPLES_UNSTATED = 100_000
"""Samples one eval run may have when neither the eval, the tier nor the scope's estimates say how many."""

# --------------------------------------------------------------------------- report

REPORT_MAX_TABLE_ROWS = 20_000
"""Rows of one table the report reads (charts and tables work on this prefix)."""
REPORT_MAX_FILES_LISTED = 2_000
"""Files the report lists."""
REPORT_MAX_PLAN_POINTS = 5_000
"""Config points of the recorded plan the report reads."""

# --------------------------------------------------------------------------- scopes (YAML)

YAML_MAX_BYTES = 1 * MiB
"""Bytes of one scope file (or of the scope text a bundle records) at most."""
YAML_MAX_NODES = 100_000
"""Nodes a scope may expand to, every alias counted as a full copy of what it names."""
YAML_MAX_DEPTH = 64
"""Nesting of mappings and sequences in a scope at most."""
GLOB_MAX_CHARS = 256
"""Characters of one path glob of a scope's ``isolation`` section at most (the shipped ones are
at most 60); every glob is matched in time linear in the path's length, whatever it holds."""

# --------------------------------------------------------------------------- command line

KEY_FILE_MAX_BYTES = 256 * KiB
"""Bytes of one key file (public, private or ``allowed_signers``) read at most."""
MAX_SHARDS = 4096
"""Shard count ``n`` of ``--shard i/n`` (and of a bundle's recorded shard) at most."""
SHARD_SPEC_MAX_CHARS = 16
"""Characters of a ``--shard`` value at most."""


@dataclass(frozen=True)
class Limit:
    """One limit as the README's security section states it."""

    name: str
    value: str
    at_limit: str


def table() -> list[Limit]:
    """Every limit with what the tool does when it is reached (the README's table). "tarball
    refused": nothing is unpacked; ``verify`` fails its ``archive`` item, ``report`` and the
    dashboard show the bundle as unreadable, ``merge``, ``sign`` and ``reproduce`` exit 2."""

    def size(n: int) -> str:
        for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
            if n >= k and n % k == 0:
                return f"{n // k} {unit}"
        return f"{n} bytes"

    refused = "tarball refused"
    return [
        Limit("bundle members", f"{BUNDLE_MAX_MEMBERS:,}", f"{refused}, at the first member past the limit"),
        Limit("bundle member size", size(BUNDLE_MAX_MEMBER_BYTES), f"{refused}, from the member's tar header"),
        Limit("bundle unpacked size", size(BUNDLE_MAX_TOTAL_BYTES), f"{refused}, from the tar headers"),
        Limit(
            "unpacked per packed byte",
            f"{BUNDLE_MAX_RATIO}x, past {size(BUNDLE_RATIO_FLOOR)} unpacked",
            f"{refused}, from the tar headers (a gzip bomb)",
        ),
        Limit("tar header bytes", f"{size(TAR_MAX_HEADER_BYTES_PER_MEMBER)} per member on average", refused),
        Limit("member name", f"{BUNDLE_MAX_NAME_CHARS} characters", refused),
        Limit(
            "manifest, attestation",
            size(MANIFEST_MAX_BYTES),
            "not parsed: `verify` fails `schema` / `attestation`; `report` shows the bundle as unreadable",
        ),
        Limit(
            "JSON nesting",
            f"{JSON_MAX_DEPTH} levels",
            "not parsed: `verify` fails `schema` / `attestation`; a table cell nested deeper is shown as its text "
            "in the report, and `merge` / `reproduce` exit 2 naming it",
        ),
        Limit(
            "result tables held in memory while verifying",
            f"{size(TABLE_KEEP_BYTES)} each, {size(TABLES_KEEP_TOTAL_BYTES)} together",
            "`verify` fails `tables` naming the table (too large to check)",
        ),
        *_row_limits(size),
        Limit("file sent by `dashboard serve`", size(SERVE_MAX_MEMBER_BYTES), "404 for that file"),
        Limit(
            "scope YAML",
            size(YAML_MAX_BYTES),
            "exit 2 naming the file (`reproduce` of a bundle recording such a scope too)",
        ),
        Limit(
            "scope expansion, every alias counted as a copy",
            f"{YAML_MAX_NODES:,} nodes",
            "exit 2 naming the file, before anything is built (a 'billion laughs')",
        ),
        Limit("scope nesting", f"{YAML_MAX_DEPTH} levels", "exit 2 naming the file"),
        Limit("path glob in a scope's `isolation`", f"{GLOB_MAX_CHARS} characters", "exit 2 naming the file and field"),
        Limit("key file (public, private, `allowed_signers`)", size(KEY_FILE_MAX_BYTES), "exit 2 naming the file"),
        Limit(
            "shards",
            f"n <= {MAX_SHARDS:,}",
            "`--shard` exits 2; a bundle recording more fails `verify`'s `schema` item",
        ),
    ]


def _row_limits(size: Callable[[int], str]) -> list[Limit]:
    """The limits on decoding result tables (:mod:`fasttrack.bundle.rowread`), as :func:`table` states them."""
    return [
        Limit(
            "rows of one result table",
            "what the judging scope's plan could produce (points x requests x runs), with headroom",
            "the table is refused from its footer, before any row is decoded: `verify` fails `tables` naming it",
        ),
        Limit(
            "result rows and text decoded per bundle",
            f"{BUNDLE_DECODED_MAX_ROWS:,} rows, {size(BUNDLE_DECODED_MAX_BYTES)} of text",
            "the table that crosses it is refused: `verify` fails `tables`, the report shows it as not readable, "
            "`merge` exits 2",
        ),
        Limit(
            "one result table decompressed",
            f"{size(TABLE_DECODED_MAX_BYTES)}, {TABLE_MAX_COLUMNS} columns, {TABLE_MAX_ROW_GROUPS:,} row groups",
            "refused from its footer: `verify` fails `tables` naming it",
        ),
        Limit(
            "one cell of a result table",
            f"{size(TABLE_CELL_MAX_BYTES)} of text",
            "the table is refused before the cell becomes text: `verify` fails `tables` naming the column",
        ),
        Limit(
            "decoded at once",
            f"{size(DECODE_SLICE_BYTES)} of text; a re-judged row keeps {KEPT_TEXT_CHARS:,} characters of a text "
            f"field, the report {KEPT_TEXT_CHARS:,} characters and {KEPT_LIST_ITEMS:,} items of a cell",
            "rows become Python objects a slice at a time",
        ),
        Limit(
            "samples of an eval run whose size nothing states",
            f"{EVAL_SAMPLES_UNSTATED:,}",
            "bounds its tables' rows (the eval's limit, the tier's, or the scope's estimate when one is given)",
        ),
    ]


# --------------------------------------------------------------------------- measuring helpers


def read_capped(path: str | os.PathLike[str], limit: int) -> bytes | None:
    """The bytes of a regular file, or None when it holds more than ``limit`` bytes.

    Reads at most ``limit + 1`` bytes, so ``/dev/zero`` or a FIFO cannot make it allocate
    without bound. ``OSError`` propagates.
    """
    with open(Path(path), "rb") as f:
        data = f.read(limit + 1)
    return None if len(data) > limit else data


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def json_depth(data: bytes | str, limit: int = JSON_MAX_DEPTH) -> int | None:
    """The nesting depth of JSON text when it is at most ``limit``, else None.

    Counts brackets outside strings without parsing (no recursion, linear time, the loops
    in C), so it is safe to call before ``json.loads`` on hostile text. Malformed text gets
    a depth too (its unclosed brackets count); the parser reports what else is wrong.
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    # drop escaped characters (``\\\\`` first, so ``\\"`` is always an escaped quote), then
    # every other piece between quotes is outside a string
    outside = b"".join(raw.replace(b"\\\\", b"").replace(b'\\"', b"").split(b'"')[0::2])
    steps = outside.translate(None, _NOT_BRACKETS).translate(_STEPS)
    if not steps:
        return 0
    deepest = max(0, max(accumulate(map(operator.sub, steps, repeat(1)))))
    return deepest if deepest <= limit else None


def json_problem(data: bytes | str, what: str, *, max_bytes: int | None = None) -> str | None:
    """Why ``data`` must not be handed to a JSON parser (too large, nested too deeply), or None."""
    if max_bytes is not None and len(data) > max_bytes:
        return f"{what} is {len(data)} bytes, over the limit of {max_bytes}"
    if json_depth(data) is None:
        return f"{what} nests arrays or objects more than {JSON_MAX_DEPTH} deep (the limit)"
    return None


def yaml_problem(text: str, what: str) -> str | None:
    """Why YAML ``text`` must not be loaded (too large, too deep, or expanding past
    ``YAML_MAX_NODES`` through aliases: a "billion laughs"), or None.

    Reads the event stream only (no node graph, no recursion): each alias counts as many
    nodes as the anchored node it repeats. Malformed YAML returns None; the loader reports it.
    """
    import yaml

    if len(text) > YAML_MAX_BYTES:
        return f"{what} is {len(text)} characters, over the limit of {YAML_MAX_BYTES}"
    c_loader = getattr(yaml, "CSafeLoader", None)
    if c_loader is not None:
        try:
            return _yaml_events_problem(text, what, c_loader)
        except yaml.YAMLError:
            pass  # libyaml scans ahead and may stop (e.g. at its own nesting limit) before the events show why
    try:
        return _yaml_events_problem(text, what, yaml.SafeLoader)
    except yaml.YAMLError:
        return None


def _yaml_events_problem(text: str, what: str, loader: Any) -> str | None:
    """:func:`yaml_problem` over the events of one parser (``yaml.YAMLError`` propagates)."""
    import yaml

    sizes: dict[str, int] = {}  # anchor -> nodes it stands for
    anchors: list[str | None] = []  # per open collection
    counts: list[int] = []  # nodes so far per open collection
    done = 0  # nodes of finished top-level documents
    for ev in yaml.parse(text, Loader=loader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            anchors.append(ev.anchor)
            counts.append(1)
            if len(counts) > YAML_MAX_DEPTH:
                return f"{what} nests mappings or sequences more than {YAML_MAX_DEPTH} deep (the limit)"
            n = 0
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, n = anchors.pop(), counts.pop()
            if anchor:
                sizes[anchor] = n
        elif isinstance(ev, yaml.ScalarEvent):
            n = 1
            if ev.anchor:
                sizes[ev.anchor] = 1
        elif isinstance(ev, yaml.AliasEvent):
            n = sizes.get(ev.anchor or "", 1)
        else:
            continue
        if counts and n:
            counts[-1] += n
        elif n:
            done += n
        if done + sum(counts) > YAML_MAX_NODES:
            return (
                f"{what} expands to more than {YAML_MAX_NODES:,} nodes through its aliases (the limit; "
                "a 'billion laughs' document?)"
            )
    return None
