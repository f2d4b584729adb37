"""Lessons: reviewer comments kept for similar future tasks, matched by lexical similarity."""

from __future__ import annotations

import re

from sqlmodel import Session, col, or_, select

from orchestrator.tables import Lesson, Run, new_id
from shared.errors import NotFound
from shared.orchestration import LessonPublic

MAX_LESSONS = 3
MIN_SIMILARITY = 0.15
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are as at be by for from how in is it of on or that the this to what when why "
    "with write return returns every all".split()
)


def words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of content words: crude, cheap, and enough to start."""
    left, right = words(a), words(b)
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def promote(session: Session, run: Run, content: str, scope: str, author: str) -> Lesson:
    lesson = Lesson(
        id=new_id("les"),
        content=content,
        scope=scope,
        source_task=run.task,
        source_run_id=run.id,
        author=author,
    )
    session.add(lesson)
    return lesson


def relevant(session: Session, task: str, tags: list[str]) -> list[Lesson]:
    """The lessons in scope (global or one of the run's tags) most like this task."""
    query = select(Lesson).where(
        col(Lesson.retired).is_(False),
        or_(col(Lesson.scope) == "global", col(Lesson.scope).in_(tags or [""])),
    )
    scored = [
        (similarity(task, f"{lesson.source_task} {lesson.content}"), lesson)
        for lesson in session.exec(query)
    ]
    picked = sorted(
        ((score, lesson) for score, lesson in scored if score >= MIN_SIMILARITY),
        key=lambda pair: (-pair[0], pair[1].created_at),
    )
    return [lesson for _, lesson in picked[:MAX_LESSONS]]


def public(lesson: Lesson) -> LessonPublic:
    return LessonPublic(
        id=lesson.id,
        content=lesson.content,
        scope=lesson.scope,
        author=lesson.author,
        source_run_id=lesson.source_run_id,
        uses=lesson.uses,
        retired=lesson.retired,
        created_at=lesson.created_at,
    )


def retire(session: Session, lesson_id: str) -> LessonPublic:
    lesson = session.get(Lesson, lesson_id)
    if lesson is None:
        raise NotFound(f"lesson {lesson_id} does not exist")
    lesson.retired = True
    session.add(lesson)
    return public(lesson)
