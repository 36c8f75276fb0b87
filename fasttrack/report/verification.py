"""The verification view: what verifying the bundle found, in the words the report shows."""

from __future__ import annotations

from fasttrack.bundle.verify import VerifyResult
from fasttrack.report import fmt
from fasttrack.report.views import SignerView, Tri, VerifyView

_ITEM_LABELS = {
    "signature": "Signature",
    "hashes": "Hashes",
    "files": "File list",
    "pr_head": "PR head",
    "archive": "Archive",
    "attestation": "Attestation",
    "schema": "Schema",
    "predicate": "Signed summary",
    "verdicts": "Verdicts",
    "rows": "Rows re-judged",
    "tables": "Tables",
    "hardware": "Hardware",
}


def verify_view(vr: VerifyResult, *, trusted_keys: int) -> VerifyView:
    items = [
        Tri(name=it.name, label=_ITEM_LABELS.get(it.name, it.name), ok=it.ok, detail=fmt.one_line(it.detail, 1200))
        for it in vr.items
    ]
    by = {t.name: t for t in items}
    sig, hashes, files, head = by["signature"], by["hashes"], by["files"], by["pr_head"]
    hashes_combined = Tri(
        name="hashes",
        label="Hashes",
        ok=(hashes.ok is True and files.ok is True) if hashes.ok is not None else None,
        detail=hashes.detail if files.ok is not False else f"{hashes.detail}; {files.detail}",
    )
    if vr.verified:
        who = ", ".join(f"key {k[:12]}" for k in vr.signers)
        head_txt = "PR head matches" if head.ok else "PR head not checked"
        # short on the first screen: the verification section names the judging scope in full
        scope = "trusted" if vr.trusted_scope else "recorded"
        judged = f"verdicts re-judged by the {scope} scope" if vr.judged_by else "verdicts as recorded"
        if vr.legacy_tables:
            judged += f" ({len(vr.legacy_tables)} older tables)"
        headline = (
            f"Verified: signed by {who or 'a trusted key'}; every file matches its signed hash; {judged}; {head_txt}."
        )
    else:
        bad = [t for t in items if t.ok is False]
        headline = "NOT VERIFIED: " + "; ".join(f"{t.label.lower()}: {t.detail}" for t in bad[:4])
        if len(bad) > 4:
            headline += f"; and {len(bad) - 4} more"
    # a signature's key id is not signed: a valid one is shown by the key that verified it, an invalid one
    # only when it claims a trusted key's id; every other entry is counted, never quoted
    signers = [
        SignerView(
            keyid=str(s.get("key") if s.get("status") == "valid" else s.get("keyid", "")),
            status=str(s.get("status", "")),
            signer=fmt.one_line(s.get("signer") or "", 120),
        )
        for s in vr.signatures
        if s.get("status") == "valid" or (s.get("status") == "invalid" and s.get("claims_trusted_key"))
    ]
    others = len(vr.signatures) - len(signers)
    return VerifyView(
        verified=vr.verified,
        headline=fmt.one_line(headline, 1500),
        signature=sig,
        hashes=hashes_combined,
        pr_head=head,
        items=items,
        signers=signers,
        trusted_keys=trusted_keys,
        other_signatures=others,
    )
