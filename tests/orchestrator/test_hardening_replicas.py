"""Revocation across replicas (Postgres): the commit that revokes a token notifies every
replica's listener, which empties its principal cache; a replica that is not listening
trusts no cached principal."""

import asyncio

import pytest

from orchestrator.auth.service import (
    BOOTSTRAP_ID,
    TOKENS_CHANNEL,
    Principal,
    PrincipalCache,
    TokenService,
)
from orchestrator.db import create_db_engine, migrate, session_scope
from orchestrator.events.hub import EventHub
from orchestrator.events.listener import EventListener
from orchestrator.tables import ApiToken
from shared.orchestration import Role
from tests.support.databases import fresh_postgres_database

pytestmark = pytest.mark.postgres

ADMIN = "admin-token-for-replica-tests-0123456789"


@pytest.fixture
def database_url():
    with fresh_postgres_database() as url:
        yield url


async def test_a_revocation_on_one_replica_empties_the_cache_of_another(database_url):
    engine = create_db_engine(database_url)
    migrate(engine)
    with session_scope(engine) as session:
        TokenService().bootstrap_admin(session, ADMIN)
    # "the other replica": its hub, its cache, its listener on the same database
    hub = EventHub()
    hub.bind(asyncio.get_running_loop())
    cache = PrincipalCache(ttl_s=3600, trusted=lambda: hub.listening)
    listener = EventListener(database_url, hub, channels={TOKENS_CHANNEL: cache.clear})
    task = asyncio.create_task(listener.run_forever())
    try:
        await asyncio.wait_for(listener.connected.wait(), timeout=60)
        principal = Principal(BOOTSTRAP_ID, "bootstrap admin", Role.admin)
        cache.put("digest", principal)
        assert cache.get("digest") == principal
        # "this replica" revokes; the other one hears it when the transaction commits
        with session_scope(engine) as session:
            assert TokenService().revoke(session, BOOTSTRAP_ID)
        for _ in range(100):
            if cache.get("digest") is None:
                break
            await asyncio.sleep(0.02)
        assert cache.get("digest") is None
        with session_scope(engine) as session:
            row = session.get(ApiToken, BOOTSTRAP_ID)
            assert row is not None
            assert row.revoked_at is not None
        # without its listener a replica cannot hear revocations: it trusts no cache entry
        cache.put("digest", principal)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        hub.set_listening(False)
        assert cache.get("digest") is None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        engine.dispose()
