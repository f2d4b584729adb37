"""The fake model's ``/v1/embeddings``: deterministic vectors the official SDK decodes, where
similar texts (and paraphrases from its synonym table) score high; logged and faultable."""

import math

import openai
import pytest

from fakemodel.state import Fault


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


async def test_vectors_are_deterministic_and_similar_texts_score_high(oai, state):
    texts = [
        "What dosage of medicine should a physician give to kids?",
        "A doctor must set the medication amount for children by their weight.",
        "Lease deposits are returned within thirty days.",
    ]
    first = await oai.embeddings.create(model="text-embedding-3-small", input=texts)
    again = await oai.embeddings.create(
        model="text-embedding-3-small", input=texts, encoding_format="float"
    )
    vectors = [d.embedding for d in first.data]
    assert [len(v) for v in vectors] == [256, 256, 256]
    for sent, plain in zip(vectors, (d.embedding for d in again.data), strict=True):
        assert sent == pytest.approx(plain, abs=1e-6)  # base64 (float32) and float agree
    assert cos(vectors[0], vectors[1]) > 0.6 > cos(vectors[0], vectors[2])
    assert [r["stage"] for r in state.requests] == ["embeddings", "embeddings"]
    assert state.requests[0]["body"]["input"] == texts


async def test_a_fault_answers_the_embeddings_call(oai, state):
    state.faults.append(Fault(stage="embeddings", status=503))
    with pytest.raises(openai.InternalServerError):
        await oai.with_options(max_retries=0).embeddings.create(model="m", input="hello")
    assert (state.requests[0]["stage"], state.requests[0]["status"]) == ("embeddings", 503)


async def test_a_bad_input_is_a_400(oai):
    with pytest.raises(openai.BadRequestError):
        await oai.embeddings.create(model="m", input=[])
