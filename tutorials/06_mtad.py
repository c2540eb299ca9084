# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 6. MTAD: multi-token assisted decoding
#
# **Learning goals.** After this notebook you can
#
# 1. compute multi-token joint decoding (MTJD) exactly, by enumeration, on a tiny model;
# 2. explain beam sampling, the way MTAD's draft proposes a block;
# 3. say why MTAD is not exact, and measure how far its law is from MTJD's;
# 4. check the bound TV(MTAD, MTJD) <= TV(token by token, MTJD) + P(some draft token accepted) empirically.
#
# **Time:** 40 minutes. **Prerequisites:** notebook 3; total-variation distance. Runs in about 15 seconds
# on a 2-core CPU (tiny models only).

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
import torch

from mtdecode import Sampler, oracle
from mtdecode.masks import figures
from mtdecode.sampling import RowRandom
from mtdecode.strategies import MTAD
from mtdecode.strategies.mtad import choose
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import sample_counts
from mtdecode.testing.mtad import check_bounded_error

target = tiny_model("llama", vocab_size=4, seed=1, layers=1, hidden=16)
draft = tiny_model("qwen2", vocab_size=4, seed=5, layers=1, hidden=16)
prompt, k = [0], 3


def tv(a, b):
    return float(0.5 * (a - b).abs().sum())


# %% [markdown]
# ## MTJD by enumeration
#
# MTJD picks the next k tokens from the target's **joint** distribution P(y_1..y_k) = prod p(y_j | y_<j).
# At temperature T it draws a block from P^(1/T), renormalised over all V^k blocks; at T = 0 it takes the
# single most likely block. With V = 4 and k = 3 there are 64 blocks: enumerate them.

# %%
joint = oracle.token_by_token_joint(target, prompt, k, Sampler(1.0))  # P over the 64 blocks
best = oracle.most_likely_block(target, prompt, k)
tokens, context = [], list(prompt)
for _ in range(k):  # token-by-token greedy, for comparison
    with torch.no_grad():
        token = int(target(torch.tensor([context])).logits[0, -1].argmax())
    tokens.append(token)
    context.append(token)


def cell(block):
    """Block (y_1, ..., y_k) is entry y_1 V^(k-1) + ... + y_k."""
    return sum(x * 4 ** (k - 1 - i) for i, x in enumerate(block))


print(f"most likely block {best}: P = {float(joint[cell(best)]):.3f}")
print(f"greedy block      {tokens}: P = {float(joint[cell(tokens)]):.3f}")

# %% [markdown]
# Greedy decoding picks the best token at each position, which need not make the best block. Tempering the
# joint (MTJD) and tempering each token (ordinary sampling) also differ:

# %%
sampler = Sampler(0.7)
mtjd = oracle.mtjd(target, prompt, k, sampler.temperature)
token_by_token = oracle.token_by_token_joint(target, prompt, k, sampler)
print("TV(token by token at T = 0.7, MTJD at T = 0.7):", round(tv(token_by_token, mtjd), 4))

# %% [markdown]
# ## Beam sampling
#
# Enumeration costs V^k target evaluations. MTAD asks a small draft instead: it keeps W beams; at each depth
# it scores every (beam, token) pair by the beam's weight times q(token | beam) and **draws** W pairs in
# proportion (beam search when greedy). Here is one draw of 2 pairs from 6 options, many times over:

# %%
scores = torch.tensor([-0.4, -1.1, -1.6, -2.3, -3.0, -0.9], dtype=torch.float64)
runs = 4000
picks = choose(scores.expand(runs, -1), 2, False, RowRandom(range(runs)), torch.ones(runs, dtype=torch.bool))
first = torch.bincount(picks[:, 0], minlength=6) / runs
print("first pick, drawn:", first.numpy().round(3))
print("exp(score) / sum: ", torch.softmax(scores, 0).numpy().round(3))

# %% [markdown]
# The beams live in the draft's KV cache as a token tree (notebook 2): each depth feeds the W newest beam
# tokens as children of their beams. Two beams over 3 depths, say:

# %%
figures.tree_mask([-1, -1, 0, 1, 2, 3], figures.prefix_names(2), ["a", "b", "a c", "b d", "a c e", "b d f"]).plot()
plt.show()

# %% [markdown]
# ## Why MTAD is not exact
#
# The target then scores the heaviest beam in one forward pass and accepts its **longest prefix whose joint
# likelihood ratio P/Q exceeds tau**: a deterministic test with no random draw, then one token from p.
# Nothing makes the accepted blocks follow P^(1/T) exactly. Measure MTAD's law over 5,000 runs:

# %%
strategy = MTAD(draft, num_draft_tokens=2, beam_width=2, threshold=0.5)
counts = sample_counts(target, prompt, strategy, k, 5000, sampler)
mtad_law = counts / counts.sum()
print("TV(MTAD, MTJD):          ", round(tv(mtad_law, mtjd), 4))
print("TV(token by token, MTJD):", round(tv(token_by_token, mtjd), 4))

# %% [markdown]
# ## The bound, checked
#
# docs/strategies/mtad.md proves TV(MTAD, MTJD) <= TV(token by token, MTJD) + P(E), where E is "some step
# accepted a draft token": when nothing is accepted, MTAD *is* token-by-token sampling. The check estimates
# both sides and allows for sampling error at a false-alarm rate of 1e-3:

# %%
result = check_bounded_error(target, draft, prompt, strategy, k=k, sampler=sampler, samples=2000)
print(result)

# %% [markdown]
# ## Exercises
#
# 1. Raise the threshold tau to 5. What happens to P(E) and to TV(MTAD, MTJD)? Why?
# 2. With the target as its own draft and enough beams to cover every block (W = V^(k-1)), greedy MTAD
#    finds the most likely block. Check it.
# 3. Is greedy decoding MTJD at T = 0? Use the enumeration above to answer.

# %% tags=["solution"]
# 1. A high tau accepts (almost) nothing: P(E) -> 0 and MTAD becomes token-by-token sampling.
strict = check_bounded_error(target, draft, prompt, MTAD(draft, 2, 2, 5.0), k=k, sampler=sampler, samples=2000)
print(strict)
# 2.
import mtdecode

run = mtdecode.generate(target, prompt, MTAD(target, k, beam_width=4 ** (k - 1)), max_new_tokens=k + 1)
print("proposal:", list(run.steps[0].proposal), "most likely block:", best)
# 3. No: greedy picks the best token at each step; MTJD at T = 0 picks the best block (compare above).
