"""Lessons: reviewer comments kept for similar future tasks, stored as knowledge entries of
kind ``lesson``. ``/v1/lessons`` is a view over them with its original response shapes."""

from __future__ import annotations

from sqlmodel import Session, col, or_, select

from orchestrator.knowledge.service import KnowledgeService
from orchestrator.tables import KnowledgeEntry, Run
from shared.contracts import KnowledgeKind
from shared.errors import NotFound
from shared.orchestration import LessonPublic

LIST_LIMIT = 500


def promote(session: Session, run: Run, content: str, scope: str, author: str) -> KnowledgeEntry:
    """Keep a reviewer's comment for the run owner's future runs (``scope``: all of them or
    those with a tag). Never for every tenant: that is an admin's separate choice (``share``),
    since the comment quotes one tenant's task and output."""
    return KnowledgeService().promote_lesson(
        session,
        content=content,
        scope=scope,
        author=author,
        source_task=run.task,
        source_run_id=run.id,
        owner=run.created_by,
    )


def public(lesson: KnowledgeEntry, tenant: str | None = None) -> LessonPublic:
    """The lesson as ``tenant`` (a service's token id; None: a person) sees it: the source
    run of a shared lesson stays with its owner."""
    own = tenant is None or lesson.owner == tenant
    return LessonPublic(
        id=lesson.id,
        content=lesson.body,
        scope=lesson.scope,
        author=lesson.author,
        source_run_id=lesson.source_run_id if own else None,
        owner=lesson.owner if own else None,
        shared=lesson.shared,
        uses=lesson.uses,
        retired=lesson.retired,
        created_at=lesson.created_at,
    )


def listed(
    session: Session, scope: str | None, include_retired: bool, tenant: str | None = None
) -> list[LessonPublic]:
    """Lessons, newest first; ``tenant`` (a service's token id): those its runs may get (its
    own, and the ones an admin shared)."""
    query = select(KnowledgeEntry).where(col(KnowledgeEntry.kind) == KnowledgeKind.lesson.value)
    if tenant is not None:
        query = query.where(
            or_(
                col(KnowledgeEntry.owner).is_(None),
                col(KnowledgeEntry.shared),
                col(KnowledgeEntry.owner) == tenant,
            )
        )
    if scope is not None:
        query = query.where(col(KnowledgeEntry.scope) == scope)
    if not include_retired:
        query = query.where(col(KnowledgeEntry.retired).is_(False))
    rows = session.exec(
        query.order_by(col(KnowledgeEntry.created_at).desc(), col(KnowledgeEntry.id).desc()).limit(
            LIST_LIMIT
        )
    )
    return [public(lesson, tenant) for lesson in rows]


def load(session: Session, lesson_id: str) -> KnowledgeEntry:
    lesson = session.get(KnowledgeEntry, lesson_id)
    if lesson is None or lesson.kind != KnowledgeKind.lesson.value:
        raise NotFound(f"lesson {lesson_id} does not exist")
    return lesson


def retire(session: Session, lesson_id: str) -> LessonPublic:
    lesson = load(session, lesson_id)
    KnowledgeService().retire(session, lesson_id)
    return public(lesson)


def share(session: Session, lesson_id: str) -> LessonPublic:
    """An admin's choice: the lesson reaches every tenant's runs (its tags still apply)."""
    load(session, lesson_id)
    return public(KnowledgeService().share(session, lesson_id))
