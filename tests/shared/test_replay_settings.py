"""Replay store settings: names, defaults, and a clear refusal of values that cannot work."""

import pytest
from pydantic import ValidationError

from actor.settings import ActorSettings
from critic.settings import CriticSettings
from shared.replay import Bounds, open_replayer
from shared.settings import ReplaySettings

TOKEN = "test-service-token-0123456789"


@pytest.fixture(autouse=True)
def _token(monkeypatch):
    monkeypatch.setenv("CROSSCHECK_SERVICE_TOKEN", TOKEN)
    monkeypatch.delenv("REDIS_URL", raising=False)


def test_defaults_are_a_sqlite_file_per_service_six_hours_and_ten_thousand_entries(monkeypatch):
    monkeypatch.delenv("ACTOR_REPLAY_DB")  # tests/conftest.py points both at tmp_path
    monkeypatch.delenv("CRITIC_REPLAY_DB")
    actor, critic = ActorSettings(), CriticSettings()
    assert str(actor.replay_db) == "var/replays/actor.sqlite"
    assert str(critic.replay_db) == "var/replays/critic.sqlite"
    assert actor.replay_store_kind == "sqlite"
    assert (actor.replay_ttl_s, actor.replay_max_entries, actor.replay_lease_s) == (
        21600.0,
        10_000,
        10.0,
    )


def test_environment_names(monkeypatch, tmp_path):
    monkeypatch.setenv("ACTOR_REPLAY_DB", str(tmp_path / "a.sqlite"))
    monkeypatch.setenv("CRITIC_REPLAY_DB", str(tmp_path / "c.sqlite"))
    monkeypatch.setenv("CROSSCHECK_REPLAY_TTL_S", "60")
    monkeypatch.setenv("CROSSCHECK_REPLAY_MAX_ENTRIES", "5")
    monkeypatch.setenv("CROSSCHECK_REPLAY_LEASE_S", "2.5")
    actor, critic = ActorSettings(), CriticSettings()
    assert actor.replay_db == tmp_path / "a.sqlite"
    assert critic.replay_db == tmp_path / "c.sqlite"
    assert (critic.replay_ttl_s, critic.replay_max_entries, critic.replay_lease_s) == (60, 5, 2.5)


def test_redis_url_chooses_redis_and_its_password_is_a_registered_secret(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "redis://:s3cret-pa%24%24@cache:6380/2")
    settings = CriticSettings()
    assert settings.replay_store_kind == "redis"
    assert "s3cret" not in repr(settings)
    assert {"s3cret-pa%24%24", "s3cret-pa$$"} <= set(settings.secrets())


def test_an_empty_redis_url_means_no_redis(monkeypatch):
    monkeypatch.setenv("REDIS_URL", "")
    assert CriticSettings().replay_store_kind == "sqlite"


def test_memory_can_be_chosen_explicitly(monkeypatch):
    monkeypatch.setenv("CROSSCHECK_REPLAY_STORE", "memory")
    assert ActorSettings().replay_store_kind == "memory"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CROSSCHECK_REPLAY_TTL_S", "0", "greater than 0"),
        ("CROSSCHECK_REPLAY_TTL_S", "six hours", "valid number"),
        ("CROSSCHECK_REPLAY_TTL_S", "inf", "finite"),
        ("CROSSCHECK_REPLAY_MAX_ENTRIES", "0", "greater than or equal to 1"),
        ("CROSSCHECK_REPLAY_MAX_ENTRIES", "1e3", "valid integer"),
        ("CROSSCHECK_REPLAY_LEASE_S", "-1", "greater than 0"),
        ("CROSSCHECK_REPLAY_STORE", "postgres", "'sqlite', 'redis' or 'memory'"),
        ("CROSSCHECK_REPLAY_STORE", "redis", "CROSSCHECK_REPLAY_STORE=redis needs REDIS_URL"),
    ],
)
def test_bad_values_are_refused_at_start_naming_the_variable(monkeypatch, variable, value, message):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError, match=message) as raised:
        ReplaySettings()
    if variable != "CROSSCHECK_REPLAY_STORE" or value != "redis":
        assert variable in str(raised.value)


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, "sqlite at {tmp}/critic.sqlite"),
        ({"CROSSCHECK_REPLAY_STORE": "memory"}, "memory (not durable)"),
        ({"REDIS_URL": "redis://:pw-123456@127.0.0.1:6390/4"}, "redis at 127.0.0.1:6390/4"),
        ({"REDIS_URL": "rediss://cache.internal/2"}, "redis at cache.internal:6379/2"),
    ],
)
async def test_open_replayer_builds_the_configured_store(
    monkeypatch, tmp_path, environment, expected
):
    monkeypatch.setenv("CRITIC_REPLAY_DB", str(tmp_path / "critic.sqlite"))
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    replayer = await open_replayer(CriticSettings(), "critic")
    try:
        assert replayer.store.description == expected.format(tmp=tmp_path)
        assert replayer.owner.startswith("critic@")
        assert replayer.store.bounds == Bounds()
        if "REDIS_URL" in environment:
            assert replayer.store.prefix == "crosscheck:replay:critic:"  # type: ignore[attr-defined]
    finally:
        await replayer.aclose()
