"""Broker tests fail if broker code makes a blocking call on a running event loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tantivy
from blockbuster import BlockBusterFunction, blockbuster_ctx

# tantivy works in Rust, out of blockbuster's sight: these calls read or write the index's
# files, or search it, so on the loop they would stall it as file I/O does.
_TANTIVY_BLOCKING: dict[type, tuple[str, ...]] = {
    tantivy.Index: ("reload", "searcher", "writer"),
    tantivy.IndexWriter: (
        "add_document",
        "commit",
        "delete_all_documents",
        "delete_documents_by_query",
        "garbage_collect_files",
        "wait_merging_threads",
    ),
    tantivy.Searcher: ("doc", "search", "terms_with_prefix"),
}


@pytest.fixture(autouse=True)
def no_blocking_calls() -> Iterator[None]:
    # Only calls made from the broker's own modules (and the shared ones it runs) count: the
    # tests may block freely.
    with blockbuster_ctx(["broker", "harvest_common"]) as blockbuster:
        for owner, names in _TANTIVY_BLOCKING.items():
            for name in names:
                function = BlockBusterFunction(owner, name, scanned_modules="broker")
                blockbuster.functions[f"tantivy.{owner.__name__}.{name}"] = function.activate()
        yield
