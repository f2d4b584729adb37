"""The reflection record: error type, the exact span, a replacement, the evidence, and a
justified ``no_error_found`` when nothing is wrong."""

from shared.contracts import MIN_JUSTIFICATION_CHARS, CritiqueIssue, Severity
from tests.critic.conftest import issue, scripted
from tests.support.fakemodel import user_text

PRIME_TASK = "Write primes_up_to(n) returning every prime <= n."
TRIAL_DIVISION = """def primes_up_to(n):
    primes = []
    for k in range(2, n + 1):
        if all(k % d for d in range(2, k)):
            primes.append(k)
    return primes
"""


class TestRecord:
    async def test_an_issue_carries_type_span_and_evidence(self, critic):
        response = await critic.post(
            "/v1/critique", json={"task": PRIME_TASK, "kind": "code", "output": TRIAL_DIVISION}
        )
        assert response.status_code == 200, response.text
        body = response.json()
        [found] = body["issues"]
        assert found["error_type"] == "inefficient_algorithm"
        assert found["original_text"] == found["quote"]
        assert found["original_text"] in TRIAL_DIVISION
        assert found["evidence_source"] == "task"
        assert body["no_error_found"] is False

    async def test_a_pass_states_no_error_found_with_a_justification(self, critic):
        response = await critic.post(
            "/v1/critique",
            json={"task": PRIME_TASK, "kind": "code", "output": "def f():\n    # sieve\n"},
        )
        body = response.json()
        assert body["verdict"] == "pass"
        assert body["issues"] == []
        assert body["no_error_found"] is True
        assert len(body["justification"]) >= MIN_JUSTIFICATION_CHARS

    async def test_a_corrected_text_is_kept(self, critic, fake_model):
        fix = issue(
            quote="The deposit is due in 3 days.",
            corrected_text="The deposit is due in 30 days.",
            error_type="factual_error",
        )
        fake_model.script({"stage": "critique", "response": scripted(issues=[fix])})
        response = await critic.post(
            "/v1/critique", json={"task": "t", "output": "The deposit is due in 3 days."}
        )
        [found] = response.json()["issues"]
        assert found["corrected_text"] == "The deposit is due in 30 days."
        assert found["error_type"] == "factual_error"
        assert len(fake_model.requests()) == 1

    async def test_a_short_justification_is_repaired(self, critic, fake_model):
        fake_model.script(
            {"stage": "critique", "response": scripted(verdict="pass", justification="Fine.")},
            {"stage": "critique", "response": scripted(verdict="pass")},
        )
        response = await critic.post("/v1/critique", json={"task": "t", "output": "An answer."})
        assert response.status_code == 200, response.text
        assert response.json()["no_error_found"] is True
        first, repair = fake_model.requests()
        assert "`justification` has 5 characters" in user_text(repair)

    async def test_a_record_still_broken_after_the_repair_is_invalid_model_output(
        self, critic, fake_model
    ):
        silent = scripted(verdict="pass", no_error_found=False, justification="")
        fake_model.script(
            {"stage": "critique", "response": silent}, {"stage": "critique", "response": silent}
        )
        response = await critic.post("/v1/critique", json={"task": "t", "output": "An answer."})
        assert response.status_code == 422
        assert response.json()["error"] == "InvalidModelOutput"
        assert "broke the reflection record" in response.json()["detail"]
        assert "`issues` is empty" in response.json()["detail"]

    async def test_issues_with_no_error_found_are_repaired(self, critic, fake_model):
        contradictory = scripted(issues=[issue()], no_error_found=True)
        fake_model.script(
            {"stage": "critique", "response": contradictory},
            {"stage": "critique", "response": scripted(issues=[issue()])},
        )
        response = await critic.post("/v1/critique", json={"task": "t", "output": "An answer."})
        assert response.status_code == 200
        assert "`no_error_found` is true but `issues` lists problems" in user_text(
            fake_model.requests()[1]
        )

    async def test_an_error_type_outside_the_taxonomy_is_repaired_then_other(
        self, critic, fake_model
    ):
        odd = scripted(issues=[issue(error_type="bad_vibes")])
        fake_model.script(
            {"stage": "critique", "response": odd}, {"stage": "critique", "response": odd}
        )
        response = await critic.post(
            "/v1/critique", json={"task": "t", "output": "An answer.", "profile": "legal"}
        )
        assert response.json()["issues"][0]["error_type"] == "other"
        repair = user_text(fake_model.requests()[1])
        assert "error_type 'bad_vibes'; use one of wrong_jurisdiction, outdated_statute" in repair

    async def test_a_dropped_quote_drops_original_text_too(self, critic, fake_model):
        bad = scripted(issues=[issue(quote="not there")])
        fake_model.script(
            {"stage": "critique", "response": bad}, {"stage": "critique", "response": bad}
        )
        response = await critic.post("/v1/critique", json={"task": "t", "output": "Real text."})
        [found] = response.json()["issues"]
        assert (found["quote"], found["original_text"]) == (None, None)


class TestCompatibility:
    def test_a_client_sending_quote_gets_original_text(self):
        old = CritiqueIssue(
            dimension="accuracy", severity=Severity.minor, quote="x", suggestion="s"
        )
        assert old.original_text == "x"
        assert old.error_type == "other"
        assert old.corrected_text is None

    def test_original_text_fills_quote_and_wins(self):
        new = CritiqueIssue(
            dimension="accuracy",
            severity=Severity.minor,
            original_text="y",
            quote="x",
            suggestion="s",
        )
        assert (new.quote, new.original_text) == ("y", "y")
