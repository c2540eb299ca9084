# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 7. Your own strategy, proved with the oracle
#
# **Learning goals.** After this notebook you can
#
# 1. write a decoding strategy against mtdecode's `DecodingStrategy` protocol, for a batch of prompts;
# 2. prove it exact with the oracle (`mtdecode.testing`): greedy parity and the sampling law;
# 3. find a bug that greedy tests cannot see, from the oracle's report, and fix it.
#
# **Time:** 45 minutes. **Prerequisites:** notebooks 1 to 3 (steps, the cache, verification of guesses).
# Runs in about 30 seconds on a 2-core CPU (tiny models only).

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

from collections.abc import Callable
from dataclasses import dataclass

import torch

import mtdecode
from mtdecode import DecodingStrategy, course
from mtdecode.sampling import draw
from mtdecode.session import with_new_token
from mtdecode.testing import check_greedy, check_sampling, strategy_decoder, tiny_model

# %% [markdown]
# ## The protocol
#
# A strategy is an object with a `decode(session)` generator. Each step it runs one target forward pass
# over every row of the batch, commits each row's tokens with `session.commit(...)`, and yields the steps
# that returns. The session gives you everything else:
#
# | what | how |
# | --- | --- |
# | how many guesses a row may make this step | `s.budget(k)` |
# | each row's committed tokens the target has not read (x0, or the whole prompt at first) | `s.unread(s.target)` |
# | one forward over each row's tokens, left to right | `s.target.extend(rows, logits_to_keep=n)` |
# | the target's distribution p | `s.sampler.probs(logits)` |
# | the rows' random streams | `s.random`, and `draw(probs, s.random, rows)` |
# | which rows are still decoding | `s.active` |
# | roll the cache back to the kept tokens | `s.target.cache.crop(s.lengths + accepted)` |
#
# ## The starting code: "echo" guessing
#
# A cheap guess: the token that followed x0 the last time x0 appeared. One guess per step, verified in
# the same forward pass as x0 (the one-hot rule of notebook 3: accept the guess with probability $p(x)$;
# otherwise draw the token from what is left of $p$). Read it carefully: it has a subtle bug.


# %%
def echo_guesses(s, k: torch.Tensor) -> torch.Tensor:
    """Per row: the token that followed the latest earlier occurrence of x0, or -1 (no guess)."""
    guesses = []
    for tokens, room in zip(s.tokens, k.tolist(), strict=True):
        earlier = [i for i in range(len(tokens) - 1) if tokens[i] == tokens[-1]]
        guesses.append([tokens[earlier[-1] + 1]] if earlier and room > 0 else [-1])
    return torch.tensor(guesses, device=s.device)


def verify_one_guess(s, guesses, p):
    """Accept guess x with probability p(x); after a rejection, draw the token from p."""
    x = guesses[:, 0]
    p_x = p[:, 0].gather(1, x.clamp(min=0)[:, None])[:, 0] * (x >= 0)  # p(x), 0 for "no guess"
    u = s.random.uniform(((x >= 0) & s.active).long())[:, 0].to(p.device)
    accepted = (u < p_x).long()
    after = torch.where(accepted.bool()[:, None], p[:, 1], p[:, 0])  # p after x if kept, else p at x0
    return accepted, draw(after, s.random, s.active)


@dataclass(frozen=True)
class EchoGuess:
    """Guess that what followed x0 last time follows it again; verify it in the same forward pass."""

    verify: Callable = verify_one_guess

    def decode(self, s):
        while not s.done:
            guesses = echo_guesses(s, s.budget(1))  # (batch, 1)
            rows = [row + guess for row, guess in zip(s.unread(s.target), guesses.clamp(min=0).tolist(), strict=True)]
            p = s.sampler.probs(s.target.extend(rows, logits_to_keep=2))  # (batch, 2, vocab): at x0, after x
            accepted, new_token = self.verify(s, guesses, p)
            s.target.cache.crop(s.lengths + accepted)
            tokens, counts = with_new_token(guesses.clamp(min=0), accepted, new_token)
            yield s.commit(tokens, counts, drafted=(guesses >= 0).long()[:, 0], accepted=accepted)


assert isinstance(EchoGuess(), DecodingStrategy)
model = tiny_model("llama", vocab_size=16, seed=3)
result = mtdecode.generate(model, [1, 2, 3, 1, 2, 3, 1], EchoGuess(), max_new_tokens=20)
print(result.tokens, "| tokens per forward:", round(result.stats.tokens_per_forward, 2))

# %% [markdown]
# ## Prove it with the oracle
#
# `strategy_decoder` turns any strategy into a decoder the oracle can call (with batches). First greedy
# parity on the oracle's six tiny models (small and large vocabularies, a sliding window, an EOS, exact
# ties), with prompts of up to 300 tokens that Hypothesis generates (8 per model here, to keep the class
# quick; the default is 25). The summary also says how often a forward verified a guess: a strategy that
# never guesses would be called *inconclusive*, not correct.

# %%
decoder = strategy_decoder(EchoGuess())
print(check_greedy(decoder, examples=8).summary)

# %% [markdown]
# Greedy parity holds. Now the law of sampled tokens, against exact enumeration:

# %%
report = check_sampling(decoder)
print(report.summary)

# %% [markdown]
# The oracle says the law is wrong, with a false-alarm rate of 1e-3: a correct strategy would fail this
# only once in a thousand times. Greedy parity could not see it: at temperature 0 $p$ is one-hot, so a
# rejected guess has $p(x) = 0$ and "draw from $p$" and "draw from $p$ without $x$" are the same thing.
#
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it that grades the answer.

# %% [markdown]
# **Exercise 7.1.** Find the bug in `verify_one_guess` (hint: notebook 3, the residual of a one-hot draft).
# Put the letter in `bug`: (a) the guess is accepted with p(x) instead of min(1, p(x)/q(x)); (b) after
# rejecting x, the token is drawn from p itself, which gives x a second chance; (c) all rows share one
# uniform number.

# %% tags=["solution"] answer="bug"
# A one-hot draft has q(x) = 1, so min(1, p(x)/q(x)) = p(x): accepting with p(x) is right. After a rejection
# the token must come from norm(max(0, p - 1[x])): p with x removed and renormalised.
bug = "b"

# %% tags=["check"] wrong="bug = 'a'"
course.check("7.1", bug, "b", hint="write down the residual max(0, p - q) for q one-hot on x")

# %% [markdown]
# **Exercise 7.2.** Fix it: write `verify_one_guess_fixed(s, guesses, p)`, a copy of `verify_one_guess` that
# draws the token after a rejection from p without x. The check runs the oracle's sampling law on it.


# %% tags=["solution"] answer="verify_one_guess_fixed"
def verify_one_guess_fixed(s, guesses, p):
    x = guesses[:, 0]
    p_x = p[:, 0].gather(1, x.clamp(min=0)[:, None])[:, 0] * (x >= 0)
    u = s.random.uniform(((x >= 0) & s.active).long())[:, 0].to(p.device)
    accepted = (u < p_x).long()
    without_x = p[:, 0].scatter(1, x.clamp(min=0)[:, None], 0.0)  # renormalised by `draw`
    without_x = torch.where((x >= 0)[:, None] & (without_x.sum(-1, keepdim=True) > 0), without_x, p[:, 0])
    after = torch.where(accepted.bool()[:, None], p[:, 1], without_x)
    return accepted, draw(after, s.random, s.active)


# %% tags=["check"] wrong="verify_one_guess_fixed = verify_one_guess"
fixed = check_sampling(strategy_decoder(EchoGuess(verify=verify_one_guess_fixed)), samples=5_000)
print(fixed.summary)
course.check_that("7.2", fixed.passed, hint="after a rejection, set p(x) to 0 before drawing")

# %% [markdown]
# **Exercise 7.3.** Extend the idea to two guesses per step (what followed x0, and the token after it). What
# must change in the verification? Put the letter in `change`: (a) nothing: verify each guess on its own
# with p(x) and keep those accepted; (b) go position by position: test the second guess only if the first
# was accepted, with p after the first guess, and after any rejection draw from p without the rejected
# token and stop; (c) accept the two guesses together with probability p(x1) p(x2).

# %% tags=["solution"] answer="change"
# The tokens after a rejected guess were computed from a token that is not in the text: they must go. So
# verification walks the guesses in order and stops at the first rejection (notebook 3's rule, one-hot q).
change = "b"

# %% tags=["check"] wrong="change = 'a'"
course.check("7.3", change, "b", hint="what did the forward pass assume when it computed p after the second guess?")
