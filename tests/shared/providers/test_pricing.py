import pytest

from shared.providers import PriceTable


class TestPriceTable:
    def test_cost_from_per_million_prices(self):
        table = PriceTable.from_json('{"m": [1.0, 2.0]}')
        assert table.cost("m", 1_000_000, 500_000) == pytest.approx(2.0)

    def test_dated_model_names_match_the_longest_prefix(self):
        table = PriceTable.from_json('{"gpt-x": [1, 1], "gpt-x-mini": [0.1, 0.1]}')
        assert table.price("gpt-x-mini-2026-01-01") == (0.1, 0.1)

    def test_unknown_model_has_no_cost(self):
        assert PriceTable.from_json(None).cost("mystery-model", 10, 10) is None

    @pytest.mark.parametrize("raw", ["not json", '{"m": 3}', '{"m": ["a", "b"]}'])
    def test_bad_table_is_a_clear_error(self, raw):
        with pytest.raises(ValueError, match="CROSSCHECK_PRICES"):
            PriceTable.from_json(raw)
