"""Render the mask pictures used by the docs into docs/img/.

Run from the repository root:

    .venv/bin/python docs/render_figures.py

Every picture is drawn by `mtdecode.masks.plot`, from masks built by
`mtdecode.masks` (most through `mtdecode.masks.figures`, as `mtdecode masks` draws them),
so the pictures always show what the code really does.
"""

from pathlib import Path

import torch

from mtdecode import masks
from mtdecode.masks import figures

OUT = Path(__file__).parent / "img"

PROMPT = ["The", "cat", "sat"]  # the committed prefix, already in the KV cache


def render_causal() -> None:
    figures.chain(["on", "the", "mat", "."], PROMPT, "causal: 3 cached + 4 new tokens").plot(OUT / "causal.png")


def render_branches() -> None:
    # two independent guesses for the continuation, fed in one forward pass
    names = ["on", "the", "mat", "by", "the", "door"]
    figure = figures.tree_mask([-1, 0, 1, -1, 3, 4], PROMPT, names)
    figure.plot(OUT / "branches.png")


def render_tree() -> None:
    #            prefix
    #           /      \
    #       0:on        4:in
    #      /    \
    #   1:the   2:a
    #     |
    #   3:mat
    figures.tree_mask([-1, 0, 0, 1, -1], PROMPT, ["on", "the", "a", "mat", "in"]).plot(OUT / "tree.png")


def render_eagle() -> None:
    # the tree one EAGLE step verifies: x0 ("on", the newest committed token, not yet in the cache), the head's two
    # best children of it, then the best nodes below them (`mtdecode.strategies.eagle`, step 3)
    #            x0: on
    #           /      \
    #       1:the      2:a
    #      /    \        \
    #   3:mat  4:floor   5:rug
    #     |
    #   6:.
    figures.tree_mask([-1, 0, 0, 1, 1, 2, 3], PROMPT, ["on", "the", "a", "mat", "floor", "rug", "."]).plot(
        OUT / "eagle_tree.png"
    )


def render_speculative() -> None:
    # the target checks x0 and k = 4 draft tokens left to right: `mtdecode masks speculative --draft-tokens 4`
    figures.speculative_mask(4, PROMPT).plot(OUT / "speculative.png")


def render_sliding_window() -> None:
    # What the adapter gives a sliding-window layer: the causal mask AND "key less than
    # `window` positions behind the query" (see CausalLM._model_mask).
    window = 3
    prefix = ["a", "b", "c", "d"]
    new = ["e", "f", "g"]
    mask = masks.causal(len(new), prefix=len(prefix))
    query_pos = torch.arange(len(prefix), len(prefix) + len(new))
    key_pos = torch.arange(len(prefix) + len(new))
    near = query_pos[:, None] - key_pos[None, :] < window
    masks.plot(
        mask & near,
        query_labels=[f"{t} @{p}" for t, p in zip(new, query_pos.tolist(), strict=True)],
        key_labels=[f"{t} @{p}" for t, p in zip(prefix + new, key_pos.tolist(), strict=True)],
        prefix=len(prefix),
        title=f"causal with a sliding window of {window}",
        path=OUT / "sliding_window.png",
    )


def render_lookahead() -> None:
    # W = 4, N = 3 (2 rows), G = 2 candidates of N - 1 = 2 tokens: `mtdecode masks lookahead --window 4 ...`
    figures.lookahead_mask(4, 3, 2, ["The", "cat"]).plot(OUT / "lookahead.png")


def render_jacobi() -> None:
    # Jacobi and prompt lookup feed x0 and the guesses left to right: a plain causal mask
    figures.chain(["x0", "g1", "g2", "g3"], PROMPT, "Jacobi / prompt lookup: x0 and 3 guesses").plot(OUT / "jacobi.png")


def render_batch() -> None:
    # speculative verification of x0 and 2 guesses over a batch of rows holding 5, 3 and 4 tokens:
    # `mtdecode masks batch --draft-tokens 2`
    figures.plot_batch(figures.batch_mask(2), OUT / "batch.png")


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    renders = (render_causal, render_branches, render_tree, render_speculative, render_sliding_window, render_lookahead)
    for render in (*renders, render_jacobi, render_batch, render_eagle):
        render()
        plt.close("all")
    for path in sorted(OUT.glob("*.png")):
        print(path)


if __name__ == "__main__":
    main()
