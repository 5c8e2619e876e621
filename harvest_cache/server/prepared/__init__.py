"""Prepared answers: what the full handling of a request worked out, kept for the next request
asked the same way while it stays the same.

A client asking again sends the same request, and the cache would make the same decisions
(``harvest_cache.http.decision``) and the same bytes: a hit on an unchanged stored object
(``hits``), a revalidation answered by a 304 of the same shape (``revalidations``), a miss on a
new URL of an origin answering in one shape (``misses``). Each is a memo of the decision and
the answer, valid while the stored object is the one it was made for (an identity check) and,
where time changes the decision, until then; the fast fetch (``fast_fetch``) repeats the
planned exchanges, and anything unplanned is worked out in full again.
"""
