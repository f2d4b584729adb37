"""Prompt templates: data is escaped, and constant prompts are rendered once per context."""

from shared.prompting import PromptBook


def test_a_constant_prompt_is_the_rendered_prompt_for_each_context():
    book = PromptBook("actor")
    for kind, entry_point in [("code", "primes_up_to"), ("text", None), ("code", "other")]:
        fresh = book.render("system.j2", kind=kind, entry_point=entry_point)
        assert book.render_constant("system.j2", kind=kind, entry_point=entry_point) == fresh
        assert book.render_constant("system.j2", kind=kind, entry_point=entry_point) == fresh
    code = book.render_constant("system.j2", kind="code", entry_point="primes_up_to")
    other = book.render_constant("system.j2", kind="code", entry_point="other")
    assert "primes_up_to" in code
    assert "other" in other
    assert code != other


def test_constant_prompts_keep_a_bounded_number_of_contexts():
    book = PromptBook("actor")
    for i in range(600):
        text = book.render_constant("system.j2", kind="code", entry_point=f"f{i}")
        assert f"f{i}" in text
    assert len(book._constant) <= 256
