# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 4. Jacobi and lookahead decoding
#
# **Learning goals.** After this notebook you can
#
# 1. run Jacobi iteration by hand on a real sentence and watch guesses converge;
# 2. explain how lookahead decoding harvests n-grams from the Jacobi trajectory into a pool;
# 3. read one lookahead step's input and mask (window and candidates in one forward pass);
# 4. choose W, N and G from this machine's measured forward-cost curve, and say why the paper's
#    GPU defaults lose on a small CPU.
#
# **Time:** 40 minutes. **Prerequisites:** notebooks 1 to 3 (greedy decoding, masks, verification).
# Runs in about 30 seconds on a 2-core CPU; all but the mask cell use SmolLM2.

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
import torch
from einops import rearrange
from transformers.utils import logging

import mtdecode
from mtdecode import course
from mtdecode.costs import curves, timing
from mtdecode.masks import figures
from mtdecode.policy import search
from mtdecode.strategies import Autoregressive, Lookahead
from mtdecode.strategies.lookahead import NgramPool

logging.disable_progress_bar()
timing.use_reference_costs()  # costs measured once on an idle reference host, not under today's load (see below)

# %% [markdown]
# ## Jacobi iteration on a real sentence
#
# **Uses SmolLM2.** Greedy decoding of $m$ tokens solves $m$ equations, $y_i = \operatorname{argmax}_y p(y \mid \text{prompt}, y_{<i})$,
# one after another. Jacobi iteration solves them all at once: guess all $m$, recompute every $y_i$ from the
# current guesses in one forward pass, repeat. Position 1 is right after one pass, and position $i$ after at
# most $i$ passes; more than one position per pass is right only when a guess already was. Here is the whole
# trajectory for a block of 8, starting from guesses copied from the prompt: count how many come right per pass.

# %%
smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
prompt = tokenizer.apply_chat_template(
    [{"role": "user", "content": "Name the planets of the solar system in order."}], add_generation_prompt=True
)["input_ids"]
block = 8
guesses = prompt[-block:]  # any start converges; prompt tokens are a cheap one
trajectory = [guesses]
for _ in range(block):
    with torch.no_grad():
        logits = smol.hf(torch.tensor([prompt + guesses])).logits[0, len(prompt) - 1 : -1]
    guesses = logits.argmax(-1).tolist()  # every position recomputed from the previous guesses
    trajectory.append(guesses)
greedy = mtdecode.generate(smol, prompt, Autoregressive(), max_new_tokens=block).row(0)
for i, row in enumerate(trajectory):
    right = sum(1 for a, b in zip(row, greedy, strict=True) if a == b)
    print(f"iteration {i}: {tokenizer.decode(row)!r:60} ({right} of {block} equal greedy's)")

# %% [markdown]
# ## The n-gram pool
#
# The guesses that Jacobi makes after a wrong token are conditioned on that wrong token, so plain Jacobi
# rarely converges more than one token per pass. Lookahead decoding keeps the trajectory anyway and reads
# n-grams out of it. Which tokens belong together? Our trajectory is stored by position: `trajectory[i][j]`
# is iteration i's guess for position j. Iteration i + 1 computes position j + 1 from the guess at position j
# of iteration i, so the pair that the model wrote *as a continuation* is (iteration i, position j) followed by
# (iteration i + 1, position j + 1). An n-gram therefore runs **diagonally** through the trajectory:
#
# `trajectory[i][j], trajectory[i + 1][j + 1], ..., trajectory[i + n - 1][j + n - 1]`
#
# (Reading one position down the iterations instead, `trajectory[i][j], trajectory[i + 1][j]`, pairs two guesses
# for the *same* position: not a continuation at all.) Lookahead decoding's window stores the last N-1
# iterations shifted by one position per row, so that each of its columns is such a diagonal. The n-grams go
# into a pool keyed by their first token; a later step verifies pool n-grams that start with its newest
# token. Here are the 3-grams of our trajectory.

# %% tags=["ngram-pool"]
n = 3
pool = NgramPool(per_key=4)
for i in range(len(trajectory) - n + 1):  # the first iteration of the n-gram
    for j in range(len(trajectory[i]) - n + 1):  # its first position
        pool.add([trajectory[i + k][j + k] for k in range(n)])  # one step down, one step right

# %%
text = tokenizer.convert_ids_to_tokens
for key in list(pool.table)[:8]:
    print(f"{text([key])[0]!r:>14} ->", [text(list(rest)) for rest in pool.candidates(key, length=2)])

# %% [markdown]
# The same diagonals in a real run. `mtdecode.figures.record_steps` runs `Lookahead(4, 4, 3)` (W = 4,
# N = 4, G = 3) on our prompt and records each step's window. The figure draws window cell (r, j) at the
# position the step gives it, s + r + j, where s is the position of x0, the newest committed token (grey).
# Each column of the window, read down its N - 1 rows, is a diagonal in positions, and it ends in the target's
# prediction under the last row (dashed): one 4-gram for the pool per colour, W of them per step.

# %%
import mtdecode.figures

recorded = mtdecode.figures.record_steps(
    smol, prompt, Lookahead(4, 4, 3), max_new_tokens=10, seed=0, text=mtdecode.figures.token_text(tokenizer)
)
example = max(recorded, key=lambda step: (step.full, step.accepted))  # a full window; the most tokens accepted
mtdecode.figures.lookahead_window(example.window, example.predictions)
plt.show()

# %% [markdown]
# ## One lookahead step
#
# Lookahead decoding puts the window (N-1 rows of W) and G candidate n-grams from the pool in **one**
# forward pass. Its mask keeps them apart: window cell (r, j) sees row 0 up to column j and column j down
# to row r; a candidate sees x0 and its own earlier tokens. W = 3, N = 3, G = 2 over 2 cached tokens:

# %%
figures.lookahead_mask(3, 3, 2, figures.prefix_names(2)).plot()
plt.show()

# %% [markdown]
# The forward takes one sequence per row, so the G candidates of N - 1 tokens go in one after another, and the
# logits that come out are cut back into candidates. `einops` says both moves with the axes' names (the same
# names as the library's shape annotations, `candidate length`), where a bare `reshape` would need a comment:

# %%
candidates = torch.tensor([[11, 12], [21, 22]])  # G = 2 candidates of N - 1 = 2 tokens
fed = rearrange(candidates, "candidate length -> (candidate length)")  # the order they enter the forward
print("fed:", fed.tolist())
logits = torch.randn(4, 5)  # one row of scores over a 5-token vocabulary per fed token
after = rearrange(logits, "(candidate length) vocab -> candidate length vocab", candidate=2)
print("back to candidates:", tuple(after.shape), "; candidate 1's second token's scores are row 3:",
      torch.equal(after[1, 1], logits[3]))  # fmt: skip

# %% [markdown]
# Here is the step of our run drawn above, now with its verification branch: the pool's n-grams keyed by x0,
# each a guess for the next N - 1 tokens, which sit at positions s + 1, s + 2, ... as they would if accepted.
# The target accepted the green prefix; the step committed those tokens and one token of the target's own
# (orange). A candidate that wins was harvested from an earlier step's window, or from the prompt.

# %%
mtdecode.figures.lookahead_window(example.window, example.predictions, example.candidates, example.chosen,
                                  example.accepted, committed=example.committed)  # fmt: skip
plt.show()

# %% [markdown]
# ## W, N and G on this machine
#
# A step feeds (W + G)(N - 1) tokens. On a large GPU a forward over 56 tokens costs about what a forward
# over 1 does, which is why the paper's defaults are W = 7, N = 5, G = 7. On a CPU the cost grows with the
# number of tokens. `mtdecode.costs` measures it once per model, device and host, and keeps it on disk.
# This notebook uses the **reference costs** that ship with mtdecode instead (`timing.use_reference_costs()`
# in the first cell): SmolLM2's costs measured once on an idle 2-core CPU, listed in the docs' measurements
# page. So every number below is the same on every machine, and a busy class server cannot change a
# conclusion. Leave that call out to measure your own machine (it takes a minute, once).

# %%
costs = timing.forward_costs(smol)
sizes = sorted(costs)
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(sizes, [curves.relative_cost(costs, n) for n in sizes], "o-")
ax.set_xlabel("new tokens in one forward")
ax.set_ylabel("cost / cost of 1 token")
ax.set_title("this machine's forward-cost curve (SmolLM2)")
plt.show()

# %% [markdown]
# With a simple model of how often a candidate's next token is right (`search.HIT_RATE`, fitted on chat),
# the predicted speed-up is (expected tokens per step) / (relative cost of the step's input). Here it is for
# N = 3 over W and G; `Lookahead(prompt_pool=False)` picks the best (W, N, G) over a larger grid. The default
# `Lookahead()` also seeds its pool with the prompt's n-grams, whose hit rate (`search.PROMPT_POOL_HIT_RATE`,
# fitted on code editing) is higher, and then verifies only the candidates that have been paying.

# %%
grid = torch.zeros(8, 9)
for w in range(1, 9):
    for g in range(0, 9):
        tokens = search.expected_tokens(w, 3, g, search.HIT_RATE)
        grid[w - 1, g] = tokens / curves.relative_cost(costs, (w + g) * 2)
fig, ax = plt.subplots(figsize=(6, 4))
image = ax.imshow(grid, origin="lower", extent=(-0.5, 8.5, 0.5, 8.5), cmap="viridis")
fig.colorbar(image, label="predicted speed-up over greedy")
ax.set_xlabel("G (candidates verified)")
ax.set_ylabel("W (window width)")
plt.show()
print("Lookahead(prompt_pool=False) picks (W, N, G) =", search.choose(costs))
print("Lookahead() picks (W, N, G) =", search.choose(costs, prompt_pool=True))

# %% [markdown]
# Now run them on our prompt. Tokens per forward is a count, the same on every machine. The time each run
# takes depends on this machine and its load right now: the cost model turns the count into a prediction
# that does not. `stats.choices` says what the tuned `Lookahead()` chose and why.

# %%
contenders = {
    "greedy": Autoregressive(),
    "Lookahead() (tuned)": Lookahead(),
    "Lookahead(7, 5, 7)": Lookahead(7, 5, 7, prompt_pool=False),
}
results = {name: mtdecode.generate(smol, prompt, strategy, max_new_tokens=32, seed=0)
           for name, strategy in contenders.items()}  # fmt: skip
for name, result in results.items():
    s = result.stats
    assert result.row(0) == results["greedy"].row(0)  # exact: every contender gives greedy's tokens
    print(f"{name:20} {s.tokens_per_forward:.2f} tokens per forward ({s.tokens_per_second:.1f} tokens/s here, now)")
    for choice in s.choices:
        print(" " * 22 + str(choice))

# %% [markdown]
# Read the counts. On this chat prompt the pool seldom holds the continuation, so the tuned `Lookahead()` commits
# barely more than one token per forward, while each of its forwards feeds more tokens than greedy's: it cannot
# be faster here, whatever the clock says. `Lookahead(7, 5, 7)` commits more per forward, but each forward feeds
# 56 tokens, and the cost curve above says what that costs on a CPU. Guessing pays where the text repeats itself:
# notebook 5 measures it on a code edit.

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it that grades the answer.

# %% [markdown]
# **Exercise 4.1.** How many Jacobi iterations did the block of 8 above need until every position equalled
# greedy's? Put the number in `iterations` (iteration 0 is the starting guess; count from the `trajectory`).

# %% tags=["solution"] answer="iterations"
# Position i is right once positions 1..i-1 are, so `block` iterations always suffice; often fewer do.
iterations = next(i for i, row in enumerate(trajectory) if row == greedy)
print("all right after iteration", iterations)

# %% tags=["check"] wrong="iterations = len([row for row in trajectory if row != greedy]) + 1"
course.check("4.1", iterations, min(i for i, row in enumerate(trajectory) if row == greedy),
             hint="find the first row of `trajectory` that equals `greedy`")  # fmt: skip

# %% [markdown]
# **Exercise 4.2.** The paper's GPU defaults are W = 7, N = 5, G = 7. With `search.expected_tokens` (at
# `search.HIT_RATE`) and `curves.relative_cost` on the course's `costs`, compute the predicted speed-up over
# greedy (tokens per step over the step's relative cost) and put it in `speedup`.

# %% tags=["solution"] answer="speedup"
tokens = search.expected_tokens(7, 5, 7, search.HIT_RATE)
cost = curves.relative_cost(costs, (7 + 7) * (5 - 1))  # a step feeds (W + G)(N - 1) tokens
speedup = tokens / cost
print(f"{tokens:.2f} tokens per step at {cost:.2f}x the cost of a 1-token forward: predicted {speedup:.2f}x greedy")

# %% tags=["check"] wrong="speedup = search.expected_tokens(7, 5, 7, search.HIT_RATE)"
course.check("4.2", speedup, search.predicted_speedup(costs, 7, 5, 7), tolerance=1e-9,
             hint="divide by the relative cost of (W + G)(N - 1) tokens")  # fmt: skip

# %% [markdown]
# **Exercise 4.3.** Which 3-gram does the pool take from the trajectory starting at iteration 1, position 2?
# Put its three token ids, in order, in `ngram`.

# %% tags=["solution"] answer="ngram"
ngram = [trajectory[1 + k][2 + k] for k in range(3)]  # one iteration down, one position right, each token
print(tokenizer.convert_ids_to_tokens(ngram))

# %% tags=["check"] wrong="ngram = [trajectory[1 + k][2] for k in range(3)]"
course.check("4.3", ngram, [trajectory[1][2], trajectory[2][3], trajectory[3][4]],
             hint="iteration i + 1 computed position j + 1 from iteration i's guess at position j")  # fmt: skip
