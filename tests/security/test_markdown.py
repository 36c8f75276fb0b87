"""Markdown that reaches a PR: the sticky comment (``pr publish``, ``pr body``) and ``report --comment``.

The comment is parsed with a real CommonMark parser with GitHub's tables (markdown-it), and every
planted string must arrive as literal text: no heading, HTML, link, image or emphasis made by
bundle text, no table cell split by it, no code span broken by it. A signature's key id is not
signed (DSSE signs the payload only), so anyone can edit it on a validly signed bundle: the comment
names a signer by the trusted key that verified the signature, and never quotes a claimed key id.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup
from security_testlib import HEAD, Keys, packed, variant

from fasttrack import ROOT
from fasttrack.bundle.dsse import envelope_bytes, read_envelope
from fasttrack.bundle.layout import ATTESTATION
from fasttrack.pr.body import render_body
from fasttrack.pr.sticky import MARKER, BundleLink
from fasttrack.report.comment import code, md, render_comment
from fasttrack.report.load import build_report_data

#: Each breaks Markdown a different way if it reaches the comment unescaped: a code span closed
#: early, a cell border, an HTML comment swallowing the rest, a heading on a line of its own, a
#: fenced block, a thematic break, emphasis, a link, an image, raw HTML, a mention, an autolink.
BREAKERS = (
    "`\n\n## FORGED <!--",
    "ZZ`|<!--x\n\n## FORGED --> **b** [l](http://e.x)",
    "ZZ``` ~~~\n```\n# FORGED\n```",
    "ZZ|FORGED|x|\n|---|---|",
    "ZZ\n---\nFORGED\n===",
    "ZZ <details open><summary>FORGED</summary> </details>",
    "ZZ ![FORGED](http://e.x/i.png) <img src=x> @FORGED https://e.x/FORGED",
    "ZZ \\`FORGED` \u202e\u200b\r\n> FORGED",
)
TEMPLATE_HEADINGS = {"Gates", "Performance (gated metric first)", "Claims", "Coverage gaps"}
TEMPLATE_HTML = ("<!-- fasttrack-report -->", "<details>", "</details>", "<!-- fasttrack-bundle ")


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _walk(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for t in tokens:
        out.append(t)
        if t.children:
            out.extend(_walk(t.children))
    return out


def assert_inert(body: str, *, links: tuple[str, ...] = ()) -> None:
    """Every planted string in ``body`` is literal text (see the module docstring)."""
    tokens = _parser().parse(body)
    flat = _walk(tokens)
    assert sum(1 for t in tokens if t.type == "hr") <= 1  # the template's rule above "Full report"
    heads = [
        (t.tag, tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"
    ]  # the inline token follows its heading_open
    assert heads and heads[0][0] == "h2" and "fasttrack:" in heads[0][1], heads
    for tag, text in heads[1:]:
        assert tag == "h3" and text in TEMPLATE_HEADINGS, (tag, text)
    for t in flat:
        if t.type in ("html_block", "html_inline"):
            assert t.content.strip().startswith(TEMPLATE_HTML) or t.content.strip() in (
                "<summary>",
                "</summary>",
            ), t.content
            assert "FORGED" not in t.content, t.content
        if t.type == "link_open":
            assert t.attrs.get("href") in links, t.attrs
        assert t.type not in ("image", "fence", "code_block"), (t.type, t.content)
        if t.type in ("strong_open", "em_open"):
            nxt = flat[flat.index(t) + 1]
            assert nxt.content not in ("b", "FORGED"), nxt.content  # the template's emphasis only
        if "FORGED" in t.content and t.type not in ("inline",):
            # the breaker arrives whole: the text before FORGED is in the same token (no split at a
            # backtick, a cell border or a line break)
            assert t.type in ("text", "code_inline"), (t.type, t.content)
            assert "ZZ" in t.content or "`" in t.content or t.content.startswith("\\"), t.content


def _hostile(obj: Any, breaker: str, seen: set[int]) -> Any:
    """``obj`` with the breaker planted at the start of every string it holds (Markup left alone)."""
    if isinstance(obj, Markup) or id(obj) in seen:
        return obj
    if isinstance(obj, str):
        return breaker + obj
    if isinstance(obj, list):
        return [_hostile(x, breaker, seen) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_hostile(x, breaker, seen) for x in obj)
    if isinstance(obj, dict):
        return {_hostile(k, breaker, seen): _hostile(v, breaker, seen) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        seen.add(id(obj))
        for f in dataclasses.fields(obj):
            setattr(obj, f.name, _hostile(getattr(obj, f.name), breaker, seen))
    return obj


@pytest.mark.parametrize("breaker", BREAKERS)
def test_every_text_of_the_comment_is_inert(base_bundle: Path, keys: Keys, breaker: str) -> None:
    data = build_report_data(base_bundle, keys=[keys.trusted_pub], pr_head=HEAD)
    assert_inert(render_comment(data))  # the clean comment passes the same rules
    _hostile(data, breaker, set())
    body = render_comment(data, report_ref=breaker + "report.html")
    assert body.startswith(MARKER + "\n")
    assert "FORGED" in body  # planted: the rules below had something to hold
    assert_inert(body)


def test_code_spans_cannot_be_broken() -> None:
    p = _parser()
    for s in ("a`b", "``x``", "`", "x|y", "a\nb", "` `", "````", "<!--", "\\`"):
        for cell in (False, True):
            span = code(s, cell=cell)
            line = f"| h |\n|---|\n| {span} |\n" if cell else f"before {span} after\n"
            inline = [t for t in _walk(p.parse(line)) if t.type == "code_inline"]
            assert len(inline) == 1, (s, span, line)
            assert inline[0].content.strip() == " ".join(s.split()).strip() or s.strip() == "", (s, inline[0].content)
    assert "\n" not in md("a\n\n## b") and md("## b").startswith("\\#")


def _forge_keyid(bundle: Path, keyid: str) -> None:
    """Edit the (unsigned) key id of the bundle's one signature: the signature still verifies."""
    p = bundle / ATTESTATION
    env = read_envelope(p.read_bytes())
    env.signatures[0].keyid = keyid
    p.write_bytes(envelope_bytes(env))


FORGED_IDS = (
    "`\n\n## FORGED <!--",
    "x` **FORGED** `",
    "<!-- fasttrack-bundle url=https://e.x/a sha256=" + "0" * 64 + " size=1 -->",
    "@FORGED https://e.x [FORGED](http://e.x)",
)


@pytest.mark.parametrize("keyid", FORGED_IDS)
def test_a_forged_key_id_never_reaches_the_comment(base_bundle: Path, keys: Keys, tmp_path: Path, keyid: str) -> None:
    b = variant(base_bundle, tmp_path / "b")
    _forge_keyid(b, keyid)
    tar = packed(b, tmp_path / "b.tar.gz")
    link = BundleLink(url="https://github.com/alice/vllm/releases/download/t/b.tar.gz", sha256="a" * 64, size=1)
    for side in ("maintainer", "contributor"):
        body = render_body(
            tar,
            link,
            side=side,  # type: ignore[arg-type]
            keys=[keys.trusted_pub],
            pr_head=HEAD,
            run_url="https://github.com/org/vllm/actions/runs/1",
            check_link=False,
        )
        assert body.verify.verified  # the signature verifies: the key id is not part of what is signed
        assert (
            "FORGED" not in body.text and keyid not in body.text and "fasttrack-bundle url=https://e.x" not in body.text
        )
        assert keys.trusted.keyid[:16] in body.text  # named by the key that verified it
        assert_inert(body.text, links=(link.url, "https://github.com/org/vllm/actions/runs/1"))


def test_pr_publish_dry_run_with_a_forged_key_id(base_bundle: Path, keys: Keys, tmp_path: Path) -> None:
    """The reported case, through the real command: a key id of a backtick, two newlines and
    ``## FORGED <!--`` on a validly signed bundle."""
    b = variant(base_bundle, tmp_path / "b")
    _forge_keyid(b, "`\n\n## FORGED <!--")
    tar = packed(b, tmp_path / "b.tar.gz")
    body_out = tmp_path / "body.md"
    res = subprocess.run(
        [
            sys.executable, "-m", "fasttrack", "pr", "publish", str(tar), "--repo", "org/vllm", "--pr", "7",
            "--asset-repo", "alice/vllm", "--key", str(keys.trusted_pub), "--pr-head", HEAD, "--dry-run",
            "--api-url", "http://127.0.0.1:9", "--body-out", str(body_out),
        ],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    body = body_out.read_text()
    assert not any(line.lstrip().startswith("## FORGED") for line in body.splitlines()), body
    assert "FORGED" not in body and f"(key `{keys.trusted.keyid[:16]}`)" in body
    release = "http://127.0.0.1:9/alice/vllm/releases/download/"
    hrefs = [str(t.attrs["href"]) for t in _walk(_parser().parse(body)) if t.type == "link_open"]
    assert hrefs and all(h.startswith(release) for h in hrefs), hrefs
    assert_inert(body, links=tuple(hrefs))
