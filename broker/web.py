"""The search page: server-side rendered HTML that works without JavaScript.

::

    GET /                    the search form (its fields: broker/search_form.py)
    GET /?q=...              results: how many, title linked to the URL, URL, gatherer,
                             snippets, numbered pages; beside them the facets (gatherer, type,
                             date: broker/facets.py), each value a link that narrows the
                             query, and the choices made, each a link that undoes it; a
                             query that does not parse is shown with the problem marked and
                             the part of the query help that explains it (broker/syntax_help.py)
    GET /?q=...&federated=1  the results of the brokers the HSR picks, merged: each with
                             the broker it came from; what each broker asked did
    GET /help                the query language (generated from docs/broker-query.md)
    GET /static/harvest.css  the style sheet
    GET /static/harvest.js   keyboard shortcuts ("/" to the search box), an enhancement only

Templates (Jinja2, autoescaped) and the static files are read once at start-up on a worker
thread (``SearchPage.startup``), never on the event loop. Snippet marks (``\\x02``/``\\x03``)
are split into (text, marked) parts that the template escapes and wraps in ``<mark>``.
Result links are made only for URL schemes a browser can safely follow (never
``javascript:``); the pages send a Content-Security-Policy that allows nothing external and
no script but the page's own file, and ``Referrer-Policy: no-referrer`` so a clicked result
does not learn the query.

``python -m broker.web`` writes the help body from docs/broker-query.md to stdout (the
package ships the result, broker/templates/query-help.html; a test keeps it in sync).
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from jinja2 import DictLoader, Environment, StrictUndefined, Template
from markupsafe import Markup, escape

from broker.errors import QuerySyntaxError
from broker.facets import FACETS, Facets
from broker.facets import label as facet_label
from broker.federation import FederatedPage, Merged
from broker.federation.merge import MAX_RESULTS
from broker.metrics import BrokerMetrics
from broker.search import Page, Result
from broker.search_form import MAX_START, PAGE_SIZES, Form, page_links
from broker.services import Services
from broker.snippets import END, START
from broker.syntax_help import HelpSection, help_sections, section_for
from harvest_common.software import software_version

TEMPLATES = ("base.html", "search.html", "help.html", "error.html")
STYLE_SHEET = "harvest.css"
SCRIPT = "harvest.js"
QUERY_HELP = "query-help.html"

LINKABLE = frozenset({"http", "https", "ftp", "gopher"})

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self';"
        " form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_TITLES = {kind.name: kind.title for kind in FACETS}


def marked_parts(text: str) -> list[tuple[str, bool]]:
    """``text`` with snippet marks as (piece, marked) parts. Unbalanced or nested marks (the
    record's own text may hold those control characters) are dropped, never trusted."""
    parts: list[tuple[str, bool]] = []
    marked = False
    piece: list[str] = []
    for char in text:
        if char in (START, END):
            if (char == START) != marked:  # opens when closed, closes when open
                if piece:
                    parts.append(("".join(piece), marked))
                    piece = []
                marked = not marked
            continue
        piece.append(char)
    if piece:
        parts.append(("".join(piece), marked))
    return parts


def marked_html(text: str) -> str:
    """``text`` escaped for HTML, its marked words in ``<mark>``."""
    return "".join(
        f"<mark>{escape(piece)}</mark>" if marked else str(escape(piece))
        for piece, marked in marked_parts(text)
    )


def linkable(url: str) -> bool:
    """Whether a result's URL may be a link (a scheme a browser can safely follow)."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return False
    return scheme in LINKABLE


@dataclass(frozen=True, slots=True)
class Assets:
    """The templates' sources and the static files, read from the package once."""

    templates: dict[str, str]
    style_sheet: bytes
    script: bytes
    query_help: str


def load_assets() -> Assets:
    """Read the package's templates (blocking: call it on a worker thread)."""
    folder = resources.files("broker") / "templates"
    return Assets(
        templates={name: (folder / name).read_text("utf-8") for name in TEMPLATES},
        style_sheet=(folder / STYLE_SHEET).read_bytes(),
        script=(folder / SCRIPT).read_bytes(),
        query_help=(folder / QUERY_HELP).read_text("utf-8"),
    )


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    try:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return None


def _result_view(result: Result) -> dict[str, Any]:
    return {
        "oid": result.oid,
        "url": result.url,
        "link": linkable(result.url),
        "title": result.title,
        "gatherer": result.gatherer,
        "template": result.template,
        "updated": _when(result.update_time),
        "snippets": [
            {"attribute": attribute, "parts": marked_parts(text)}
            for attribute, text in result.snippets
        ],
        "object": f"api/objects/{result.oid}",
        "broker": None,
        "also": (),
    }


def _merged_view(merged: Merged) -> dict[str, Any]:
    """A federated result: the object's link goes to the broker it came from."""
    view = _result_view(merged.result)
    base = merged.broker.url.rstrip("/")
    view.update(
        object=f"{base}/api/objects/{merged.result.oid}",
        broker=merged.broker,
        also=merged.also,
    )
    return view


def chosen_view(form: Form) -> list[dict[str, str]]:
    """The facet choices the query is narrowed by, each with the link that undoes it."""
    return [
        {
            "facet": _TITLES[facet],
            "label": facet_label(facet, value),
            "remove": form.choosing(facet, None),
        }
        for facet, value in form.chosen
    ]


def facets_view(form: Form, found: Facets) -> list[dict[str, Any]]:
    """The facets as the page lists them: each value a link that narrows the query to it,
    or (chosen) that undoes the choice."""
    return [
        {
            "name": facet.kind.name,
            "title": facet.kind.title,
            "more": facet.more,
            "entries": [
                {
                    "label": value.label,
                    "count": value.count,
                    "chosen": value.chosen,
                    "href": form.choosing(facet.kind.name, None if value.chosen else value.value),
                }
                for value in facet.values
            ],
        }
        for facet in found.facets
        if facet.values
    ]


def error_view(
    form: Form, error: QuerySyntaxError, sections: dict[str, HelpSection]
) -> dict[str, Any]:
    """A query that does not parse: its text around the problem, where the problem is in the
    search box (when the box holds the whole query), and the help's section about it."""
    at = error.position
    text = error.query
    typed = form.q
    box = None
    if text == typed.strip():
        box = at + len(typed) - len(typed.lstrip())
    return {
        "error": error,
        "before": text[:at],
        "at": text[at : at + 1],
        "after": text[at + 1 :],
        "error_in_box": box,
        "hint": sections.get(section_for(text, at)),
    }


class SearchPage:
    """The page's handlers over one broker."""

    def __init__(self, services: Services, metrics: BrokerMetrics) -> None:
        self._services = services
        self._metrics = metrics
        self._templates: dict[str, Template] = {}
        self._assets: Assets | None = None
        self._sections: dict[str, HelpSection] = {}

    async def startup(self, app: web.Application) -> None:
        """Read the templates and static files on a worker thread, and compile them."""
        self._assets = assets = await asyncio.to_thread(load_assets)
        await asyncio.to_thread(software_version)  # cached for the footer
        env = Environment(
            loader=DictLoader(assets.templates),
            autoescape=True,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._templates = {name: env.get_template(name) for name in TEMPLATES}
        self._sections = help_sections(assets.query_help)

    def _render(self, name: str, status: int = 200, **context: Any) -> web.Response:
        context.setdefault("broker_name", self._services.config.broker.name)
        context.setdefault("version", software_version())
        html = self._templates[name].render(**context)
        return web.Response(
            text=html, status=status, content_type="text/html", charset="utf-8", headers=HEADERS
        )

    async def index(self, request: web.Request) -> web.Response:
        max_results = self._services.config.broker.max_results
        form = Form.read(request.query, max_results)
        now = time.time()
        query = form.query(now)
        context: dict[str, Any] = {
            "form": form,
            "query": query,
            "sizes": sorted({n for n in PAGE_SIZES if n <= max_results} | {form.n}),
            "chosen": chosen_view(form),
            "options_open": form.advanced(max_results),
            "error": None,
            "error_in_box": None,
            "page": None,
            "facets": None,
        }
        if query:
            try:
                with self._metrics.query("page"):
                    if form.federated:
                        merged = await self._services.federated_search(
                            query, limit=form.n, offset=form.start, case_sensitive=form.case
                        )
                    else:
                        page, found = await self._search(form, query, now)
            except QuerySyntaxError as error:
                context.update(error_view(form, error, self._sections))
                return self._render("search.html", status=400, **context)
            if form.federated:
                self._metrics.federated(a.outcome for a in merged.answers)
                context.update(self._federated_view(form, merged))
            else:
                context.update(self._page_view(form, page, found))
        return self._render("search.html", **context)

    async def _search(self, form: Form, query: str, now: float) -> tuple[Page, Facets | None]:
        """The page of results, and the facets of the query when it has results."""
        page = await self._services.search(
            query, limit=form.n, offset=form.start, case_sensitive=form.case
        )
        if not page.results:
            return page, None
        found = await self._services.facets(
            form.base_query, chosen=dict(form.chosen), case_sensitive=form.case, now=now
        )
        return page, found

    def _page_view(self, form: Form, page: Page, found: Facets | None) -> dict[str, Any]:
        last = page.offset + len(page.results)
        more = last < page.total and last < MAX_START
        return self._paged(form, page, [_result_view(r) for r in page.results], more) | {
            "exact": page.exact,
            "answers": None,
            "pages": page_links(form, page.offset, page.total) if page.results else [],
            "facets": None if found is None else facets_view(form, found),
            "facets_exact": found is None or found.exact,
            "facets_complete": found is None or found.complete,
        }

    def _federated_view(self, form: Form, page: FederatedPage) -> dict[str, Any]:
        more = page.more and page.offset + form.n < MAX_RESULTS
        return self._paged(form, page, [_merged_view(m) for m in page.results], more) | {
            "exact": False,  # the brokers' totals, summed: a URL two hold counts twice
            "answers": page.answers,
            "pages": [],
        }

    @staticmethod
    def _paged(
        form: Form, page: Page | FederatedPage, results: list[dict[str, Any]], more: bool
    ) -> dict[str, Any]:
        return {
            "page": page,
            "results": results,
            "first": page.offset + 1,
            "last": page.offset + len(page.results),
            "previous": form.link(max(0, page.offset - form.n)) if page.offset > 0 else None,
            "next": form.link(page.offset + form.n) if more else None,
        }

    async def help(self, request: web.Request) -> web.Response:
        assert self._assets is not None
        return self._render("help.html", body=Markup(self._assets.query_help))

    def _static(self, body: bytes, content_type: str) -> web.Response:
        return web.Response(
            body=body,
            content_type=content_type,
            charset="utf-8",
            headers={"Cache-Control": "max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    async def style_sheet(self, request: web.Request) -> web.Response:
        assert self._assets is not None
        return self._static(self._assets.style_sheet, "text/css")

    async def script(self, request: web.Request) -> web.Response:
        assert self._assets is not None
        return self._static(self._assets.script, "text/javascript")

    def error_page(self, status: int, title: str, message: str) -> web.Response:
        """An HTML error page (for the app's error boundary)."""
        if not self._templates:  # before start-up finished: plain text
            return web.Response(status=status, text=f"{title}: {message}\n")
        return self._render("error.html", status=status, title=title, message=message)


def add_routes(app: web.Application, services: Services, metrics: BrokerMetrics) -> SearchPage:
    """Serve the search page from ``app``; returns it (for error pages)."""
    page = SearchPage(services, metrics)
    app.on_startup.append(page.startup)
    app.router.add_get("/", page.index)
    app.router.add_get("/help", page.help)
    app.router.add_get(f"/static/{STYLE_SHEET}", page.style_sheet)
    app.router.add_get(f"/static/{SCRIPT}", page.script)
    return page


# -- the help page's body, generated from the query language's documentation ---------------

_SLUG_DROP = re.compile(r"[^\w\- ]")


def _slug(text: str) -> str:
    return _SLUG_DROP.sub("", text.strip().lower()).replace(" ", "-")


def query_help_html(markdown: str) -> str:
    """docs/broker-query.md as HTML (raw HTML in it escaped; headings get ids, so the
    document's own ``#errors`` links work)."""
    from markdown_it import MarkdownIt  # only to generate the file: not needed at run time

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(markdown)
    for number, token in enumerate(tokens):
        if token.type == "heading_open" and number + 1 < len(tokens):
            token.attrSet("id", _slug(tokens[number + 1].content))
    body: str = md.renderer.render(tokens, md.options, {})
    notice = "<!-- Generated from docs/broker-query.md by `python -m broker.web`. -->\n"
    return notice + body


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    source = Path(args[0]) if args else Path(__file__).parents[1] / "docs" / "broker-query.md"
    sys.stdout.write(query_help_html(source.read_text("utf-8")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
