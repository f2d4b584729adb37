"""Knowledge entries: written through the API, shipped as pack files, or promoted from a
reviewer's comment (kind ``lesson``); retrieved for the Actor and the Critic by the text
index, mixed with cosine similarity when embeddings are on (top entries above a threshold)."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, col, or_, select

from orchestrator.db import Database
from orchestrator.knowledge import index
from orchestrator.knowledge.embeddings import Vectors, cosine
from orchestrator.knowledge.schemas import (
    KnowledgeCreate,
    KnowledgeMatch,
    KnowledgePublic,
    KnowledgeUpdate,
    PackFile,
)
from orchestrator.readmodel.runs import RunChanges, RunState, read_run, update_run
from orchestrator.settings import OrchestratorSettings
from orchestrator.tables import KnowledgeEntry, new_id, utcnow
from shared.contracts import KnowledgeKind, KnowledgeNote, TaskKind
from shared.datafiles import load_toml_model
from shared.errors import ConfigurationError, NotFound
from shared.orchestration import Policy

TOP = 3
CANDIDATES = 30  # ranked by the index before the profile filter keeps the top ones
MIN_SIMILARITY = 0.6  # with embeddings: the cosine an entry needs (seed 000)
TEXT_SHARE = 0.2  # with embeddings: how much the text index adds to the cosine
TITLE_CHARS = 200


def profile_for(profile: str | None, kind: TaskKind) -> str:
    """The profile a run's critiques use: its own, else the task kind's default."""
    return profile or ("code" if kind is TaskKind.code else "general")


class PackError(ConfigurationError):
    """A pack file that cannot be loaded; the message names the file and the field."""


def public(entry: KnowledgeEntry, tenant: str | None = None) -> KnowledgePublic:
    """The entry as ``tenant`` (a service's token id; None: a reviewer or an admin) sees it:
    the source run of a lesson only its owner and people see."""
    own = tenant is None or entry.owner == tenant
    return KnowledgePublic(
        id=entry.id,
        kind=KnowledgeKind(entry.kind),
        title=entry.title,
        body=entry.body,
        profiles=list(entry.profiles or []),
        weight=entry.weight,
        pack=entry.pack,
        author=entry.author,
        retired=entry.retired,
        scope=entry.scope,
        source_run_id=entry.source_run_id if own else None,
        owner=entry.owner if own else None,
        shared=entry.shared,
        uses=entry.uses,
        created_at=entry.created_at,
        updated_at=entry.updated_at,
    )


def note(entry: KnowledgeEntry) -> KnowledgeNote:
    return KnowledgeNote(
        id=entry.id,
        kind=KnowledgeKind(entry.kind),
        title=entry.title,
        body=entry.body,
        weight=entry.weight,
    )


def knowledge_from_settings(settings: OrchestratorSettings) -> KnowledgeService:
    """The service the API and the steps share; with embeddings on, its embeddings client
    (the key and URL default to the OpenAI provider's own settings)."""
    if not settings.knowledge_embeddings:
        return KnowledgeService(settings.knowledge_min_score)
    try:  # the model SDK comes with the `embeddings` extra only
        from shared.providers.embeddings import Embedder
        from shared.providers.settings import ProviderSettings
    except ImportError as exc:
        raise ConfigurationError(
            "ORCHESTRATOR_KNOWLEDGE_EMBEDDINGS is on but the OpenAI SDK is not installed here: "
            f"install crosscheck-orchestrator[embeddings] ({exc.name} is missing)"
        ) from None
    provider = ProviderSettings()
    key = settings.knowledge_embedding_api_key or provider.openai_api_key
    if key is None:
        raise ConfigurationError(
            "ORCHESTRATOR_KNOWLEDGE_EMBEDDINGS is on but no API key is set for the embeddings "
            "endpoint: set ORCHESTRATOR_KNOWLEDGE_EMBEDDING_API_KEY or OPENAI_API_KEY"
        )
    embedder = Embedder(
        model=settings.knowledge_embedding_model,
        api_key=key.get_secret_value(),
        base_url=settings.knowledge_embedding_base_url or provider.openai_base_url,
        timeout_s=settings.knowledge_embedding_timeout_s,
    )
    return KnowledgeService(
        settings.knowledge_min_score,
        vectors=Vectors(embedder),
        min_similarity=settings.knowledge_min_similarity,
    )


def lesson_title(content: str) -> str:
    """A lesson's title: the first line of the reviewer's comment, cut to fit."""
    first = next((line.strip() for line in content.splitlines() if line.strip()), "Lesson")
    return first if len(first) <= TITLE_CHARS else first[: TITLE_CHARS - 1] + "…"


def in_scope(entry: KnowledgeEntry, tags: list[str] | None) -> bool:
    """``global`` entries apply to every run; a tag-scoped one only to runs with that tag."""
    return entry.scope == "global" or entry.scope in (tags or [])


def owned_by(entry: KnowledgeEntry, tenant: str | None) -> bool:
    """Whether ``tenant`` (the token that started a run; None: any) may get the entry: an
    owned lesson only its owner's runs unless shared, an unowned entry every run."""
    return tenant is None or entry.owner is None or entry.shared or entry.owner == tenant


class KnowledgeService:
    def __init__(
        self,
        min_score: float = 0.0,
        top: int = TOP,
        *,
        vectors: Vectors | None = None,
        min_similarity: float = MIN_SIMILARITY,
    ) -> None:
        self.min_score = min_score
        self.top = top
        self.vectors = vectors
        self.min_similarity = min_similarity

    async def aclose(self) -> None:
        if self.vectors is not None:
            await self.vectors.aclose()

    async def query_vector(self, db: Database, text: str) -> list[float] | None:
        """The embedding of a query; ``None`` with embeddings off (nothing is sent) or when
        the provider failed (logged; the text index ranks alone)."""
        if self.vectors is None:
            return None
        return await self.vectors.query(db, text)

    async def run_vector(self, db: Database, run_id: str) -> list[float] | None:
        """The query vector of a run's task (for the Critic's call); ``None`` with embeddings
        off, where nothing is read or sent."""
        if self.vectors is None:
            return None
        run = await db.read(lambda s: read_run(s, run_id))
        if run.critic_notes is not None:  # chosen at the run's first critique
            return None
        return await self.vectors.query(db, run.task)

    async def actor_vector(self, db: Database, run_id: str, stage: str) -> list[float] | None:
        """The query vector the Actor's draft needs to choose its entries; ``None`` when it
        needs none (embeddings off, a revision, or a draft that chose already)."""
        if self.vectors is None or stage != "draft":
            return None
        run = await db.read(lambda s: read_run(s, run_id))
        if run.actor_knowledge is not None or run.lessons_used is not None:
            return None
        return await self.vectors.query(db, run.task)

    def for_actor(
        self,
        session: Session,
        run: RunState,
        stage: str,
        vector: list[float] | None = None,
    ) -> list[KnowledgeNote]:
        """The entries every Actor call of this run receives, lessons first.

        Chosen once, at the draft, and kept on the run (``actor_knowledge``; the lessons
        among them also in ``lessons_used``, and each entry's ``uses`` counts the run) before
        the Actor is called, so a replayed step and every revision get the same entries.
        A run that chose lessons before knowledge existed keeps those. Their content is kept
        on the run from the first call (``actor_notes``): an entry edited later reaches later
        runs, never a re-run of this one's steps."""
        if run.actor_notes is not None:
            return [KnowledgeNote.model_validate(n) for n in run.actor_notes]
        changes = RunChanges({})
        chosen = run.actor_knowledge
        if chosen is None and run.lessons_used is None and stage == "draft":
            policy = Policy.model_validate(run.policy)
            profile = profile_for(policy.profile, TaskKind(run.kind))
            ranked = self._ranked(
                session, run.task, profile, run.tags or [], vector, run.created_by
            )
            for entry, _ in ranked:
                entry.uses += 1
                session.add(entry)
            session.flush()
            chosen = [entry.id for entry, _ in ranked]
            lessons = [entry.id for entry, _ in ranked if entry.kind == KnowledgeKind.lesson]
            changes.values.update(actor_knowledge=chosen, lessons_used=lessons)
        notes = self.notes(session, chosen if chosen is not None else run.lessons_used or [])
        notes.sort(key=lambda n: n.kind is not KnowledgeKind.lesson)
        changes.values["actor_notes"] = _kept(notes)
        update_run(session, run, changes)  # one UPDATE
        return notes

    def for_critic(
        self,
        session: Session,
        run: RunState,
        profile: str | None,
        vector: list[float] | None = None,
    ) -> list[KnowledgeNote]:
        """The entries every Critic call of this run receives: the relevant ones at its
        first critique, kept on the run with their content (``critic_notes``), so a re-run
        step sends the Critic the same request and every round is judged with the same
        knowledge; an entry edited later reaches later runs."""
        if run.critic_notes is not None:
            return [KnowledgeNote.model_validate(n) for n in run.critic_notes]
        notes = self.relevant(session, run.task, profile, run.tags or [], vector, run.created_by)
        update_run(session, run, RunChanges({"critic_notes": _kept(notes)}))
        return notes

    def notes(self, session: Session, ids: list[str]) -> list[KnowledgeNote]:
        """These entries (retired ones too: a run keeps what it chose), in this order."""
        if not ids:
            return []
        rows = session.exec(select(KnowledgeEntry).where(col(KnowledgeEntry.id).in_(ids)))
        found = {entry.id: entry for entry in rows}
        return [note(found[i]) for i in ids if i in found]

    def promote_lesson(
        self,
        session: Session,
        *,
        content: str,
        scope: str,
        author: str,
        source_task: str,
        source_run_id: str | None,
        owner: str | None,
    ) -> KnowledgeEntry:
        """Keep a reviewer's comment as a ``lesson`` entry for similar future tasks of
        ``owner`` (the token that started the run; None: every run)."""
        entry = KnowledgeEntry(
            id=new_id("les"),
            kind=KnowledgeKind.lesson.value,
            title=lesson_title(content),
            body=content,
            profiles=[],
            pack="review",
            author=author,
            scope=scope,
            source_task=source_task,
            source_run_id=source_run_id,
            owner=owner,
        )
        session.add(entry)
        session.flush()
        return entry

    def create(self, session: Session, body: KnowledgeCreate, author: str) -> KnowledgePublic:
        entry = KnowledgeEntry(
            id=new_id("kn"),
            kind=body.kind.value,
            title=body.title,
            body=body.body,
            profiles=list(body.profiles),
            weight=body.weight,
            author=author,
            scope=body.scope,
        )
        session.add(entry)
        session.flush()
        return public(entry)

    def load(self, session: Session, entry_id: str, tenant: str | None = None) -> KnowledgeEntry:
        """The entry; another tenant's lesson is as absent as an unknown id (404)."""
        entry = session.get(KnowledgeEntry, entry_id)
        if entry is None or not owned_by(entry, tenant):
            raise NotFound(f"no knowledge entry {entry_id}")
        return entry

    def share(self, session: Session, entry_id: str) -> KnowledgeEntry:
        """An admin's choice: the lesson reaches every tenant's runs from now on."""
        entry = self.load(session, entry_id)
        entry.shared = True
        entry.updated_at = utcnow()
        session.add(entry)
        session.flush()
        return entry

    def listed(
        self,
        session: Session,
        *,
        kind: KnowledgeKind | None,
        profile: str | None,
        include_retired: bool,
        limit: int,
        tenant: str | None = None,
    ) -> list[KnowledgePublic]:
        query = select(KnowledgeEntry)
        if tenant is not None:  # a service: unowned entries and its own lessons
            query = query.where(
                or_(
                    col(KnowledgeEntry.owner).is_(None),
                    col(KnowledgeEntry.shared),
                    col(KnowledgeEntry.owner) == tenant,
                )
            )
        if kind is not None:
            query = query.where(col(KnowledgeEntry.kind) == kind.value)
        if not include_retired:
            query = query.where(col(KnowledgeEntry.retired).is_(False))
        rows = session.exec(query.order_by(col(KnowledgeEntry.created_at).desc()))
        out = []
        for entry in rows:
            if profile is not None and entry.profiles and profile not in entry.profiles:
                continue
            out.append(public(entry, tenant))
            if len(out) == limit:
                break
        return out

    def update(self, session: Session, entry_id: str, body: KnowledgeUpdate) -> KnowledgePublic:
        entry = self.load(session, entry_id)
        for name in body.model_fields_set:
            value = getattr(body, name)
            if name == "kind":
                value = value.value
            elif name == "profiles":
                value = list(value)
            setattr(entry, name, value)
        entry.updated_at = utcnow()
        session.add(entry)
        session.flush()
        return public(entry)

    def retire(self, session: Session, entry_id: str) -> KnowledgePublic:
        return self.update(session, entry_id, KnowledgeUpdate(retired=True))

    def relevant(
        self,
        session: Session,
        text: str,
        profile: str | None,
        tags: list[str] | None = None,
        vector: list[float] | None = None,
        tenant: str | None = None,
    ) -> list[KnowledgeNote]:
        """At most ``top`` active entries for this profile, these run tags and this tenant
        whose score clears the threshold, best first."""
        return [
            note(entry) for entry, _ in self._ranked(session, text, profile, tags, vector, tenant)
        ]

    def search(
        self,
        session: Session,
        text: str,
        profile: str | None,
        tags: list[str] | None = None,
        vector: list[float] | None = None,
        tenant: str | None = None,
    ) -> list[KnowledgeMatch]:
        return [
            KnowledgeMatch(entry=public(entry, tenant), score=round(score, 6))
            for entry, score in self._ranked(session, text, profile, tags, vector, tenant)
        ]

    def _fits(
        self,
        entry: KnowledgeEntry | None,
        profile: str | None,
        tags: list[str] | None,
        tenant: str | None = None,
    ) -> bool:
        if entry is None or entry.retired or not in_scope(entry, tags):
            return False
        if not owned_by(entry, tenant):
            return False
        return profile is None or not entry.profiles or profile in entry.profiles

    def _ranked(
        self,
        session: Session,
        text: str,
        profile: str | None,
        tags: list[str] | None,
        vector: list[float] | None,
        tenant: str | None = None,
    ) -> list[tuple[KnowledgeEntry, float]]:
        if vector is not None:
            return self._ranked_by_vector(session, text, profile, tags, vector, tenant)
        out: list[tuple[KnowledgeEntry, float]] = []
        for hit in index.search(session, text, CANDIDATES):
            if hit.score < self.min_score:
                break
            entry = session.get(KnowledgeEntry, hit.id)
            if entry is None or not self._fits(entry, profile, tags, tenant):
                continue
            out.append((entry, hit.score))
            if len(out) == self.top:
                break
        return out

    def _ranked_by_vector(
        self,
        session: Session,
        text: str,
        profile: str | None,
        tags: list[str] | None,
        vector: list[float],
        tenant: str | None = None,
    ) -> list[tuple[KnowledgeEntry, float]]:
        """Entries whose cosine with the query clears ``min_similarity``, ranked by that
        cosine plus a share of their text-index score (relative to the best one)."""
        hits = {hit.id: hit.score for hit in index.search(session, text, CANDIDATES)}
        best = max(hits.values(), default=0.0)
        scored: list[tuple[float, str, KnowledgeEntry]] = []
        rows = session.exec(select(KnowledgeEntry).where(col(KnowledgeEntry.retired).is_(False)))
        for entry in rows:
            if not self._fits(entry, profile, tags, tenant) or not entry.embedding:
                continue
            similarity = cosine(vector, entry.embedding)
            if similarity < self.min_similarity:
                continue
            lexical = hits.get(entry.id, 0.0) / best if best > 0 else 0.0
            scored.append((similarity + TEXT_SHARE * lexical, entry.id, entry))
        scored.sort(key=lambda t: (-t[0], t[1]))
        return [(entry, score) for score, _, entry in scored[: self.top]]

    def load_packs(self, session: Session, folder: Path) -> int:
        """Upsert every ``*.toml`` pack of ``folder``; entries keep their ids
        (``<pack>.<key>``), so a restart changes nothing, and an edited file updates them."""
        if not folder.is_dir():
            raise PackError(f"knowledge pack folder {folder} does not exist")
        count = 0
        for path in sorted(folder.glob("*.toml")):
            for entry in read_pack(path):
                existing = session.get(KnowledgeEntry, entry.id)
                if existing is None:
                    session.add(entry)
                elif (
                    existing.kind,
                    existing.title,
                    existing.body,
                    existing.profiles,
                    existing.weight,
                ) != (entry.kind, entry.title, entry.body, entry.profiles, entry.weight):
                    for name in ("kind", "title", "body", "profiles", "weight", "pack"):
                        setattr(existing, name, getattr(entry, name))
                    existing.updated_at = utcnow()
                    session.add(existing)
                count += 1
        session.flush()
        return count


def read_pack(path: Path) -> list[KnowledgeEntry]:
    pack = load_toml_model(path, PackFile, "knowledge pack", PackError)
    keys = [e.key for e in pack.entries]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise PackError(f"knowledge pack {path}: field `entries`: repeated key(s) {repeated}")
    return [
        KnowledgeEntry(
            id=f"{pack.pack}.{e.key}",
            kind=e.kind.value,
            title=e.title,
            body=e.body,
            profiles=list(e.profiles),
            weight=e.weight,
            pack=pack.pack,
            author=f"pack:{path.name}",
        )
        for e in pack.entries
    ]


def _kept(notes: list[KnowledgeNote]) -> list[dict[str, object]]:
    return [n.model_dump(mode="json") for n in notes]
