# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 2. The KV cache and attention masks
#
# **Learning goals.** After this notebook you can
#
# 1. say what one KV-cache entry is, and why the newest committed token is never in the cache;
# 2. use the cache's three operations, `commit`, `crop` and `keep` (compaction), and check the result
#    against a fresh forward pass;
# 3. predict, then draw, the causal, tree and lookahead masks;
# 4. explain how a batch of rows with different lengths shares one cache (holes, positions, packing).
#
# **Time:** 30 minutes. **Prerequisites:** notebook 1; attention: each token's query is compared with the
# keys of the tokens it may see, and a mask decides which. Runs in about 10 seconds on a 2-core CPU.

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
import torch

from mtdecode import CausalLM, Runner, course, masks
from mtdecode.masks import figures
from mtdecode.testing import tiny_model
from mtdecode.testing.tolerance import rounding_tolerance

model = CausalLM(tiny_model("llama", vocab_size=64, seed=1))  # float64, CPU

# %% [markdown]
# ## What a cache entry is
#
# When the model reads a token, every layer computes a key and a value for it. Later tokens attend to
# them, so a decoder keeps them: the **KV cache**, one key and one value tensor per layer, one column per
# token read. A `Runner` binds a model to one cache; `runner.extend(tokens)` feeds tokens left to right
# after what the cache holds. New entries are **pending** until the strategy says what to keep.

# %%
runner = Runner(model, role="target")
cache = runner.cache
runner.extend([5, 9, 2])
print(cache)  # three pending entries
cache.commit()
print(cache)
keys = cache.hf_cache.layers[0].keys
print("layer 0 keys:", tuple(keys.shape), "= (batch, kv heads, columns, head dim)")

# %% [markdown]
# ## Crop: keep a prefix, drop the tail
#
# Speculative decoding feeds guesses and keeps only the accepted ones. Feed three guesses, keep the
# first: `crop(4)` keeps the entries at positions 0 to 3.

# %%
runner.extend([7, 8, 9])
cache.crop(4)
committed = [5, 9, 2, 7]
print(cache)

# %% [markdown]
# ## Keep: compaction after a tree
#
# Lookahead and MTAD feed several alternatives in one pass, as a tree. `parents[i]` is node i's parent
# (-1: it hangs off the cached tokens). Each node is computed at position "cached length + depth", seeing
# only its ancestors, so any root-to-leaf path is exactly what a left-to-right pass would have computed.
# After verification, `keep(path)` keeps that path's entries, in order, and drops the rest.

# %%
parents = [-1, 0, 0, 1]  # 11 -> {12, 13}, 12 -> 14
runner.forward(torch.tensor([[11, 12, 13, 14]]), masks.tree_positions(parents), masks.tree(parents))
cache.keep([0, 1, 3])  # the path 11 -> 12 -> 14
committed += [11, 12, 14]
print(cache)

# %% [markdown]
# Does the edited cache still describe the committed text? Feed one more token and compare with a fresh
# forward over the committed tokens: equal up to float64 rounding.

# %%
got = runner.extend([20])[0, -1]
fresh = Runner(model, role="fresh").extend(committed + [20])[0, -1]
print("largest difference:", float((got - fresh).abs().max()))
print("rounding tolerance:", rounding_tolerance(model, fresh, keys=len(committed) + 1))

# %% [markdown]
# ## Masks: predict, then draw
#
# A mask has one row per token fed (query) and one column per token it may look at (key): the cached
# tokens, then the new ones. **Before running the next cell**, sketch on paper the mask for 2 cached
# tokens and 3 new ones fed left to right. Then compare.

# %%
figures.causal_mask(3, figures.prefix_names(2)).plot()
plt.show()

# %% [markdown]
# Now predict the tree `parents = [-1, 0, 0, 1, -1]` over 2 cached tokens: which new tokens does node 3
# see? Node 4?

# %%
figures.tree_mask([-1, 0, 0, 1, -1], figures.prefix_names(2)).plot()
plt.show()

# %% [markdown]
# Lookahead decoding (notebook 4) feeds a Jacobi window and candidate n-grams in one pass. Cell (r, j) of
# the window sees row 0 up to column j and column j down to row r; a candidate sees x0 and its own
# earlier tokens. Predict the mask for W = 3, N = 3 (two rows) and G = 1 candidate of 2 tokens.

# %%
figures.lookahead_mask(3, 3, 1, figures.prefix_names(2)).plot()
plt.show()

# %% [markdown]
# ## A batch: holes, positions, packing
#
# A batch shares one key tensor, but its rows hold different numbers of tokens (other prompt lengths,
# other numbers of accepted guesses). So a column need not hold an entry of every row: the cache keeps,
# per row and column, whether it holds an entry (`valid`) and at which position. A **hole** is hidden by
# the mask; attention ignores the order of keys, so a hole costs a masked column and nothing else.

# %%
runner = Runner(model, role="target")
runner.extend([[5, 9, 2, 7], [3, 1]])  # the shorter row is left-padded; padding never becomes an entry
runner.cache.commit()
runner.extend([[8, 8, 8], [6, 6, 6]])  # x0 and two guesses in each row
runner.cache.crop([6, 5])  # row 0 keeps 2 of its 3 new entries, row 1 all 3
print("lengths:", runner.cache.lengths.tolist())
print(runner.cache.valid.int())

# %% [markdown]
# The strategy builds only the structure among the new tokens; `masks.place` puts it after each row's
# own entries. Here: verifying x0 and 2 guesses over rows that hold 5, 3 and 4 tokens.

# %%
figures.plot_batch(figures.batch_mask(2))
plt.show()

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it that grades the answer.

# %% [markdown]
# **Exercise 2.1.** After `[5, 9, 2]`, feed a tree with `parents = [-1, -1]`: two *alternative* next tokens,
# 3 and 4. Then call `keep([0, 1])` as if they were a path, feed token 5, and compare its logits with a fresh
# forward over `[5, 9, 2, 3, 4, 5]`. Is the largest difference within the rounding tolerance? Put `True` or
# `False` in `same_as_fresh`, and the reason in `why`: (a) keep() reorders the entries; (b) token 4 never
# attended to token 3, and both sit at the same position, but the cache now claims 4 came after 3; (c) the
# tree mask hides the cached tokens from both nodes.

# %% tags=["solution"] answer="same_as_fresh, why"
tree_runner = Runner(model, role="target")
tree_runner.extend([5, 9, 2])
tree_runner.cache.commit()
tree_runner.forward(torch.tensor([[3, 4]]), masks.tree_positions([-1, -1]), masks.tree([-1, -1]))
tree_runner.cache.keep([0, 1])
got = tree_runner.extend([5])[0, -1]
fresh = Runner(model, role="fresh").extend([5, 9, 2, 3, 4, 5])[0, -1]
print("difference:", float((got - fresh).abs().max()))  # far above rounding
same_as_fresh, why = False, "b"

# %% tags=["check"] wrong="same_as_fresh, why = True, 'b'"
_runner = Runner(model, role="check")
_runner.extend([5, 9, 2])
_runner.cache.commit()
_runner.forward(torch.tensor([[3, 4]]), masks.tree_positions([-1, -1]), masks.tree([-1, -1]))
_runner.cache.keep([0, 1])
_got, _fresh = _runner.extend([5])[0, -1], Runner(model, role="fresh").extend([5, 9, 2, 3, 4, 5])[0, -1]
_within = bool((_got - _fresh).abs().max() <= rounding_tolerance(model, _fresh, keys=6))
course.check("2.1", (same_as_fresh, why), (_within, "b"), hint="which keys did node 4 attend to when it was fed?")

# %% [markdown]
# **Exercise 2.2.** A tree node at depth d is fed at position "cached length + d". Put in `positions` the
# positions `masks.tree_positions` gives the tree `parents = [-1, 0, 0, 1, -1]` (depths counted from 0, as
# offsets after the cache), working them out by hand first.

# %% tags=["solution"] answer="positions"
positions = [0, 1, 1, 2, 0]  # a node's depth: roots 0, their children 1, grandchildren 2; siblings share one

# %% tags=["check"] wrong="positions = [0, 1, 2, 3, 4]"
course.check("2.2", positions, masks.tree_positions([-1, 0, 0, 1, -1]).flatten().tolist(),
             hint="a node sits one position after its parent, whatever order it was fed in")  # fmt: skip

# %% [markdown]
# **Exercise 2.3.** In the batch section, `runner.cache.valid` shows which columns hold an entry. Which
# columns are holes for row 1 (the row whose prompt had 2 tokens)? Put their indices in `holes`, in order.

# %% tags=["solution"] answer="holes"
holes = [c for c in range(runner.cache.valid.shape[1]) if not runner.cache.valid[1, c]]
print(holes)  # row 1's 2 prompt tokens sit in columns 0-1; columns 2-3, where row 0's longer prompt went on, stay empty

# %% tags=["check"] wrong="holes = [0, 1]"
course.check("2.3", holes, torch.nonzero(~runner.cache.valid[1]).flatten().tolist(),
             hint="print `runner.cache.valid`: row 1 is its second line")  # fmt: skip
