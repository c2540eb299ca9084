# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 5. Prompt lookup: when copying pays
#
# **Learning goals.** After this notebook you can
#
# 1. explain prompt-lookup decoding: the text so far is the draft;
# 2. predict on which tasks it helps (the answer quotes its prompt) and on which it does not;
# 3. measure it on SmolLM2: tokens per forward, and which steps copied what;
# 4. say what a copy adds to EAGLE's tree of guesses, and where.
#
# **Time:** 20 minutes. **Prerequisites:** notebooks 1 and 3 (greedy verification of guesses).
# Runs in about 30 seconds on a 2-core CPU; the measurements use SmolLM2.

# %%
import warnings

warnings.filterwarnings("ignore", message="IProgress not found")  # no widget library: plain progress bars

import matplotlib.pyplot as plt
from transformers.utils import logging

import mtdecode
from mtdecode.bench import load_suite
from mtdecode.strategies import Autoregressive, Eagle, PromptLookup
from mtdecode.strategies.prompt_lookup import lookup

logging.disable_progress_bar()

# %% [markdown]
# ## The idea
#
# When an answer quotes its prompt (editing code, summarising a passage, answering over a document), the
# tokens after the latest n-gram usually continue as they did the last time that n-gram appeared.
# `lookup(tokens, ngram, k)` finds the most recent earlier occurrence of the last `ngram` tokens (falling
# back to shorter n-grams) and copies the k tokens after it. The target verifies the copy in one forward
# pass and keeps its longest right prefix, plus one token of its own: exact, like every verifier here.

# %%
text = [7, 1, 2, 3, 4, 5, 9, 9, 1, 2]
print("copied:", lookup(text, ngram=2, k=3))  # [1, 2] occurred before, followed by 3, 4, 5

# %% [markdown]
# ## Code editing against chat (SmolLM2)
#
# **Uses SmolLM2.** Two prompts from mtdecode's benchmark suite: a code edit (the answer repeats the
# function with one change) and a chat question (the answer is new text).

# %%
smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
tasks = load_suite()["tasks"]
prompts = {
    name: tokenizer.apply_chat_template(tasks[name]["prompts"][0], add_generation_prompt=True)["input_ids"]
    for name in ("code", "chat")
}
results = {}
for name, prompt in prompts.items():
    for strategy in (Autoregressive(), PromptLookup(ngram=3, num_draft_tokens=10)):
        result = mtdecode.generate(smol, prompt, strategy, max_new_tokens=40, eos_token_id=tokenizer.eos_token_id)
        results[name, type(strategy).__name__] = result
        s = result.stats
        print(
            f"{name:5} {type(strategy).__name__:15} {s.new_tokens} tokens, {s.tokens_per_forward:.2f} per forward, "
            f"{s.tokens_per_second:.1f} tokens/s"
        )
    assert results[name, "PromptLookup"].row(0) == results[name, "Autoregressive"].row(0)  # exact

# %% [markdown]
# Tokens committed by each target forward pass: the code edit copies long runs, the chat answer almost never.

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3), sharey=True)
for ax, name in zip(axes, prompts, strict=True):
    steps = results[name, "PromptLookup"].steps
    ax.bar(range(len(steps)), [len(step.tokens) for step in steps])
    ax.set_title(f"{name}: {len(steps)} forwards for {sum(len(s.tokens) for s in steps)} tokens")
    ax.set_xlabel("target forward")
axes[0].set_ylabel("tokens committed")
plt.show()

# %% [markdown]
# What did the longest copies contain?

# %%
steps = sorted(results["code", "PromptLookup"].steps, key=lambda step: -step.accepted)[:3]
for step in steps:
    print(f"{step.accepted} guesses accepted: {tokenizer.decode(step.tokens)!r}")

# %% [markdown]
# Copying is not free: a forward over 11 tokens costs more than one over 1 on a CPU (notebook 4 measured
# how much), and on chat most of those guesses are rejected. Prompt lookup pays where answers quote.
#
# ## A copy inside a tree (EAGLE)
#
# EAGLE (notebook 3) drafts a tree from the target's own features, a few tokens deep. `Eagle()` also grafts
# prompt lookup's copy onto that tree as one more branch: down the tree while a node carries the copy's next
# token, then as new nodes. The copy's nodes are worth the chance that the copy holds that far (this row's
# record, as `PromptLookup` keeps it), and the one verification forward checks the head's guesses and the copy
# together. `Eagle(lookup=0)` is the head's tree alone.

# %%
another = {  # a longer code edit from the suite (its answer quotes more), and the chat question
    "code": tokenizer.apply_chat_template(tasks["code"]["prompts"][2], add_generation_prompt=True)["input_ids"],
    "chat": prompts["chat"],
}
for name, prompt in another.items():
    greedy = mtdecode.generate(smol, prompt, Autoregressive(), max_new_tokens=40, eos_token_id=tokenizer.eos_token_id)
    for label, strategy in (("head's tree", Eagle(lookup=0)), ("tree + copy", Eagle())):
        result = mtdecode.generate(smol, prompt, strategy, max_new_tokens=40, eos_token_id=tokenizer.eos_token_id)
        longest = max(step.accepted for step in result.steps) + 1
        same = result.row(0) == greedy.row(0)
        print(f"{name:5} {label:12} {result.stats.tokens_per_forward:.2f} per forward, longest step {longest}, "
              f"same as greedy: {same}")  # fmt: skip

# %% [markdown]
# On the code edit the copy's branch has many tokens accepted at once, more than the head's tree is deep; on
# chat the copy seldom holds, and the tree is the head's.
#
# ## Exercises
#
# 1. Run the code prompt with `num_draft_tokens` 2 and 20. How do tokens per forward and tokens per
#    second move, and why do they not move together?
# 2. Which `ngram` works better on the code prompt: 1 or 4? Explain the trade-off.
# 3. Write a prompt of your own on which prompt lookup commits more than 3 tokens per forward.

# %% tags=["solution"]
# 1. More guesses: more tokens per forward where a copy is long, but every forward costs more.
for k in (2, 20):
    s = mtdecode.generate(smol, prompts["code"], PromptLookup(3, k), max_new_tokens=40).stats
    print(f"k={k:2}: {s.tokens_per_forward:.2f} per forward, {s.tokens_per_second:.1f} tokens/s")
# 2. Short n-grams match more often but copy the wrong continuation more often; long ones match less.
for n in (1, 4):
    s = mtdecode.generate(smol, prompts["code"], PromptLookup(n, 10), max_new_tokens=40).stats
    print(f"ngram={n}: {s.tokens_per_forward:.2f} per forward")
# 3. For example: ask the model to repeat a list with one item changed.
