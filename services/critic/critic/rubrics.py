"""What the Critic judges, by kind of task."""

from __future__ import annotations

from shared.contracts import TaskKind

RUBRICS: dict[TaskKind, list[tuple[str, str]]] = {
    TaskKind.text: [
        ("completeness", "every part of the task is answered; nothing asked for is missing"),
        ("coherence", "the parts fit together and nothing contradicts itself"),
        ("accuracy", "every claim is true and supported; nothing is invented"),
        ("structure", "the order, headings and length suit the reader and the task"),
    ],
    TaskKind.code: [
        ("correctness", "the code does what the task asks, for every valid input"),
        ("complexity", "time and memory use fit the input sizes the task implies"),
        ("edge_cases", "empty, boundary, invalid and large inputs are handled"),
        ("code_quality", "clear names, no dead code, idiomatic Python, no needless dependencies"),
    ],
}
