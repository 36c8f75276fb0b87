"""Evidence bundles: write, pack, sign, verify, merge and read.

The pipeline's calls, in order::

    from fasttrack import bundle

    prov = bundle.collect_provenance(engines=[...], models={...}, datasets={...}, seeds={...})
    manifest = bundle.write_bundle(
        out_dir,
        results=check_results,                      # list[CheckResult], one per check
        scope=bundle.scope_info(yaml_text, model=..., tier=..., path=...),
        plan=bundle.plan_info(plan, shard="1/1"),
        provenance=prov,
        pr=bundle.PRLink(repository=..., number=..., base_sha=..., head_sha=..., ...),
        rehearsal=False, rehearsal_reason=None,
        artifacts_from=run_dir,                     # its artifacts/ and logs/ are copied
        sign_keys=[bundle.load_private_key(key_path)],
    )
    bundle.pack_bundle(out_dir, out_dir.with_suffix(".tar.gz"))
    result = bundle.verify_bundle(path, keys=[pub_path], pr_head=sha)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrack import lazy_exports

#: Public name -> defining module (imported on first use, so ``import fasttrack.bundle`` is cheap).
_EXPORTS: dict[str, str] = {
    "sign_bundle": "attest",
    "BundleError": "errors",
    "KeyFileError": "errors",
    "MergeError": "errors",
    "UnsafeArchiveError": "errors",
    "PublicKey": "keys",
    "SigningKey": "keys",
    "generate_keypair": "keys",
    "load_private_key": "keys",
    "load_public_keys": "keys",
    "load_trust_dir": "keys",
    "SCHEMA_VERSION": "manifest",
    "CheckEntry": "manifest",
    "EngineRecord": "manifest",
    "Hardware": "manifest",
    "Manifest": "manifest",
    "PlanInfo": "manifest",
    "PRLink": "prlink",
    "Provenance": "manifest",
    "ScopeInfo": "manifest",
    "build_manifest": "manifest",
    "json_schema": "manifest",
    "load_manifest": "manifest",
    "plan_info": "manifest",
    "recompute_verdict": "manifest",
    "scope_info": "manifest",
    "merge_bundles": "merge",
    "pack_bundle": "pack",
    "collect_provenance": "provenance",
    "hash_tree": "provenance",
    "BundleView": "reader",
    "open_bundle": "reader",
    "Limits": "safe_tar",
    "extract_bundle": "safe_tar",
    "VerifyResult": "verify",
    "verify_bundle": "verify",
    "write_bundle": "writer",
}

__all__ = [
    "BundleError",
    "BundleView",
    "CheckEntry",
    "EngineRecord",
    "Hardware",
    "KeyFileError",
    "Limits",
    "Manifest",
    "MergeError",
    "PRLink",
    "PlanInfo",
    "Provenance",
    "PublicKey",
    "SCHEMA_VERSION",
    "ScopeInfo",
    "SigningKey",
    "UnsafeArchiveError",
    "VerifyResult",
    "build_manifest",
    "collect_provenance",
    "extract_bundle",
    "generate_keypair",
    "hash_tree",
    "json_schema",
    "load_manifest",
    "load_private_key",
    "load_public_keys",
    "load_trust_dir",
    "merge_bundles",
    "open_bundle",
    "pack_bundle",
    "plan_info",
    "recompute_verdict",
    "scope_info",
    "sign_bundle",
    "verify_bundle",
    "write_bundle",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.attest import sign_bundle
    from fasttrack.bundle.errors import BundleError, KeyFileError, MergeError, UnsafeArchiveError
    from fasttrack.bundle.keys import (
        PublicKey,
        SigningKey,
        generate_keypair,
        load_private_key,
        load_public_keys,
        load_trust_dir,
    )
    from fasttrack.bundle.manifest import (
        SCHEMA_VERSION,
        CheckEntry,
        EngineRecord,
        Hardware,
        Manifest,
        PlanInfo,
        Provenance,
        ScopeInfo,
        build_manifest,
        json_schema,
        load_manifest,
        plan_info,
        recompute_verdict,
        scope_info,
    )
    from fasttrack.bundle.merge import merge_bundles
    from fasttrack.bundle.pack import pack_bundle
    from fasttrack.bundle.prlink import PRLink
    from fasttrack.bundle.provenance import collect_provenance, hash_tree
    from fasttrack.bundle.reader import BundleView, open_bundle
    from fasttrack.bundle.safe_tar import Limits, extract_bundle
    from fasttrack.bundle.verify import VerifyResult, verify_bundle
    from fasttrack.bundle.writer import write_bundle
