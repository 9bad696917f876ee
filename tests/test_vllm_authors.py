"""Authors on the real engine, seen from the tokens themselves: a rigged pair whose senior only writes
even ids and whose junior only odd ids (`save_qwen3(rig=...)`, sampled with top_k 5), so a token's
parity names the model whose logits it was drawn from. That parity must equal the schedule's fold for
every schedule, also when the KV cache is small enough that vLLM pre-empts and resumes requests, and
when rollouts share their prompt through the prefix cache (on, as in production)."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm

from test_vllm_core import EVERY_SCHEDULE  # noqa: E402
from vllm_helpers import engine_options, metric, save_qwen3  # noqa: E402

from trlvr.engine import Sampling, StepSchedule, WordSchedule  # noqa: E402
from trlvr.vllm.core import authors_from_tokens  # noqa: E402
from trlvr.vllm.pair import VLLMPair  # noqa: E402

ROWS, NEW = 64, 96
# KV per token: senior 2 layers x (K, V) x 1 head x 32 x 4 bytes + junior 1 layer: 768 bytes; 24 blocks of 32
# tokens hold 768 tokens, against 64 rows x ~100 tokens: vLLM must pre-empt
KV_BYTES = 24 * 32 * 768
SAMPLING = Sampling(NEW, temperature=2.0, top_k=5, seed=11)


@pytest.fixture(scope="module")
def rigged(tmp_path_factory):
    root = tmp_path_factory.mktemp("rigged")
    senior = save_qwen3(root / "senior", seed=4, layers=2, rig="even")
    junior = save_qwen3(root / "junior", seed=5, layers=1, rig="odd")
    pair = VLLMPair(
        senior,
        junior,
        engine=engine_options(kv_cache_memory_bytes=KV_BYTES, max_model_len=160, max_num_seqs=ROWS),
    )
    yield pair
    pair.close()


def _prompts(n):
    return [[2 + (7 * i) % 50, 3 + i % 11, 4 + (3 * i) % 40] for i in range(n)]


def _parity_is_the_author(out) -> None:
    for ids, authors in zip(out.completion_ids, out.authors, strict=True):
        assert [1 - t % 2 for t in ids] == authors


@pytest.mark.parametrize("schedule", EVERY_SCHEDULE, ids=repr)
def test_every_token_comes_from_its_author_under_preemption(rigged, schedule):
    keys = [7000 + i for i in range(ROWS)]
    out = rigged.generate(_prompts(ROWS), schedule, SAMPLING, keys)
    assert out.plan["preemptions"] > 0, "the KV budget did not force vLLM to pre-empt"
    _parity_is_the_author(out)
    folded = authors_from_tokens(out.completion_ids, keys, schedule, rigged.tables, SAMPLING.seed)
    assert all(folded.authors[i, : len(a)].long().tolist() == a for i, a in enumerate(out.authors))
    if schedule.writers == {"senior", "junior"} and not isinstance(
        schedule, StepSchedule
    ):  # random text: no steps
        share = out.senior_authored[out.completion_mask].float().mean()
        assert 0.05 < share < 0.95


def test_a_row_alone_equals_the_row_preempted_in_a_batch_of_64(rigged):
    keys, sched = [500 + i for i in range(ROWS)], WordSchedule(0.5, 4)
    batch = rigged.generate(_prompts(ROWS), sched, SAMPLING, keys)
    assert batch.plan["preemptions"] > 0
    for i in (0, 31, 63):
        alone = rigged.generate([_prompts(ROWS)[i]], sched, SAMPLING, [keys[i]])
        assert alone.plan["preemptions"] == 0
        assert alone.completion_ids[0] == batch.completion_ids[i] and alone.authors[0] == batch.authors[i]
        torch.testing.assert_close(
            torch.tensor(alone.senior_logprobs[0]), torch.tensor(batch.senior_logprobs[i]), atol=1e-4, rtol=0
        )


def test_an_eos_written_by_the_junior_ends_the_row(rigged):
    """EOS ids 5 and 9 are odd: only the junior writes them, and each such row stops right there."""
    eos_pair = copy.copy(rigged)  # the same engine, other EOS ids
    eos_pair.eos_token_ids = [5, 9]
    out = eos_pair.generate(_prompts(16), WordSchedule(0.5, 4), SAMPLING, list(range(16)))
    ended = [i for i, f in enumerate(out.finish_reasons) if f == "eos"]
    assert ended, "no row wrote an EOS"
    for i in ended:
        assert out.completion_ids[i][-1] in (5, 9) and out.authors[i][-1] == 0
        assert not set(out.completion_ids[i][:-1]) & {5, 9}


def test_rollouts_sharing_a_prompt_hit_the_prefix_cache_and_keep_their_authors(rigged):
    """GRPO's groups: 8 rollouts of each of 8 prompts of 40 tokens (one full 32-token block each) under KV
    pressure, so requests also resume after pre-emption on cached blocks. The prefix cache is hit, every
    token still comes from its author, and a row computed with no cache hit at all (the cache emptied,
    the row alone) has the same tokens, authors and log-probs."""
    group = torch.Generator().manual_seed(3)
    prompts = [torch.randint(2, 200, (40,), generator=group).tolist() for _ in range(8)]
    prompts = [p for p in prompts for _ in range(8)]
    keys, sched, sampling = (
        [900 + i for i in range(ROWS)],
        WordSchedule(0.5, 4),
        Sampling(48, temperature=2.0, top_k=5, seed=11),
    )
    rigged.llm.reset_prefix_cache()
    hits = metric(rigged, "vllm:prefix_cache_hits")
    batch = rigged.generate(prompts, sched, sampling, keys)
    assert metric(rigged, "vllm:prefix_cache_hits") - hits >= 7 * 8 * 32, "the shared blocks were not reused"
    assert batch.plan["preemptions"] > 0
    _parity_is_the_author(batch)
    for i in (0, 9, 63):
        rigged.llm.reset_prefix_cache()
        hits = metric(rigged, "vllm:prefix_cache_hits")
        alone = rigged.generate([prompts[i]], sched, sampling, [keys[i]])
        assert metric(rigged, "vllm:prefix_cache_hits") == hits  # computed as with caching off
        assert alone.completion_ids[0] == batch.completion_ids[i] and alone.authors[0] == batch.authors[i]
        torch.testing.assert_close(
            torch.tensor(alone.senior_logprobs[0]), torch.tensor(batch.senior_logprobs[i]), atol=1e-4, rtol=0
        )
