"""Critic profiles: shipped as TOML files, validated at start, chosen per request."""

from pathlib import Path

import pytest

from critic.app import create_app
from critic.profiles import ProfileBook, ProfileError
from tests.support.factories import critic_settings
from tests.support.fakemodel import user_text

SHIPPED = {"code", "general", "legal", "medical", "support"}

GOOD = """
name = "tax"
title = "Tax advice"
kinds = ["text"]
risk = "high"
default_depth = "L2"
persona = "You are a senior tax adviser reviewing a colleague's memo."

[[dimensions]]
name = "accuracy"
definition = "every rate, threshold and deadline matches the tax year asked about"
{error_types}
"""
TYPES = ("wrong_tax_year", "wrong_rate", "missed_filing_deadline", "residency", "double")


def error_types(names: tuple[str, ...]) -> str:
    return "".join(
        f'\n[[error_types]]\nname = "{name}"\ndefinition = "what {name} means, spelled out"\n'
        for name in names
    )


ERROR_TYPES = error_types(TYPES)


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


class TestShippedProfiles:
    async def test_the_critic_lists_every_shipped_profile(self, critic):
        response = await critic.get("/v1/profiles")
        assert response.status_code == 200, response.text
        profiles = {p["name"]: p for p in response.json()}
        assert set(profiles) == SHIPPED
        legal = profiles["legal"]
        assert legal["risk"] == "high"
        assert legal["default_depth"] == "L2"
        assert [e["name"] for e in legal["error_types"]][:2] == [
            "wrong_jurisdiction",
            "outdated_statute",
        ]
        assert [d["name"] for d in profiles["general"]["dimensions"]] == [
            "completeness",
            "coherence",
            "accuracy",
            "structure",
        ]
        assert "dosage_unit" in [e["name"] for e in profiles["medical"]["error_types"]]
        assert all(len(p["error_types"]) == 5 for p in profiles.values())

    async def test_profiles_need_the_service_token(self, critic_with):
        async with critic_with() as client:
            response = await client.get("/v1/profiles", headers={"Authorization": "Bearer no"})
        assert response.status_code == 401

    async def test_the_profile_sets_persona_dimensions_and_error_types(self, critic, fake_model):
        response = await critic.post(
            "/v1/critique",
            json={"task": "Can I end my lease early?", "output": "Yes.", "profile": "legal"},
        )
        assert response.status_code == 200, response.text
        assert response.json()["profile"] == "legal"
        assert response.json()["risk"] == "high"
        system = fake_model.requests()[0]["body"]["system"]
        assert "senior legal reviewer" in system
        assert "1. wrong_jurisdiction:" in system
        assert "5. invented_citation:" in system
        assert "completeness:" in system

    @pytest.mark.parametrize(
        ("kind", "profile", "present", "absent"),
        [
            ("code", "code", "edge_cases", "coherence"),
            ("text", "general", "coherence", "edge_cases"),
        ],
    )
    async def test_without_a_profile_the_kind_picks_its_own(
        self, critic, fake_model, kind, profile, present, absent
    ):
        response = await critic.post(
            "/v1/critique", json={"task": "t", "kind": kind, "output": "x = 1"}
        )
        assert response.json()["profile"] == profile
        system = fake_model.requests()[0]["body"]["system"]
        assert present in system
        assert absent not in system

    async def test_an_unknown_profile_is_a_422_naming_the_known_ones(self, critic, fake_model):
        response = await critic.post(
            "/v1/critique", json={"task": "t", "output": "x", "profile": "astrology"}
        )
        assert response.status_code == 422
        assert response.json()["error"] == "UnknownProfile"
        assert "'astrology'" in response.json()["detail"]
        assert "legal, medical" in response.json()["detail"]
        assert fake_model.requests() == []

    async def test_a_text_profile_on_code_is_a_422(self, critic):
        response = await critic.post(
            "/v1/critique", json={"task": "t", "kind": "code", "output": "x", "profile": "legal"}
        )
        assert response.status_code == 422
        assert "judges text tasks, not code" in response.json()["detail"]

    async def test_a_malformed_profile_name_is_a_422_on_the_field(self, critic):
        response = await critic.post(
            "/v1/critique", json={"task": "t", "output": "x", "profile": "../etc/passwd"}
        )
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "profile"]


class TestProfileFiles:
    def test_an_extra_folder_adds_a_profile_the_critic_uses(
        self, tmp_path, fake_model, service_token
    ):
        write(tmp_path, "tax", GOOD.format(error_types=ERROR_TYPES))
        book = ProfileBook.load(tmp_path)
        assert book.get("tax").error_type_names[-1] == "other"
        assert set(book.profiles) == SHIPPED | {"tax"}

    def test_invalid_toml_names_the_file(self, tmp_path):
        path = write(tmp_path, "tax", 'name = "tax"\ntitle = \n')
        with pytest.raises(ProfileError, match=rf"profile {path}: not valid TOML"):
            ProfileBook.load(tmp_path)

    @pytest.mark.parametrize(
        ("edit", "field", "message"),
        [
            (lambda t: t.replace('risk = "high"', 'risk = "extreme"'), "risk", "low', 'medium'"),
            (
                lambda t: t.replace('default_depth = "L2"', 'default_depth = "L9"'),
                "default_depth",
                "L1",
            ),
            (
                lambda t: t.replace(ERROR_TYPES, error_types(TYPES[:4])),
                "error_types",
                "at least 5",
            ),
            (
                lambda t: t.replace('name = "residency"', 'name = "wrong_rate"'),
                "error_types",
                "repeated name(s) wrong_rate",
            ),
            (
                lambda t: t.replace('name = "double"', 'name = "other"'),
                "error_types.4.name",
                "implied",
            ),
            (
                lambda t: t.replace('name = "accuracy"', 'name = "Accuracy!"'),
                "dimensions.0.name",
                "pattern",
            ),
            (lambda t: t.replace('persona = "', 'personna = "'), "persona", "Field required"),
            (
                lambda t: t.replace('kinds = ["text"]', 'kinds = ["poetry"]'),
                "kinds.0",
                "'text' or 'code'",
            ),
        ],
    )
    def test_a_bad_field_stops_the_start_naming_file_and_field(
        self, tmp_path, edit, field, message
    ):
        path = write(tmp_path, "tax", edit(GOOD.format(error_types=ERROR_TYPES)))
        with pytest.raises(ProfileError) as caught:
            ProfileBook.load(tmp_path)
        text = str(caught.value)
        assert text.startswith(f"profile {path}: ")
        assert f"`{field}`" in text
        assert message in text

    def test_the_name_must_match_the_file(self, tmp_path):
        path = write(tmp_path, "taxes", GOOD.format(error_types=ERROR_TYPES))
        with pytest.raises(ProfileError, match=rf"profile {path}: field `name`: 'tax' must match"):
            ProfileBook.load(tmp_path)

    def test_a_shipped_name_cannot_be_redefined(self, tmp_path):
        text = GOOD.format(error_types=ERROR_TYPES).replace('name = "tax"', 'name = "legal"')
        path = write(tmp_path, "legal", text)
        with pytest.raises(
            ProfileError, match=rf"profile {path}: field `name`: 'legal' is already"
        ):
            ProfileBook.load(tmp_path)

    def test_a_missing_folder_is_refused(self, tmp_path):
        with pytest.raises(ProfileError, match="does not exist"):
            ProfileBook.load(tmp_path / "nowhere")

    def test_the_critic_refuses_to_start_with_a_bad_profile(
        self, tmp_path, fake_model, service_token
    ):
        write(tmp_path, "tax", "name = 3\n")
        settings = critic_settings(fake=fake_model, token=service_token, profiles_dir=tmp_path)
        with pytest.raises(ProfileError, match="tax.toml"):
            create_app(settings)

    async def test_an_added_profile_judges_requests(self, tmp_path, critic_with, fake_model):
        write(tmp_path, "tax", GOOD.format(error_types=ERROR_TYPES))
        async with critic_with(profiles_dir=tmp_path) as client:
            listed = (await client.get("/v1/profiles")).json()
            response = await client.post(
                "/v1/critique", json={"task": "t", "output": "x", "profile": "tax"}
            )
        assert "tax" in [p["name"] for p in listed]
        assert response.json()["depth"] == "L2"
        assert "1. wrong_tax_year:" in fake_model.requests()[0]["body"]["system"]
        assert user_text(fake_model.requests()[0]).rstrip().endswith("</candidate_output>")
