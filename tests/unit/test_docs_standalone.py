"""Docs and comments stand alone: a clone has no design write-ups ("seed 000") and no issue
tracker ("issue 5"), so no tracked file cites them; a rule is stated in our words or cited as
a section of docs/design.md, and every such citation names a section that exists."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

# A seed write-up, an issue number, or "the write-up": documents a clone does not have.
CITATION = re.compile(r"\bseeds? ?0\d\d\b|\bissue ?\d+|write-ups?\b", re.IGNORECASE)
DESIGN_LINK = re.compile(r"design\.md#([A-Za-z0-9_-]+)")
# The sections other files cite (docs/design.md's promise to them).
SECTIONS = (
    "lifecycle",
    "turns",
    "cancel",
    "permissions",
    "coalescing",
    "echo-and-rewind",
    "cursors",
    "durability",
    "attention",
    "subagents",
    "resume",
    "glossary",
)

# Copies of other projects' text, kept as they are.
FIXTURES = ("tests/agents/codex_schema/",)
THIS_FILE = "tests/unit/test_docs_standalone.py"

# Files being reworded by the helpers who own them, in the same change as this test; each with
# the citations it still holds. Only ever shrinks: an entry whose file no longer holds that
# many is a failure too, so the list is emptied as the files are fixed.
PENDING: dict[str, int] = {}


def tracked_texts() -> dict[str, str]:
    """Every tracked text file (by its path in the repository) and its text."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    texts: dict[str, str] = {}
    for name in (n.decode() for n in listed if n):
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet in the index
        data = path.read_bytes()
        if b"\0" not in data:
            texts[name] = data.decode("utf-8", errors="replace")
    return texts


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def design_anchors() -> set[str]:
    text = DESIGN.read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return {slug(h) for h in headings} | set(re.findall(r'<a id="([^"]+)">', text))


def citation_counts(texts: dict[str, str]) -> Counter[str]:
    return Counter(
        {
            name: len(CITATION.findall(text))
            for name, text in texts.items()
            if name != THIS_FILE and not name.startswith(FIXTURES)
        }
    )


def test_no_tracked_file_cites_a_seed_an_issue_or_a_write_up() -> None:
    counts = citation_counts(tracked_texts())
    cited = {name: n for name, n in counts.items() if n and PENDING.get(name) != n}
    assert cited == {}, "state the rule in our words, or cite a section of docs/design.md"


def test_a_pending_file_is_listed_only_while_it_still_cites() -> None:
    counts = citation_counts(tracked_texts())
    stale = {name: counts.get(name, 0) for name, n in PENDING.items() if counts.get(name) != n}
    assert stale == {}, "update PENDING to what these files hold now (remove those at 0)"


def test_design_has_every_section_other_files_rely_on() -> None:
    assert set(SECTIONS) - design_anchors() == set()


def test_every_design_citation_names_a_section_that_exists() -> None:
    anchors = design_anchors()
    missing = {
        f"{name}: #{anchor}"
        for name, text in tracked_texts().items()
        for anchor in DESIGN_LINK.findall(text)
        if anchor not in anchors
    }
    assert missing == set()


def test_slugs_are_githubs() -> None:
    assert slug("A run's life") == "a-runs-life"
    assert slug("Limits (`Config.subagents`)") == "limits-configsubagents"
    assert slug("Turns: ownership, queue, steer, replace") == "turns-ownership-queue-steer-replace"
