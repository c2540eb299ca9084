"""Render the mask pictures used by the docs into docs/img/.

Run from the repository root:

    .venv/bin/python docs/render_figures.py

Every picture is drawn by `mtdecode.masks.plot`, from masks built by
`mtdecode.masks` (most through `mtdecode.masks.figures`, as `mtdecode masks` draws them),
so the pictures always show what the code really does. The teaching figures (lookahead's window, EAGLE's
token tree, the draft/verify timelines) are drawn by `mtdecode.figures` from real SmolLM2 runs, recorded once.

Each picture is drawn twice, once per colour scheme of the site: `img/NAME.png` for the light one
and `img/dark/NAME.png` (light ink on a transparent background) for the dark one; the site's hook
(`docs/hooks/pages.py`) shows each in its scheme. A new figure needs nothing more: a render function
that saves to `OUT / "NAME.png"`, listed in `main`, with matplotlib's current colours for text and
lines (no hard-coded black or white).
"""

import functools
import json
from pathlib import Path

import torch

from mtdecode import bench, masks
from mtdecode.masks import figures

IMG = Path(__file__).parent / "img"
OUT = IMG  # where the render functions save: IMG, then IMG / "dark" (see `main`)

#: the dark scheme's ink (mkdocs-material's slate text colour) and a background for legends
INK, PANEL = "#e2e4e9", "#2e303e"
DARK = {
    "savefig.transparent": True,
    "text.color": INK,
    "axes.labelcolor": INK,
    "axes.edgecolor": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "grid.color": INK,
    "legend.facecolor": PANEL,
    "legend.edgecolor": INK,
}

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


def render_benchmark() -> None:
    # the run on docs/benchmark.md, drawn again from its JSON (`mtdecode bench --plot` draws the same picture)
    run = json.loads((Path(__file__).parent / "benchmark.json").read_text())
    title = f"{run['settings']['model']}, greedy, {run['settings']['max_new_tokens']} new tokens"
    bench.plot(OUT / "benchmark.png", bench.read_json(Path(__file__).parent / "benchmark.json"), title)


# ------------------------------------------------------------------ teaching figures from real runs (SmolLM2)


@functools.cache
def smollm2_runs() -> dict:
    """The real runs the teaching figures draw, recorded once and drawn in both colour schemes: SmolLM2 with
    `Lookahead(4, 4, 3)` on notebook 4's prompt, `Eagle()` on the longer code edit of notebook 5, and greedy,
    speculative (the shipped draft) and EAGLE on notebook 3's chat prompt and on that code edit. Costs are the
    reference costs (`timing.use_reference_costs`), so the timelines do not depend on this host's load."""
    import mtdecode
    import mtdecode.figures
    from mtdecode.costs import timing
    from mtdecode.strategies import Autoregressive, Eagle, Lookahead, Speculative

    timing.use_reference_costs()
    smol, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    text = mtdecode.figures.token_text(tokenizer)
    chat = lambda content: tokenizer.apply_chat_template(  # noqa: E731
        [{"role": "user", "content": content}], add_generation_prompt=True
    )["input_ids"]
    planets = chat("Name the planets of the solar system in order.")
    focus = chat("Give three tips for staying focused while studying.")
    code_task = bench.load_suite()["tasks"]["code"]["prompts"][2]
    code = tokenizer.apply_chat_template(code_task, add_generation_prompt=True)["input_ids"]
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)

    def timed(prompt: list[int], tokens: int) -> dict:
        contenders = {"greedy": Autoregressive(), "speculative": Speculative(draft), "EAGLE": Eagle()}
        return {name: mtdecode.figures.record_forwards(smol, prompt, strategy, max_new_tokens=tokens)
                for name, strategy in contenders.items()}  # fmt: skip

    return {
        "lookahead": mtdecode.figures.record_steps(smol, planets, Lookahead(4, 4, 3), max_new_tokens=10, seed=0,
                                                   text=text),  # fmt: skip
        "trees": mtdecode.figures.record_steps(smol, code, Eagle(), max_new_tokens=16, text=text),
        "timeline chat": timed(focus, 12),
        "timeline code": timed(code, 16),
    }


def render_lookahead_window() -> None:
    # the full window of the run's step that accepted the most, with its verification branch
    import mtdecode.figures

    step = max(smollm2_runs()["lookahead"], key=lambda s: (s.full, s.accepted))
    fig = mtdecode.figures.lookahead_window(step.window, step.predictions, step.candidates, step.chosen,
                                            step.accepted, committed=step.committed)  # fmt: skip
    fig.savefig(OUT / "lookahead_window.png", dpi=110)


def render_token_tree() -> None:
    # the first tree EAGLE verified on the code edit: the head's branches and prompt lookup's copy
    import mtdecode.figures

    tree = smollm2_runs()["trees"][0]
    fig = mtdecode.figures.token_tree(tree.root, tree.tokens, tree.parents, tree.accepted, copied=tree.copied,
                                      target_token=tree.target_token)  # fmt: skip
    fig.savefig(OUT / "eagle_token_tree.png", dpi=110)


def render_timelines() -> None:
    # where the time goes: every forward of greedy, speculative and EAGLE, in units of a 1-token target forward
    import mtdecode.figures

    for name, title in (("chat", "a chat answer, 12 tokens"), ("code", "a code edit, 16 tokens")):
        fig = mtdecode.figures.timeline(smollm2_runs()[f"timeline {name}"], title=f"SmolLM2 on {title}",
                                        unit="cost in 1-token target forwards, reference costs")  # fmt: skip
        fig.savefig(OUT / f"timeline_{name}.png", dpi=110)


#: the figures drawn from real SmolLM2 runs (the runs are recorded once, by `smollm2_runs`)
TEACHING = (render_lookahead_window, render_token_tree, render_timelines)


def main() -> None:
    global OUT
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    renders = (render_causal, render_branches, render_tree, render_speculative, render_sliding_window, render_lookahead)
    for OUT, style in ((IMG, "default"), (IMG / "dark", DARK)):
        OUT.mkdir(exist_ok=True)
        with plt.style.context(style):
            for render in (*renders, render_jacobi, render_batch, render_eagle, render_benchmark, *TEACHING):
                render()
                plt.close("all")
    for path in sorted(IMG.glob("**/*.png")):
        print(path)


if __name__ == "__main__":
    main()
