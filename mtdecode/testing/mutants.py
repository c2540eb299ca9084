"""A catalogue of real bug classes: wrong decoders and wrong samplers, each caught by the oracle.

Every mutant here is a small, plausible mistake of the kind found in public implementations
(each docstring names the class and, where one exists, a public report of it). `CATALOGUE`
lists them with the check that must catch each at its default settings; `tests/test_oracle.py`
proves that it does, and that the correct versions pass.

The correct baselines are written the way a research project or a student would write them,
directly against transformers (no mtdecode strategy inside):

- `homework_rejection_sampler(p, q, drafted)`: speculative sampling's rule (Leviathan et al.
  2023, Algorithm 1) behind the kernel signature of `check_rejection_sampler`;
- `homework_speculative(model, prompt, ...)`: a speculative decoder behind the `Decoder`
  signature, with a noisy copy of the model as its draft and transformers' `DynamicCache`.

Each mutant is one of these with one thing changed (the `bug` argument), or an mtdecode
strategy with one function replaced.
"""

import contextlib
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from unittest import mock

import torch
from transformers import DynamicCache

from mtdecode import beams, verification
from mtdecode.cache import cache_keyword
from mtdecode.copying import lookup
from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.strategies import Lookahead, PromptLookup
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.testing.blackbox import SAMPLING_SETTINGS
from mtdecode.testing.decoders import global_seed, strategy_decoder
from mtdecode.testing.trees import TREE_MUTANTS

# ---------------------------------------------------------------- the kernel: speculative sampling's rule


def homework_rejection_sampler(
    p: Float[Tensor, "k_plus_1 vocab"], q: Float[Tensor, "k vocab"], drafted: Int[Tensor, " k"], bug: str = ""
) -> list[int]:
    """Algorithm 1 of Leviathan et al. (2023), one guess at a time, with torch's global generator.

    Keep d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection draw from
    norm(max(0, p_i - q_i)) and stop; if all k are kept, draw a bonus token from p_{k+1}.
    `bug` selects one of the mutants below ("" is the correct rule).
    """
    k = drafted.numel()
    if bug == "residuals_in_place":  # every residual made up front, in the caller's p
        p[:k].sub_(q).clamp_(min=0)
    for i in range(k):
        d = int(drafted[i])
        if bug == "accept_if_equal_to_target_sample":
            kept = int(torch.multinomial(p[i], 1)) == d
        else:
            ratio = p[i, d] if bug == "accept_with_p" else torch.clamp(p[i, d] / q[i, d], max=1.0)
            kept = bool(torch.rand((), dtype=torch.float64) < ratio)
        if not kept:
            return drafted[:i].tolist() + [_correction(p[i], q[i], bug)]
    if bug == "bonus_dropped":
        return drafted.tolist()
    bonus_row = p[k - 1] if bug == "bonus_from_wrong_row" and k > 0 else p[k]
    return drafted.tolist() + [_draw(bonus_row, bug)]


def _draw(probs: Float[Tensor, " vocab"], bug: str) -> int:
    """One token from `probs`: by `torch.multinomial`, or for the noise-floor mutant by the exponential race."""
    if bug != "exponential_noise_floor":
        return int(torch.multinomial(probs, 1))
    # argmax_x probs(x) / E_x with E_x ~ Exp(1) draws x with probability probs(x), if E can be arbitrarily small;
    # here E = -log(u) with u on a grid of NOISE_BITS bits, so E >= -log(1 - 2^-bits) and the tail is cut
    steps = 2**NOISE_BITS
    u = torch.randint(1, steps, probs.shape, dtype=torch.float64) / steps
    return int((probs / -torch.log(u)).argmax())


def _correction(p_i: Float[Tensor, " vocab"], q_i: Float[Tensor, " vocab"], bug: str) -> int:
    """The token after a rejection: from norm(max(0, p - q)) (or what a mutant draws instead)."""
    if bug in ("residual_from_p", "accept_if_equal_to_target_sample"):
        return int(torch.multinomial(p_i, 1))
    residual = (p_i - q_i).clamp(min=0)
    if bug == "residual_unnormalised":  # inverse CDF with a uniform on [0, 1): the missing mass lands on the last token
        u = torch.rand((), dtype=torch.float64)
        return min(int(torch.searchsorted(residual.cumsum(0), u, right=True)), p_i.numel() - 1)
    return _draw(residual / residual.sum(), bug)


def residual_unnormalised(p, q, drafted):
    """The residual max(0, p - q) drawn by inverse CDF without dividing by its sum, so the mass it lacks
    goes to the last token. Renormalising is easy to skip because `torch.multinomial` does it silently
    (vLLM's review of its first rejection sampler discussed exactly this, vllm-project/vllm#2336)."""
    return homework_rejection_sampler(p, q, drafted, bug="residual_unnormalised")


def residual_from_p(p, q, drafted):
    """After a rejection, the new token drawn from p instead of norm(max(0, p - q)); reported in
    ShopeeLLM/Spec-RL#14 (the code samples the first rejected position from the target distribution)."""
    return homework_rejection_sampler(p, q, drafted, bug="residual_from_p")


def accept_with_p(p, q, drafted):
    """A guess kept with probability p(x) instead of min(1, p(x) / q(x)): the one-hot rule of lookahead
    decoding applied to a draft that came with a distribution."""
    return homework_rejection_sampler(p, q, drafted, bug="accept_with_p")


def accept_if_equal_to_target_sample(p, q, drafted):
    """A guess kept only if it equals a token sampled from p, and a fresh token from p after a mismatch:
    biased towards the tokens both models favour (ml-explore/mlx-swift-lm#459; lablup/mlxcel#902)."""
    return homework_rejection_sampler(p, q, drafted, bug="accept_if_equal_to_target_sample")


def residuals_in_place(p, q, drafted):
    """The residuals max(0, p_i - q_i) made up front in the caller's own p tensor, to save a copy: the ratios
    then read the residuals instead of p, and whoever reads p next sees them too (vllm-project/vllm-ascend#2881:
    target probabilities corrupted in place between draws)."""
    return homework_rejection_sampler(p, q, drafted, bug="residuals_in_place")


#: the noise-floor mutant's uniform has this many bits (vLLM's float32 noise: 24)
NOISE_BITS = 4


def exponential_noise_floor(p, q, drafted):
    """Residual and bonus tokens drawn by the exponential race (argmax p(x) / E_x) with noise E that cannot be
    small: E = -log(u) for u on a grid of 2^-NOISE_BITS, so a token whose p is far below the leader's is never
    drawn. vllm-project/vllm#43150: float32 exponential noise never goes below 2^-24, so tail tokens are never
    drawn. At 24 bits the lost tail is below ~1e-7 of the leading probability, beyond the reach of any sample
    count; with 4 bits (a sampler that keeps its noise coarse) the same mechanism cuts tails the oracle sees."""
    return homework_rejection_sampler(p, q, drafted, bug="exponential_noise_floor")


def bonus_from_wrong_row(p, q, drafted):
    """After a full acceptance, the bonus token drawn from p_k (the row of the last guess) instead of p_{k+1}."""
    return homework_rejection_sampler(p, q, drafted, bug="bonus_from_wrong_row")


def bonus_dropped(p, q, drafted):
    """After a full acceptance, no bonus token: at most k tokens per step instead of k + 1. The law stays
    right; the contract (accepted tokens plus one more) catches it. Lookahead decoding's public code does
    this on a full match (hao-ai-lab/LookaheadDecoding#56)."""
    return homework_rejection_sampler(p, q, drafted, bug="bonus_dropped")


# ---------------------------------------------------------------- a whole speculative decoder

_DRAFTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
#: the homework decoder's draft: a copy of the target with this much relative noise on every weight
DRAFT_NOISE = 1.0


def _draft_for(hf_model):
    from mtdecode.testing.models import perturbed

    if hf_model not in _DRAFTS:
        _DRAFTS[hf_model] = perturbed(hf_model, DRAFT_NOISE, seed=1)
    return _DRAFTS[hf_model]


def _feed(model, cache: DynamicCache, ids: list[int], bug: str = "") -> Float[Tensor, "new vocab"]:
    """Feed `ids` left to right after what `cache` holds; return their logits."""
    start = cache.get_seq_length()
    positions = torch.arange(start, start + len(ids), device=model.device)[None]
    extra = {}
    if bug == "positions_wrap_at_64":  # a position buffer of 64 entries, reused from its start
        positions = positions % 64
    if bug == "position_off_by_one_past_128":  # the second page of 128 entries numbered from 129
        positions = positions + (positions >= 128).long()
    if bug == "own_mask_without_window":  # a 4-D mask of its own, plain causal: the model's window is lost
        keys = start + len(ids)
        causal = torch.ones(len(ids), keys, dtype=torch.bool, device=model.device).tril(start)
        extra["attention_mask"] = causal[None, None]
    with torch.no_grad():
        fed = torch.tensor([ids], device=model.device)
        out = model(input_ids=fed, position_ids=positions, **{cache_keyword(model.forward): cache}, **extra)
    return out.logits[0]


class _LastMaxSampler(Sampler):
    """Greedy that breaks an exact tie to the highest token id (`>=` in a running max) instead of the lowest."""

    def probs(self, logits):
        if self.temperature != 0:
            return super().probs(logits)
        flipped = logits.flip(-1).argmax(-1)  # the first maximum from the end: the highest id among ties
        return torch.nn.functional.one_hot(logits.shape[-1] - 1 - flipped, logits.shape[-1]).to(logits.dtype)


class _NucleusWithoutCrossing(Sampler):
    """Top-p that keeps only the tokens whose cumulative probability stays *below* p: the token that crosses p is
    dropped (the smallest nucleus reaching p must include it)."""

    def probs(self, logits):
        if self.top_p is None or self.temperature == 0:
            return super().probs(logits)
        probs = Sampler(self.temperature, self.top_k, None).probs(logits)
        ordered, order = probs.sort(-1, descending=True)
        keep = ordered.cumsum(-1) < self.top_p
        keep[..., 0] = True
        kept = torch.zeros_like(keep).scatter(-1, order, keep)
        probs = torch.where(kept, probs, 0.0)
        return probs / probs.sum(-1, keepdim=True)


class TopPBeforeTemperature(Sampler):
    """Top-p applied to the untempered distribution, temperature after: the nucleus is chosen from other
    probabilities than the ones sampled. A bug where temperature comes first (transformers and the oracle), and the
    order of llama.cpp's default sampler chain, the only one llama-cpp-python offers (a law to judge it by)."""

    def probs(self, logits):
        if self.top_p is None or self.temperature == 0:
            return super().probs(logits)
        nucleus = Sampler(1.0, self.top_k, self.top_p).probs(logits) > 0
        probs = Sampler(self.temperature, self.top_k, None).probs(logits)
        probs = torch.where(nucleus, probs, 0.0)
        return probs / probs.sum(-1, keepdim=True)


_SAMPLERS = {
    "ties_to_highest_id": _LastMaxSampler,
    "nucleus_without_crossing_token": _NucleusWithoutCrossing,
    "nucleus_before_temperature": TopPBeforeTemperature,
}


def homework_speculative(
    model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed, k: int = 3, bug: str = ""
) -> list[int]:
    """Speculative decoding written directly against transformers: a noisy copy of `model` drafts k tokens
    one by one, one target forward verifies them, `homework_rejection_sampler` keeps a prefix plus one
    token, and both `DynamicCache`s are cropped back; it stops after the model's EOS. torch's global
    generator, seeded with `seed` by `global_seed`, makes every draw. `bug` selects one of the mutants below
    ("" is the correct decoder)."""
    import random as unseeded

    target = CausalLM.wrap(model).hf
    draft = _draft_for(target)
    sampler = _SAMPLERS.get(bug, Sampler)(temperature, top_k, top_p)
    eos = target.generation_config.eos_token_id
    eos = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
    tokens, budget = list(prompt), len(prompt) + max_new_tokens
    target_cache, draft_cache = DynamicCache(), DynamicCache()
    target_read = 0  # committed tokens the target has read
    with global_seed(unseeded.randrange(2**31) if bug == "acceptance_unseeded" else seed):
        while len(tokens) < budget:
            guesses, q_rows, q_raw = [], [], []
            feed = tokens[draft_cache.get_seq_length() :]
            for _ in range(k if bug == "longer_than_asked" else min(k, budget - len(tokens) - 1)):
                logits = _feed(draft, draft_cache, feed)[-1].double()
                q_drawn = sampler.probs(logits)  # the distribution the guess is drawn from
                guesses.append(int(torch.multinomial(q_drawn, 1)))
                # the draft's distribution as the ratio sees it: the same one, or (a mutant) the raw softmax
                q_rows.append(torch.softmax(logits, -1) if bug == "draft_temperature_mismatch" else q_drawn)
                q_raw.append(torch.softmax(logits, -1))
                feed = guesses[-1:]
            if bug == "never_guesses_when_sampling" and temperature > 0:
                guesses, q_rows, q_raw = [], [], []
            logits = _feed(target, target_cache, tokens[target_read:] + guesses, bug).double()
            rows = logits[-(len(guesses) + 1) :]
            if bug == "reads_one_row_early_on_long_prompts" and len(tokens) == len(prompt) >= 11:
                rows = logits[-(len(guesses) + 2) : -1]  # the prefill's rows, one too early
            p = sampler.probs(rows)
            q = torch.stack(q_rows) if q_rows else p[:0]
            if bug == "ratio_of_untempered_probabilities" and guesses:
                p_raw = torch.softmax(logits[-(len(guesses) + 1) :], -1)
                accepted = _accept_by_raw_ratio(p, q, p_raw, torch.stack(q_raw), guesses)
            else:
                if bug == "stop_rule_peeks_at_p":  # stop drafting where the *target* is unsure (peeking at p)
                    unsure = [i for i, d in enumerate(guesses) if p[i, d] < 0.25]
                    guesses, q = (guesses[: unsure[0]], q[: unsure[0]]) if unsure else (guesses, q)
                    p = p[: len(guesses) + 1]
                accepted = homework_rejection_sampler(p, q, torch.tensor(guesses, dtype=torch.long))
            ended = next((i for i, t in enumerate(accepted) if t in eos), None)
            if ended is not None and bug != "eos_not_cut_mid_block":
                accepted = accepted[: ended + 1]
            keep = len(tokens) + len(accepted) - 1  # cache entries: the committed tokens and the kept guesses
            _crop_to(target_cache, keep + 1 if bug == "cache_rollback_off_by_one" else keep)
            _crop_to(draft_cache, keep)
            tokens += accepted
            target_read = keep  # the target has read every committed token but the newest
            if ended is not None:
                break
    return tokens[len(prompt) :] if bug == "longer_than_asked" else tokens[len(prompt) : budget]


def _crop_to(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` entries (transformers 5 crops by a negative count of entries to remove)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _accept_by_raw_ratio(p, q, p_raw, q_raw, guesses: list[int]) -> list[int]:
    """The ratio of untempered probabilities, then the tempered residual: temperature applied after the ratio."""
    for i, d in enumerate(guesses):
        if not bool(torch.rand((), dtype=torch.float64) < torch.clamp(p_raw[i, d] / q_raw[i, d], max=1.0)):
            return guesses[:i] + [_correction(p[i], q[i], "")]
    return guesses + [int(torch.multinomial(p[len(guesses)], 1))]


def draft_temperature_mismatch(model, prompt, **settings):
    """Guesses drawn from the draft's tempered, truncated distribution, while the acceptance ratio and the
    residual use its raw softmax: the q in the rule is not the q the guess came from, so the output is not p
    (huggingface/transformers#47932; deepseek-ai/DeepSpec#31)."""
    return homework_speculative(model, prompt, bug="draft_temperature_mismatch", **settings)


def ratio_of_untempered_probabilities(model, prompt, **settings):
    """Temperature and top-k/top-p applied after the ratio: the acceptance ratio is computed from both models'
    raw softmax, while drafting, the residual and the bonus token use the tempered distributions."""
    return homework_speculative(model, prompt, bug="ratio_of_untempered_probabilities", **settings)


def stop_rule_peeks_at_p(model, prompt, **settings):
    """A draft cut short where the *target* gives a guess little probability. A stopping rule may look at q
    only (it is part of drafting); one that looks at p chooses the proposal with knowledge of the verifier,
    and the output is no longer p."""
    return homework_speculative(model, prompt, bug="stop_rule_peeks_at_p", **settings)


def cache_rollback_off_by_one(model, prompt, **settings):
    """After a rejection, the target's cache is cropped one entry too long: the first rejected guess stays
    in it, and every later forward attends to a token that is not in the text. Greedy output changes."""
    return homework_speculative(model, prompt, bug="cache_rollback_off_by_one", **settings)


def _homework(bug: str, doc: str) -> Callable:
    """`homework_speculative` with one bug, as a named decoder."""

    def decoder(model, prompt, **settings):
        return homework_speculative(model, prompt, bug=bug, **settings)

    decoder.__name__ = decoder.__qualname__ = bug
    decoder.__doc__ = doc
    return decoder


reads_one_row_early_on_long_prompts = _homework(
    "reads_one_row_early_on_long_prompts",
    """For prompts of 11 tokens or more, the first new token is read from the prefill's second-to-last row: an
    offset that only long prompts reach (a prompt padded or split past a fixed size). Short prompts are right.""",
)
positions_wrap_at_64 = _homework(
    "positions_wrap_at_64",
    """Position ids taken modulo 64, as from a position buffer of 64 entries reused from its start: right until a
    total of 64 tokens, wrong after.""",
)
position_off_by_one_past_128 = _homework(
    "position_off_by_one_past_128",
    """Positions past 128 numbered one too high, as when a second cache page of 128 entries starts its count at
    129: right until a total of 128 tokens, wrong after.""",
)
own_mask_without_window = _homework(
    "own_mask_without_window",
    """The decoder passes a 4-D mask of its own, plain causal, to a model with a sliding window: the model uses
    the mask it is given, so the window is lost (tokens see further back than the model was trained to). Right
    on every model without a window, and until the window is crossed.""",
)
eos_not_cut_mid_block = _homework(
    "eos_not_cut_mid_block",
    """A step that accepts the end-of-sequence token in the middle of its block commits the whole block: tokens
    after EOS end up in the output.""",
)
longer_than_asked = _homework(
    "longer_than_asked",
    """The draft is not cut to the budget, and the output is not either: a step near the end commits more tokens
    than max_new_tokens allows.""",
)
ties_to_highest_id = _homework(
    "ties_to_highest_id",
    """Greedy verification breaks an exact tie to the highest token id (a running max with `>=`) while greedy
    decoding breaks it to the lowest (`torch.argmax`): two paths disagree exactly at ties (vllm-project/vllm#7627).""",
)
nucleus_without_crossing_token = _homework(
    "nucleus_without_crossing_token",
    """Top-p keeps the tokens whose cumulative probability stays below p, dropping the token that crosses p: the
    nucleus is one token short and the law is wrong under top-p.""",
)
nucleus_before_temperature = _homework(
    "nucleus_before_temperature",
    """Top-p chosen on the untempered distribution and temperature applied after: under temperature and top-p
    together the nucleus holds other tokens than the tempered law's.""",
)
acceptance_unseeded = _homework(
    "acceptance_unseeded",
    """Every draw comes from a stream the seed does not set (lookahead's development version accepts guesses with
    Python's unseeded `random`): each run has the right law, but a seed does not repeat it.""",
)
never_guesses_when_sampling = _homework(
    "never_guesses_when_sampling",
    """When sampling, it never verifies a guess: plain token-by-token sampling with the draft's work thrown away
    (lade 0.0.2's sampling patch is commented out). The law is right; the speculative path is never tested.""",
)


# ---------------------------------------------------------------- one-hot (multi-candidate) verification


def _keep_rejected(p, proposals, random):
    """`verification.try_proposals` without step 1's removal: after rejecting x, p keeps x's mass."""
    chosen = torch.full((p.shape[0],), -1, dtype=torch.long, device=p.device)
    for c in range(proposals.shape[1]):
        x = proposals[:, c]
        trying = (x >= 0) & (chosen < 0) & ~(proposals[:, :c] == x[:, None]).any(1)
        u = random.uniform(trying.long())[:, 0].to(p.device)
        chosen = torch.where(trying & (u < p.gather(1, x.clamp(min=0)[:, None])[:, 0]), x, chosen)
    return chosen, p


def _lookahead_with(replacements: dict) -> Callable:
    """mtdecode's lookahead (W=2, N=3, G=2, prompt pool) as a batched decoder, with functions of
    `mtdecode.verification` replaced while it runs."""
    inner = strategy_decoder(Lookahead(2, 3, 2, prompt_pool=True))

    def run(call, *args, **kwargs):
        with contextlib.ExitStack() as stack:
            for name, value in replacements.items():
                stack.enter_context(mock.patch.object(verification, name, value))
            return call(*args, **kwargs)

    def decoder(model, prompt, **settings):
        return run(inner, model, prompt, **settings)

    decoder.takes_batches = True
    decoder.batch = lambda model, prompts, **settings: run(inner.batch, model, prompts, **settings)
    return decoder


multi_candidate_keeps_rejected = _lookahead_with({"try_proposals": _keep_rejected})
multi_candidate_keeps_rejected.__doc__ = """Lookahead's multi-candidate verifier without removing a rejected
token from p before trying the next candidate: the rejected token keeps its mass, the next candidate is
accepted too often. Speculative sampling's rule, applied to several one-hot candidates, needs
norm(max(0, p - 1[x])) after each rejection (Fu et al. 2024, Algorithm 4; SpecInfer)."""
multi_candidate_keeps_rejected.__name__ = multi_candidate_keeps_rejected.__qualname__ = "multi_candidate_keeps_rejected"


def _number_by_index(module, args, kwargs):
    """A forward pre-hook: positions that branch (a token tree, lookahead's window and candidates) renumbered by
    each node's index in the input, first position onward; a plain chain is left as it is."""
    positions = kwargs.get("position_ids")
    if positions is None or positions.shape[-1] < 2 or bool((positions.diff(dim=-1) == 1).all()):
        return None
    kwargs["position_ids"] = positions[..., :1] + torch.arange(positions.shape[-1], device=positions.device)
    return args, kwargs


def _with_model_hook(inner: Callable, hook: Callable) -> Callable:
    """A batched decoder that runs `inner` with `hook` on the model's forward (a forward pre-hook with kwargs)."""

    def run(call, model, *args, **kwargs):
        hf = CausalLM.wrap(model).hf
        handle = hf.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            return call(model, *args, **kwargs)
        finally:
            handle.remove()

    def decoder(model, prompt, **settings):
        return run(inner, model, prompt, **settings)

    decoder.takes_batches = True
    decoder.batch = lambda model, prompts, **settings: run(inner.batch, model, prompts, **settings)
    return decoder


tree_nodes_numbered_by_index = _with_model_hook(
    strategy_decoder(Lookahead(2, 3, 2, prompt_pool=True)), _number_by_index
)
tree_nodes_numbered_by_index.__doc__ = """Lookahead's window and verification branch given rotary positions by each
node's index in the flattened input instead of its depth in the tree: every node after the first branch is
verified at the wrong position (the class of mlxcel#1214, tree nodes with wrong rotary positions)."""
tree_nodes_numbered_by_index.__name__ = tree_nodes_numbered_by_index.__qualname__ = "tree_nodes_numbered_by_index"


@dataclass(frozen=True)
class PoolReadAfterUpdate(PromptLookup):
    """Prompt lookup whose verifier reads its candidates from the pool (the text) after the step has put its
    own tokens in: the tokens it verifies are not the ones it fed, so it checks each against the target's
    prediction for another prefix. The pool must be read once, before the step, and the same candidates fed
    and verified."""

    def decode(self, s):
        while not s.done:
            k = s.budget(self.num_draft_tokens).tolist()
            fed = [lookup(tokens, self.ngram, n) for tokens, n in zip(s.tokens, k, strict=True)]
            reread = [lookup(t + f, self.ngram, len(f)) for t, f in zip(s.tokens, fed, strict=True)]
            reread = [r + f[len(r) :] for r, f in zip(reread, fed, strict=True)]  # as many as were fed
            yield from _verify_other_than_fed(s, fed, reread)


def _verify_other_than_fed(s, fed: list[list[int]], verified: list[list[int]]):
    """`verification.verify_chain`, but the guesses checked are `verified`, not the ones fed."""
    from mtdecode.verification import padded

    guesses_fed, guesses = padded(fed, s.device), padded(verified, s.device)
    rows = [row + guess for row, guess in zip(s.unread(s.target), guesses_fed.clamp(min=0).tolist(), strict=True)]
    logits = s.target.extend(rows, logits_to_keep=guesses.shape[1] + 1)
    p = s.sampler.probs(logits)
    verdict = verification.verify_candidates(p[:, 0], p[:, None, 1:], guesses[:, None, :], s.random, s.active)
    s.target.cache.crop(s.lengths + verdict.accepted)
    yield s.commit(verdict.tokens, verdict.accepted + 1, drafted=(guesses >= 0).sum(1), accepted=verdict.accepted)


pool_read_after_update = strategy_decoder(PoolReadAfterUpdate(ngram=2, num_draft_tokens=4))
pool_read_after_update.__doc__ = PoolReadAfterUpdate.__doc__
pool_read_after_update.__name__ = pool_read_after_update.__qualname__ = "pool_read_after_update"


# ---------------------------------------------------------------- MTAD's beam sampling


def beam_weights_log_softmax_of_probabilities(log_scores, width, greedy, random, rows):
    """MTAD's beam draw with the beam weights normalised by log_softmax of *probabilities* instead of
    log(p / sum p): the beams are drawn with probability proportional to exp(p) rather than p, close to
    uniform. The bug of MTAD's public code in its batched path (ZongyueQin/MTAD; fixed in its tree path)."""
    probabilities = log_scores.exp()
    return beams.choose(torch.log_softmax(probabilities, dim=-1), width, greedy, random, rows)


#: mutant -> the check that must catch it at its default settings
CATALOGUE: dict[Callable, str] = {
    residual_unnormalised: "check_rejection_sampler",
    residual_from_p: "check_rejection_sampler",
    accept_with_p: "check_rejection_sampler",
    accept_if_equal_to_target_sample: "check_rejection_sampler",
    bonus_from_wrong_row: "check_rejection_sampler",
    bonus_dropped: "check_rejection_sampler",
    beam_weights_log_softmax_of_probabilities: "check_beam_sampler",
    draft_temperature_mismatch: "check_sampling",
    ratio_of_untempered_probabilities: "check_sampling",
    stop_rule_peeks_at_p: "check_sampling",
    multi_candidate_keeps_rejected: "check_sampling",
    cache_rollback_off_by_one: "check_greedy",
    pool_read_after_update: "check_greedy",
    residuals_in_place: "check_rejection_sampler",
    exponential_noise_floor: "check_rejection_sampler",
    reads_one_row_early_on_long_prompts: "check_greedy",
    positions_wrap_at_64: "check_greedy",
    position_off_by_one_past_128: "check_greedy",
    own_mask_without_window: "check_greedy",
    eos_not_cut_mid_block: "check_greedy",
    longer_than_asked: "check_greedy",
    ties_to_highest_id: "check_greedy",
    tree_nodes_numbered_by_index: "check_greedy",
    nucleus_without_crossing_token: "check_sampling",
    nucleus_before_temperature: "check_sampling",
    acceptance_unseeded: "check_seeds",
    never_guesses_when_sampling: "check_sampling",
}
CATALOGUE.update({mutant: "check_tree_sampler" for mutant in TREE_MUTANTS})

#: for the slow ones, check settings smaller than the defaults that were measured to catch them (the tests use these;
#: a check at its defaults has more samples and so at least this power): samples per setting, and the one setting
#: whose law the bug changes
_PLAIN, _TOP_K, _TOP_P = SAMPLING_SETTINGS  # temperature 1; temperature 0.7 with top-k 5; 1.2 with top-p 0.8
NEEDS: dict[Callable, dict] = {
    draft_temperature_mismatch: {"samples": 2_000, "settings": (_TOP_K,)},
    ratio_of_untempered_probabilities: {"samples": 500, "settings": (_TOP_K,)},
    stop_rule_peeks_at_p: {"samples": 500, "settings": (_PLAIN,)},
    nucleus_without_crossing_token: {"samples": 500, "settings": (_TOP_P,)},
    nucleus_before_temperature: {"samples": 500, "settings": (_TOP_P,)},
    never_guesses_when_sampling: {"samples": 500, "settings": (_PLAIN,)},
    bonus_from_wrong_row: {"trials": 2_000},  # caught at 100 trials per source
    exponential_noise_floor: {"trials": 3_000},  # caught at 3,000
}
