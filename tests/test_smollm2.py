"""The embedded default model, SmolLM2-135M-Instruct (float32): our greedy equals transformers'
greedy, 3 prompts x 64 tokens. Where float32 rounding makes them part, the two tokens must
have been a near tie at the first difference (one forward over the common prefix): closer than
twice the rounding tolerance of float32 logits at that depth (`mtdecode.testing.tolerance`)."""

import functools

import pytest
import torch

import mtdecode
from mtdecode.policy import Adaptive
from mtdecode.testing import first_divergence, greedy_tokens, hf_greedy_tokens
from mtdecode.zoo.int8 import exact_int_mm

pytestmark = pytest.mark.slow

PROMPTS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Give three tips for staying focused while studying.",
]
NEW_TOKENS = 64


@functools.cache
def default():
    return mtdecode.load_model(), mtdecode.load_tokenizer()


@functools.cache
def greedy(prompt: str) -> list[int]:
    """Our greedy tokens after the prompt (`NEW_TOKENS` of them): several tests compare with them, and a worker
    decodes them once."""
    model, _ = default()
    return greedy_tokens(model, chat(prompt), NEW_TOKENS)


def chat(prompt: str) -> list[int]:
    _, tokenizer = default()
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
    )["input_ids"]


def test_default_model_is_the_real_smollm2():
    model, tokenizer = default()
    assert type(model.hf).__name__ == "LlamaForCausalLM"
    assert model.vocab_size == 49152 and model.hf.config.num_hidden_layers == 30
    assert tokenizer.decode(greedy_tokens(model, chat(PROMPTS[0]), 8)).startswith("The capital of France is Paris")


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_equals_transformers_on_smollm2(prompt):
    model, _ = default()
    ids = chat(prompt)
    ours = greedy(prompt)
    theirs = hf_greedy_tokens(model, ids, NEW_TOKENS)
    assert len(ours) == len(theirs) == NEW_TOKENS
    tie = first_divergence(model, ids, ours, theirs)
    assert tie is None or tie.within_rounding, f"outputs part at token {tie.index} without a near tie: {tie}"


def test_the_shipped_draft_loads_and_speculative_greedy_equals_greedy():
    """The distilled draft ships in the repository; with it, speculative greedy decoding on the real
    model gives greedy's tokens (float32: any difference must start at a near tie)."""
    from mtdecode.strategies import Speculative

    model, _ = default()
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    assert type(draft.hf).__name__ == "SubsetHeadLlama" and draft.vocab_size == model.vocab_size
    for prompt in PROMPTS[:2]:
        ids = chat(prompt)
        result = mtdecode.generate(model, ids, Speculative(draft, 4), max_new_tokens=NEW_TOKENS)
        ours = result.tokens[0].tolist()
        tie = first_divergence(model, ids, ours, greedy(prompt))
        assert tie is None or tie.within_rounding, f"speculative parts from greedy without a near tie: {tie}"
        # The trained weights are really loaded: the recipe's untrained starting point (copied
        # layers) accepts almost nothing, the shipped draft clearly more; compare them with
        # benchmarks/draft_acceptance.py.
        assert result.stats.mean_accepted > 0.08


def test_the_shipped_draft_was_taught_code():
    """The draft's data holds code edits (`mtdecode.recipes.distill.KINDS`): teacher forced on the target's greedy
    answers to a held-out edit of each held-out snippet, its greedy guess is the target's token at more than a quarter
    of the places (the shipped draft: 44 of 109). The draft distilled on chat alone guessed 7 of those 109, and nothing
    sensible on code (`python -m mtdecode.recipes.distill evaluate` gives agreement by kind)."""
    from mtdecode.recipes.distill import agreement
    from mtdecode.recipes.prompts import CODE_EDITS, code_prompts

    model, tokenizer = default()
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    agreed = places = 0
    for text in code_prompts(held_out=True)[:: len(CODE_EDITS)]:  # the first edit of each snippet
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        counts = agreement(model, draft, ids["input_ids"], 32, tokenizer.eos_token_id)
        agreed, places = agreed + counts[0], places + counts[1]
    assert agreed > places / 4, f"the draft guessed {agreed} of {places} tokens of code edits"


def test_the_shipped_eagle_head_loads_beats_an_untrained_one_and_eagle_greedy_equals_greedy():
    """The EAGLE head ships in the repository (`load_model("smollm2-135m-eagle")`). With it, `Eagle` gives greedy's
    tokens on the real model (float32: any difference must start at a near tie), and verifies clearly more tokens
    per target forward than with an untrained head of the same shape (a fixed tree of 8 nodes for both, so the
    comparison does not depend on the host's cost curve; the head's tree alone, no copy)."""
    from mtdecode.strategies import Eagle
    from mtdecode.zoo.eagle import EagleHead

    model, _ = default()
    head = mtdecode.load_model("smollm2-135m-eagle")
    assert isinstance(head, EagleHead) and head.embedding.shape == (model.vocab_size, 576)
    torch.manual_seed(0)  # the untrained head's starting weights, as the recipe draws them
    untrained = EagleHead(model.config, head.embedding, model.hf.get_output_embeddings().weight, head.head_token_ids)
    ids = chat(PROMPTS[1])
    shape = dict(depth=4, width=3, tree_size=8, lookup=0)
    trained = mtdecode.generate(model, ids, Eagle(head, **shape), max_new_tokens=NEW_TOKENS)
    tie = first_divergence(model, ids, trained.tokens[0].tolist(), greedy(PROMPTS[1]))
    assert tie is None or tie.within_rounding, f"eagle parts from greedy without a near tie: {tie}"
    plain = mtdecode.generate(model, ids, Eagle(untrained.eval(), **shape), max_new_tokens=NEW_TOKENS)
    assert trained.stats.tokens_per_forward > 1.5, trained.stats
    assert plain.stats.tokens_per_forward < 1.1, plain.stats


@pytest.mark.skipif(not exact_int_mm(), reason="an int8 head needs exact int8 products (a CPU with VNNI)")
def test_the_shipped_eagle_heads_int8_form_accepts_as_much_and_eagle_greedy_equals_greedy():
    """The shipped head in int8 (`load_model("smollm2-135m-eagle", quantize="int8")`), on the same prompt and tree
    as above: greedy's tokens (any difference must start at a near tie), more than 1.5 tokens per forward."""
    from mtdecode.strategies import Eagle

    model, _ = default()
    ids = chat(PROMPTS[1])
    int8 = mtdecode.load_model("smollm2-135m-eagle", quantize="int8")
    shape = dict(depth=4, width=3, tree_size=8, lookup=0)
    fast = mtdecode.generate(model, ids, Eagle(int8, **shape), max_new_tokens=NEW_TOKENS)
    tie = first_divergence(model, ids, fast.tokens[0].tolist(), greedy(PROMPTS[1]))
    assert tie is None or tie.within_rounding, f"eagle (int8 head) parts from greedy without a near tie: {tie}"
    assert fast.stats.tokens_per_forward > 1.5, fast.stats


def test_eagle_with_its_copy_branch_equals_greedy_and_accepts_past_the_heads_depth_where_the_answer_quotes():
    """A code-editing prompt, whose answer repeats the given code: `Eagle` with the copy (prompt lookup's guess as
    one more branch of the tree) gives greedy's tokens (any difference must start at a near tie), and some steps
    accept more tokens than the head's tree is deep (2), which only the copy can give. Fixed costs, so that the
    tree-size rule chooses alike on every host."""
    from mtdecode.costs import DraftCosts
    from mtdecode.strategies import Eagle

    model, _ = default()
    code = "def area(width, height):\n    return width * height\n"
    ids = chat(f"Rename the function `area` to `rectangle_area`:\n\n{code}")
    greedy = greedy_tokens(model, ids, NEW_TOKENS)
    costs = DraftCosts(0.0, [1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35, 1.4, 1.45, 1.5, 1.55, 1.6, 1.65, 1.7, 1.75])
    result = mtdecode.generate(model, ids, Eagle(depth=2, width=3, policy=Adaptive(costs=costs, depth_cost=0.05)),
                               max_new_tokens=NEW_TOKENS)  # fmt: skip
    tie = first_divergence(model, ids, result.tokens[0].tolist(), greedy)
    assert tie is None or tie.within_rounding, f"eagle with a copy parts from greedy without a near tie: {tie}"
    assert max(result.stats.accepted_lengths) > 2, result.stats
