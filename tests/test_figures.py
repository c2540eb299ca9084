"""`mtdecode.figures`: each figure is drawn from a real run of a tiny model, and shows that run's data.

- The lookahead window: its diagonals, read back from the arrows' ends and the cells' labels, are exactly the
  n-grams `Lookahead` gives its pool at that step; the accepted tokens are the step's.
- The token tree: one node per verified node (`Step.drafted`), the accepted path's labels are the step's
  accepted tokens, in order.
- The timeline: one block per forward pass (`Stats`), each as wide as its cost; the target's blocks feed what
  the steps say they fed, and carry the steps' accepted/drafted.
- A wrong input (an accepted path that is not a path of the tree, ...) raises a clear error.
"""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import mtdecode  # noqa: E402
from mtdecode import figures  # noqa: E402
from mtdecode.costs import curves, timing
from mtdecode.strategies import Autoregressive, Eagle, Lookahead, Speculative  # noqa: E402
from mtdecode.strategies.lookahead import NgramPool  # noqa: E402
from mtdecode.testing import tiny_model  # noqa: E402
from mtdecode.testing.models import perturbed  # noqa: E402
from mtdecode.zoo.eagle import EagleHead  # noqa: E402

#: a prompt that repeats itself, so that the pool's and the copy's guesses are sometimes right
PROMPT = [1, 5, 2, 9, 4, 4, 7, 3, 1, 5, 2, 9, 4]
#: fixed costs in units of a 1-token target forward, so that the timeline's geometry repeats on every host
COSTS = {"target": lambda n: 1 + 0.05 * (n - 1), "draft": lambda n: 0.3, "head": lambda n: 0.1}


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def labels(fig, gid: str) -> list[str]:
    """The texts of every label with this gid, in the order they were drawn."""
    return [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == gid]


def guessing_pair():
    """A tiny target whose layers barely touch the residual stream (its next token depends mostly on the current
    one) and an EAGLE head that predicts the feature of the token it is fed: many of its guesses are right."""
    model = tiny_model("llama", vocab_size=64, seed=0)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.003)
            layer.mlp.down_proj.weight.mul_(0.003)
    torch.manual_seed(0)
    embedding, output = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    head = EagleHead(model.config, embedding, output, torch.arange(64)).to(model.dtype).eval()
    hidden = model.config.hidden_size
    with torch.no_grad():
        head.fuse.weight.zero_()
        head.fuse.weight[:, hidden:] = torch.eye(hidden, dtype=model.dtype)  # the fed token's embedding passes
        head.fuse.bias.zero_()
        head.layer.self_attn.o_proj.weight.zero_()
        head.layer.mlp.down_proj.weight.zero_()
        head.norm.weight.copy_(model.model.norm.weight)
    return model, head


# ------------------------------------------------------------------ the lookahead window


def diagonals(fig) -> list[tuple[str, ...]]:
    """The n-grams the window figure draws, read back from its arrows (tail `xyann`, head `xy`) and the labels
    at their ends. Every arrow must go one position right and one row down."""
    ax = fig.axes[0]
    at = {tuple(t.get_position()): t.get_text() for t in ax.texts if t.get_gid() in ("window", "prediction")}
    links = {tuple(a.xyann): tuple(a.xy) for a in ax.texts if a.get_gid() == "ngram"}
    assert all((x1 - x0, y1 - y0) == (1, 1) for (x0, y0), (x1, y1) in links.items())
    starts = set(links) - set(links.values())
    chains = []
    for point in sorted(starts):
        chain = [point]
        while chain[-1] in links:
            chain.append(links[chain[-1]])
        chains.append(tuple(at[p] for p in chain))
    return sorted(chains)


def straight_down(fig, rows: int) -> list[tuple[str, ...]]:
    """What reading the figure straight down one position would pair (two iterations' guesses for the SAME
    position, the mistake notebook 4 once made): the negative control."""
    ax = fig.axes[0]
    at = {tuple(t.get_position()): t.get_text() for t in ax.texts if t.get_gid() in ("window", "prediction")}
    columns = {x for x, _ in at}
    full = [x for x in columns if all((x, y) in at for y in range(rows + 1))]
    return sorted(tuple(at[x, y] for y in range(rows + 1)) for x in full)


def test_the_window_figure_shows_the_ngrams_lookahead_gives_its_pool(monkeypatch):
    given = []  # the n-grams each call of `NgramPool.add_columns` got, as the figures show tokens
    real = NgramPool.add_columns

    def recording(pool, grid, new_row):
        given.append(sorted(tuple(str(row[j]) for row in grid) + (str(new_row[j]),) for j in range(len(new_row))))
        real(pool, grid, new_row)

    model = tiny_model(vocab_size=16, seed=3)
    strategy = Lookahead(4, 3, 3)
    with monkeypatch.context() as patch:
        patch.setattr(NgramPool, "add_columns", recording)
        steps = figures.record_steps(model, PROMPT, strategy, max_new_tokens=16, seed=0)
    harvested = [step for step in steps[:-1] if step.full]  # the run ends before the last step's harvest
    assert len(harvested) == len(given) >= 4
    for step, ngrams in list(zip(harvested, given, strict=True))[:3]:  # three figures are enough
        fig = figures.lookahead_window(step.window, step.predictions, step.candidates, step.chosen, step.accepted)
        assert diagonals(fig) == ngrams
        assert straight_down(fig, 2) != ngrams  # the test tells the diagonals from the same-position pairs
        assert len(labels(fig, "window")) == 4 * 2 and labels(fig, "prediction") == step.predictions
        plt.close(fig)
    # the verification branch: the accepted tokens are the step's own, in a run of its own
    result = mtdecode.generate(model, PROMPT, strategy, max_new_tokens=16, seed=0)
    assert len(steps) == len(result.steps)
    hits = [(step, real_step) for step, real_step in zip(steps, result.steps, strict=True) if real_step.accepted]
    assert hits, "no step accepted a candidate: the check below would check nothing"
    for step, real_step in hits[:2]:
        fig = figures.lookahead_window(step.window, step.predictions, step.candidates, step.chosen, step.accepted,
                                       committed=step.committed)  # fmt: skip
        assert labels(fig, "accepted") == [str(t) for t in real_step.tokens[: real_step.accepted]]
        assert labels(fig, "committed") == [str(t) for t in real_step.tokens]
        assert len(labels(fig, "accepted")) + len(labels(fig, "candidate")) == sum(map(len, step.candidates))
        plt.close(fig)


# ------------------------------------------------------------------ the token tree


def test_the_tree_figure_shows_each_verified_tree_and_its_accepted_path():
    model, head = guessing_pair()
    strategy = Eagle(head, depth=4, width=2, tree_size=6)
    trees = figures.record_steps(model, PROMPT, strategy, max_new_tokens=16)
    result = mtdecode.generate(model, PROMPT, strategy, max_new_tokens=16)
    assert len(trees) == len(result.steps) - 1  # the first step is a plain forward over the prompt
    assert max(len(tree.accepted) for tree in trees) >= 2  # paths deeper than one node were accepted
    # the last step's tokens may be cut at the budget after verification: the others show what was committed
    for tree, step in zip(trees[:-1], result.steps[1:-1], strict=True):
        fig = figures.token_tree(tree.root, tree.tokens, tree.parents, tree.accepted, copied=tree.copied,
                                 target_token=tree.target_token)  # fmt: skip
        nodes = labels(fig, "node") + labels(fig, "accepted")
        assert len(nodes) == step.drafted and sorted(nodes) == sorted(tree.tokens)
        assert labels(fig, "accepted") == [str(t) for t in step.tokens[: step.accepted]]  # drawn down the path
        assert labels(fig, "target") == [str(step.tokens[step.accepted])]
        edges = [a for a in fig.axes[0].texts if a.get_gid() in ("edge", "accepted-edge")]
        assert len(edges) == step.drafted + 1  # one per node, and one to the target's token
        assert sum(a.get_gid() == "accepted-edge" for a in edges) == step.accepted + 1
        plt.close(fig)


def test_the_tree_is_laid_out_as_a_tree():
    """Every node is one depth right of its parent; leaves have rows of their own."""
    parents = [-1, -1, 0, 0, 2, 1]
    fig = figures.token_tree("x", ["a", "b", "c", "d", "e", "f"], parents, [0, 2, 4])
    ax = fig.axes[0]
    place = {t.get_text(): t.get_position() for t in ax.texts if t.get_gid() in ("root", "node", "accepted")}
    names = ["a", "b", "c", "d", "e", "f"]
    for name, parent in zip(names, parents, strict=True):
        assert place[name][0] == place["x" if parent < 0 else names[parent]][0] + 1
    leaves = [place[name][1] for name in ("d", "e", "f")]
    assert len(set(leaves)) == 3


# ------------------------------------------------------------------ the timeline


def blocks(fig, gid: str) -> list:
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def test_the_timeline_shows_every_forward_of_each_run_at_its_cost():
    model, head = guessing_pair()
    draft = perturbed(model, 0.1, seed=1)
    strategies = {"greedy": Autoregressive(), "speculative": Speculative(draft, 3), "EAGLE": Eagle(head, 4, 2, 6)}
    runs = {name: figures.record_forwards(model, PROMPT, s, max_new_tokens=10, costs=COSTS)
            for name, s in strategies.items()}  # fmt: skip
    fig = figures.timeline(runs)
    verdicts = []
    for name, strategy in strategies.items():
        result = mtdecode.generate(model, PROMPT, strategy, max_new_tokens=10)
        steps = runs[name]
        assert [(s.drafted, s.accepted, s.tokens) for s in steps] == [
            (s.drafted, s.accepted, len(s.tokens)) for s in result.steps
        ]
        target = blocks(fig, f"{name}/target")
        assert len(target) == result.stats.target_forwards
        second = "draft" if name == "speculative" else "head"
        assert len(blocks(fig, f"{name}/{second}")) == result.stats.draft_forwards
        # the target fed the unread tokens (the prompt first, then x0) and the guesses the step verified
        fed = [f.tokens for s in steps for f in s.forwards if f.lane == "target"]
        assert fed == [(len(PROMPT) if i == 0 else 1) + s.drafted for i, s in enumerate(result.steps)]
        assert [b.get_width() for b in target] == pytest.approx([COSTS["target"](n) for n in fed])
        # one after another: each block starts where the one before it, in any lane, ended
        ordered = sorted(blocks(fig, f"{name}/target") + blocks(fig, f"{name}/{second}"), key=lambda b: b.get_x())
        ends = [0.0] + [b.get_x() + b.get_width() for b in ordered[:-1]]
        assert [b.get_x() for b in ordered] == pytest.approx(ends)
        verdicts += [f"{s.accepted}/{s.drafted}" for s in result.steps if s.drafted]
    assert labels(fig, "verdict") == verdicts
    assert any(int(v.split("/")[0]) > 0 for v in verdicts)  # some guesses were accepted


def test_the_timeline_costs_default_to_the_kept_measurements(monkeypatch):
    """Without `costs`, a forward over n tokens costs what `tuning` keeps for the model (here a made-up curve, so
    that nothing is timed): t(n) / t(1) for the target, t_draft(n) / t(1) for the draft."""
    model = tiny_model(vocab_size=16, seed=3)
    draft = perturbed(model, 0.1, seed=1)
    kept = {model: {1: 0.010, 4: 0.012, 16: 0.020}, draft: {1: 0.002, 4: 0.003, 16: 0.004}}
    monkeypatch.setattr(timing, "forward_costs", lambda m, rows=1, **_: kept[m.hf])
    steps = figures.record_forwards(model, PROMPT, Speculative(draft, 2), max_new_tokens=4)
    forwards = [f for s in steps for f in s.forwards]
    assert {f.lane for f in forwards} == {"target", "draft"}
    for f in forwards:
        assert f.cost == pytest.approx(curves.relative_cost(kept[model if f.lane == "target" else draft], f.tokens)
                                       * (1 if f.lane == "target" else 0.2))  # fmt: skip


# ------------------------------------------------------------------ wrong inputs


def test_wrong_inputs_raise_clear_errors():
    tokens, parents = ["a", "b", "c", "d"], [-1, 0, 0, 1]
    figures.token_tree("x", tokens, parents, [0, 1, 3])  # a path: fine
    with pytest.raises(ValueError, match=r"not a path down from x0: node 2 is not a child of node 1"):
        figures.token_tree("x", tokens, parents, [0, 1, 2])  # siblings, not a path
    with pytest.raises(ValueError, match="not a path down from x0: node 1 is not a child of x0"):
        figures.token_tree("x", tokens, parents, [1, 3])  # does not start at the root
    with pytest.raises(ValueError, match="node 1's parent 2 is not an earlier node"):
        figures.token_tree("x", tokens, [-1, 2, 0, 1], [])
    with pytest.raises(ValueError, match="accepted node 7 is not a node"):
        figures.token_tree("x", tokens, parents, [0, 7])
    window = [["a", "b"], ["c", "d"]]
    with pytest.raises(ValueError, match="3 predictions for a window of 2 columns"):
        figures.lookahead_window(window, ["e", "f", "g"])
    with pytest.raises(ValueError, match="rows of equal"):
        figures.lookahead_window([["a", "b"], ["c"]], ["e", "f"])
    with pytest.raises(ValueError, match="accepted=3 tokens of candidate 0, which has 2"):
        figures.lookahead_window(window, ["e", "f"], [["b", "c"]], chosen=0, accepted=3)
    with pytest.raises(ValueError, match="chosen=1 is not one of the 1 candidates"):
        figures.lookahead_window(window, ["e", "f"], [["b", "c"]], chosen=1, accepted=1)
    step = figures.TimedStep([figures.Forward("target", 1, -1.0)], 0, 0, 1)
    with pytest.raises(ValueError, match="negative cost"):
        figures.timeline({"greedy": [step]})
    model, head = guessing_pair()
    with pytest.raises(ValueError, match=r"no cost given for the lanes \['head'\]"):
        figures.record_forwards(model, PROMPT, Eagle(head, 2, 2, 2), max_new_tokens=2, costs={"target": len})


def test_token_texts_are_made_visible():
    assert figures.shown(" order") == "␣order"
    assert figures.shown("\n\t") == "↵⇥"
    assert figures.shown("") == "∅"
    assert figures.shown("abcdefghijk") == "abcdefg…"
