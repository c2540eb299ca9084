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
# 1. derive speculative sampling's rule (accept $x$ with probability $\min(1, p(x)/q(x))$, else draw from $\operatorname{norm}(\max(0, p - q))$);
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
from mtdecode import course
from mtdecode.costs import timing
from mtdecode.strategies import Speculative
from mtdecode.testing import check_rejection_sampler, mutants, tiny_model
from mtdecode.testing.models import perturbed

logging.disable_progress_bar()
timing.use_reference_costs()  # the drafting rules weigh costs measured on an idle reference host (notebook 4)

# %% [markdown]
# ## The rule
#
# A small draft model $q$ guesses a token $d$; the target $p$ judges it. We want the emitted token to be
# distributed exactly as $p$. Accept $d$ with probability $a(d)$, and otherwise draw from some $r$:
#
# $$P(\text{out} = x) = q(x)\, a(x) + P(\text{reject})\, r(x).$$
#
# Choose $a(x) = \min(1, p(x)/q(x))$. Then $q(x)\, a(x) = \min(q(x), p(x))$, so the accepted part already
# gives every token $\min(p, q)$ of the mass it needs. What is missing at $x$ is $p(x) - \min(p(x), q(x)) =
# \max(0, p(x) - q(x))$, and the total missing mass is exactly $P(\text{reject})$. So $r$ must be
# $\operatorname{norm}(\max(0, p - q))$, the residual, renormalised. (Leviathan et al. 2023, Algorithm 1.)
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
# The broken rule can even hand back the very guess it rejected: a rejected guess $d$ has $p(d) < q(d)$, so
# the residual is $0$ at $d$, but the stray mass lands on the last token, which may be d.
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
# **These cells use SmolLM2** and drafts of three qualities: the target itself (a perfect draft), a copy of the
# target with noise added to its weights, and the shipped 4-layer draft. For each we measure (1) how often it
# agrees with the target's greedy token on the target's own answer, and (2) how many guesses speculative decoding
# accepts per target forward, with k = 3 guesses per step.

# %%
smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
shipped = mtdecode.load_model(mtdecode.DRAFT_MODEL)
chat = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Give three tips for staying focused while studying."}], add_generation_prompt=True
)["input_ids"]
answer = mtdecode.generate(smol, chat, mtdecode.strategies.Autoregressive(), max_new_tokens=32).row(0)  # greedy's
sequence = torch.tensor([chat + answer])
with torch.no_grad():
    target_choice = smol.hf(sequence).logits[0, len(chat) - 1 : -1].argmax(-1)

drafts = {
    "the target itself": smol,
    "target + noise 0.05": mtdecode.CausalLM(perturbed(smol.hf, 0.05, seed=0)),  # a full-size copy, 5% noise
    "shipped 4-layer draft": shipped,
}
rows = []
for name, d in drafts.items():
    with torch.no_grad():
        agreement = float((d.hf(sequence).logits[0, len(chat) - 1 : -1].argmax(-1) == target_choice).double().mean())
    stats = mtdecode.generate(smol, chat, Speculative(d, 3), max_new_tokens=16).stats
    rows.append((name, agreement, stats.mean_accepted, stats.tokens_per_forward))
    print(
        f"{name:22}: agreement {agreement:.2f}, accepted per forward {stats.mean_accepted:.2f}, "
        f"tokens per forward {stats.tokens_per_forward:.2f}"
    )

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
ax.plot([r[1] for r in rows], [r[2] for r in rows], "o-")
for name, agreement, accepted, _ in rows:
    ax.annotate(name, (agreement, accepted), textcoords="offset points", xytext=(5, 5), fontsize=9)
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
# lookahead decoding uses (notebook 4): try each proposed token $x$ in turn, accept it with probability $p(x)$,
# otherwise remove it from $p$. So Eagle is exact: at temperature 0 its tokens are greedy's.

# %%
for name, strategy in (("speculative, 4-layer draft", Speculative(shipped)), ("eagle, tree", Eagle(head))):
    result = mtdecode.generate(smol, chat, strategy, max_new_tokens=32)
    same = result.row(0) == answer  # greedy's 32 tokens, from above
    print(f"{name:28s} tokens per target forward {result.stats.tokens_per_forward:.2f}, same as greedy: {same}")

# %% [markdown]
# ## Where the time goes: a draft/verify timeline
#
# Tokens per target forward leave out what drafting costs. `mtdecode.figures.record_forwards` runs a strategy and
# records every forward pass of every model, each with its cost in units of a 1-token target forward, read from
# the reference costs (not from a clock read now). The timeline lays the forwards of 12 new tokens end to end.
# Greedy makes one target forward per token. Speculative decoding runs the draft (orange) before each target
# forward; EAGLE runs its head (green), a small fraction of a target forward per depth of the tree. Each
# verification is labelled accepted/drafted, the first forward of each model (the prompt, read at once) is
# hatched, and the dotted line marks where greedy ends.

# %%
import mtdecode.figures

timed = {
    name: mtdecode.figures.record_forwards(smol, chat, strategy, max_new_tokens=12)
    for name, strategy in (
        ("greedy", mtdecode.strategies.Autoregressive()),
        ("speculative", Speculative(shipped)),
        ("EAGLE", Eagle(head)),
    )
}
mtdecode.figures.timeline(timed)
plt.show()

# %% [markdown]
# Read each run from left to right. Speculative decoding pays one draft forward per guess, and a verification
# earns its wider forward only with the guesses it accepts; EAGLE's head costs a fraction of that per depth, and
# one verification checks a whole tree. Where each run ends, against the dotted line, is what the same 12 tokens
# cost. On a chat answer few guesses are accepted; notebook 5 measures a code edit, where many more are.

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it that grades the answer.

# %% [markdown]
# **Exercise 3.1.** Accept the guess with probability p(x) instead of min(1, p(x)/q(x)), keep the same
# residual norm(max(0, p - q)), and compute the law of the emitted token with `law_of_one_step`'s reasoning.
# How far is it from p? Put the total variation, 0.5 * sum |law - p|, in `tv_accept_p`.

# %% tags=["solution"] answer="tv_accept_p"
# Accepted part q(x) p(x); rejection has probability 1 - sum_x q(x) p(x), and then the residual is drawn.
residual = (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()
accept_p = q * p + (1 - (q * p).sum()) * residual
tv_accept_p = float(0.5 * (accept_p - p).abs().sum())
print("TV:", tv_accept_p)

# %% tags=["check"] wrong="tv_accept_p = float(0.5 * (right - p).abs().sum())"
_residual = (p - q).clamp(min=0) / (p - q).clamp(min=0).sum()
_law = q * p + (1 - (q * p).sum()) * _residual
course.check("3.1", tv_accept_p, float(0.5 * (_law - p).abs().sum()), tolerance=1e-9,
             hint="the accepted part is q(x) p(x); what is left is drawn from the residual")  # fmt: skip

# %% [markdown]
# **Exercise 3.2.** Greedy speculative decoding: at temperature 0, p and q are one-hot. What does the rule
# become? Put the letter in `rule`: (a) accept every guess, since q(x) = 1; (b) accept a guess exactly when it
# is the target's argmax, and after a rejection emit the target's argmax; (c) accept with probability
# p(x) = 1/2 when the two argmaxes differ.

# %% tags=["solution"] answer="rule"
# min(1, p(x)/q(x)) is 1 if the target's argmax is x and 0 otherwise; the residual max(0, p - q) is then
# one-hot on the target's argmax.
rule = "b"

# %% tags=["check"] wrong="rule = 'a'"
course.check("3.2", rule, "b", hint="p(x)/q(x) with both one-hot: what is it when the argmaxes differ?")

# %% [markdown]
# **Exercise 3.3.** Suppose the draft agreed with the target with probability a on every guess, independently.
# A step of k guesses commits the accepted guesses plus one token of the target's own. Write
# `tokens_per_step(a, k)`, the expected number of tokens one step commits.


# %% tags=["solution"] answer="tokens_per_step"
def tokens_per_step(a: float, k: int) -> float:
    # guess i is kept only if guesses 1..i are: probability a^i; plus the target's own token
    return sum(a**i for i in range(k + 1))  # = (1 - a^(k+1)) / (1 - a)


for _, agreement, _, per_forward in rows:
    print(f"a = {agreement:.2f}: predicted {tokens_per_step(agreement, 3):.2f} tokens per step, measured {per_forward:.2f}")


# %% tags=["check"] wrong="tokens_per_step = lambda a, k: 1 + k * a"
course.check("3.3", [tokens_per_step(a, k) for a, k in [(0.0, 3), (0.5, 1), (0.6, 3), (0.9, 5)]],
             [1.0, 1.5, 2.176, (1 - 0.9**6) / 0.1], tolerance=1e-9,
             hint="the i-th guess counts only if every guess before it was accepted too")  # fmt: skip

# %% [markdown]
# **Exercise 3.4.** EAGLE's tree is built from the head's top tokens: its candidates are not drawn from q.
# Why may the verifier still accept each with probability p(x)? Put the letter in `why_exact`: (a) the head
# is trained to match p, so its tokens are nearly samples of p; (b) each candidate is fixed before the step's
# random draws, accepted with p(x) and removed from p when rejected, so each position emits x with
# probability p(x) whatever the candidates were; (c) at temperature 0 every verifier is exact.

# %% tags=["solution"] answer="why_exact"
# A tree chosen after looking at this step's p would favour tokens p likes, and the output would no longer be p.
why_exact = "b"

# %% tags=["check"] wrong="why_exact = 'a'"
course.check("3.4", why_exact, "b", hint="what must hold about when the candidates were chosen?")
