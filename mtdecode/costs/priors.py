"""Acceptance priors: how often a draft's first guess, or a Jacobi guess, is accepted on the target's own text,
measured once per pair of models and host and kept on disk like the costs (`mtdecode.store`)."""

import torch

from mtdecode import store
from mtdecode.costs import timing
from mtdecode.model import CausalLM, Runner
from mtdecode.tensor_types import Int, Tensor

#: tokens of the target's own greedy text on which `draft_acceptance` scores the draft, after a start of `START` tokens
ACCEPTANCE_TOKENS, START = 64, 8


def draft_acceptance(target: CausalLM, draft: CausalLM) -> float:
    """How often the draft's greedy guess is the target's greedy token, given the target's text so far: the chance
    that a first guess is accepted at temperature 0 (alpha in Leviathan et al., Section 3.1), which the stopping rule
    takes as its prior (`rule_for`'s `acceptance`). Scored on `ACCEPTANCE_TOKENS` tokens of the target's own greedy
    continuation of `START` tokens it sampled with a fixed seed; measured once per pair of models and host and kept on
    disk like the costs (`mtdecode.store`), so that every process uses the same number."""

    def kept() -> float:
        key = {
            "target": store.module_key(target.hf) | {"weights": store.weights_key(target.hf)},
            "draft": store.module_key(draft.hf) | {"weights": store.weights_key(draft.hf)},
            "host": store.host_key(),
        }
        return store.kept("acceptance", key, lambda: {"acceptance": _score_draft(target, draft)})["acceptance"]

    return timing.read_once((target, draft), ("acceptance",), kept)


def _score_draft(target: CausalLM, draft: CausalLM) -> float:
    text = _target_text(target, ACCEPTANCE_TOKENS)
    with torch.no_grad():
        guesses = Runner(draft, "tuning").extend(text.to(draft.device))[:, START:-1].argmax(-1)  # (1, tokens)
    return float((guesses.to(text.device) == text[:, START + 1 :]).double().mean())


def _target_text(target: CausalLM, greedy: int) -> Int[Tensor, "1 tokens"]:
    """Token 0, then `START` tokens sampled from the target with a fixed seed, then `greedy` tokens of its greedy
    continuation: text of the target's own on which a guesser is scored."""
    generator = torch.Generator().manual_seed(0)
    runner, text = Runner(target, "tuning"), torch.zeros(1, 1, dtype=torch.long, device=target.device)
    logits = runner.extend(text, logits_to_keep=1)[:, -1]  # (1, vocab)
    with torch.no_grad():
        for i in range(START + greedy):
            runner.cache.commit()
            sampled = torch.multinomial(torch.softmax(logits.double().cpu(), -1), 1, generator=generator)
            token = sampled.to(text.device) if i < START else logits.argmax(-1, keepdim=True)
            text = torch.cat([text, token], dim=1)
            logits = runner.extend(text[:, -1:], logits_to_keep=1)[:, -1]
    return text


def jacobi_acceptance(target: CausalLM) -> float:
    """How often a Jacobi guess at the first place of the block is accepted: Jacobi decoding with one guess per
    step, greedy, for `ACCEPTANCE_TOKENS` tokens after the start that `draft_acceptance` uses; its accepted guesses
    over its steps. `Jacobi`'s rule takes it as the first place's prior: guesses made after a wrong token seldom
    converge on real text (the papers' plain Jacobi gains a few percent of tokens per step), and an even chance
    instead made the rule verify a dozen guesses before their record said they do not pay. Measured once per model
    and host and kept on disk (`mtdecode.store`), like the costs."""

    def score() -> dict:
        text = _target_text(target, 0)[0].tolist()
        kept = jacobi_guesses(target, text, text[-1], ACCEPTANCE_TOKENS)  # any start converges: a prompt token
        return {"acceptance": sum(kept) / len(kept)}

    def kept() -> float:
        key = {"target": store.module_key(target.hf) | {"weights": store.weights_key(target.hf)}}
        return store.kept("jacobi-acceptance", key | {"host": store.host_key()}, score)["acceptance"]

    return timing.read_once((target,), ("jacobi-acceptance",), kept)


def jacobi_guesses(target: CausalLM, text: list[int], guess: int, tokens: int) -> list[bool]:
    """Whether each step of `Jacobi(block=1)` (`mtdecode.strategies.jacobi`, greedy) kept its guess, from `text` and a
    first `guess` until at least `tokens` new tokens. Each step is one forward over the whole text and the guess, with
    no cache (the text is short): the guess is kept if it is the target's token after the text, and the next guess
    is the target's token after the guess (the Jacobi update, which repeats the new token after a kept guess)."""
    kept, start = [], len(text)
    with torch.no_grad():
        while len(text) - start < tokens:
            fed = torch.tensor([text + [guess]], device=target.device)
            after_text, after_guess = Runner(target, "tuning").extend(fed, logits_to_keep=2)[0].argmax(-1).tolist()
            kept.append(guess == after_text)
            text = text + ([guess, after_guess] if kept[-1] else [after_text])
            guess = after_guess
    return kept
