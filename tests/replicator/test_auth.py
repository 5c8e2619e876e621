"""Signed requests and answers: round trips, every tampered part refused, the time window,
replays refused within it (with bounded memory of request ids), and answers bound to their
request. Every refusal is an AuthError (a ReplicatorError), but for a full memory of ids."""

from __future__ import annotations

import pytest

from harvest_common.errors import ReplicatorError
from replicator import auth
from replicator.auth import (
    MEMBER,
    NONCE,
    SIGNATURE,
    SKEW,
    TIME,
    SeenRequests,
    check_answer,
    check_request,
    sign_answer,
    sign_request,
)
from replicator.errors import AuthError, ReplayError, ReplayMemoryFull

SECRET = b"a shared secret of the group"
NOW = 1_700_000_000.0
METHOD = "POST"
PATH = "/replication/hsr/entries?after=3&limit=10"
BODY = b'{"keys":["a","b"]}'
ID = "0123456789abcdef" * 2


def _signed(now: float = NOW, nonce: str = ID) -> dict[str, str]:
    return sign_request(SECRET, "m1", METHOD, PATH, BODY, now, nonce)


def _check(
    headers: dict[str, str],
    *,
    secret: bytes = SECRET,
    method: str = METHOD,
    path: str = PATH,
    body: bytes = BODY,
    now: float = NOW,
    seen: SeenRequests | None = None,
) -> str:
    return check_request(
        secret, headers, method, path, body, now, SeenRequests() if seen is None else seen
    )


# Requests ----------------------------------------------------------------------------------


def test_a_signed_request_names_its_member() -> None:
    headers = _signed()
    assert set(headers) == {MEMBER, TIME, NONCE, SIGNATURE}
    assert headers[MEMBER] == "m1"
    assert headers[TIME] == f"{NOW:.3f}"
    assert len(headers[SIGNATURE]) == 64
    assert _check(headers) == "m1"


def test_the_method_is_compared_without_case() -> None:
    headers = sign_request(SECRET, "m1", "post", PATH, BODY, NOW, ID)
    assert _check(headers, method="POST") == "m1"


def test_signing_is_deterministic_and_depends_on_the_secret() -> None:
    assert _signed() == _signed()
    other = sign_request(b"another secret entirely", "m1", METHOD, PATH, BODY, NOW, ID)
    assert other[SIGNATURE] != _signed()[SIGNATURE]


@pytest.mark.parametrize(
    "change",
    [
        {"method": "GET"},
        {"path": "/replication/hsr/entries?after=4&limit=10"},
        {"path": "/replication/other/entries?after=3&limit=10"},
        {"body": b'{"keys":["a","c"]}'},
        {"body": b""},
        {"secret": b"not the group's secret at all"},
    ],
)
def test_a_request_altered_on_the_way_is_refused(change: dict[str, object]) -> None:
    headers = _signed()
    with pytest.raises(AuthError, match="bad signature"):
        _check(headers, **change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (MEMBER, "m2"),
        (TIME, f"{NOW + 1:.3f}"),
        (TIME, f"{NOW:.2f}"),  # the same instant, written otherwise: not what was signed
        (NONCE, "f" * 32),  # another id: not the request signed
        (SIGNATURE, "0" * 64),
    ],
)
def test_a_tampered_header_is_refused(header: str, value: str) -> None:
    headers = _signed()
    assert headers[header] != value
    headers[header] = value
    with pytest.raises(AuthError, match="bad signature"):
        _check(headers)


def test_a_flipped_signature_digit_is_refused() -> None:
    headers = _signed()
    last = headers[SIGNATURE][-1]
    headers[SIGNATURE] = headers[SIGNATURE][:-1] + ("0" if last != "0" else "1")
    with pytest.raises(AuthError):
        _check(headers)


@pytest.mark.parametrize("missing", [MEMBER, TIME, NONCE, SIGNATURE])
def test_a_missing_header_means_unsigned(missing: str) -> None:
    headers = _signed()
    del headers[missing]
    with pytest.raises(AuthError, match="not signed"):
        _check(headers)


def test_no_headers_at_all_is_refused() -> None:
    with pytest.raises(AuthError, match="not signed"):
        _check({})


@pytest.mark.parametrize("offset", [-(SKEW + 1), SKEW + 1, -10 * SKEW, 10 * SKEW])
def test_a_request_outside_the_time_window_is_refused(offset: float) -> None:
    # Signed at NOW + offset, checked at NOW: too old (negative) or from the future.
    headers = _signed(NOW + offset)
    with pytest.raises(AuthError, match="time"):
        _check(headers)
    # The same headers are good at the time they were made.
    assert _check(headers, now=NOW + offset) == "m1"


@pytest.mark.parametrize("offset", [-(SKEW - 1), SKEW - 1, 0.0])
def test_a_request_within_the_time_window_is_accepted(offset: float) -> None:
    assert _check(_signed(NOW + offset)) == "m1"


@pytest.mark.parametrize("when", ["yesterday", "", "nan", "inf", "-inf", "1e400"])
def test_a_bad_time_is_refused(when: str) -> None:
    headers = _signed()
    headers[TIME] = when
    with pytest.raises(AuthError):
        _check(headers)


@pytest.mark.parametrize(
    ("header", "value"),
    [
        (SIGNATURE, "é" * 64),  # not ASCII: hmac.compare_digest would raise TypeError
        (SIGNATURE, "\udcff" * 64),  # a byte that was not UTF-8, as aiohttp decodes it
        (MEMBER, "m\udcff"),  # could not even be encoded for the MAC
        (MEMBER, "mé"),
    ],
)
def test_non_ascii_headers_are_refused_not_crashed_on(header: str, value: str) -> None:
    headers = _signed()
    headers[header] = value
    with pytest.raises(AuthError, match="bad signature"):
        _check(headers)


# Replays -----------------------------------------------------------------------------------


def test_an_exact_replay_within_the_window_is_refused() -> None:
    seen = SeenRequests()
    headers = _signed()
    assert _check(headers, seen=seen) == "m1"
    for later in (0.0, 1.0, SKEW - 1):
        with pytest.raises(ReplayError, match="replay"):
            _check(headers, seen=seen, now=NOW + later)
    # Past the window the time check refuses it, and the next request finds it forgotten.
    with pytest.raises(AuthError, match="time"):
        _check(headers, seen=seen, now=NOW + SKEW + 1)
    _check(_signed(NOW + SKEW + 1, nonce="f" * 32), seen=seen, now=NOW + SKEW + 1)
    assert len(seen) == 1


def test_replays_are_auth_errors() -> None:
    assert issubclass(ReplayError, AuthError)
    assert not issubclass(ReplayMemoryFull, AuthError)  # not the sender's fault: 503


def test_every_request_has_an_id_of_its_own() -> None:
    seen = SeenRequests()
    for i in range(100):
        assert _check(_signed(nonce=f"{i:032x}"), seen=seen) == "m1"
    assert len(seen) == 100


def test_a_request_from_the_future_is_remembered_until_it_would_be_too_old() -> None:
    seen = SeenRequests()
    ahead = _signed(NOW + SKEW)  # made (by its clock) SKEW seconds after ours
    assert _check(ahead, seen=seen) == "m1"
    later = NOW + 2 * SKEW - 1
    _check(_signed(later, nonce="e" * 32), seen=seen, now=later)  # purges what expired
    with pytest.raises(ReplayError):
        _check(ahead, seen=seen, now=later)
    # Past its own window (made + SKEW) both are forgotten: only the last one is held.
    last = NOW + 3 * SKEW
    _check(_signed(last, nonce="d" * 32), seen=seen, now=last)
    assert len(seen) == 1


def test_a_full_memory_refuses_until_the_oldest_id_expires() -> None:
    seen = SeenRequests(capacity=3)
    for i in range(3):
        _check(_signed(NOW + i, nonce=f"{i:032x}"), seen=seen, now=NOW + i)
    with pytest.raises(ReplayMemoryFull, match="3 requests within 300 s") as caught:
        _check(_signed(NOW + 10, nonce="a" * 32), seen=seen, now=NOW + 10)
    assert caught.value.retry == pytest.approx(SKEW - 10)
    # A replay is still told apart from a request that does not fit.
    with pytest.raises(ReplayError):
        _check(_signed(NOW, nonce=f"{0:032x}"), seen=seen, now=NOW + 10)
    assert _check(_signed(NOW + SKEW + 1, nonce="a" * 32), seen=seen, now=NOW + SKEW + 1)
    assert len(seen) == 3


def test_an_unsigned_or_forged_request_takes_no_room() -> None:
    seen = SeenRequests(capacity=1)
    forged = sign_request(b"not the group's secret", "m1", METHOD, PATH, BODY, NOW, ID)
    for _ in range(3):
        with pytest.raises(AuthError, match="bad signature"):
            _check(forged, seen=seen)
    assert len(seen) == 0
    assert _check(_signed(), seen=seen) == "m1"


@pytest.mark.parametrize("nonce", ["", "0" * 31, "0" * 33, "G" * 32, "A" * 32, "\udcff" * 32])
def test_a_bad_request_id_is_refused(nonce: str) -> None:
    headers = _signed()
    headers[NONCE] = nonce
    with pytest.raises(AuthError, match="X-Harvest-Nonce"):
        _check(headers)


# Answers -----------------------------------------------------------------------------------


def test_an_answer_round_trips() -> None:
    request = _signed()[SIGNATURE]
    body = b'{"entries":[]}'
    signature = sign_answer(SECRET, request, body)
    assert len(signature) == 64
    check_answer(SECRET, request, body, signature)  # no error
    assert sign_answer(SECRET, request, body) == signature


def test_an_answer_to_another_request_is_refused() -> None:
    first = _signed()[SIGNATURE]
    second = sign_request(SECRET, "m1", METHOD, PATH, BODY, NOW, "f" * 32)[SIGNATURE]
    assert first != second
    body = b'{"entries":[]}'
    replayed = sign_answer(SECRET, first, body)
    with pytest.raises(AuthError, match="does not match"):
        check_answer(SECRET, second, body, replayed)


@pytest.mark.parametrize(
    ("secret", "body"),
    [
        (SECRET, b'{"entries":[1]}'),  # altered on the way
        (SECRET, b""),  # truncated to nothing
        (b"a secret of another group", b'{"entries":[]}'),  # forged
    ],
)
def test_an_altered_or_forged_answer_is_refused(secret: bytes, body: bytes) -> None:
    request = _signed()[SIGNATURE]
    signature = sign_answer(SECRET, request, b'{"entries":[]}')
    with pytest.raises(AuthError, match="does not match"):
        check_answer(secret, request, body, signature)


def test_an_unsigned_answer_is_refused() -> None:
    with pytest.raises(AuthError, match="not signed"):
        check_answer(SECRET, _signed()[SIGNATURE], b"", None)


@pytest.mark.parametrize("given", ["", "é" * 64, "\udcff" * 64])
def test_a_garbled_answer_signature_is_refused(given: str) -> None:
    with pytest.raises(AuthError, match="does not match"):
        check_answer(SECRET, _signed()[SIGNATURE], b"", given)


def test_the_request_and_answer_signatures_are_kept_apart() -> None:
    # An answer's MAC is over other fields than a request's: one is never the other.
    headers = _signed()
    assert sign_answer(SECRET, headers[SIGNATURE], BODY) != headers[SIGNATURE]


def test_auth_errors_are_replicator_errors() -> None:
    assert issubclass(AuthError, ReplicatorError)
    with pytest.raises(ReplicatorError):
        auth.check_request(SECRET, {}, METHOD, PATH, BODY, NOW, SeenRequests())
