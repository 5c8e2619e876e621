"""Essence's pipeline with injected fake summarizers: selection, unnesting, fallback, noindex."""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass, field

import pytest

from gatherer.errors import SummarizeError
from gatherer.essence.document import Document, Parts, Summary
from gatherer.essence.options import EssenceOptions
from gatherer.essence.pipeline import summarize
from gatherer.essence.summarizers import SUMMARIZERS, Summarizer
from tests.gatherer.test_unnest import tar_of, zip_of

URL = "http://example.org/pub/x"
OPTIONS = EssenceOptions()
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
HTML = b"<!DOCTYPE html><html><body><a href='/next'>next</a></body></html>"


@dataclass
class Fake:
    """A summarizer that says which type it summarized and records what it was called on."""

    kind: str
    links: tuple[str, ...] = ()
    noindex: bool = False
    calls: list[str] = field(default_factory=list)

    def __call__(self, document: Document, options: EssenceOptions) -> Parts:
        self.calls.append(document.name)
        attributes = (
            ("Summarized-By", self.kind.encode()),
            ("Size", b"%d" % len(document.content)),
        )
        return Parts(attributes, self.links, self.noindex)


def fakes(*kinds: str, **special: Fake) -> dict[str, Summarizer]:
    table: dict[str, Summarizer] = {kind: Fake(kind) for kind in kinds}
    table.update(special)
    return table


def doc(content: bytes, name: str = "", content_type: str | None = None) -> Document:
    return Document(URL, content, content_type, name=name)


def test_a_registered_summarizer_gives_attributes_and_links() -> None:
    table = fakes(HTML=Fake("HTML", links=("http://example.org/next",)))
    summary = summarize(doc(HTML, "index.html"), OPTIONS, table)
    assert summary == Summary(
        "HTML",
        attributes=(("Summarized-By", b"HTML"), ("Size", b"%d" % len(HTML))),
        links=("http://example.org/next",),
    )


FALLBACK = [
    ("no summarizer for the type: Binary's", fakes("Binary", "Text"), "PDF", b"Binary"),
    ("own summarizer preferred", fakes("Binary", "PDF"), "PDF", b"PDF"),
]


@pytest.mark.parametrize(
    ("table", "kind", "by"), [c[1:] for c in FALLBACK], ids=[c[0] for c in FALLBACK]
)
def test_fallback_to_binary(table: dict[str, Summarizer], kind: str, by: bytes) -> None:
    summary = summarize(doc(b"%PDF-1.4\n%\xe2\xe3\n"), OPTIONS, table)
    assert summary.type == kind
    assert summary.selected
    assert summary.attributes[0] == ("Summarized-By", by)


def test_no_summarizer_and_no_binary_gives_no_attributes() -> None:
    assert summarize(doc(b"%PDF-1.4\n"), OPTIONS, fakes("Text")) == Summary("PDF")


def test_stoplisted_type_is_not_summarized() -> None:
    table = fakes("Image", "Binary")
    assert summarize(doc(PNG, "p.png"), OPTIONS, table) == Summary("Image", selected=False)
    assert [fake.calls for fake in table.values() if isinstance(fake, Fake)] == [[], []]


def test_stoplisted_html_is_still_summarized_for_its_links() -> None:
    html = Fake("HTML", links=("http://example.org/next",))
    options = EssenceOptions(stoplist=frozenset({"HTML"}))
    summary = summarize(doc(HTML, "index.html"), options, {"HTML": html})
    assert summary == Summary("HTML", selected=False, links=("http://example.org/next",))
    assert html.calls == ["index.html"]


def test_stoplisted_html_without_its_summarizer_does_not_fall_back() -> None:
    binary = Fake("Binary")
    options = EssenceOptions(stoplist=frozenset({"HTML"}))
    summary = summarize(doc(HTML, "index.html"), options, {"Binary": binary})
    assert summary == Summary("HTML", selected=False)
    assert binary.calls == []


def test_noindex_unselects_but_keeps_links() -> None:
    html = Fake("HTML", links=("http://example.org/a",), noindex=True)
    summary = summarize(doc(HTML, "index.html"), OPTIONS, {"HTML": html})
    assert summary == Summary("HTML", selected=False, links=("http://example.org/a",))


def test_default_table_is_the_registered_summarizers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SUMMARIZERS, "Text", Fake("Text"))
    summary = summarize(doc(b"plain words\n", "a.txt"), OPTIONS)
    assert summary.attributes[0] == ("Summarized-By", b"Text")


BUNDLE = {
    "README": b"read me\n",
    "src/main.c": b"int main(void);\n",
    "logo.png": PNG,
    "docs.zip": zip_of({"guide.html": HTML}),
}


def test_archive_members_are_embedded_in_order() -> None:
    table = fakes("README", "C", "HTML", "Image", "Binary")
    content = gzip.compress(tar_of(BUNDLE))
    summary = summarize(doc(content, "bundle.tar.gz"), OPTIONS, table)
    assert summary.type == "GNUCompressed"
    assert summary.selected
    assert summary.attributes == (
        ("Members", b"README\nsrc/main.c\nlogo.png\ndocs.zip/guide.html"),
    )
    assert summary.links == ()
    assert summary.embedded == (
        (("Member", b"README"), ("Type", b"README"), ("Summarized-By", b"README"), ("Size", b"8")),
        (("Member", b"src/main.c"), ("Type", b"C"), ("Summarized-By", b"C"), ("Size", b"16")),
        (("Member", b"logo.png"), ("Type", b"Image")),  # stoplisted: Member and Type only
        (
            ("Member", b"docs.zip/guide.html"),
            ("Type", b"HTML"),
            ("Summarized-By", b"HTML"),
            ("Size", b"%d" % len(HTML)),
        ),
    )


def test_member_without_a_summarizer_falls_back_to_binary() -> None:
    summary = summarize(doc(zip_of({"a.pdf": b"%PDF-1.4\n"}), "a.zip"), OPTIONS, fakes("Binary"))
    assert summary.embedded == (
        (("Member", b"a.pdf"), ("Type", b"PDF"), ("Summarized-By", b"Binary"), ("Size", b"9")),
    )


def test_noindex_member_gives_member_and_type_only() -> None:
    table = fakes(HTML=Fake("HTML", links=("http://example.org/a",), noindex=True))
    summary = summarize(doc(zip_of({"p.html": HTML}), "a.zip"), OPTIONS, table)
    assert summary.embedded == ((("Member", b"p.html"), ("Type", b"HTML")),)
    assert summary.links == ()


def test_stoplisted_html_member_is_not_summarized() -> None:
    html = Fake("HTML", links=("http://example.org/a",))
    options = EssenceOptions(stoplist=frozenset({"HTML"}))
    summary = summarize(doc(zip_of({"p.html": HTML}), "a.zip"), options, {"HTML": html})
    assert summary.embedded == ((("Member", b"p.html"), ("Type", b"HTML")),)
    assert html.calls == []


def test_member_too_deep_to_unnest_is_summarized_by_its_type_or_binary() -> None:
    content = zip_of({"inner.zip": zip_of({"a.txt": b"a"})})
    options = EssenceOptions(unnest_max_depth=1)
    by_binary = summarize(doc(content, "a.zip"), options, fakes("Binary", "Text"))
    by_zip = summarize(doc(content, "a.zip"), options, fakes("Binary", "Zip"))
    assert by_binary.embedded[0][:3] == (
        ("Member", b"inner.zip"),
        ("Type", b"Zip"),
        ("Summarized-By", b"Binary"),
    )
    assert by_zip.embedded[0][2] == ("Summarized-By", b"Zip")
    assert by_binary.attributes[-1] == ("Unnest-Truncated", b"nested deeper than 1 levels")


def test_cut_member_list_is_reported() -> None:
    content = tar_of({f"{n}.txt": b"x" for n in range(5)})
    summary = summarize(doc(content, "t.tar"), EssenceOptions(unnest_max_members=2), {})
    assert summary.attributes == (
        ("Members", b"0.txt\n1.txt"),
        ("Unnest-Truncated", b"more than 2 members"),
    )
    assert summary.embedded == (
        (("Member", b"0.txt"), ("Type", b"Text")),
        (("Member", b"1.txt"), ("Type", b"Text")),
    )


def test_empty_archive_has_no_members() -> None:
    summary = summarize(doc(tar_of({}), "empty.tar"), OPTIONS, {})
    assert summary == Summary("Tar", attributes=(("Members", b""),))


def test_undecodable_tar_member_name_keeps_its_bytes() -> None:
    content = tar_of({"caf\udce9.txt": b"latin-1 name"})  # as tarfile reads the byte 0xE9
    summary = summarize(doc(content, "t.tar"), OPTIONS, {})
    assert summary.embedded[0][0] == ("Member", b"caf\xe9.txt")


def test_corrupt_container_is_summarized_as_binary_with_the_error() -> None:
    summary = summarize(doc(b"PK\x03\x04 broken", "a.zip"), OPTIONS, fakes("Binary", "Zip"))
    assert summary.type == "Zip"
    assert summary.selected
    assert summary.attributes[0] == ("Summarized-By", b"Binary")
    assert summary.attributes[-1][0] == "Unnest-Error"
    assert summary.attributes[-1][1].startswith(b"corrupt zip")
    assert summary.embedded == ()


def test_stoplisted_container_is_not_unnested() -> None:
    text = Fake("Text")
    options = EssenceOptions(stoplist=frozenset({"Tar"}))
    summary = summarize(doc(tar_of({"a.txt": b"a"}), "t.tar"), options, {"Text": text})
    assert summary == Summary("Tar", selected=False)
    assert text.calls == []


def test_summarize_error_propagates() -> None:
    def failing(document: Document, options: EssenceOptions) -> Parts:
        raise SummarizeError(document.url, "error: bad PDF")

    with pytest.raises(SummarizeError, match="bad PDF"):
        summarize(doc(b"%PDF-1.4\n"), OPTIONS, {"PDF": failing})


def test_other_summarizer_exceptions_are_left_to_the_worker_supervisor() -> None:
    def crashing(document: Document, options: EssenceOptions) -> Parts:
        raise ZeroDivisionError("bug in a summarizer")

    with pytest.raises(ZeroDivisionError):
        summarize(doc(zip_of({"a.txt": b"a"}), "a.zip"), OPTIONS, {"Text": crashing})


def test_summary_is_picklable() -> None:
    table = fakes("README", "C", "HTML", "Image", "Binary")
    summary = summarize(doc(gzip.compress(tar_of(BUNDLE)), "b.tgz"), OPTIONS, table)
    assert pickle.loads(pickle.dumps(summary)) == summary
    assert len(summary.embedded) == len(BUNDLE)
