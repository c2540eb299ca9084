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
# 1. compute multi-token joint decoding (MTJD) exactly, by enumeration, on a tiny model, and say when it differs
#    from token-by-token sampling (tempering, truncation, the greedy limit);
# 2. explain beam sampling, the way MTAD's draft proposes a block;
# 3. state what MTAD's acceptance rule guarantees and what our bound
#    $\mathrm{TV}(M, \mathrm{MTJD}_T) \le \mathrm{TV}(A, \mathrm{MTJD}_T) + \Pr(E)$ bounds, under which assumptions,
#    and what the paper claims;
# 4. choose settings where that bound says something, and read a sweep over the threshold $\tau$;
# 5. explain, with numbers, why MTAD can land farther from MTJD than plain sampling while lowering perplexity;
# 6. explain MMTAD, which verifies all W beams in one forward as a token tree, and why it accepts more often.
#
# **Time:** 55 minutes. **Prerequisites:** notebook 3; total-variation distance; Hoeffding's inequality (for the
# error bars). Runs in about 40 seconds on a 2-core CPU (tiny models only).

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import math

import matplotlib.pyplot as plt
import torch
from einops import rearrange, reduce

import mtdecode
from mtdecode import Sampler, course, oracle
from mtdecode.beams import choose
from mtdecode.figures import token_tree
from mtdecode.masks import figures
from mtdecode.sampling import RowRandom
from mtdecode.strategies import MMTAD, MTAD, Autoregressive
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import block_cells, sampled_run
from mtdecode.testing.mtad import check_bounded_error

V, k = 4, 3  # vocabulary and block length: V^k = 64 blocks, few enough to enumerate
target = tiny_model("llama", vocab_size=V, seed=1, layers=1, hidden=16)
draft = tiny_model("qwen2", vocab_size=V, seed=5, layers=1, hidden=16)  # an unrelated small model
prompt = [1, 1]
sampler = Sampler(0.7)  # the temperature every sampled run below uses
SAMPLES, FALSE_ALARM = 4000, 1e-3  # runs per measurement; the error rate of every printed conclusion


def tv(a, b):
    """Total-variation distance between two distributions over the same blocks."""
    return float(0.5 * (a - b).abs().sum())


def cell(block):
    """Block (y_1, ..., y_k) is entry y_1 V^(k-1) + ... + y_k of a distribution over blocks."""
    return sum(x * V ** (k - 1 - i) for i, x in enumerate(block))


def greedy_block(model, prefix):
    """k tokens of greedy decoding: the most likely token at each position in turn."""
    context = list(prefix)
    for _ in range(k):
        with torch.no_grad():
            context.append(int(model(torch.tensor([context])).logits[0, -1].argmax()))
    return context[len(prefix) :]


# %% [markdown]
# ## MTJD by enumeration
#
# The target's **joint** distribution over the next $k$ tokens is the product of its next-token distributions:
#
# $$P(y_{1:k} \mid x) = \prod_{j=1}^{k} p(y_j \mid x, y_{<j}).$$
#
# MTJD at temperature $T$ draws a whole block from $P^{1/T}$, renormalised over all $V^k$ blocks:
#
# $$\mathrm{MTJD}_T(y) = \frac{P(y)^{1/T}}{\sum_{y'} P(y')^{1/T}},$$
#
# and as $T \to 0$ it takes the single most likely block. With $V = 4$ and $k = 3$ there are 64 blocks:
# enumerate them.

# %%
joint = oracle.token_by_token_joint(target, prompt, k, Sampler(1.0))  # P over the 64 blocks, untempered
best = oracle.most_likely_block(target, prompt, k)
tokens = greedy_block(target, prompt)
print(f"most likely block {best}: P = {float(joint[cell(best)]):.3f}")
print(f"greedy block      {tokens}: P = {float(joint[cell(tokens)]):.3f}")

# %% [markdown]
# Greedy decoding picks the best token at each position, which need not make the best block: here the first
# token agrees, but greedy's second token leads to a block of lower joint probability. So greedy decoding is
# **not** MTJD at $T = 0$.
#
# Token-by-token sampling with the same Sampler draws each token from the Sampler's distribution $\tilde p$
# (tempered, maybe truncated by top-k or top-p), so its law over blocks is
# $A(y) = \prod_j \tilde p(y_j \mid x, y_{<j})$. At $T = 1$ without truncation $\tilde p = p$, hence
# $A = P = \mathrm{MTJD}_1$: sampling a block from the joint **is** sampling token by token. MTJD differs only
# when the joint is tempered ($T \ne 1$), when the per-token distributions are truncated, or in the greedy limit:

# %%
mtjd = oracle.mtjd(target, prompt, k, sampler.temperature)
token_by_token = oracle.token_by_token_joint(target, prompt, k, sampler)
gap = tv(token_by_token, mtjd)
at_one = tv(oracle.token_by_token_joint(target, prompt, k, Sampler(1.0)), oracle.mtjd(target, prompt, k, 1.0))
truncated = oracle.token_by_token_joint(target, prompt, k, Sampler(1.0, top_k=2))
print(f"TV(A, MTJD) at T = 1, no truncation: {at_one:.1e}  (equal up to rounding)")
print(f"TV(A, MTJD) at T = 1, top-k = 2:     {tv(truncated, joint):.3f}")
print(f"TV(A, MTJD) at T = 0.7:              {gap:.3f}")

# %% [markdown]
# At $T = 0.7$ the two laws are close on this prompt: tempering each token and tempering the whole block move
# the probabilities in nearly the same way. Keep that number, $\mathrm{TV}(A, \mathrm{MTJD}_{0.7}) \approx 0.03$,
# in mind: it is all that MTJD changes, relative to plain sampling, on this prompt, and it is the yardstick for
# MTAD below.
#
# ## Beam sampling
#
# Enumeration costs $V^k$ target evaluations. MTAD asks a small draft $q$ instead: it keeps $W$ beams; at each
# depth it scores every (beam, token) pair by the beam's weight times $q(\text{token} \mid \text{beam})$ and
# **draws** $W$ pairs in proportion (beam search when greedy). Here is one draw of 2 pairs from 6 options, many
# times over:

# %%
scores = torch.tensor([-0.4, -1.1, -1.6, -2.3, -3.0, -0.9], dtype=torch.float64)
runs = 4000
picks = choose(scores.expand(runs, -1), 2, False, RowRandom(range(runs)), torch.ones(runs, dtype=torch.bool))
first = torch.bincount(picks[:, 0], minlength=6) / runs
print("first pick, drawn:", first.numpy().round(3))
print("exp(score) / sum: ", torch.softmax(scores, 0).numpy().round(3))

# %% [markdown]
# The options are laid out as MTAD lays them out: $W$ beams times $V$ tokens, flattened into one row of
# $W \cdot V$ pairs so that one draw picks a beam and a token together; the pick's index is then split back
# into the pair. With `einops` the flattening names its axes, as `mtdecode/strategies/mtad.py` does:

# %%
beam_weights = torch.tensor([-0.2, -1.0])  # W = 2 beams: log q of each so far
next_log_q = torch.log_softmax(torch.tensor([[2.0, 0.5, 0.1], [0.3, 1.5, 0.2]]), dim=-1)  # V = 3 next tokens each
pairs = rearrange(beam_weights[:, None] + next_log_q, "beam token -> (beam token)")  # 6 options, beam-major
pick = int(pairs.argmax())
print(f"best pair: index {pick} -> beam {pick // 3}, token {pick % 3}")

# %% [markdown]
# The block MTAD proposes is the **heaviest** of the $W$ beams. Keeping the heaviest of several draws favours
# blocks the draft finds likely: the proposal is sharper than one draw from $q$ would be. We will see this bias
# in the numbers.
#
# The beams live in the draft's KV cache as a token tree (notebook 2): each depth feeds the $W$ newest beam
# tokens as children of their beams. Two beams over 3 depths, say:

# %%
figures.tree_mask([-1, -1, 0, 1, 2, 3], figures.prefix_names(2), ["a", "b", "a c", "b d", "a c e", "b d f"]).plot()
plt.show()

# %% [markdown]
# ## What MTAD guarantees, and what it does not
#
# One MTAD step with block length $\gamma$: the draft proposes $y_{1:\gamma}$; one target forward gives the
# joint likelihoods of all its prefixes; MTAD accepts the **longest** prefix whose ratio passes,
#
# $$n = \max\left\{ m \le \gamma : \frac{P(y_{1:m})}{Q(y_{1:m})} > \tau \right\} \quad (n = 0 \text{ if none}),$$
#
# with $P$ and $Q$ the joint probabilities under the Sampler's distributions $\tilde p$ and $\tilde q$. Then it
# draws one token from $\tilde p(\cdot \mid x, y_{1:n})$ and commits $n + 1$ tokens. The test is deterministic:
# there is no uniform draw as in speculative sampling, and no residual distribution. Nothing makes the committed
# blocks follow $\mathrm{MTJD}_T$ exactly.
#
# **What the rule itself guarantees (per step).** Straight from the definition of $n$ (the first inequality when
# $n \ge 1$):
#
# $$\log P(y_{1:n}) - \log Q(y_{1:n}) > \log \tau \quad\text{and}\quad
# \log P(y_{1:m}) - \log Q(y_{1:m}) \le \log \tau \ \text{ for every } n < m \le \gamma.$$
#
# This is a statement about **likelihoods**: an accepted prefix is at least $\tau$ times as likely under the
# target as under the draft. It says nothing about **how often** a block is committed: that frequency is how
# often the draft proposes it, which is the draft's business. `check_threshold_rule` verifies both inequalities
# on every step of a run.
#
# **What the paper claims.** Qin et al., "Optimized Multi-Token Joint Decoding with Auxiliary Model for LLM
# Inference" (arXiv 2407.09722, ICLR 2025), state in their abstract that MTAD approximates exact MTJD with a
# bounded error. The theorem itself (its assumptions and the quantity it bounds) was not in the text available
# to us when writing this notebook, so we do not restate it; the bound below is ours, not the paper's.
#
# **Our bound (docs/strategies/mtad.md).** Fix the prompt $x$, the block length $k$ and a Sampler with $T > 0$.
# Compare three laws over blocks of $k$ tokens: $A$ (token by token with $\tilde p$), $\mathrm{MTJD}_T$
# (above, from the untruncated joint) and $M$ (the first $k$ tokens of MTAD with the same Sampler). Let $E$ be
# the event that some MTAD step, among those that produce these $k$ tokens, accepts at least one draft token.
# Assume (1) each step draws its own token from $\tilde p$ with randomness independent of that step's proposal,
# (2) the proposal depends only on the context and on randomness independent of the target's draws, and
# (3) exact arithmetic. Then
#
# $$\mathrm{TV}(M, A) \le \Pr(E) \qquad\text{hence}\qquad
# \mathrm{TV}(M, \mathrm{MTJD}_T) \le \mathrm{TV}(A, \mathrm{MTJD}_T) + \Pr(E).$$
#
# *Why:* run MTAD, and build a second sequence that copies MTAD's own tokens until the first acceptance and
# samples $\tilde p$ afresh after it. That sequence has law $A$ (assumptions 1 and 2), and it equals MTAD's
# output whenever $E$ does not happen; the coupling inequality gives the first bound, the triangle inequality
# the second.
#
# The two results bound different things. The rule's guarantee is about the likelihood of each accepted prefix
# and holds for any draft; ours is about the **distribution** of the output and costs a price, $\Pr(E)$, that is
# large exactly when MTAD accepts a lot. Our bound never promises that MTAD is closer to MTJD than $A$ is; it
# promises that MTAD strays from $A$ by no more than how often it accepts.
#
# ## A demo where the bound says something
#
# With the unrelated draft, $\gamma = 2$, $W = 2$ and $\tau = 1$, MTAD accepts a draft token in a bit under half
# of the runs. `check_bounded_error` runs it 4,000 times (seeded), checks the rule on every step, and compares
# the measured distance with the bound, allowing for sampling error at a false-alarm rate of $10^{-3}$. Two
# helpers turn measurements into intervals that hold except with probability $10^{-3}$ each: `hoeffding` for a
# rate or a mean, `tv_error` for a distance measured over the 64 blocks.


# %%
def hoeffding(samples, spread=1.0):
    """Half-width of an interval that holds the true mean of `samples` independent values lying in a range
    `spread` wide, except with probability FALSE_ALARM (Hoeffding's inequality, two-sided)."""
    return spread * math.sqrt(math.log(2 / FALSE_ALARM) / (2 * samples))


def tv_error(samples):
    """How far a TV measured from `samples` runs over V^k blocks can be from the true TV, except with probability
    FALSE_ALARM: Cauchy-Schwarz bounds its expectation by sqrt(V^k / N) / 2, McDiarmid its deviation."""
    return 0.5 * math.sqrt(V**k / samples) + math.sqrt(math.log(1 / FALSE_ALARM) / (2 * samples))


demo = MTAD(draft, num_draft_tokens=2, beam_width=2, threshold=1.0)
result = check_bounded_error(target, draft, prompt, demo, k=k, sampler=sampler, samples=SAMPLES)
print(result)
distance_at_most = result.measured + tv_error(SAMPLES)
bound_at_least = result.token_by_token_gap + result.acceptance - hoeffding(SAMPLES)
bound_at_most = result.token_by_token_gap + result.acceptance + hoeffding(SAMPLES)
print(f"true TV(MTAD, MTJD) <= {distance_at_most:.3f};  {bound_at_least:.3f} <= true bound <= {bound_at_most:.3f}")
print(f"informative (bound < 1): {bound_at_most < 1};  distance under the bound: {distance_at_most < bound_at_least}"
      f"  (each interval fails with probability at most {FALSE_ALARM:g})")  # fmt: skip

# %% [markdown]
# $\Pr(E)$ is clearly below 1, the right-hand side is about half of the trivial value 1, and even the largest
# distance consistent with the measurement is well under the smallest bound consistent with it. (After a prompt
# where every proposal passes, $\Pr(E) = 1$ and the same check says nothing.)
#
# ## How $\tau$ moves the picture
#
# Raise $\tau$ and MTAD accepts less: $\Pr(E)$ falls, the bound falls towards $\mathrm{TV}(A, \mathrm{MTJD})$,
# and MTAD turns into plain sampling. `measure` runs a strategy `SAMPLES` times (row $b$ seeded $b$) and returns
# the law of its first $k$ tokens, each run's block and the fraction of runs in which $E$ happened:


# %%
def measure(strategy, samples=SAMPLES, at=prompt):
    """The law of `strategy`'s first k tokens over `samples` seeded runs, each run's block, and the rate of E."""
    run = sampled_run(target, [list(at)] * samples, strategy, k, sampler, seed=0)
    blocks = block_cells(run.tokens, V)
    law = torch.bincount(blocks, minlength=V**k).double() / samples
    accepted = torch.zeros(samples, dtype=torch.bool)
    for step in run.steps:  # E: some step of the run accepted a draft token
        accepted[step.row] |= step.accepted > 0
    return law, blocks, float(accepted.double().mean())


taus = [0.25, 0.5, 1.0, 2.0, 4.0]
sweep = {tau: measure(MTAD(draft, 2, 2, tau)) for tau in taus}
reference, _, _ = measure(Autoregressive())  # exact token-by-token sampling, measured the same way
floor = tv(reference, mtjd)  # what a sampler of A measures from SAMPLES runs: the rest is sampling noise
print(f"TV(A, MTJD) = {gap:.3f} exactly; measured from {SAMPLES} runs of A: {floor:.3f} (the noise floor)")
print(" tau   P(E)   TV(MTAD, MTJD)   bound TV(A, MTJD) + P(E)   within bound + allowance")
for tau, (law, _, rate) in sweep.items():  # the allowance: the check's slack for the same number of runs
    measured = tv(law, mtjd)
    print(f"{tau:4}  {rate:5.3f}  {measured:10.3f}  {gap + rate:18.3f}  {measured <= gap + rate + result.slack!s:>20}")

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(taus, [sweep[t][2] for t in taus], "o-", label="P(E)")
ax.plot(taus, [tv(sweep[t][0], mtjd) for t in taus], "s-", label="TV(MTAD, MTJD), measured")
ax.plot(taus, [gap + sweep[t][2] for t in taus], "--", label="bound TV(A, MTJD) + P(E)")
ax.axhline(gap, color="gray", linestyle=":", label="TV(A, MTJD), exact")
ax.axhline(floor, color="gray", linestyle="-.", label="TV(A, MTJD), measured (noise floor)")
ax.set_xscale("log")
ax.set_xticks(taus, [str(t) for t in taus])
ax.minorticks_off()
ax.set_xlabel("threshold tau")
ax.set_ylabel("probability / distance")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Read the sweep from the right. At $\tau = 4$ MTAD accepts (almost) nothing, so it is plain sampling, and its
# measured distance is of the size of the noise floor: 4,000 runs spread over 64 blocks cannot measure a distance
# of 0.03 exactly. That is why the measured value can sit a little above the bound there; the check's allowance
# (`result.slack`) covers it. As $\tau$ falls, MTAD accepts more and its law moves away from MTJD: at
# $\tau = 0.5$ the measured distance is ten times $\mathrm{TV}(A, \mathrm{MTJD})$ (at least 0.2 once its error
# bar is taken off, as the perplexity table below shows), and at $\tau = 0.25$ MTAD
# accepts in (nearly) every run, so the bound reaches 1 and says nothing. A useful bound needs $\Pr(E)$ well
# below 1, that is few accepted draft tokens: the regime where MTAD saves the least work.
#
# ## Reading the distance figures
#
# MTAD moves probability away from MTJD whenever it accepts. Where does that displacement come from?
#
# ### Where MTAD's probability goes
#
# Look at the first token. Below: $\tilde p$ (what $A$ draws), MTJD's first-token marginal, the draft's
# $\tilde q$, their ratio $\tilde p / \tilde q$ (the test of a one-token prefix), and how often MTAD's first
# token is each value in three settings, with error bars that hold except with probability $10^{-3}$ each:


# %%
def first_token(law):
    """The law of y_1 from a law over blocks (blocks in order, the first token's index the slowest)."""
    return reduce(law, "(first rest) -> first", "sum", first=V)


draft_law = oracle.token_by_token_joint(draft, prompt, k, sampler)
own_law, own_blocks, own_rate = measure(MTAD(target, 2, 2, 0.5), samples=2 * SAMPLES)  # target as its own draft
rows = {
    "p~ (token by token)": first_token(token_by_token),
    "MTJD at T = 0.7": first_token(mtjd),
    "q~ (unrelated draft)": first_token(draft_law),
    "ratio p~ / q~": first_token(token_by_token) / first_token(draft_law),
    "MTAD, draft, tau 0.5": first_token(sweep[0.5][0]),
    "MTAD, draft, tau 0.25": first_token(sweep[0.25][0]),
    "MTAD, own draft, tau 0.5": first_token(own_law),
}
print(f"{'first token':26}" + "".join(f"{t:>8}" for t in range(V)))
for name, values in rows.items():
    print(f"{name:26}" + "".join(f"{float(v):8.3f}" for v in values))
print(f"error bars on MTAD's rows: +-{hoeffding(SAMPLES):.3f} (own draft: +-{hoeffding(2 * SAMPLES):.3f})")

# %% [markdown]
# Three mechanisms show here.
#
# 1. **A deterministic test commits what the draft proposes.** Token 0 has $\tilde p / \tilde q \approx 2$:
#    whenever the heaviest beam starts with it, it is committed; otherwise it can still be drawn from $\tilde p$
#    after a rejection. Its frequency mixes the draft's proposals with $\tilde p$ (0.68 against 0.61), and no
#    random draw corrects the mix as speculative sampling's would.
# 2. **A low $\tau$ admits what the target likes less than the draft.** Token 2 has $\tilde p / \tilde q
#    \approx 0.43$. At $\tau = 0.25$ it passes, and the draft proposes it often ($\tilde q \approx 0.49$, more
#    for the heaviest of two beams): MTAD starts with token 2 in about 0.69 of the runs, against 0.21 under
#    $\tilde p$. The law moves towards the draft.
# 3. **The heaviest beam is sharper than a sample.** With the target as its own draft every ratio is exactly 1,
#    so at $\tau = 0.5$ every proposal is accepted whole, and the output is the heaviest of two beams drawn
#    from the target itself: token 0 comes out in about 0.84 of the runs against 0.61 under $\tilde p$. The
#    draft is perfect, yet the law is not MTJD's.
#
# ### Perplexity: when MTAD helps
#
# The paper's measure of quality is perplexity: $\exp$ of the mean of $-\log P$ per generated token, under the
# untempered target. For each block, $-\tfrac{1}{k} \log P(y)$ lies between its smallest and largest value over
# the 64 blocks, so Hoeffding's inequality gives an error bar for its mean over the runs:

# %%
nll = -joint.log() / k  # each block's negative log-likelihood per token under the untempered target
spread = float(nll.max() - nll.min())
base = float((token_by_token * nll).sum())  # exact, for A
print(f"{'per-token NLL (nats)':30}{'value':>8}{'perplexity':>12}   vs token by token   TV to MTJD at least")
print(f"{'token by token (exact)':30}{base:8.3f}{math.exp(base):12.3f}")
print(f"{'MTJD at T = 0.7 (exact)':30}{float((mtjd * nll).sum()):8.3f}{math.exp(float((mtjd * nll).sum())):12.3f}")
for name, (law, blocks, _) in [
    ("MTAD, own draft, tau 0.5", (own_law, own_blocks, own_rate)),
    ("MTAD, draft, tau 0.5", sweep[0.5]),
    ("MTAD, draft, tau 0.25", sweep[0.25]),
]:
    mean, error = float(nll[blocks].mean()), hoeffding(len(blocks), spread)
    verdict = "lower" if mean + error < base else "higher" if mean - error > base else "cannot tell"
    lowest = tv(law, mtjd) - tv_error(len(blocks))  # the true distance is at least this
    print(f"{name:30}{mean:8.3f}{math.exp(mean):12.3f}   {verdict:>17}   {lowest:8.3f} (vs {gap:.3f})")

# %% [markdown]
# With the target as its own draft MTAD lowers perplexity clearly, which is the paper's claim in miniature:
# the heaviest beam prefers likely blocks. Yet its law is at least several times farther from
# $\mathrm{MTJD}_{0.7}$ than plain sampling is. Lower perplexity and "closer to MTJD" are different goals:
# on this prompt $\mathrm{MTJD}_{0.7}$ hardly changes perplexity at all (compare its row with token by token),
# and MTAD's gain comes from the beam's sharpening of the law, which is what a lower temperature would do too.
# With the unrelated draft at a low $\tau$ the law moves towards the draft, and 4,000 runs cannot even tell
# whether perplexity went down. So: MTAD helps when the draft agrees with the target and $\tau$ keeps out prefixes the target
# dislikes; it moves the law whenever it accepts, by at most $\Pr(E)$ in total variation from $A$.
#
# ## MMTAD: verify every beam
#
# MTAD drafts $W$ beams and then verifies only the heaviest. The paper's ICLR 2025 version adds MMTAD: the target
# verifies **all** $W$ beams in the same one forward, as a token tree of $W$ chains under $x_0$ (shared prefixes
# are not merged). Beam $i$ passes at depth $d$ if $\log P(y^i_{1:d}) - \log Q_d > \log \tau$, with $Q_d$ the
# heaviest beam's joint $q$ of its first $d$ tokens; the step keeps the **deepest** depth at which any beam passes,
# and there the passing beam with the largest $P$. Here is the first step of one run, drawn from its record
# (`Step.candidates`: the blocks verified; `Step.proposal`: the winner):

# %%
tree_run = mtdecode.generate(target, prompt, MMTAD(draft, 2, 3, 0.5), max_new_tokens=k, temperature=0.7, seed=8)
first_step = tree_run.steps[0]
blocks = first_step.candidates
nodes = [str(token) for block in blocks for token in block]
parents = [-1 if d == 0 else i * len(block) + d - 1 for i, block in enumerate(blocks) for d in range(len(block))]
winner = blocks.index(first_step.proposal)
kept = [winner * len(first_step.proposal) + d for d in range(first_step.accepted)]
print("verified:", blocks, " winner:", first_step.proposal, " accepted:", first_step.accepted)
print("committed:", first_step.tokens)
token_tree(str(prompt[-1]), nodes, parents, kept, target_token=str(first_step.tokens[first_step.accepted]),
           title=f"MMTAD's first step: {len(blocks)} beams of 2 under x0, {first_step.accepted} tokens accepted")  # fmt: skip
plt.show()

# %% [markdown]
# Why does verifying every beam raise acceptance? With the default denominator, MTAD's test of the heaviest beam
# is one of MMTAD's tests, so on the same beams MMTAD accepts at least as deep, and deeper whenever a lighter beam
# is one the target likes more. Measured on our pair with the same $k$, $W$ and $\tau$, the rate of $E$ (some
# token accepted) and the accepted tokens per step:

# %%
for name, strategy in (("MTAD", MTAD(draft, 2, 3, 0.5)), ("MMTAD", MMTAD(draft, 2, 3, 0.5))):
    run = sampled_run(target, [list(prompt)] * 1000, strategy, k, sampler, seed=0)
    rate = len({step.row for step in run.steps if step.accepted}) / 1000
    per_step = sum(step.accepted for step in run.steps) / len(run.steps)
    print(f"{name:6s} P(E) = {rate:.3f}, accepted tokens per step {per_step:.3f}")

# %% [markdown]
# The bound of this notebook holds for MMTAD unchanged (a step that accepts nothing commits the target's own
# draw, made independently of the beams), with $E$ now "some beam passes"; a larger $\Pr(E)$ loosens it.
# `tests/test_mtad_sampling.py` checks it at a false-alarm rate of $10^{-3}$.
#
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it: run the check, and it tells
# you whether the answer is right, with a hint when it is not.

# %% [markdown]
# **Exercise 6.1.** Is greedy decoding MTJD at $T = 0$? Answer for the prompt `[2, 2]`: put the block greedy
# decoding gives (its first $k$ tokens, a list) in `greedy`, and the block MTJD takes at $T = 0$ in `mode`.

# %% tags=["solution"] answer="greedy, mode"
greedy = greedy_block(target, [2, 2])  # the most likely token at each position in turn
mode = oracle.most_likely_block(target, [2, 2], k)  # the most likely block: MTJD as T -> 0
print("greedy:", greedy, "MTJD at T = 0:", mode, "- not the same block, so greedy is not MTJD at T = 0")

# %% tags=["check"] wrong="greedy = mode = greedy_block(target, [2, 2])"
course.check("6.1", (greedy, mode), (greedy_block(target, [2, 2]), oracle.most_likely_block(target, [2, 2], k)),
             hint="greedy maximises each token; MTJD at T = 0 maximises the joint probability of the block")  # fmt: skip

# %% [markdown]
# **Exercise 6.2.** With the target as its own draft and enough beams to cover every block
# ($W = V^{k-1} = 16$), greedy MTAD's beam search is exhaustive. Decode `prompt` greedily with
# `MTAD(target, k, beam_width=16)` and put the block its first step proposed (`run.steps[0].proposal`, as a list)
# in `proposal`.

# %% tags=["solution"] answer="proposal"
run = mtdecode.generate(target, prompt, MTAD(target, k, beam_width=V ** (k - 1)), max_new_tokens=k + 1)
proposal = list(run.steps[0].proposal)
print("proposal:", proposal, "most likely block:", best)  # an exhaustive beam search finds the best block

# %% tags=["check"] wrong="proposal = greedy_block(target, prompt)"
course.check("6.2", proposal, best, hint="an exhaustive beam search ranks whole blocks by their joint probability")

# %% [markdown]
# **Exercise 6.3.** Use the target as its own draft, so that every prefix has $P/Q = 1$. Without running anything,
# what is $\Pr(E)$ for $\tau = 0.9$ and for $\tau = 1.5$? Put the two numbers in `p_e_low` and `p_e_high`.

# %% tags=["solution"] answer="p_e_low, p_e_high"
# a ratio of 1 passes every tau below 1 (the first step accepts at least one token) and no tau of 1 or more
p_e_low, p_e_high = 1.0, 0.0
_, _, measured_low = measure(MTAD(target, 2, 2, 0.9), samples=200)
_, _, measured_high = measure(MTAD(target, 2, 2, 1.5), samples=200)
print("measured:", measured_low, measured_high, "- at tau 1.5 the bound is TV(A, MTJD) alone: MTAD is A")

# %% tags=["check"] wrong="p_e_low, p_e_high = 1.0, 1.0"
course.check("6.3", (p_e_low, p_e_high), (1.0, 0.0), hint="a prefix is accepted only if P/Q is strictly above tau")

# %% [markdown]
# **Exercise 6.4.** At $\tau = 4$ MTAD accepts almost nothing, yet the measured $\mathrm{TV}(\mathrm{MTAD},
# \mathrm{MTJD})$ is above the exact $\mathrm{TV}(A, \mathrm{MTJD})$ and may even exceed the bound. Why does that
# not contradict the bound? Put a letter in `why`: (a) the bound only holds at $T = 1$; (b) a distance measured
# from 4,000 runs over 64 blocks carries sampling noise, as the measured distance of plain sampling itself shows
# (the noise floor), and the check allows for it; (c) at a high $\tau$ MTAD draws its own token from the draft.

# %% tags=["solution"] answer="why"
why = "b"  # compare the tau = 4 row with the noise floor printed above the sweep table

# %% tags=["check"] wrong="why = 'c'"
course.check("6.4", why, "b", hint="measure plain sampling the same way: how far from MTJD does it land?")


# %% [markdown]
# **Exercise 6.5.** One MMTAD step verified three beams of three tokens. `ratios[i][d]` below is
# $\log P(y^i_{1:d+1}) - \log Q_{d+1}$ and `joint[i][d]` is $\log P(y^i_{1:d+1})$. With $\tau = 0.5$
# ($\log \tau \approx -0.69$), how many tokens does the step accept, and which beam wins? Put the pair
# `(n, winner)` in `outcome` (beams numbered from 0).

# %%
ratios = [[-0.2, -0.9, -1.5], [-0.5, -0.6, -2.0], [-0.1, -0.3, -0.8]]
joint = [[-0.9, -2.1, -3.6], [-1.2, -2.0, -4.1], [-1.1, -1.9, -3.3]]

# %% tags=["solution"] answer="outcome"
# depth 3 (column 2): nobody passes (-1.5, -2.0 and -0.8 are all below -0.69); depth 2: beams 1 and 2 pass
# (-0.6 and -0.3); the winner is the passing beam with the larger log P at depth 2: beam 2 (-1.9 > -2.0)
outcome = (2, 2)

# %% tags=["check"] wrong="outcome = (1, 0)"
passes = [[r > math.log(0.5) for r in row] for row in ratios]
deepest = max((d + 1 for row in passes for d, ok in enumerate(row) if ok), default=0)
winning = max((i for i in range(3) if passes[i][deepest - 1]), key=lambda i: joint[i][deepest - 1])
course.check("6.5", outcome, (deepest, winning),
             hint="look for the deepest column where some ratio exceeds log tau, then compare log P there")  # fmt: skip
