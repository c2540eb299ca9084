# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 3. Speculative decoding
#
# **Learning goals.** After this notebook you can
#
# 1. derive speculative sampling's rule (accept x with min(1, p(x)/q(x)), else draw from norm(max(0, p - q)));
# 2. show, by exact enumeration on a tiny vocabulary, that the rule outputs exactly p;
# 3. break the rule on purpose and watch the oracle (`mtdecode.testing`) catch it;
# 4. measure, on SmolLM2, how acceptance depends on how well the draft agrees with the target;
# 5. see a draft that reads the target's own features (EAGLE) verify a token tree in one forward.
#
# **Time:** 40 minutes. **Prerequisites:** notebooks 1 and 2; conditional probability.
# Runs in about 40 seconds on a 2-core CPU (the last two parts use SmolLM2).

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
import torch
from transformers.utils import logging

import mtdecode
from mtdecode.strategies import Speculative
from mtdecode.testing import check_rejection_sampler, mutants, tiny_model
from mtdecode.testing.models import perturbed

logging.disable_progress_bar()

# %% [markdown]
# ## The rule
#
# A small draft model q guesses a token d; the target p judges it. We want the emitted token to be
# distributed exactly as p. Accept d with probability a(d), and otherwise draw from some r:
#
#     P(out = x) = q(x) a(x) + P(reject) r(x)
#
# Choose a(x) = min(1, p(x)/q(x)). Then q(x) a(x) = min(q(x), p(x)), so the accepted part already
# gives every token min(p, q) of the mass it needs. What is missing at x is p(x) - min(p(x), q(x)) =
# max(0, p(x) - q(x)), and the total missing mass is exactly P(reject). So r must be
# **norm(max(0, p - q))**, the residual, renormalised. (Leviathan et al. 2023, Algorithm 1.)
#
# ## Checked by exact enumeration
#
# Take a tiny target and a noisy copy as the draft, and their distributions for the next token.

# %%
target = tiny_model("llama", vocab_size=8, seed=1, layers=1, hidden=16)
draft = perturbed(target, 0.5, seed=2)
prompt = torch.tensor([[1, 2, 3]])
with torch.no_grad():
    p = torch.softmax(target(prompt).logits[0, -1], -1)
    q = torch.softmax(draft(prompt).logits[0, -1], -1)


def law_of_one_step(p, q, residual):
    """P(out = x) for one guess: accepted with min(1, p/q), else a draw from `residual` (a distribution)."""
    accept = torch.minimum(torch.ones_like(p), p / q)
    reject = (q * (1 - accept)).sum()
    return q * accept + reject * residual


right = law_of_one_step(p, q, (p - q).clamp(min=0) / (p - q).clamp(min=0).sum())
print("largest |P(out = x) - p(x)|:", float((right - p).abs().max()))

# %% [markdown]
# Now the same with the residual **not** renormalised, drawn by inverse CDF with a uniform number on
# [0, 1): the mass the residual lacks falls on the last token.

# %%
unnormalised = (p - q).clamp(min=0)
broken_residual = unnormalised.clone()
broken_residual[-1] += 1 - unnormalised.sum()
wrong = law_of_one_step(p, q, broken_residual)
fig, ax = plt.subplots(figsize=(8, 2.5))
width = 0.28
tokens = torch.arange(8)
ax.bar(tokens - width, p, width, label="p (target)")
ax.bar(tokens, right, width, label="speculative, right")
ax.bar(tokens + width, wrong, width, label="residual not renormalised")
ax.set_xlabel("token")
ax.legend()
plt.show()
print("total variation of the broken rule from p:", float(0.5 * (wrong - p).abs().sum()))

# %% [markdown]
# The broken rule can even hand back the very guess it rejected: a rejected guess d has p(d) < q(d), so
# the residual is 0 at d, but the stray mass lands on the last token, which may be d.
#
# ## The oracle catches it
#
# `mtdecode.testing.check_rejection_sampler` checks any rejection sampler with the signature
# `fn(p, q, drafted) -> accepted tokens plus one more`, on synthetic targets and drafts of many shapes,
# with a stated false-alarm rate. A correct homework version passes; the broken one fails.

# %%
for sampler in (mutants.homework_rejection_sampler, mutants.residual_unnormalised):
    report = check_rejection_sampler(sampler, trials=2_000)
    print(report.summary, end="\n\n")

# %% [markdown]
# ## Acceptance against draft quality (SmolLM2)
#
# **These cells use SmolLM2** and its shipped 4-layer draft. We make worse drafts by adding noise to the
# shipped one, and measure for each (1) how often it agrees with the target's greedy token on the target's
# own answer, and (2) how many guesses speculative decoding accepts per target forward.

# %%
smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
shipped = mtdecode.load_model(mtdecode.DRAFT_MODEL)
chat = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Give three tips for staying focused while studying."}], add_generation_prompt=True
)["input_ids"]
answer = mtdecode.generate(smol, chat, mtdecode.strategies.Autoregressive(), max_new_tokens=24).row(0)
sequence = torch.tensor([chat + answer])
with torch.no_grad():
    target_choice = smol.hf(sequence).logits[0, len(chat) - 1 : -1].argmax(-1)

rows = []
for noise in (0.0, 0.1, 0.3):
    d = shipped if noise == 0 else mtdecode.CausalLM(perturbed(shipped.hf, noise, seed=0))
    with torch.no_grad():
        agreement = float((d.hf(sequence).logits[0, len(chat) - 1 : -1].argmax(-1) == target_choice).double().mean())
    stats = mtdecode.generate(smol, chat, Speculative(d, 3), max_new_tokens=24).stats
    rows.append((noise, agreement, stats.mean_accepted, stats.tokens_per_forward))
    print(
        f"noise {noise:4.2f}: agreement {agreement:.2f}, accepted per forward {stats.mean_accepted:.2f}, "
        f"tokens per forward {stats.tokens_per_forward:.2f}"
    )

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.plot([r[1] for r in rows], [r[2] for r in rows], "o-")
for noise, agreement, accepted, _ in rows:
    ax.annotate(f"noise {noise}", (agreement, accepted), textcoords="offset points", xytext=(5, 5))
ax.set_xlabel("draft agrees with the target's greedy token")
ax.set_ylabel("guesses accepted per forward (k = 3)")
plt.show()

# %% [markdown]
# ## Drafting from the target's own features: EAGLE (SmolLM2)
#
# **These cells use SmolLM2** and the EAGLE head that ships for it. Instead of a separate small model, the draft
# is one decoder layer that reads the target's top hidden state (its *features*) at each committed position,
# with the next token's embedding, and guesses the next feature; the target's own output rows turn the guess
# into a distribution. The head is much smaller than the 4-layer draft, and it drafts a *tree*: the head's best
# tokens after x0, the best tokens after those, and so on, ranked by the product of its probabilities. The
# target verifies the whole tree in one forward pass with a tree mask: each node sees the committed tokens, its
# ancestors and itself.

# %%
from mtdecode.masks import figures
from mtdecode.strategies import Eagle

head = mtdecode.load_model("smollm2-135m-eagle")
count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
print(
    f"4-layer draft: {count(shipped.hf) / 1e6:.1f} M parameters; EAGLE head: {count(head) / 1e6:.1f} M "
    f"(plus the target's embedding and its output rows for {len(head.head_token_ids)} tokens)"
)
nodes = ["on", "one", "a", "task", "thing", "single", "at"]  # x0 = "on", then the head's tree below it
figures.tree_mask([-1, 0, 0, 1, 1, 2, 3], ["<user>", "...", "Focus"], nodes).plot()
plt.show()

# %% [markdown]
# Every path from x0 down the tree is a candidate. The verifier is the one-hot multi-candidate rule that
# lookahead decoding uses (notebook 4): try each proposed token x in turn, accept it with probability p(x),
# otherwise remove it from p. So Eagle is exact: at temperature 0 its tokens are greedy's.

# %%
greedy = mtdecode.generate(smol, chat, mtdecode.strategies.Autoregressive(), max_new_tokens=48)
for name, strategy in (("speculative, 4-layer draft", Speculative(shipped)), ("eagle, tree", Eagle(head))):
    result = mtdecode.generate(smol, chat, strategy, max_new_tokens=48)
    same = result.row(0) == greedy.row(0)
    print(f"{name:28s} tokens per target forward {result.stats.tokens_per_forward:.2f}, same as greedy: {same}")

# %% [markdown]
# ## Exercises
#
# 1. Show with `law_of_one_step` that accepting with probability p(x) instead of min(1, p(x)/q(x)), with
#    the same residual, does not give p. How far is it (total variation)?
# 2. Greedy speculative decoding: with temperature 0, p and q are one-hot. What does the rule become?
# 3. If the draft agreed with the target with probability a on every guess, independently, how many
#    tokens would one step of k guesses commit on average? Compare with the measurements above.
# 4. Eagle's tree is built from the head's top-k tokens: its candidates are not drawn from q. Why may the
#    verifier still accept each with probability p(x), and what would go wrong if the tree were chosen after
#    looking at the target's p for this step?

# %% tags=["solution"]
# 1. Accept with p(x): the accepted part is q(x) p(x); rejection has probability 1 - sum q p.
accept_p = q * p + (1 - (q * p).sum()) * (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()
print("TV:", float(0.5 * (accept_p - p).abs().sum()))
# 2. Accept iff the draft's argmax equals the target's; after a rejection the residual is the target's argmax.
# 3. Tokens per step = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a).
for _, agreement, _, per_forward in rows:
    a = agreement
    print(f"a = {a:.2f}: predicted {(1 - a**4) / (1 - a):.2f} tokens per step, measured {per_forward:.2f}")
# 4. A one-hot proposal is accepted with p(x) and removed from p on rejection; each position then emits x with
#    probability p(x) whatever the proposals were, as long as they were fixed before the step's draws. The head
#    reads only committed tokens and the target's features at committed positions, so they are. A tree chosen
#    after looking at this step's p would favour tokens p likes, and the output would no longer be p.
