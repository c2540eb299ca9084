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
from transformers.utils import logging

import mtdecode
from mtdecode import tuning
from mtdecode.masks import figures
from mtdecode.strategies import Autoregressive, Lookahead
from mtdecode.strategies.lookahead import NgramPool

logging.disable_progress_bar()

# %% [markdown]
# ## Jacobi iteration on a real sentence
#
# **Uses SmolLM2.** Greedy decoding of m tokens solves m equations, y_i = argmax p(. | prompt, y_1..y_{i-1}),
# one after another. Jacobi iteration solves them all at once: guess all m, recompute every y_i from the
# current guesses in one forward pass, repeat. Position 1 is right after one pass; often several converge
# together. Here is the whole trajectory for a block of 8, starting from guesses copied from the prompt.

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
# ## One lookahead step
#
# Lookahead decoding puts the window (N-1 rows of W) and G candidate n-grams from the pool in **one**
# forward pass. Its mask keeps them apart: window cell (r, j) sees row 0 up to column j and column j down
# to row r; a candidate sees x0 and its own earlier tokens. W = 3, N = 3, G = 2 over 2 cached tokens:

# %%
figures.lookahead_mask(3, 3, 2, figures.prefix_names(2)).plot()
plt.show()

# %% [markdown]
# ## W, N and G on this machine
#
# A step feeds (W + G)(N - 1) tokens. On a large GPU a forward over 56 tokens costs about what a forward
# over 1 does, which is why the paper's defaults are W = 7, N = 5, G = 7. On a CPU the cost grows with the
# number of tokens. `mtdecode.tuning` measures it once per model, device and host, and keeps it on disk:

# %%
costs = tuning.forward_costs(smol)
sizes = sorted(costs)
fig, ax = plt.subplots(figsize=(6, 3))
ax.plot(sizes, [tuning.relative_cost(costs, n) for n in sizes], "o-")
ax.set_xlabel("new tokens in one forward")
ax.set_ylabel("cost / cost of 1 token")
ax.set_title("this machine's forward-cost curve (SmolLM2)")
plt.show()

# %% [markdown]
# With a simple model of how often a candidate's next token is right (`tuning.HIT_RATE`, fitted on chat),
# the predicted speed-up is (expected tokens per step) / (relative cost of the step's input). Here it is for
# N = 3 over W and G; `Lookahead(prompt_pool=False)` picks the best (W, N, G) over a larger grid. The default
# `Lookahead()` also seeds its pool with the prompt's n-grams, whose hit rate (`tuning.PROMPT_POOL_HIT_RATE`,
# fitted on code editing) is higher, and then verifies only the candidates that have been paying.

# %%
grid = torch.zeros(8, 9)
for w in range(1, 9):
    for g in range(0, 9):
        tokens = tuning.expected_tokens(w, 3, g, tuning.HIT_RATE)
        grid[w - 1, g] = tokens / tuning.relative_cost(costs, (w + g) * 2)
fig, ax = plt.subplots(figsize=(6, 4))
image = ax.imshow(grid, origin="lower", extent=(-0.5, 8.5, 0.5, 8.5), cmap="viridis")
fig.colorbar(image, label="predicted speed-up over greedy")
ax.set_xlabel("G (candidates verified)")
ax.set_ylabel("W (window width)")
plt.show()
print("Lookahead(prompt_pool=False) picks (W, N, G) =", tuning.choose(costs))
print("Lookahead() picks (W, N, G) =", tuning.choose(costs, prompt_pool=True))

# %% [markdown]
# And measured, side by side with greedy on our prompt (both give the same tokens):

# %%
contenders = {"greedy": Autoregressive(), "Lookahead() (tuned)": Lookahead(), "Lookahead(7, 5, 7)": Lookahead(7, 5, 7, prompt_pool=False)}
for name, strategy in contenders.items():
    s = mtdecode.generate(smol, prompt, strategy, max_new_tokens=32, seed=0).stats
    print(f"{name:20} {s.tokens_per_forward:.2f} tokens per forward, {s.tokens_per_second:.1f} tokens/s")

# %% [markdown]
# ## Exercises
#
# 1. How many iterations did Jacobi need until all 8 positions equalled greedy's? Why can it never need
#    more than 8?
# 2. Using `tuning.expected_tokens`, compute the expected tokens per step for W = 7, N = 5, G = 7 and the
#    relative cost of its input on this machine. Is it predicted to win?
# 3. Why does an EOS token in the window's new row need special care (hint: the window slides on)?

# %% tags=["solution"]
# 1. Position i is right once positions 1..i-1 are: after at most i iterations, so at most 8.
first_all_right = next(i for i, row in enumerate(trajectory) if row == greedy)
print("all right after iteration", first_all_right)
# 2.
tokens = tuning.expected_tokens(7, 5, 7, tuning.HIT_RATE)
cost = tuning.relative_cost(costs, (7 + 7) * 4)
print(f"{tokens:.2f} tokens per step at {cost:.2f}x the cost of a 1-token forward: speed-up {tokens / cost:.2f}")
# 3. The window's guesses continue past an EOS into text that will never be generated; n-grams with it
#    would be verified after the end. The paper's code replaces it with a prompt token.
