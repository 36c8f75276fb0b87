"""``merge --sign-key`` signs only what a trust set vouched for.

A merged bundle's signature stands for every shard in it. ``merge --sign-key`` once signed a merge
of unsigned shards, or of shards signed by unknown keys. Now every shard must verify against the
trust set given with ``--key`` / ``--trusted-keys`` (a trusted signature over matching files) before
the merge signs, and without a trust set the merge does not sign at all. Each refusal exits 2 with
one paragraph and writes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from security_testlib import Keys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bundle"))

from bundle_testlib import build_shard  # noqa: E402  (needs the path above)

from fasttrack import ROOT  # noqa: E402
from fasttrack.bundle.errors import MergeError  # noqa: E402
from fasttrack.bundle.merge import merge_bundles  # noqa: E402
from fasttrack.bundle.verify import verify_bundle  # noqa: E402


def shards(root: Path, signers: list[list]) -> list[Path]:  # type: ignore[type-arg]
    n = len(signers)
    return [build_shard(root / f"s{i}", i, n, sign=sign) for i, sign in enumerate(signers, start=1)]


def ft(*args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300", "NO_COLOR": "1"}
    env.pop("FASTTRACK_TRUST_DIR", None)
    return subprocess.run(
        [sys.executable, "-m", "fasttrack", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "case", ["unsigned", "stranger", "one-stranger", "no-trust-set", "trust-dir-unsigned", "tampered"]
)
def test_merge_refuses_to_sign_what_no_trusted_key_signed(case: str, keys: Keys, tmp_path: Path) -> None:
    t, o = keys.trusted, keys.other
    signers = {
        "unsigned": [[], []],
        "stranger": [[o], [o]],
        "one-stranger": [[t], [o]],
        "no-trust-set": [[t], [t]],
        "trust-dir-unsigned": [[t], []],
        "tampered": [[t], [t]],
    }[case]
    ss = shards(tmp_path, signers)
    if case == "tampered":
        (ss[1] / "logs" / "added-after-signing.log").write_text("x\n")
    trust = (
        []
        if case == "no-trust-set"
        else (["--trusted-keys", keys.trust_dir] if case == "trust-dir-unsigned" else ["--key", keys.trusted_pub])
    )
    out = tmp_path / "merged.tar.gz"
    before = sorted(p.name for p in tmp_path.iterdir())
    res = ft("merge", *ss, "-o", out, "--sign-key", keys.trusted_priv, *trust)
    assert res.returncode == 2, (res.stdout, res.stderr)
    err = res.stderr
    assert "Traceback" not in err and err.count("error:") == 1, err
    if case == "no-trust-set":
        assert "--key" in err and "--trusted-keys" in err, err
    else:
        assert "does not verify" in err and ("signature" in err or "files" in err), err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == before
    # the library refuses the same way
    with pytest.raises(MergeError):
        merge_bundles(
            ss,
            tmp_path / "lib.tar.gz",
            sign_keys=[t],
            keys=[] if case in ("no-trust-set", "trust-dir-unsigned") else [keys.trusted_pub],
            trust_dir=keys.trust_dir if case == "trust-dir-unsigned" else None,
        )
    assert not (tmp_path / "lib.tar.gz").exists()


def test_merge_signs_shards_every_one_of_which_verifies(keys: Keys, tmp_path: Path) -> None:
    ss = shards(tmp_path, [[keys.trusted], [keys.second]])
    out = tmp_path / "merged.tar.gz"
    res = ft("merge", *ss, "-o", out, "--sign-key", keys.trusted_priv, "--trusted-keys", keys.trust_dir)
    assert res.returncode == 0, res.stderr
    assert verify_bundle(out, keys=[keys.trusted_pub]).verified
    # unsigned shards still merge into an unsigned bundle (integrity checked): nothing is vouched for
    plain = shards(tmp_path / "plain", [[], []])
    res = ft("merge", *plain, "-o", tmp_path / "plain.tar.gz")
    assert res.returncode == 0, res.stderr
    assert "not signed" in verify_bundle(tmp_path / "plain.tar.gz", keys=[keys.trusted_pub]).item("signature").detail
