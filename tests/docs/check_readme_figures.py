#!/usr/bin/env python3
"""Keeps README.md a front door whose figures come from docs/benchmarks.md.

    check_readme_figures.py [README] [BENCHMARKS]

README and BENCHMARKS default to the repository's README.md and docs/benchmarks.md (found from
this script's location). Three checks, each failure printed as one line naming the file and line:

1. Every performance figure in the README -- a ratio ("2.08x", "3.36 times", "1.46-1.49x") or a
   rate ("1527.7 images/s", "123,004 images/s") -- appears in BENCHMARKS with the same digits:
   a ratio where BENCHMARKS states it as a ratio (bold, "**2.08**"; followed by "x" or "times";
   or after "="), a rate as a number anywhere. "**" and thousands separators are ignored on both
   sides, so "2.08x" matches "**2.08**" and "1,943.4" matches "1943.4"; another rounding
   ("2.1x" for 2.08) does not match.
2. The README has at most 300 lines.
3. Every relative link in the README and in the .md files of BENCHMARKS' folder (docs/) names a
   file that exists, relative to the page it is on, and, for "page.md#anchor", a heading of that
   page (GitHub's anchors: lowercase, punctuation removed, spaces to '-', "-1", "-2" for repeated
   headings); every code fence of those pages is closed. --no-links skips this check (a README
   copied elsewhere to try the figure check has no docs/ beside it).

Exit status 0 with a one-line "ok" summary, 1 with the failures, 2 for a missing input file.
Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

MAX_README_LINES = 300

NUMBER = r"\d+(?:\.\d+)?"
# A ratio: "2.08x" ("x" not followed by a letter or digit, so "500x375" and "x86" are not ratios),
# "2.3 times", "1.46-1.49x"; a rate: "1527.7 images/s".
RATIO = re.compile(
    rf"(?<![\w.])(?P<value>{NUMBER}(?:\s*(?:-|--|to)\s*{NUMBER})?)(?:x(?![\w])|×|\s+times\b)")
RATE = re.compile(rf"(?<![\w.])(?P<value>{NUMBER})\s*images\s*(?:/\s*s\b|per\s+second\b)")
THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`+[^`]*`+")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(?P<text>.*?)\s*#*\s*$")


def plain(text: str) -> str:
    """Text with bold markers and thousands separators removed: how figures are compared."""
    return THOUSANDS.sub("", text.replace("**", ""))


def canonical(value: str) -> str:
    """A figure's digits, with its range dash written one way."""
    return re.sub(r"\s*(?:--|-|to)\s*", "-", plain(value).strip())


def readme_figures(lines: list[str]) -> list[tuple[int, str, str]]:
    """(line number, kind, value) for every ratio and rate in the README, code blocks included."""
    found = []
    for number, line in enumerate(lines, 1):
        text = plain(line)
        for match in RATIO.finditer(text):
            found.append((number, "ratio", canonical(match.group("value"))))
        for match in RATE.finditer(text):
            found.append((number, "rate", canonical(match.group("value"))))
    return found


class Benchmarks:
    """What docs/benchmarks.md states: its numbers, and those it states as ratios."""

    def __init__(self, text: str):
        self.text = plain(text)
        self.bold = set()
        for span in re.finditer(r"\*\*(.+?)\*\*", text, re.S):
            self.bold.update(canonical(n) for n in re.findall(NUMBER, plain(span.group(1))))

    def _standalone(self, value: str) -> str:
        return rf"(?<![\w.]){re.escape(value)}(?!\.?\d)"

    def has_rate(self, value: str) -> bool:
        return re.search(self._standalone(value), self.text) is not None

    def has_ratio(self, value: str) -> bool:
        if "-" in value:  # a range must be written as a range
            low, high = value.split("-", 1)
            pattern = rf"(?<![\w.]){re.escape(low)}\s*(?:--|-|to)\s*{re.escape(high)}(?!\.?\d)"
            return re.search(pattern, self.text) is not None
        if value in self.bold:
            return True
        stated = self._standalone(value)
        return (re.search(rf"{stated}\s*(?:x(?![\w])|×|times\b)", self.text) is not None
                or re.search(rf"=\s*{stated}", self.text) is not None)


def check_figures(readme: Path, lines: list[str], benchmarks: Benchmarks, bench_path: Path) -> tuple[list[str], int]:
    failures = []
    figures = readme_figures(lines)
    for number, kind, value in figures:
        present = benchmarks.has_ratio(value) if kind == "ratio" else benchmarks.has_rate(value)
        if not present:
            shown = f"{value}x" if kind == "ratio" else f"{value} images/s"
            failures.append(f"{readme}:{number}: figure '{shown}' is not in {bench_path}"
                            f" (quote it as {bench_path.name} has it, with its command there)")
    return failures, len(figures)


def github_anchor(heading: str) -> str:
    """GitHub's id for a heading: its rendered text, lowercase, punctuation out, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    parts = text.split("`")  # odd parts are code spans, kept as they are
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"<[^>]+>", "", parts[i])  # inline HTML
        parts[i] = re.sub(r"(\*\*|__|(?<!\w)[*_]|[*_](?!\w))", "", parts[i])  # emphasis markers
    text = "".join(parts).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def outside_code(lines: list[str]):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors_of(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        anchors, seen = set(), {}
        for _, line in outside_code(path.read_text(encoding="utf-8").splitlines()):
            match = HEADING.match(line)
            if not match:
                continue
            anchor = github_anchor(match.group("text"))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            anchors.add(anchor if count == 0 else f"{anchor}-{count}")
        cache[path] = anchors
    return cache[path]


def check_links(pages: list[Path]) -> tuple[list[str], int]:
    failures, checked, cache = [], 0, {}
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        fences = [number for number, line in enumerate(lines, 1) if FENCE.match(line)]
        if len(fences) % 2:
            failures.append(f"{page}:{fences[-1]}: a code fence that is never closed")
        for number, line in outside_code(lines):
            line = INLINE_CODE.sub("", line)
            for match in list(LINK.finditer(line)) + list(IMAGE.finditer(line)):
                target = match.group("target")
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                    continue
                checked += 1
                path_part, _, anchor = target.partition("#")
                resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
                if not resolved.exists():
                    failures.append(f"{page}:{number}: link '{target}': no file {resolved}")
                    continue
                if anchor and resolved.suffix == ".md" and resolved.is_file():
                    if anchor not in anchors_of(resolved, cache):
                        failures.append(f"{page}:{number}: link '{target}': {resolved.name} has no heading "
                                        f"with the anchor '#{anchor}'")
    return failures, checked


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parents[2]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("readme", nargs="?", type=Path, default=repo / "README.md")
    parser.add_argument("benchmarks", nargs="?", type=Path, default=repo / "docs" / "benchmarks.md")
    parser.add_argument("--no-links", action="store_true", help="check the figures and the length only")
    args = parser.parse_args(argv)
    for path in (args.readme, args.benchmarks):
        if not path.is_file():
            print(f"check_readme_figures: no file {path}", file=sys.stderr)
            return 2

    lines = args.readme.read_text(encoding="utf-8").splitlines()
    benchmarks = Benchmarks(args.benchmarks.read_text(encoding="utf-8"))
    failures, figures = check_figures(args.readme, lines, benchmarks, args.benchmarks)
    if len(lines) > MAX_README_LINES:
        failures.append(f"{args.readme}: {len(lines)} lines, more than {MAX_README_LINES}: a README is a front "
                        "door; move the details to docs/")
    links = 0
    if not args.no_links:
        pages = [args.readme] + sorted(p for p in args.benchmarks.parent.glob("*.md") if p.resolve() != args.readme.resolve())
        link_failures, links = check_links(pages)
        failures += link_failures

    if failures:
        for failure in failures:
            print(failure, file=sys.stderr)
        print(f"check_readme_figures: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    link_text = "" if args.no_links else f", {links} relative links resolve"
    print(f"ok: {args.readme.name} has {len(lines)} lines, its {figures} figures are in {args.benchmarks.name}{link_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
