"""The index of stored variants' entity tags that a vary-miss lists in If-None-Match."""

from __future__ import annotations

from harvest_cache.server.variants import VariantTags


def test_candidates_are_the_variants_of_the_current_generation() -> None:
    tags = VariantTags()
    tags.record("u", "g1", "u-en", '"en"')
    tags.record("u", "g1", "u-fr", '"fr"')
    assert tags.candidates("u", "g1") == (("u-en", '"en"'), ("u-fr", '"fr"'))
    assert tags.candidates("u", "g0") == ()  # another marker: none of them
    assert tags.candidates("other", "g1") == ()


def test_a_new_generation_forgets_the_old_variants() -> None:
    tags = VariantTags()
    tags.record("u", "g1", "u-en", '"en"')
    tags.record("u", "g2", "u-de", '"de"')
    assert tags.candidates("u", "g2") == (("u-de", '"de"'),)
    assert tags.candidates("u", "g1") == ()


def test_a_variant_stored_again_or_without_etag_is_updated_or_forgotten() -> None:
    tags = VariantTags()
    tags.record("u", "g", "u-en", '"en1"')
    tags.record("u", "g", "u-fr", '"fr"')
    tags.record("u", "g", "u-en", '"en2"')
    assert tags.candidates("u", "g") == (("u-fr", '"fr"'), ("u-en", '"en2"'))
    tags.record("u", "g", "u-fr", None)
    assert tags.candidates("u", "g") == (("u-en", '"en2"'),)


def test_bounded_per_url_and_in_urls() -> None:
    tags = VariantTags(urls=2, per_url=3)
    for n in range(5):
        tags.record("u", "g", f"u-{n}", f'"{n}"')
    assert [key for key, _ in tags.candidates("u", "g")] == ["u-2", "u-3", "u-4"]
    tags.record("v", "g", "v-0", '"0"')
    tags.record("w", "g", "w-0", '"0"')  # the least recently recorded URL goes
    assert tags.candidates("u", "g") == ()
    assert tags.candidates("v", "g") == (("v-0", '"0"'),)
    assert tags.candidates("w", "g") == (("w-0", '"0"'),)
