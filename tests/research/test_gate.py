"""The query-quality gate: what is searched, and the reason each other query is not."""

from research.gate import gate, normalise


def reasons(queries, max_queries=3, max_words=8):
    accepted, rejected = gate(queries, max_queries=max_queries, max_words=max_words)
    return accepted, {f.query: f.reason for f in rejected}


def test_normalising_ignores_case_spacing_and_edge_punctuation():
    assert normalise('  "Golden  Gate Bridge opening?" ') == "golden gate bridge opening"


def test_empty_duplicate_and_over_long_queries_are_refused_with_their_reason():
    accepted, refused = reasons(
        [
            "golden gate bridge opening year",
            "   ",
            "Golden Gate bridge  opening year?",
            "one two three four five six seven eight nine",
        ]
    )
    assert accepted == ["golden gate bridge opening year"]
    assert refused["   "] == "empty query"
    assert refused["Golden Gate bridge  opening year?"] == "duplicate of an earlier query"
    assert refused["one two three four five six seven eight nine"].startswith("too long: 9 words")


def test_eight_words_is_the_boundary_and_the_limit_is_a_setting():
    eight = "one two three four five six seven eight"
    assert reasons([eight])[0] == [eight]
    assert reasons([eight], max_words=7)[0] == []


def test_the_number_of_queries_is_capped_in_order():
    accepted, refused = reasons(["a1", "b2", "c3", "d4"], max_queries=3)
    assert accepted == ["a1", "b2", "c3"]
    assert refused == {"d4": "over the cap of 3 queries per request"}
    assert reasons(["a1", "b2", "c3", "d4"], max_queries=4)[0] == ["a1", "b2", "c3", "d4"]
