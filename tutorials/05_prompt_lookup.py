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
from mtdecode import course, figures
from mtdecode.bench import load_suite
from mtdecode.copying import lookup  # prompt lookup's copy, which EAGLE's copy branch shares
from mtdecode.costs import curves, timing
from mtdecode.strategies import Autoregressive, Eagle, PromptLookup, Speculative

logging.disable_progress_bar()
timing.use_reference_costs()  # costs measured once on an idle reference host (notebook 4), not under today's load

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
greedy = {  # greedy's answers: the chat one from above, the longer code edit's decoded here
    "code": mtdecode.generate(smol, another["code"], Autoregressive(), max_new_tokens=40,
                              eos_token_id=tokenizer.eos_token_id),
    "chat": results["chat", "Autoregressive"],
}  # fmt: skip
for name, prompt in another.items():
    for label, strategy in (("head's tree", Eagle(lookup=0)), ("tree + copy", Eagle())):
        result = mtdecode.generate(smol, prompt, strategy, max_new_tokens=40, eos_token_id=tokenizer.eos_token_id)
        longest = max(step.accepted for step in result.steps) + 1
        same = result.row(0) == greedy[name].row(0)
        print(f"{name:5} {label:12} {result.stats.tokens_per_forward:.2f} per forward, longest step {longest}, "
              f"same as greedy: {same}")  # fmt: skip

# %% [markdown]
# On the code edit the copy's branch has many tokens accepted at once, more than the head's tree is deep; on
# chat the copy seldom holds, and the tree is the head's.
#
# Here are two trees that `Eagle()` verified on the code edit, recorded by `figures.record_steps`: the
# first step's, and the step that accepted the most. x0 is at the left, each node right of its parent; the
# copy's nodes have dashed purple borders, the accepted path is green, and the target's own token after it is
# orange.

# %%
trees = figures.record_steps(smol, another["code"], Eagle(), max_new_tokens=16,
                             eos_token_id=tokenizer.eos_token_id, text=figures.token_text(tokenizer))  # fmt: skip
deepest = max(trees, key=lambda tree: len(tree.accepted))
for tree in [trees[0]] + ([deepest] if deepest is not trees[0] else []):
    figures.token_tree(tree.root, tree.tokens, tree.parents, tree.accepted, copied=tree.copied,
                       target_token=tree.target_token)  # fmt: skip
    plt.show()

# %% [markdown]
# ## A real speed-up, and why the separate draft wins least (SmolLM2)
#
# **Uses SmolLM2.** The longer code edit again, 40 new tokens, four ways: greedy, prompt lookup, EAGLE (tree
# plus copy) and speculative decoding with the shipped 4-layer draft model. All four give greedy's tokens.
# For each run the table shows
#
# - **tokens per forward**: a count, the same on every machine;
# - **cost**: all its forward passes (target, draft, head) added up in units of one 1-token target forward,
#   from the reference costs. This is the time the run takes on the idle reference CPU, and it does not move;
# - **seconds here**: the wall time of this run on this machine, now. On a busy class server this column
#   moves from run to run; the conclusions below rest on the other two.

# %%
import time

code = another["code"]
contenders = {
    "greedy": Autoregressive(),
    "prompt lookup": PromptLookup(),
    "EAGLE": Eagle(),
    "speculative (4-layer draft)": Speculative(mtdecode.load_model(mtdecode.DRAFT_MODEL)),
}
runs, seconds = {}, {}
for name, strategy in contenders.items():
    start = time.perf_counter()
    runs[name] = figures.record_forwards(smol, code, strategy, max_new_tokens=40)
    seconds[name] = time.perf_counter() - start
cost = {name: sum(f.cost for step in steps for f in step.forwards) for name, steps in runs.items()}
print(f"{'':28} {'tokens/forward':>14} {'cost':>7} {'vs greedy':>9} {'seconds here':>12} {'vs greedy':>9}")
for name, steps in runs.items():
    made, forwards = sum(s.tokens for s in steps), len(steps)
    print(
        f"{name:28} {made / forwards:14.2f} {cost[name]:7.1f} {cost['greedy'] / cost[name]:8.2f}x "
        f"{seconds[name]:12.2f} {seconds['greedy'] / seconds[name]:8.2f}x"
    )

# %% [markdown]
# Prompt lookup and EAGLE commit several tokens per forward here, and a forward over a few more tokens costs
# little more than one over a single token: they win most. The separate draft beats greedy too (it was taught
# code edits, `mtdecode.recipes.distill`), but by less: it commits fewer tokens per target forward, and each of
# its guesses costs a forward of the draft model, which on this CPU is not cheap next to a target forward:

# %%
drafting = runs["speculative (4-layer draft)"]
draft_cost = next(f.cost for step in drafting for f in step.forwards if f.lane == "draft" and f.tokens == 1)
drafted = sum(step.drafted > 0 for step in drafting)
first_kept = sum(step.accepted > 0 for step in drafting)
target_costs = curves.draft_costs(smol, contenders["speculative (4-layer draft)"].draft)
extra = target_costs.t(2) - target_costs.t(1)  # one more token in the verifying forward
print(f"one draft forward costs {draft_cost:.2f} of a target forward; verifying one more token costs {extra:.2f}")
print(f"a first guess saves a target forward (1.00) only when it is kept: it pays if kept more than "
      f"{draft_cost + extra:.0%} of the time")  # fmt: skip
print(f"measured: the draft's first guess was kept in {first_kept} of {drafted} steps ({first_kept / drafted:.0%})")

# %% [markdown]
# SmolLM2 has 135 M parameters, 28 M of them its embedding and output layer over 49,152 tokens. The 4-layer
# draft shares the embedding and scores only 8,192 tokens, but 4 of the target's 30 layers plus that scoring are
# still a sizeable fraction of a target forward; the first cell above prints it. A guess pays only when it is
# kept more often than that cost (plus verifying one more token) over the forward it saves: on this code edit it
# is; on a chat answer it is kept far less often (notebook 3), and there the drafting rule soon stops drafting.
# Speculative decoding wins most where the draft is *much* cheaper than the target and still agrees often: a
# 68 M draft for a 7 B target costs about 1 % of it. The EAGLE head reads the
# target's own features, so one layer is enough to guess well, and prompt lookup's guesses cost nothing to make.
#
# ## Exercises
#
# Each exercise has an answer cell (fill in the `...`) and a check cell below it that grades the answer.

# %% [markdown]
# **Exercise 5.1.** What does `lookup([4, 8, 15, 16, 23, 42, 8, 15], ngram=2, k=3)` return? Work it out by
# hand first (the last 2 tokens, their latest earlier occurrence, the 3 tokens after it), then put the list
# in `copied`.

# %% tags=["solution"] answer="copied"
copied = [16, 23, 42]  # [8, 15] occurred at positions 1-2; the three tokens after it
print(lookup([4, 8, 15, 16, 23, 42, 8, 15], ngram=2, k=3))

# %% tags=["check"] wrong="copied = [4, 8, 15]"
course.check("5.1", copied, lookup([4, 8, 15, 16, 23, 42, 8, 15], ngram=2, k=3),
             hint="copy what came *after* the earlier occurrence of the last two tokens")  # fmt: skip

# %% [markdown]
# **Exercise 5.2.** Decode the code prompt (`prompts["code"]`, 16 new tokens) with `PromptLookup(3, 2)` and
# `PromptLookup(3, 20)`, and put their tokens per forward in `per_forward_2` and `per_forward_20`.

# %% tags=["solution"] answer="per_forward_2, per_forward_20"
per_forward_2 = mtdecode.generate(smol, prompts["code"], PromptLookup(3, 2), max_new_tokens=16).stats.tokens_per_forward
per_forward_20 = mtdecode.generate(smol, prompts["code"], PromptLookup(3, 20), max_new_tokens=16).stats.tokens_per_forward
print(f"k = 2: {per_forward_2:.2f} tokens per forward; k = 20: {per_forward_20:.2f}")

# %% tags=["check"] wrong="per_forward_2, per_forward_20 = per_forward_20, per_forward_2"
course.check("5.2", (per_forward_2, per_forward_20), tuple(
    mtdecode.generate(smol, prompts["code"], PromptLookup(3, k), max_new_tokens=16).stats.tokens_per_forward
    for k in (2, 20)), tolerance=1e-9, hint="`result.stats.tokens_per_forward`, one run per k")  # fmt: skip

# %% [markdown]
# **Exercise 5.3.** More copied tokens per step commit more tokens per forward where a copy is long. Why can
# k = 20 still be slower than k = 10 in tokens per second? Put the letter in `why`: (a) a longer copy is less
# likely to be right at every position; (b) every forward verifies all k copied tokens, and on a CPU a forward
# over 21 tokens costs more than one over 11, while the copy's tail is mostly rejected; (c) the copy itself
# takes longer to find.

# %% tags=["solution"] answer="why"
# (a) lowers tokens per forward only a little (the accepted prefix is kept); the cost grows with every token fed
why = "b"

# %% tags=["check"] wrong="why = 'c'"
course.check("5.3", why, "b", hint="what does a forward over more tokens cost on a CPU (notebook 4)?")
