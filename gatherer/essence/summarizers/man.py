"""The manual-page summarizer: troff source written with the man(7) macros, reduced to plain
text (escapes resolved, requests dropped, the text of font macros kept) and split into its
``.SH`` sections. BSD mdoc(7) pages (``.Dt``, ``.Sh``, ``.Nm``) are not understood."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers.text_tools import abstract, attributes, collapse, decode

# Macros whose arguments are text in one font (or a synopsis's command): words keep spaces.
_FONT_MACROS = frozenset({"B", "I", "SM", "SB", "SY"})
# Macros alternating two fonts: the arguments run together (".BR ls (1)" is "ls(1)").
_ALTERNATING_MACROS = frozenset({"BR", "BI", "IB", "IR", "RB", "RI"})

# Requests that end the paragraph being filled.
_BREAK_NAMES = "br sp SH SS PP LP P TP TQ IP HP RS RE nf fi SY YS"
_BREAKS = frozenset(_BREAK_NAMES.split())

# A request's arguments: "quoted, with "" for a quote" or bare words.
_ARGUMENT = re.compile(r'"((?:[^"]|"")*)"?|(\S+)')
# One troff escape: a font, size or string change, a named character, a comment, or one
# character; the named character's name is captured.
_ESCAPE = re.compile(
    r"""\\(?:
        [fF*](?:\[[^\]]*\]|\(..|.)
      | s[+-]?(?:\d\d?|\(\d\d|\[\d+\])
      | \((..)
      | \[([^\]]*)\]
      | ["\#].*
      | [hvwolLDNbxXZ]'[^']*'
      | (.)
    )""",
    re.VERBOSE,
)
_NAMED_CHARACTERS = {
    "em": "\N{EM DASH}",
    "en": "\N{EN DASH}",
    "hy": "-",
    "mi": "-",
    "bu": "\N{BULLET}",
    "co": "\N{COPYRIGHT SIGN}",
    "rg": "\N{REGISTERED SIGN}",
    "tm": "\N{TRADE MARK SIGN}",
    "aq": "'",
    "dq": '"',
    "lq": "\N{LEFT DOUBLE QUOTATION MARK}",
    "rq": "\N{RIGHT DOUBLE QUOTATION MARK}",
    "oq": "\N{LEFT SINGLE QUOTATION MARK}",
    "cq": "\N{RIGHT SINGLE QUOTATION MARK}",
    "ga": "`",
    "ti": "~",
    "ha": "^",
    "rs": "\\",
    "pl": "+",
    "mu": "\N{MULTIPLICATION SIGN}",
    "de": "\N{DEGREE SIGN}",
    "<=": "\N{LESS-THAN OR EQUAL TO}",
    ">=": "\N{GREATER-THAN OR EQUAL TO}",
}
# What a one-character escape stands for; the others (\& \| \^ \c...) print nothing.
_ONE_CHARACTER = {
    "-": "-",
    "e": "\\",
    "\\": "\\",
    " ": " ",
    "~": " ",
    "0": " ",
    "'": "'",
    "`": "`",
    ".": ".",
}


def summarize(document: Document, options: EssenceOptions) -> Parts:
    """``Title`` ("ls(1)"), ``Description`` (the NAME line), ``Synopsis``, ``Headings``
    (section names) and the DESCRIPTION section's start as ``Partial-Text``."""
    page = _Page.read(decode(document.content, document.charset))
    return Parts(
        attributes=attributes(
            ("Title", page.title),
            ("Description", collapse(" ".join(page.section("NAME")))),
            ("Synopsis", "\n".join(page.section("SYNOPSIS"))),
            ("Headings", "\n".join(page.headings)),
            (
                "Partial-Text",
                abstract([" ".join(page.section("DESCRIPTION"))], options.abstract_bytes),
            ),
        )
    )


@dataclass(slots=True)
class _Page:
    """A manual page as plain text: its title, section names, and each section's
    paragraphs (filled lines joined as troff would, one output line each)."""

    title: str = ""
    headings: list[str] = field(default_factory=list)
    sections: dict[str, list[str]] = field(default_factory=dict)

    def section(self, name: str) -> list[str]:
        return self.sections.get(name, [])

    @classmethod
    def read(cls, source: str) -> _Page:
        page = cls()
        section: list[str] = []  # the current section's; text before the first .SH is dropped
        paragraph: list[str] = []
        filling = True  # between .nf and .fi each line is a line of its own
        heading_follows = False  # a bare ".SH" takes its name from the next line
        defining = False  # inside a macro definition, ".de" to ".."
        for raw in source.splitlines():
            if defining:
                defining = raw.rstrip() != ".."
                continue
            if not raw.startswith((".", "'")):
                text = _plain(raw).strip()
                if heading_follows:
                    section = page._start_section(text)
                    heading_follows = False
                    continue
            else:
                name, arguments = _request(raw[1:])
                if name in _BREAKS:
                    _end_paragraph(paragraph, section)
                if name == "TH" and len(arguments) >= 2:
                    page.title = f"{arguments[0]}({arguments[1]})"
                elif name == "SH" and arguments:
                    section = page._start_section(" ".join(arguments))
                elif name == "SH":
                    heading_follows = True
                elif name in ("nf", "fi"):
                    filling = name == "fi"
                defining = name in ("de", "de1", "am")
                text = _macro_text(name, arguments)
            if text:
                paragraph.append(text)
                if not filling:
                    _end_paragraph(paragraph, section)
        _end_paragraph(paragraph, section)
        return page

    def _start_section(self, heading: str) -> list[str]:
        heading = collapse(heading)
        self.headings.append(heading)
        return self.sections.setdefault(heading.upper(), [])


def _end_paragraph(paragraph: list[str], section: list[str]) -> None:
    """Move the words gathered in ``paragraph`` to ``section`` as one line."""
    if paragraph:
        section.append(collapse(" ".join(paragraph)))
        paragraph.clear()


def _macro_text(name: str, arguments: list[str]) -> str:
    """The text a request prints itself: the arguments of the font macros, an option in
    a synopsis, a paragraph's tag; other requests print nothing."""
    if name in _FONT_MACROS:
        return " ".join(arguments)
    if name in _ALTERNATING_MACROS:
        return "".join(arguments)
    if name == "OP":
        return f"[{' '.join(arguments)}]"
    if name == "IP" and arguments:
        return arguments[0]
    return ""


def _request(line: str) -> tuple[str, list[str]]:
    """A request line (without its leading dot) as its name and plain-text arguments."""
    name, _, rest = line.strip().replace("\t", " ").partition(" ")
    if name.startswith('\\"'):  # a comment line
        return "", []
    arguments = [
        _plain(quoted.replace('""', '"') if quoted else bare)
        for quoted, bare in _ARGUMENT.findall(rest)
    ]
    return name, [argument for argument in arguments if argument]


def _plain(text: str) -> str:
    """``text`` with its troff escapes replaced by what they print."""
    return _ESCAPE.sub(_unescape, text)


def _unescape(match: re.Match[str]) -> str:
    two_letter, bracketed, single = match.groups()
    name = two_letter or bracketed
    if name is not None:
        return _NAMED_CHARACTERS.get(name, "")
    return _ONE_CHARACTER.get(single, "") if single is not None else ""
