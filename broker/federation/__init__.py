"""Brokers working together through the HSR: each registers a summary of its content
(summary, kept current by summaries), the HSR ranks brokers for a query from those (route),
and a federated search asks the chosen ones at once and merges their answers (client,
merge)."""

from broker.federation.client import Federation
from broker.federation.merge import Answer, FederatedPage, Merged, html_parts
from broker.federation.route import Candidate, Ranked, rank
from broker.federation.summaries import SummaryKeeper, SummaryStats
from broker.federation.summary import ContentSummary, SummaryFormatError, from_record

__all__ = [
    "Answer",
    "Candidate",
    "ContentSummary",
    "FederatedPage",
    "Federation",
    "Merged",
    "Ranked",
    "SummaryFormatError",
    "SummaryKeeper",
    "SummaryStats",
    "from_record",
    "html_parts",
    "rank",
]
