"""Knowledge entries: written through the API or shipped as pack files, retrieved for the
Critic by the text index (top entries above a score threshold)."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, col, select

from orchestrator.knowledge import index
from orchestrator.knowledge.schemas import (
    KnowledgeCreate,
    KnowledgeMatch,
    KnowledgePublic,
    KnowledgeUpdate,
    PackFile,
)
from orchestrator.tables import KnowledgeEntry, new_id, utcnow
from shared.contracts import KnowledgeKind, KnowledgeNote, TaskKind
from shared.datafiles import load_toml_model
from shared.errors import ConfigurationError, NotFound

TOP = 3
CANDIDATES = 30  # ranked by the index before the profile filter keeps the top ones


def profile_for(profile: str | None, kind: TaskKind) -> str:
    """The profile a run's critiques use: its own, else the task kind's default."""
    return profile or ("code" if kind is TaskKind.code else "general")


class PackError(ConfigurationError):
    """A pack file that cannot be loaded; the message names the file and the field."""


def public(entry: KnowledgeEntry) -> KnowledgePublic:
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


class KnowledgeService:
    def __init__(self, min_score: float = 0.0, top: int = TOP) -> None:
        self.min_score = min_score
        self.top = top

    def create(self, session: Session, body: KnowledgeCreate, author: str) -> KnowledgePublic:
        entry = KnowledgeEntry(
            id=new_id("kn"),
            kind=body.kind.value,
            title=body.title,
            body=body.body,
            profiles=list(body.profiles),
            weight=body.weight,
            author=author,
        )
        session.add(entry)
        session.flush()
        return public(entry)

    def load(self, session: Session, entry_id: str) -> KnowledgeEntry:
        entry = session.get(KnowledgeEntry, entry_id)
        if entry is None:
            raise NotFound(f"no knowledge entry {entry_id}")
        return entry

    def listed(
        self,
        session: Session,
        *,
        kind: KnowledgeKind | None,
        profile: str | None,
        include_retired: bool,
        limit: int,
    ) -> list[KnowledgePublic]:
        query = select(KnowledgeEntry)
        if kind is not None:
            query = query.where(col(KnowledgeEntry.kind) == kind.value)
        if not include_retired:
            query = query.where(col(KnowledgeEntry.retired).is_(False))
        rows = session.exec(query.order_by(col(KnowledgeEntry.created_at).desc()))
        out = []
        for entry in rows:
            if profile is not None and entry.profiles and profile not in entry.profiles:
                continue
            out.append(public(entry))
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

    def relevant(self, session: Session, text: str, profile: str | None) -> list[KnowledgeNote]:
        """At most ``top`` active entries for this profile whose score clears the threshold,
        best first."""
        return [note(entry) for entry, _ in self._ranked(session, text, profile)]

    def search(self, session: Session, text: str, profile: str | None) -> list[KnowledgeMatch]:
        return [
            KnowledgeMatch(entry=public(entry), score=round(score, 6))
            for entry, score in self._ranked(session, text, profile)
        ]

    def _ranked(
        self, session: Session, text: str, profile: str | None
    ) -> list[tuple[KnowledgeEntry, float]]:
        out: list[tuple[KnowledgeEntry, float]] = []
        for hit in index.search(session, text, CANDIDATES):
            if hit.score < self.min_score:
                break
            entry = session.get(KnowledgeEntry, hit.id)
            if entry is None or entry.retired:
                continue
            if profile is not None and entry.profiles and profile not in entry.profiles:
                continue
            out.append((entry, hit.score))
            if len(out) == self.top:
                break
        return out

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
