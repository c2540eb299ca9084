"""Render the mask pictures used by the docs into docs/img/.

Run from the repository root:

    .venv/bin/python docs/render_figures.py

Every picture is drawn by `mtdecode.masks.plot`, from masks built by
`mtdecode.masks`, so the pictures always show what the code really does.
"""

from pathlib import Path

import torch

from mtdecode import masks

OUT = Path(__file__).parent / "img"

PROMPT = ["The", "cat", "sat"]  # the committed prefix, already in the KV cache


def labels(tokens: list[str], start: int = 0) -> list[str]:
    """'index:token' for each token, so rows and columns can be matched by eye."""
    return [f"{start + i}:{t}" for i, t in enumerate(tokens)]


def render_causal() -> None:
    new = ["on", "the", "mat", "."]
    mask = masks.causal(len(new), prefix=len(PROMPT))
    masks.plot(
        mask,
        query_labels=labels(new),
        key_labels=PROMPT + labels(new),
        prefix=len(PROMPT),
        title="causal: 3 cached + 4 new tokens",
        path=OUT / "causal.png",
    )


def render_branches() -> None:
    # two independent guesses for the continuation, fed in one forward pass
    new = ["on", "the", "mat", "by", "the", "door"]
    parents = [-1, 0, 1, -1, 3, 4]
    mask = masks.tree(parents, prefix=len(PROMPT))
    masks.plot(
        mask,
        query_labels=labels(new),
        key_labels=PROMPT + labels(new),
        prefix=len(PROMPT),
        title="two branches, parents [-1,0,1,-1,3,4]",
        path=OUT / "branches.png",
    )


def render_tree() -> None:
    #            prefix
    #           /      \
    #       0:on        4:in
    #      /    \
    #   1:the   2:a
    #     |
    #   3:mat
    new = ["on", "the", "a", "mat", "in"]
    parents = [-1, 0, 0, 1, -1]
    mask = masks.tree(parents, prefix=len(PROMPT))
    positions = masks.tree_positions(parents, prefix=len(PROMPT)).tolist()
    masks.plot(
        mask,
        query_labels=[f"{label} @{pos}" for label, pos in zip(labels(new), positions, strict=True)],
        key_labels=PROMPT + labels(new),
        prefix=len(PROMPT),
        title="tree, parents [-1,0,0,1,-1]",
        path=OUT / "tree.png",
    )


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
    # W = 4, N = 3 (2 rows), G = 2 candidates of N - 1 = 2 tokens; x0 = "sat" was committed last
    layout = masks.LookaheadLayout(context=1, rows=2, columns=4, candidates=2, length=2)
    names = ["x0"] * layout.size
    for r in range(layout.rows):
        for j in range(layout.columns):
            if (r, j) != (0, 0):
                names[layout.cell(r, j)] = f"w{r}{j}"
    for c in range(layout.candidates):
        for k in range(layout.length):
            names[layout.candidate(c, k)] = f"c{c}{k}"
    prefix = ["The", "cat"]
    positions = layout.positions(len(prefix)).tolist()
    masks.plot(
        layout.mask(len(prefix)),
        query_labels=[f"{name} @{pos}" for name, pos in zip(names, positions, strict=True)],
        key_labels=prefix + names,
        prefix=len(prefix),
        title="lookahead: W=4, N=3, G=2 (window w, candidates c)",
        path=OUT / "lookahead.png",
    )


def render_jacobi() -> None:
    # Jacobi and prompt lookup feed x0 and the guesses left to right: a plain causal mask
    new = ["x0", "g1", "g2", "g3"]
    masks.plot(
        masks.causal(len(new), prefix=len(PROMPT)),
        query_labels=labels(new),
        key_labels=PROMPT + labels(new),
        prefix=len(PROMPT),
        title="Jacobi / prompt lookup: x0 and 3 guesses",
        path=OUT / "jacobi.png",
    )


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUT.mkdir(exist_ok=True)
    for render in (render_causal, render_branches, render_tree, render_sliding_window, render_lookahead, render_jacobi):
        render()
        plt.close("all")
    for path in sorted(OUT.glob("*.png")):
        print(path)


if __name__ == "__main__":
    main()
