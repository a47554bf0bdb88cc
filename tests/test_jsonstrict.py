"""The byte counts behind the fast duplicate-key checks: the numpy path used for big inputs
gives what the plain byte search gives."""

from __future__ import annotations

import json
import random

import pytest

from warehouse.ingesting import jsonstrict


def _doc(seed: int, blank: bool) -> bytes:
    rnd = random.Random(seed)
    keys = ["a", "name", 'q"uo:te', "x\\\\", "colon:", "\\\\\":"]
    events = []
    for i in range(4000):
        e = {rnd.choice(keys): rnd.choice(["v", 'say "hi":', ":", "\\\\", i])
             for _ in range(rnd.randint(0, 4))}
        events.append(e)
    text = json.dumps({"traceEvents": events})
    if blank:
        k = text.index('":', len(text) // 2) + 1  # a key's colon, far into the document
        text = text[:k] + " " + text[k:]  # that key written "key" :
    return text.encode()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("blank", [False, True])
def test_big_inputs_count_like_the_byte_search(seed, blank):
    data = _doc(seed, blank)
    assert len(data) >= jsonstrict._BIG  # the numpy path
    want = data.count(b'":') - data.count(b'\\":')
    assert jsonstrict.approx_key_count(data) == want
    backslash_key = b'\\\\":' in data  # a key ending in an escaped backslash: not counted
    assert jsonstrict.keys_counted(data) == (None if blank or backslash_key else want)
    assert (jsonstrict._WS_BEFORE_COLON.search(data) is not None) is blank
    small = data[:1000]
    assert jsonstrict.approx_key_count(small) == small.count(b'":') - small.count(b'\\":')
    assert jsonstrict.keys_counted(small) == (
        None if jsonstrict._WS_BEFORE_COLON.search(small) or b'\\\\":' in small
        else jsonstrict.approx_key_count(small))


def test_a_key_ending_in_an_escaped_backslash_sends_the_document_to_the_exact_check():
    """Review finding: ``"a\\\\":`` was not counted as a key, so one repeated key elsewhere
    made the counts equal and the repetition went unseen."""
    data = b'{"a\\\\": 0, "k": 1, "k": 2}'
    assert jsonstrict.approx_key_count(data) == 2  # the undercount
    assert jsonstrict.keys_counted(data) is None
    big = b'{"a\\\\": 0, ' + b", ".join(b'"k%d": 1' % i for i in range(
        jsonstrict._BIG // 8)) + b', "k1": 2}'
    assert len(big) >= jsonstrict._BIG and jsonstrict.keys_counted(big) is None
    with pytest.raises(Exception, match="unique object keys"):
        jsonstrict.check_no_duplicate_keys(data, 3, "f.json")


def test_a_blank_before_a_colon_far_into_a_big_input_is_seen():
    data = b'{"a": 1, ' + b'"k":2, ' * 20000 + b'"late" : 3}'
    assert jsonstrict.keys_counted(data) is None
    fixed = data.replace(b'"late" :', b'"late":')
    assert jsonstrict.keys_counted(fixed) == fixed.count(b'":') == 20002
    with pytest.raises(Exception, match="unique object keys"):
        jsonstrict.check_no_duplicate_keys(data, 0, "f.json")
