"""Errors raised while writing, packing, signing, reading or merging bundles."""

from __future__ import annotations

from fasttrack.errors import FasttrackError


class BundleError(FasttrackError):
    """A bundle (directory or ``.tar.gz``) is unusable, unsafe or inconsistent."""


class UnsafeArchiveError(BundleError):
    """A tarball holds a member that must never be extracted (traversal, link, device, bomb)."""


class KeyFileError(BundleError):
    """A key file cannot be read, is of the wrong type, or is missing."""


class MergeError(BundleError):
    """Shard bundles cannot be merged (different scope, plan or versions; missing shards)."""
