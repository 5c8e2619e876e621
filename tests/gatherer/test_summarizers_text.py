"""The text-type summarizers (Text, README, FAQ), source code (C, Python), manual pages,
binaries, their shared text helpers, and the summarizer registry."""

from __future__ import annotations

import pytest

from gatherer.essence.document import Document, Parts
from gatherer.essence.options import EssenceOptions
from gatherer.essence.summarizers import SUMMARIZERS, text_tools


def summarize(kind: str, content: str | bytes, **options: object) -> dict[str, bytes]:
    data = content.encode() if isinstance(content, str) else content
    parts: Parts = SUMMARIZERS[kind](
        Document("http://www.example.org/file", data),
        EssenceOptions(**options),  # type: ignore[arg-type]
    )
    found = dict(parts.attributes)
    assert len(found) == len(parts.attributes), "an attribute name appears twice"
    assert parts.links == ()
    assert parts.noindex is False
    return found


def test_registry_has_every_type_the_recognizer_names() -> None:
    assert set(SUMMARIZERS) == {
        "HTML",
        "Text",
        "README",
        "FAQ",
        "C",
        "Python",
        "PDF",
        "ManPage",
        "Binary",
        "Directory",
    }


# --- text_tools ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "declared", "expected"),
    [
        pytest.param("Café".encode(), (), "Café", id="utf-8-default"),
        pytest.param("Café".encode("latin-1"), ("latin-1",), "Café", id="declared"),
        pytest.param("Café".encode("latin-1"), (None, "latin-1"), "Café", id="none-skipped"),
        pytest.param("Café".encode(), ("bogus", "utf-8"), "Café", id="unknown-skipped"),
        pytest.param("Café".encode(), ("rot13",), "Café", id="non-text-codec-skipped"),
        pytest.param("Caf\xe9".encode("latin-1"), ("utf-8",), "Café", id="misdeclared-falls-back"),
        pytest.param("\u2018q\u2019".encode("cp1252"), (), "\u2018q\u2019", id="cp1252"),
        pytest.param(b"\x81\x8d", (), "\x81\x8d", id="latin-1-last"),
        pytest.param("\ufeffBOM".encode(), (), "BOM", id="byte-order-mark-dropped"),
    ],
)
def test_decode(data: bytes, declared: tuple[str | None, ...], expected: str) -> None:
    assert text_tools.decode(data, *declared) == expected


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("abc", 10, b"abc", id="short"),
        pytest.param("abcdef", 3, b"abc", id="ascii-cut"),
        pytest.param("aé", 2, b"a", id="two-byte-character-not-split"),
        pytest.param("a€", 3, b"a", id="three-byte-character-not-split"),
        pytest.param("a\U0001f600", 4, b"a", id="four-byte-character-not-split"),
        pytest.param("a\U0001f600", 5, "a\U0001f600".encode(), id="exact"),
        pytest.param("abc", 0, b"", id="zero"),
    ],
)
def test_utf8_prefix(text: str, limit: int, expected: bytes) -> None:
    assert text_tools.utf8_prefix(text, limit) == expected


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("one\ntwo\nthree\n", 7, b"one\ntwo", id="whole-lines-only"),
        pytest.param("one\ntwo\nthree\n", 6, b"one", id="partial-second-line-dropped"),
        pytest.param("\n\n  \none  \ntwo", 100, b"one\ntwo", id="leading-blank-lines-skipped"),
        pytest.param("one\r\ntwo\r\n", 100, b"one\ntwo", id="crlf"),
        pytest.param("abcdefghij\nk", 4, b"abcd", id="long-first-line-cut"),
        pytest.param("one\n\n\ntwo", 100, b"one\n\n\ntwo", id="inner-blank-lines-kept"),
        pytest.param("one\ntwo " + "x" * 50, 8, b"one", id="line-cut-by-the-window-dropped"),
        pytest.param("", 10, b"", id="empty"),
    ],
)
def test_leading_lines(text: str, limit: int, expected: bytes) -> None:
    assert text_tools.leading_lines(text, limit) == expected


@pytest.mark.parametrize(
    ("text", "count", "expected"),
    [
        pytest.param(
            "zeta alpha alpha beta beta gamma",
            3,
            ["alpha", "beta", "gamma"],
            id="ties-alphabetical",
        ),
        pytest.param("Harvest harvest HARVEST broker", 5, ["harvest", "broker"], id="lowercased"),
        pytest.param("the that with from cat dog gatherer", 5, ["gatherer"], id="stopwords-short"),
        pytest.param("café naïve café", 5, ["café", "naïve"], id="unicode-letters"),
        pytest.param("snake_case_word x2word", 5, ["word", "case", "snake"], id="letters-only"),
        pytest.param("alpha beta", 0, [], id="zero"),
    ],
)
def test_keywords(text: str, count: int, expected: list[str]) -> None:
    assert text_tools.keywords(text, count) == expected


def test_abstract_stops_consuming_once_it_has_enough() -> None:
    pieces = iter(["word "] * 1000)
    assert text_tools.abstract(pieces, 12) == b"word word wo"
    assert len(list(pieces)) > 900


@pytest.mark.parametrize(
    ("pieces", "limit", "expected"),
    [
        pytest.param(["a  b", "c\n\nd"], 100, b"a bc d", id="pieces-joined-then-collapsed"),
        pytest.param(["ab", "cd ", " ef"], 4, b"abcd", id="word-across-pieces"),
        pytest.param([" " * 5000, "x"], 1, b"x", id="whitespace-before-text"),
        pytest.param([], 10, b"", id="no-pieces"),
    ],
)
def test_abstract(pieces: list[str], limit: int, expected: bytes) -> None:
    assert text_tools.abstract(pieces, limit) == expected


def test_attributes_drop_empty_values_and_encode_text() -> None:
    assert text_tools.attributes(("A", "é"), ("B", ""), ("C", b"raw"), ("D", b"")) == (
        ("A", "é".encode()),
        ("C", b"raw"),
    )


# --- Text, README, FAQ ---------------------------------------------------------------------

README = """

   Harvest   Gatherer   Release 1.0

The Gatherer collects indexing information from documents on
archive sites. The Gatherer runs the Essence summarizer on each
document and stores the summaries as SOIF records.

Summaries travel to a Broker, which indexes the summaries.
"""


@pytest.mark.parametrize(
    ("kind", "full_text", "has_full_text"),
    [
        pytest.param("Text", False, False, id="text"),
        pytest.param("Text", True, True, id="text-full-text-option"),
        pytest.param("README", False, True, id="readme-always-full"),
        pytest.param("FAQ", False, True, id="faq-always-full"),
    ],
)
def test_text_summary(kind: str, full_text: bool, has_full_text: bool) -> None:
    found = summarize(kind, README, abstract_bytes=100, max_keywords=4, full_text=full_text)
    expected = {
        "Title": b"Harvest Gatherer Release 1.0",
        "Keywords": b"Gatherer Release\nHarvest Gatherer\nEssence summarizer\nSOIF records",
        "Language": b"en",
        "Partial-Text": b"Harvest   Gatherer   Release 1.0\n\n"
        b"The Gatherer collects indexing information from documents on",
    }
    if has_full_text:
        expected["Full-Text"] = README.encode()
    assert found == expected


@pytest.mark.parametrize(
    ("content", "title"),
    [
        pytest.param("x" * 300 + "\nnext", b"x" * 200, id="at-most-200-characters"),
        pytest.param("\n\n\t \n  first \t line  \nsecond", b"first line", id="first-non-blank"),
        pytest.param("only\rold-mac\rlines", b"only", id="carriage-return-lines"),
        pytest.param("  \n \n", None, id="blank-file-has-no-title"),
    ],
)
def test_text_title(content: str, title: bytes | None) -> None:
    assert summarize("Text", content).get("Title") == title


def test_text_in_a_legacy_charset_is_decoded() -> None:
    found = summarize("Text", "Résumé of the café\n".encode("latin-1"))
    assert found["Title"] == "Résumé of the café".encode()


# --- C -------------------------------------------------------------------------------------

C_SOURCE = r"""/*
 * gather.c -- the Harvest Gatherer's main loop.
 *
 * Copyright (c) 1994, University of Colorado.
 */

#include <stdio.h>
#include "gatherer.h"
#  include <sys/types.h>
/* #include <commented_out.h> */

#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define BLOCK(x) \
    { x; }

static int count;
extern int prototype_only(int x);
struct node { int value; struct node *next; };
static char *fake = "not_a_function(int x) {";

/* commented_out(int y) { } */
// also_commented(void) {

static int
add(int a, int b)
{
    if (a > b) {
        return a;
    }
    while (a) { a--; }
    return a + b;
}

int old_style(argc, argv)
    int argc;
    char **argv;
{
    return 0;
}

void register_callback(void (*cb)(int), const char *name) {
    char c = '{';
    cb(0);
}

#ifdef __cplusplus
extern "C" {
#endif
int inside_extern(void) { return 1; }
#ifdef __cplusplus
}
#endif

int main(int argc, char **argv) { return add(1, 2); }
"""


def test_c_summary() -> None:
    assert summarize("C", C_SOURCE) == {
        "Functions": b"add\nold_style\nregister_callback\ninside_extern\nmain",
        "Includes": b"stdio.h\ngatherer.h\nsys/types.h",
        "Partial-Text": b"gather.c -- the Harvest Gatherer's main loop.\n\n"
        b"Copyright (c) 1994, University of Colorado.",
    }


@pytest.mark.parametrize(
    ("source", "functions"),
    [
        pytest.param("int f(void);\nint f(void) { }", b"f", id="prototype-then-definition-once"),
        pytest.param("int Gatherer :: run(int n) const { }", b"Gatherer::run", id="qualified"),
        pytest.param(
            "__attribute__((noreturn)) void die(const char *m) { }", b"die", id="attribute-skipped"
        ),
        pytest.param("namespace ns { int g() { return 0; } }", b"g", id="namespace-contents"),
        pytest.param("} if (x) { y(); } while (z) { }", None, id="keywords-excluded"),
        pytest.param("int a[] = { f(1), g(2) };", None, id="initializer-is-not-a-function"),
        pytest.param("int f(void) { }\n/* never closed", b"f", id="unterminated-comment"),
        pytest.param(
            'int f(void) { s = "never closed\n}\nint g(void) { }', b"f\ng", id="bad-string"
        ),
        pytest.param(
            "extern int a;\n" * 40 + "extern int b", None, id="many-declarations-no-backtracking"
        ),
    ],
)
def test_c_functions(source: str, functions: bytes | None) -> None:
    assert summarize("C", source).get("Functions") == functions


@pytest.mark.parametrize(
    ("source", "partial_text"),
    [
        pytest.param(
            "// First line.\n// Second line.\nint x;", b"First line.\nSecond line.", id="slashes"
        ),
        pytest.param("\n\n/** Doc. **/\nint x;", b"Doc.", id="stars"),
        pytest.param("int x; /* not leading */", None, id="code-first"),
    ],
)
def test_c_leading_comment(source: str, partial_text: bytes | None) -> None:
    assert summarize("C", source).get("Partial-Text") == partial_text


# --- Python --------------------------------------------------------------------------------

PYTHON_SOURCE = '''"""Harvest Broker client.

    Talks to a Broker over HTTP.
"""

from __future__ import annotations

import os.path
import sys, json
from . import soif
from ..common import errors as errs

if sys.version_info >= (3, 11):
    def modern() -> None:
        pass


class Broker:
    """A broker."""

    class Query:
        def run(self):
            def helper():
                pass
            return helper

    async def fetch(self, url):
        import json
        return (lambda: url)()


def main():
    return Broker()
'''


def test_python_summary() -> None:
    assert summarize("Python", PYTHON_SOURCE) == {
        "Functions": b"modern\nBroker.Query.run\nBroker.Query.run.helper\nBroker.fetch\nmain",
        "Classes": b"Broker\nBroker.Query",
        "Imports": b"__future__\nos.path\nsys\njson\n.\n..common",
        "Partial-Text": b"Harvest Broker client.\n\nTalks to a Broker over HTTP.",
    }


PYTHON2_SOURCE = '''#!/usr/bin/python
# An old module.
"""Old module.

    Written for Python 1.5.
"""
import string, os
from types import *
print "hello"
class Old:
    def method(self):
        pass
def func():
    pass
'''


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            PYTHON2_SOURCE,
            {
                "Functions": b"method\nfunc",
                "Classes": b"Old",
                "Imports": b"string\nos\ntypes",
                "Partial-Text": b"Old module.\n\nWritten for Python 1.5.",
            },
            id="python-2-syntax-error",
        ),
        pytest.param(
            "x = " + "-" * 20_000 + "1\ndef after():\n    pass\n",
            {"Functions": b"after"},
            id="parser-memory-error",
        ),
        pytest.param(
            "x = " + "-" * 5_000 + "1\nclass After:\n    pass\n",
            {"Classes": b"After"},
            id="parser-recursion-error",
        ),
        pytest.param("def f():\n    pass\n\x00", {"Functions": b"f"}, id="null-byte"),
        pytest.param(
            "import big\ndef big_module():\n    pass\n" + "# padding\n" * 120_000,
            {"Functions": b"big_module", "Imports": b"big"},
            id="too-big-to-parse",
        ),
    ],
)
def test_python_fallback(source: str, expected: dict[str, bytes]) -> None:
    assert summarize("Python", source) == expected


# --- manual pages --------------------------------------------------------------------------

LS_PAGE = r""".\" DO NOT MODIFY THIS FILE!  It was generated by help2man.
.TH LS "1" "March 2024" "GNU coreutils 9.4" "User Commands"
.de XX
.B macro body text
..
.SH NAME
ls \- list directory contents
.SH SYNOPSIS
.B ls
[\fI\,OPTION\/\fR]... [\fI\,FILE\/\fR]...
.SH DESCRIPTION
.\" Add any additional description here
.PP
List information about the FILEs (the current directory by default).
Sort entries alphabetically if none of
\fB\-cftuvSUX\fR nor \fB\-\-sort\fR is specified.
.TP
\fB\-a\fR, \fB\-\-all\fR
do not ignore entries starting with .
.SS "Exit status:"
.IP 0 4
if OK,
.SH "SEE ALSO"
.BR dir (1),
.BR vdir (1)
"""


def test_man_page_summary() -> None:
    assert summarize("ManPage", LS_PAGE, abstract_bytes=120) == {
        "Title": b"LS(1)",
        "Description": b"ls - list directory contents",
        "Synopsis": b"ls [OPTION]... [FILE]...",
        "Headings": b"NAME\nSYNOPSIS\nDESCRIPTION\nSEE ALSO",
        "Partial-Text": b"List information about the FILEs (the current directory by default). "
        b"Sort entries alphabetically if none of -cftuvSUX no",
    }


@pytest.mark.parametrize(
    ("line", "plain"),
    [
        pytest.param(r"ls \- list", "ls - list", id="minus"),
        pytest.param(
            r"\fBbold\fR \fIitalic\fP \f(CWcode\fR \f[B]b\f[]", "bold italic code b", id="fonts"
        ),
        pytest.param(r"a \(em b \(en c \(bu d", "a \u2014 b \u2013 c \u2022 d", id="named"),
        pytest.param(r"\[em] \[unknown]x", "\u2014 x", id="bracketed-names"),
        pytest.param(r"x\&y\|z\^w", "xyzw", id="zero-width"),
        pytest.param(r"back\eslash", "back\\slash", id="backslash"),
        pytest.param(r"\s-1SMALL\s0 \s+2big\s0", "SMALL big", id="sizes"),
        pytest.param(r"\*(lqquoted\*(rq \*R", "quoted", id="strings-dropped"),
        pytest.param(r"text \" a comment", "text", id="comment"),
        pytest.param(r"a\ b", "a b", id="escaped-space"),
        pytest.param(r"\h'3n'x\v'-1'y", "xy", id="motions"),
    ],
)
def test_man_escapes(line: str, plain: str) -> None:
    found = summarize("ManPage", f".SH NAME\n{line}\n")
    assert found["Description"] == plain.encode()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            '.SH NAME\n.B "two words" more\n.BR "a b" c\n.BI x y\n',
            {"Headings": b"NAME", "Description": b"two words more a bc xy"},
            id="font-macros",
        ),
        pytest.param(
            ".SH\nNAME\nfoo \\- bar\n",
            {"Headings": b"NAME", "Description": b"foo - bar"},
            id="heading-on-next-line",
        ),
        pytest.param(
            ".SH SYNOPSIS\n.nf\nfoo -a\nfoo -b\n.fi\nfilled\ntogether\n",
            {"Headings": b"SYNOPSIS", "Synopsis": b"foo -a\nfoo -b\nfilled together"},
            id="no-fill-lines",
        ),
        pytest.param(
            ".SH SYNOPSIS\n.SY grep\n.OP -i\n.I pattern\n.YS\n",
            {"Headings": b"SYNOPSIS", "Synopsis": b"grep [-i] pattern"},
            id="synopsis-macros",
        ),
        pytest.param(
            ".TH ONLYNAME\n.SH NAME\nx\n",
            {"Headings": b"NAME", "Description": b"x"},
            id="th-without-section",
        ),
        pytest.param("no requests at all\n", {}, id="text-before-any-section-dropped"),
    ],
)
def test_man_structure(source: str, expected: dict[str, bytes]) -> None:
    assert summarize("ManPage", source) == expected


# --- binaries ------------------------------------------------------------------------------

BINARY = (
    b"\x7fELF\x02\x01\x01\x00\x00"
    b"/lib64/ld-linux.so.2\x00short\x00__printf_chk\x00\xff\xfe"
    b"/lib64/ld-linux.so.2\x00\t  padded string  \x00      \x00"
    b"Copyright 1994 University of Colorado\x00"
)


def test_binary_summary() -> None:
    assert summarize("Binary", BINARY) == {
        "Strings": b"/lib64/ld-linux.so.2\n__printf_chk\npadded string\n"
        b"Copyright 1994 University of Colorado",
        "Keywords": b"colorado\ncopyright\nlinux\npadded\nprintf\nstring\nuniversity",
    }


def test_binary_strings_stop_at_twice_the_abstract_size() -> None:
    content = b"\x00".join(b"%c" % letter * 10 for letter in b"abcdefgh")
    found = summarize("Binary", content, abstract_bytes=10)
    assert found["Strings"] == b"aaaaaaaaaa\nbbbbbbbbb"


def test_binary_without_strings_has_no_attributes() -> None:
    assert summarize("Binary", bytes(range(0, 32)) * 100 + b"\x80\xff" * 100) == {}
