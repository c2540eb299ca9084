"""`Eagle` (`mtdecode.strategies.eagle`): feature-level drafting with a token tree, verified in one forward.

- Greedy parity on tiny float64 models with untrained (random) heads, ragged batches, EOS and budgets: parity must
  not depend on the head's quality. A random head is rarely right, so the same is checked with a head built to be
  right most of the time (a target whose next token depends mostly on its current one, and a head that copies the
  current token's feature): then steps accept deep paths of the tree, and the bookkeeping of both caches along
  accepted paths is exercised.
- A tree grows, and is verified, no deeper than its row's budget has room for (at a row's last token, not at all).
- The copy branch (prompt lookup's guess grafted onto the tree, on by default, so in every test above): where the
  text repeats, it has more tokens accepted than the head's tree is deep, with greedy's output; `graft` follows
  the tree, then hangs new nodes, and the best nodes stay a subtree.
- The sampling law by exact enumeration (`mtdecode.testing.distribution`, chi-square at a false-alarm rate of
  1e-3): a fixed tree, a tree sized by the cost rule, and a one-node tree with the copy's node beside it; the same
  test rejects a wrong tree verifier.
"""

import dataclasses
import functools

import pytest
import torch

import mtdecode
from mtdecode import Sampler, verification
from mtdecode.copying import Copy
from mtdecode.costs import DraftCosts
from mtdecode.policy import Adaptive, Fixed
from mtdecode.strategies import Autoregressive
from mtdecode.strategies.eagle import Eagle
from mtdecode.strategies.eagle.tree import Tree, graft, head_guesses, tree_size
from mtdecode.testing import tiny_model
from mtdecode.testing.distribution import check_distribution
from mtdecode.verification import best_nodes
from mtdecode.zoo import int8
from mtdecode.zoo.eagle import EagleHead, quantize_head
from mtdecode.zoo.int8 import exact_int_mm

from test_verification import keep_rejected

#: a made-up forward-cost curve (dips included) so that the tree-size rule repeats on every host
COSTS = DraftCosts(draft=0.0, target=[1.0, 1.2, 1.05, 1.1, 1.3, 1.35, 1.4, 1.6])


def random_head(model, seed: int, tokens=None) -> EagleHead:
    torch.manual_seed(seed)
    vocab = model.config.vocab_size
    tokens = torch.arange(vocab) if tokens is None else tokens
    head = EagleHead(model.config, model.get_input_embeddings().weight, model.get_output_embeddings().weight, tokens)
    return head.to(model.dtype).eval()


def copying_pair(seed: int = 0, vocab: int = 64):
    """A target whose layers add little (0.3%) to the residual stream (its next token depends mostly on the current
    one) and a head that predicts the feature of the token it is fed: norm(e(x)), which the target's own
    feature nearly is. Most of the head's first guesses, and many deeper ones, are the target's tokens."""
    model = tiny_model("llama", vocab_size=vocab, seed=seed)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.003)
            layer.mlp.down_proj.weight.mul_(0.003)
    head = random_head(model, seed)
    hidden = model.config.hidden_size
    with torch.no_grad():
        head.fuse.weight.zero_()
        head.fuse.weight[:, hidden:] = torch.eye(hidden, dtype=model.dtype)  # fused = e(x_{t+1})
        head.fuse.bias.zero_()
        head.layer.self_attn.o_proj.weight.zero_()  # the layer passes its input through
        head.layer.mlp.down_proj.weight.zero_()
        head.norm.weight.copy_(model.model.norm.weight)
    return model, head


PROMPTS = [[1, 2, 3, 4, 5], [7], [9, 10, 11, 12, 13, 14, 15, 16, 17], [3, 3, 3]]


def greedy(model, prompts, max_new_tokens, **options):
    return mtdecode.generate(model, prompts, Autoregressive(), max_new_tokens=max_new_tokens, **options)


SHAPES = [
    dict(depth=5, width=4, tree_size=12),
    dict(depth=3, width=2, tree_size=1),
    dict(depth=1, width=1, tree_size=1),
    dict(
        depth=4, width=3, policy=Adaptive(costs=COSTS, depth_cost=0.05)
    ),  # the rule: tree size and depth from the costs
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_random_heads_reproduce_greedy_decoding(seed, shape):
    model = tiny_model("llama", vocab_size=64, seed=seed)
    head = random_head(model, seed, tokens=torch.arange(0, 64, 2))  # the head scores half the vocabulary
    expected = greedy(model, PROMPTS, 24)
    out = mtdecode.generate(model, PROMPTS, Eagle(head, **shape), max_new_tokens=24)
    assert out.tokens.tolist() == expected.tokens.tolist()


def test_a_random_head_reproduces_greedy_decoding_on_another_family():
    """The head is a Llama layer whatever the target: on a Qwen2 target (attention biases) parity holds too."""
    model = tiny_model("qwen2", vocab_size=64, seed=5)
    head = random_head(model, 5)
    out = mtdecode.generate(model, PROMPTS, Eagle(head, depth=4, width=3, tree_size=8), max_new_tokens=24)
    assert out.tokens.tolist() == greedy(model, PROMPTS, 24).tokens.tolist()


def test_a_good_head_accepts_deep_paths_and_reproduces_greedy_decoding_with_eos():
    model, head = copying_pair()
    expected = greedy(model, PROMPTS, 40, eos_token_id=5, pad_token_id=0)
    for shape in (
        dict(depth=6, width=3, tree_size=10),
        dict(depth=6, width=2, policy=Adaptive(costs=COSTS, depth_cost=0.05)),
    ):
        out = mtdecode.generate(model, PROMPTS, Eagle(head, **shape), max_new_tokens=40, eos_token_id=5,
                                pad_token_id=0)  # fmt: skip
        assert out.tokens.tolist() == expected.tokens.tolist()
        assert out.stats.new_tokens / out.stats.row_forwards > 2.0, out.stats  # deep paths were accepted
        # the rule verifies fewer nodes until its record learns that this head is better than its confidences
        assert max(out.stats.accepted_lengths) >= (4 if "tree_size" in shape else 3)


def test_the_rule_grows_deep_trees_only_where_another_depth_pays():
    """A depth that costs nothing lets the good head's tree grow to depth 6 and verify paths of 3 or more; one
    that costs 50 target forwards never pays, so every tree stops at depth 1 (at most W nodes verified)."""
    model, head = copying_pair()
    shape = dict(depth=6, width=2, lookup=0)  # the head's tree alone
    cheap = Eagle(head, **shape, policy=Adaptive(costs=COSTS, depth_cost=0.0))
    dear = Eagle(head, **shape, policy=Adaptive(costs=COSTS, depth_cost=50.0))
    cheap = mtdecode.generate(model, PROMPTS, cheap, max_new_tokens=30)
    dear = mtdecode.generate(model, PROMPTS, dear, max_new_tokens=30)
    assert cheap.tokens.tolist() == dear.tokens.tolist()
    assert max(cheap.stats.accepted_lengths) >= 3
    assert max(step.drafted for step in dear.steps) <= 2 and max(dear.stats.accepted_lengths) <= 1


def test_no_depth_is_grown_or_verified_past_what_a_rows_budget_has_room_for(monkeypatch):
    """With 2 new tokens, the step after the prompts' forward commits the row's last token: the head grows no depth
    past the first (scored in any case) and no node is verified, even with a fixed tree of 8 (before, the head grew
    4 depths and 8 nodes were verified, then cut at the budget). With 4 new tokens no tree is deeper than 2 (two
    guesses and the step's own token), and one is that deep."""
    from mtdecode.strategies import eagle

    model, head = copying_pair()
    trees = []
    original = eagle.grow_tree
    monkeypatch.setattr(eagle, "grow_tree", lambda *a, **k: trees.append(original(*a, **k)) or trees[-1])
    strategy = Eagle(head, depth=4, width=2, tree_size=8, lookup=0)
    for budget, deepest in ((2, 0), (4, 2)):
        trees.clear()
        out = mtdecode.generate(model, [[1, 2, 3]], strategy, max_new_tokens=budget)
        assert out.tokens.tolist() == greedy(model, [[1, 2, 3]], budget).tokens.tolist()
        assert max(int(tree.limit.max()) for tree in trees) == deepest
        assert max(int(tree.depth.max()) for tree in trees) == max(deepest, 1)
        assert max(step.drafted for step in out.steps) <= 2 * deepest


def test_one_row_alone_decodes_as_in_a_batch():
    model, head = copying_pair(seed=3)
    strategy = Eagle(head, depth=4, width=3, tree_size=8)
    batch = mtdecode.generate(model, PROMPTS, strategy, max_new_tokens=30)
    for b, prompt in enumerate(PROMPTS):
        alone = mtdecode.generate(model, prompt, strategy, max_new_tokens=30)
        assert alone.row(0) == batch.row(b)


def test_the_copy_branch_reaches_past_the_heads_depth_and_changes_no_output():
    """With one head node per step (depth 1, width 1) the head alone never has more than one token accepted; the
    copy (prompt lookup's guess, grafted as another branch) has several accepted at once where the target's greedy
    text repeats itself, as the copying pair's does. The output is greedy's with the copy and without it."""
    for seed in (0, 1, 2):
        model, head = copying_pair(seed=seed)
        expected = greedy(model, PROMPTS, 40).tokens.tolist()
        shape = dict(depth=1, width=1, policy=Adaptive(costs=COSTS, depth_cost=0.05))
        alone = mtdecode.generate(model, PROMPTS, Eagle(head, **shape, lookup=0), max_new_tokens=40)
        copying = mtdecode.generate(model, PROMPTS, Eagle(head, **shape), max_new_tokens=40)
        assert alone.tokens.tolist() == expected and copying.tokens.tolist() == expected
        assert max(alone.stats.accepted_lengths) <= 1
        assert max(copying.stats.accepted_lengths) >= 3, copying.stats
        assert copying.stats.row_forwards < alone.stats.row_forwards


def test_the_copy_is_read_by_the_run_that_matched_as_prompt_lookup_reads_it():
    """`find_copies`: row 0's last token recurs alone (a 1-token match), row 1's last three tokens and the one before
    them agree with an earlier place (a run of 4). Before any record, a copy's first token holds with the prior
    L / (L + 2) of the run L before it: 1/3 and 2/3, as prompt lookup reads its copies (by place in the copy, both
    were 1/2)."""
    from mtdecode.copying import find_copies
    from mtdecode.model import CausalLM
    from mtdecode.policy.records import CopyRecord
    from mtdecode.sampling import RowRandom
    from mtdecode.session import Session

    rows = [[5, 9, 1, 2, 3, 9], [7, 1, 2, 3, 4, 8, 7, 1, 2, 3]]
    target = CausalLM.wrap(tiny_model("llama", vocab_size=16))
    s = Session(target, rows, sampler=Sampler(), random=RowRandom([0, 1]), max_new_tokens=8)
    copy = find_copies(s, most=3, ngram=3, record=CopyRecord(batch=2))
    assert copy.tokens == [[1, 2, 3], [4, 8, 7]] and copy.matched == [1, 4]
    assert copy.holds[:, 0].tolist() == pytest.approx([1 / 3, 2 / 3])
    assert copy.holds[1].tolist() == pytest.approx([4 / 6, 4 / 6 * 5 / 7, 4 / 6 * 5 / 7 * 6 / 8])  # runs 4, 5, 6


def test_a_copy_follows_the_tree_while_it_can_then_hangs_new_nodes_below():
    """`graft`: row 0's copy [5, 7, 9, 10] follows the head's nodes 5 (node 0) and 7 (its child, node 2), then adds
    9 and 10 below them; row 1's copy [8] starts at x0 beside the head's nodes; row 2 has none (padding). Worth
    falls along the copy, and padding is never verified."""
    tokens = torch.tensor([[5, 6, 7, 8]] * 3)
    parent = torch.tensor([[-1, -1, 0, 1]] * 3)
    depth = torch.tensor([[1, 1, 2, 2]] * 3)
    value = torch.tensor([[0.5, 0.3, 0.2, 0.1]] * 3, dtype=torch.float64)
    tree = Tree(tokens, parent, depth, value.clone(), value, torch.full((3,), 2), value.clone(), 4)
    holds = [1 / 2, 1 / 2 * 2 / 3, 1 / 2 * 2 / 3 * 3 / 4, 1 / 2 * 2 / 3 * 3 / 4 * 4 / 5]  # made up, falling along it
    copy = Copy([[5, 7, 9, 10], [8], []], torch.tensor([holds, [holds[0], -1, -1, -1], [-1] * 4]), [1, 1, 0])
    grafted = graft(tree, copy)
    assert grafted.head_nodes == 4
    assert grafted.tokens[:2].tolist() == [[5, 6, 7, 8, 9, 10], [5, 6, 7, 8, 8, 0]]
    assert grafted.parent[:2].tolist() == [[-1, -1, 0, 1, 2, 4], [-1, -1, 0, 1, -1, -1]]
    assert grafted.depth[0].tolist() == [1, 1, 2, 2, 3, 4]
    assert grafted.copy.tolist() == [[1, 0, 2, 0, 3, 4], [0, 0, 0, 0, 1, 0], [0] * 6]
    assert grafted.copy_chance[0].tolist() == pytest.approx([holds[0], -1, holds[1], -1, holds[2], holds[3]])
    assert grafted.value[1].tolist() == pytest.approx([0.5, 0.3, 0.2, 0.1, 0.0, -1.0])  # the copy's node, padding
    assert grafted.chance[2, 4:].tolist() == [-1.0, -1.0]

    n, worth = tree_size(torch.ones(3, dtype=torch.bool), grafted, Fixed(6))
    assert n.tolist() == [6, 5, 4]  # row 1's padding and row 2's are not counted
    assert worth[0].tolist() == pytest.approx([0.5, 0.3, holds[1], 0.1, holds[2], holds[3]])
    chosen, rank = best_nodes(worth, 6)
    for b in range(3):  # every kept node's parent is kept: each row's best nodes form a subtree
        kept = set(chosen[b][rank[b] < n[b]].tolist())
        assert all(int(grafted.parent[b, node]) in kept | {-1} for node in kept)


@pytest.mark.skipif(not exact_int_mm(), reason="int8 heads need exact int8 products (a CPU with VNNI)")
def test_an_int8_head_drafts_for_a_float64_target_and_changes_no_output():
    """`quantize_head` turns the head's linear layers and scores to int8: its guesses are still mostly right
    (deep paths accepted) and a row decodes as it does alone; the output is the target's greedy output, since the
    target checks every token."""
    model, head = copying_pair(seed=3)
    head = quantize_head(head.float())
    assert head.scorer is not None and head.dtype == torch.float32
    strategy = Eagle(head, depth=6, width=2, policy=Adaptive(costs=COSTS, depth_cost=0.05))
    out = mtdecode.generate(model, PROMPTS, strategy, max_new_tokens=30)
    assert out.tokens.tolist() == greedy(model, PROMPTS, 30).tokens.tolist()
    assert out.stats.new_tokens / out.stats.row_forwards > 2.0, out.stats
    alone = mtdecode.generate(model, PROMPTS[2], strategy, max_new_tokens=30)
    steps = [(step.drafted, step.accepted) for step in out.steps if step.row == 2]
    assert [(step.drafted, step.accepted) for step in alone.steps] == steps  # the same trees, the same verdicts


def test_an_int8_head_is_refused_where_it_cannot_be_made(monkeypatch):
    model, head = copying_pair(seed=3)
    with pytest.raises(ValueError, match="CPU and float32"):
        quantize_head(head)  # float64
    monkeypatch.setattr(int8, "exact_int_mm", lambda: False)
    with pytest.raises(RuntimeError, match="exact int8 products"):
        quantize_head(head.float())


def test_bad_settings_and_a_head_for_another_model_are_refused():
    model = tiny_model("llama", vocab_size=64, seed=0)
    head = random_head(model, 0)
    with pytest.raises(ValueError, match="depth"):
        Eagle(head, depth=0)
    with pytest.raises(ValueError, match="tree_size"):
        Eagle(head, depth=2, width=2, tree_size=5)
    with pytest.raises(ValueError, match="lookup"):
        Eagle(head, lookup=-1)
    with pytest.raises(ValueError, match="ngram"):
        Eagle(head, ngram=0)
    with pytest.raises(TypeError, match="EagleHead"):
        Eagle(model)
    other = tiny_model("llama", vocab_size=80, seed=0)
    with pytest.raises(ValueError, match="trained for the target"):
        mtdecode.generate(other, [1, 2], Eagle(head), max_new_tokens=3)


# ------------------------------------------------------------------ the sampling law

SAMPLES = 20_000
FALSE_ALARM = 1e-3
PROMPT = [1, 2, 3, 1]


@functools.cache
def small():
    model = tiny_model("llama", vocab_size=8, seed=1, layers=1, hidden=16)
    return model, random_head(model, 4)


def check(strategy):
    model, _ = small()
    return check_distribution(model, PROMPT, strategy, n=4, sampler=Sampler(temperature=1.0), samples=SAMPLES,
                              false_alarm=FALSE_ALARM)  # fmt: skip


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "shape",
    [
        dict(depth=2, width=3, tree_size=5),
        dict(depth=2, width=3, policy=Adaptive(costs=COSTS, depth_cost=0.0)),
        dict(
            depth=1, width=1, policy=Adaptive(costs=COSTS, depth_cost=0.0)
        ),  # the copy's node often beside the head's one
    ],
)
def test_sampling_matches_autoregressive(shape):
    """After the first (plain) step, the second verifies a tree of depth 2 with several children per node (the
    4-token block's budget leaves room for two guesses there, and a tree grows no deeper than its room): the
    block's next tokens come from the tree's verification. With the rule, how many nodes a step
    verifies depends on the head's confidences after the first token (checked first): the law is p all the same.
    The copy (on by default) joins the tree wherever the first token occurred in the prompt; with one head node
    per step, a second verified node is the copy's own (checked first)."""
    model, head = small()
    if shape["depth"] == 1:
        runs = [mtdecode.generate(model, PROMPT, Eagle(head, **shape), max_new_tokens=4, temperature=1.0, seed=seed)
                for seed in range(20)]  # fmt: skip
        assert any(run.steps[1].drafted == 2 for run in runs if len(run.steps) > 1)
    elif "costs" in shape:
        runs = [mtdecode.generate(model, PROMPT, Eagle(head, **shape), max_new_tokens=4, temperature=1.0, seed=seed)
                for seed in range(20)]  # fmt: skip
        assert len({run.steps[1].drafted for run in runs if len(run.steps) > 1}) > 1
    result = check(Eagle(head, **shape))
    assert result.passed, str(result)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize(
    "shape", [dict(depth=2, width=3, tree_size=5), dict(depth=1, width=1, policy=Adaptive(costs=COSTS, depth_cost=0.0))]
)
def test_the_test_rejects_a_wrong_tree_verifier(monkeypatch, shape):
    monkeypatch.setattr(verification, "try_proposals", keep_rejected)
    _, head = small()
    result = check(Eagle(head, **shape))
    assert not result.passed, f"the keep_rejected mutant went unnoticed: {result}"


def test_the_heads_calibration_learns_from_its_nodes_off_the_copy_only():
    """`head_guesses`: of the verified nodes, the head's calibration reads the head's own that do not carry the copy's
    token. Row 0's copy follows head node 0 and hangs node 4 below it; row 1 has no copy. Node 3 of row 0 is not
    verified."""
    tokens = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 8, 0]])
    parent = torch.tensor([[-1, -1, 0, 1, 0], [-1, -1, 0, 1, -1]])
    depth = torch.tensor([[1, 1, 2, 2, 2], [1, 1, 2, 2, 1]])
    value = torch.tensor([[0.5, 0.3, 0.2, 0.1, 0.0]] * 2, dtype=torch.float64)
    copy = torch.tensor([[1, 0, 0, 0, 2], [0] * 5])
    tree = Tree(tokens, parent, depth, value, value, torch.full((2,), 2), value, 4, copy, value)
    chosen = torch.tensor([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]])
    valid = torch.tensor([[True, True, True, False, True], [True, True, True, True, False]])
    taught = head_guesses(tree, chosen, valid)
    assert taught.tolist() == [[False, True, True, False, False], [True, True, True, True, False]]
    no_copy = dataclasses.replace(tree, copy=None, copy_chance=None)
    assert head_guesses(no_copy, chosen, valid).tolist() == (valid & (chosen < 4)).tolist()
