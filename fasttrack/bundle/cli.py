"""Bundle subcommands: ``keys generate|show``, ``sign``, ``verify``, ``merge``."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fasttrack import registry, terminal
from fasttrack.bundle.errors import BundleError

if TYPE_CHECKING:  # pragma: no cover
    from fasttrack.bundle.verify import VerifyResult
from fasttrack.bundle.keys import generate_keypair, load_private_key, load_public_keys, openssh_public_line

TRUST_ENV = "FASTTRACK_TRUST_DIR"

console = terminal.console()


def shown(text: object) -> str:
    """User or bundle text fit for the terminal: control and bidi-override characters replaced
    (no escape sequence from a bundle reaches it), console markup escaped (printed as written)."""
    out = []
    for ch in str(text):
        cat = unicodedata.category(ch)
        out.append(ch if ch == "\n" or not (cat in ("Cc", "Cs", "Co") or cat == "Cf") else "\ufffd")
    return escape("".join(out))


keys_app = typer.Typer(help="Create and inspect Ed25519 signing keys.", no_args_is_help=True)


@keys_app.command("generate")
def keys_generate(
    out: Path = typer.Option(..., "-o", "--out", help="Directory to write the key pair into."),
    name: str = typer.Option("fasttrack", "--name", help="File name of the private key; the public key is NAME.pub."),
    comment: Optional[str] = typer.Option(None, "--comment", help="Comment of the public key (default: user@host)."),
) -> None:
    """Write a new Ed25519 key pair: DIR/NAME (PEM PKCS8, mode 0600) and DIR/NAME.pub (OpenSSH)."""
    priv, pub = generate_keypair(out, name=name, comment=comment)
    key = load_private_key(priv)
    console.print(shown(f"private key: {priv}\npublic key:  {pub}\nkey id:      {key.keyid}"), highlight=False)


@keys_app.command("show")
def keys_show(path: Path = typer.Argument(..., help="A public or private key file (PEM or OpenSSH).")) -> None:
    """Print the key id and OpenSSH public line of every Ed25519 key in a file."""
    for k in load_public_keys(path, allow_private=True):
        console.print(shown(f"{k.keyid}  {openssh_public_line(k.key, k.comment)}"), highlight=False, soft_wrap=True)


def sign_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory or .tar.gz."),
    key: Path = typer.Option(..., "--key", "-k", help="Ed25519 private key (PEM or OpenSSH, e.g. ~/.ssh/id_ed25519)."),
    replace: bool = typer.Option(
        False, "--replace", help="Drop existing signatures when the bundle changed since they were made."
    ),
) -> None:
    """Add a signature to a bundle's attestation (several signers may sign one bundle)."""
    from fasttrack.bundle.attest import sign_bundle

    sk = load_private_key(key)
    env = sign_bundle(bundle, sk, replace=replace)
    console.print(
        shown(f"signed {bundle} with key {sk.keyid} ({len(env.signatures)} signature(s) on the bundle)"),
        highlight=False,
    )


def verify_cmd(
    bundle: Path = typer.Argument(..., help="Bundle directory or .tar.gz."),
    key: list[Path] = typer.Option([], "--key", "-k", help="Trusted public key file (repeatable)."),
    trust: Optional[Path] = typer.Option(
        None, "--trust", help=f"Directory of trusted *.pub keys (default: ${TRUST_ENV} when no --key is given)."
    ),
    pr_head: Optional[str] = typer.Option(None, "--pr-head", help="The PR head commit the bundle must have tested."),
    min_signatures: int = typer.Option(1, "--min-signatures", min=1, help="Valid trusted signatures required."),
    require_pass: bool = typer.Option(False, "--require-pass", help="Also fail unless the bundle verdict is pass."),
    trusted_scope: Optional[str] = typer.Option(
        None,
        "--trusted-scope",
        help="Hold the bundle's recorded scope against this one (the repository's at the PR base): a scope file, "
        "a folder of NAME.yaml or NAME/scope.yaml, or a shipped suite's name. Any loosening fails, named.",
    ),
    min_tier: Optional[str] = typer.Option(
        None, "--min-tier", help="Fail unless the bundle ran at least this tier (smoke < standard < full)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable result."),
) -> None:
    """Check signatures, every hash, the file list, the schema, the verdicts and the PR head; with
    --trusted-scope, that the recorded scope asks for at least what the trusted one asks for.

    Exits 0 only when every check holds (and, with --require-pass, the verdict is pass: a
    rehearsal's verdict is ``rehearsal``, which --require-pass refuses). A bundle whose scope
    loosens the trusted scope, or that ran a tier below --min-tier, fails with every reason listed.
    """
    from fasttrack.bundle.consistency import pr_head_argument, tier_argument
    from fasttrack.bundle.headline import headline
    from fasttrack.bundle.verify import verify_bundle

    pr_head = pr_head_argument(pr_head)
    tier_argument(min_tier)
    if not key and trust is None:
        env_trust = os.environ.get(TRUST_ENV)
        if not env_trust:
            raise BundleError("no trusted key given: pass --key PUB (repeatable) or --trust DIR, or set $" + TRUST_ENV)
        trust = Path(env_trust)
    res = verify_bundle(
        bundle,
        keys=key,
        trust_dir=trust,
        pr_head=pr_head,
        min_signatures=min_signatures,
        trusted_scope=trusted_scope,
        min_tier=min_tier,
    )
    # --require-pass: the verdict is pass over the whole tier (a shard holds part of it)
    ok = res.verified and (not require_pass or (res.verdict == "pass" and res.shard in (None, "1/1")))
    hl = headline(res)
    if as_json:
        out = res.model_dump(mode="json")
        out["ok"] = ok
        out["headline"] = hl.text
        out["headline_reasons"] = list(hl.reasons)
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        _print_verification(res, bundle, require_pass=require_pass)
    if not ok:
        raise SystemExit(1)


def _print_verification(res: VerifyResult, bundle: Path, *, require_pass: bool) -> None:
    """The text form of ``verify``: one row per item, who signed, the verdict, the bundle ID, the PR link and
    every way the recorded scope loosens the trusted one."""
    table = Table(show_header=True, header_style="bold", box=None)
    table.add_column("check")
    table.add_column("")
    table.add_column("detail", overflow="fold")
    for it in res.items:
        mark = "[green]ok[/]" if it.ok else ("[dim]-[/]" if it.ok is None else "[bold red]FAIL[/]")
        table.add_row(it.name, mark, shown(it.detail))
    console.print(table)
    signed = [f"{s['identity']} (key {s['key'][:16]})" for s in res.signatures if s.get("identity")]
    if signed:
        console.print(shown("signed by: " + ", ".join(signed)), highlight=False)
    status = "[green]verified[/]" if res.verified else "[bold red]NOT verified[/]"
    console.print(f"{shown(bundle)}: {status}; bundle verdict: [bold]{res.verdict}[/]", highlight=False)
    if res.bundle_id:
        console.print(f"bundle ID: {res.bundle_id}", highlight=False)
    from fasttrack.bundle.headline import headline

    hl = headline(res)
    console.print(f"headline: [bold]{shown(hl.text)}[/]", highlight=False)
    for why in hl.reasons:
        console.print(f"  - {shown(why)}", highlight=False)
    if res.pr_link is not None:
        console.print(shown(f"PR link: {res.pr_link}: {res.pr_link_detail}"), highlight=False)
    if res.scope_loosenings:
        console.print(
            shown(f"the recorded scope loosens the trusted scope {res.trusted_scope} in these ways:"),
            highlight=False,
        )
        for line in res.scope_loosenings:
            console.print(f"  - {shown(line)}", highlight=False)
    if res.verified and require_pass and res.verdict == "pass" and res.shard not in (None, "1/1"):
        console.print(f"--require-pass: shard {res.shard} holds part of the tier only", highlight=False)
    if res.verified and require_pass and res.verdict != "pass":
        why = (
            " (a rehearsal on hardware the scope does not declare is not evidence)"
            if res.verdict == "rehearsal"
            else ""
        )
        console.print(f"--require-pass: the verdict is not pass{why}", highlight=False)


def merge_cmd(
    shards: list[Path] = typer.Argument(..., help="Shard bundles (directories or .tar.gz) of one plan."),
    out: Path = typer.Option(..., "-o", "--out", help="Merged bundle: a directory, or a file ending in .tar.gz."),
    sign_key: list[Path] = typer.Option([], "--sign-key", help="Private key to sign the merged bundle (repeatable)."),
    key: list[Path] = typer.Option(
        [], "--key", "-k", help="Require every shard to be signed by this key (repeatable)."
    ),
    trust: Optional[Path] = typer.Option(
        None, "--trusted-keys", "--trust", help="Require every shard to be signed by a key in DIR."
    ),
) -> None:
    """Combine the shard bundles of one plan into one bundle and sign it.

    --sign-key needs --key or --trusted-keys: every shard must verify against that trust set
    (a trusted signature over matching files) before the merged bundle is signed."""
    from fasttrack.bundle.merge import merge_bundles

    sks = [load_private_key(k) for k in sign_key]
    m = merge_bundles(shards, out, sign_keys=sks, keys=key, trust_dir=trust)
    signed = f", signed by {len(sks)} key(s)" if sks else ", unsigned (sign it with `fasttrack sign`)"
    console.print(
        f"merged {len(shards)} shard(s) into {shown(out)}: verdict [bold]{m.verdict}[/]{signed}", highlight=False
    )


@registry.component("subcommand", "bundle")
def register(app: typer.Typer) -> None:
    """Add the bundle subcommands to the ``fasttrack`` app."""
    app.add_typer(keys_app, name="keys")
    app.command("sign")(sign_cmd)
    app.command("verify")(verify_cmd)
    app.command("merge")(merge_cmd)
