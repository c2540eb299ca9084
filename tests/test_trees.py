"""The kernel-level oracle for token trees (`mtdecode.testing.trees`): both correct recursive rejection rules and
mtdecode's own pass `check_tree_sampler`, every mutant of `TREE_MUTANTS` fails it at the default settings, the
contract catches outputs that are not an accepted path plus one token, and the check's own pieces (the exact
law it compares with, the trees it drafts) are right. Every check is seeded: a correct sampler fails with
probability at most 10⁻³, and with the seeds fixed that would show on every run, never flakily."""

import itertools

import pytest
import torch

from mtdecode.testing import assert_conforms
from mtdecode.testing import trees as T
from mtdecode.testing.stats import assert_matches

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "fn, siblings",
    [
        (T.specinfer_sampler, "iid"),
        (T.without_replacement_sampler, "without replacement"),
        (T.ours, "iid"),
        (T.ours, "without replacement"),
    ],
    ids=["specinfer-iid", "without_replacement", "ours-iid", "ours-without_replacement"],
)
def test_correct_tree_samplers_conform(fn, siblings):
    report = T.check_tree_sampler(fn, siblings=siblings)
    assert_conforms(report)
    assert report.figures["siblings"] == siblings and report.figures["trials"] == 10_000
    assert report.figures["detectable_tv"] < 0.07
    assert "at most 0.001" in report.summary  # the false-alarm rate is stated


def test_a_sampler_that_takes_one_tree_at_a_time_is_called_per_trial():
    calls = []

    def one_at_a_time(tree, p, q):
        calls.append(tree.tokens.shape)
        return T.specinfer_sampler(tree, p, q)

    scenario = T.SCENARIOS[4]  # near one-hot p: a few cells hold most blocks, so 150 trials can be tested
    assert_conforms(T.check_tree_sampler(one_at_a_time, trials=150, scenarios=[scenario]))
    assert calls == [(len(scenario.parents),)] * 150


@pytest.mark.parametrize("mutant", list(T.TREE_MUTANTS), ids=lambda m: m.__name__)
def test_every_tree_mutant_fails_at_the_default_settings(mutant):
    report = T.check_tree_sampler(mutant)
    assert not report.passed, f"{mutant.__name__} was not caught: {report.summary}"
    assert "FAILED" in report.summary and report.figures["siblings"] == mutant.siblings


# ---- the contract


def _first_leaf_without_its_first_node(tree, p, q):
    """Not a path: the first leaf's tokens with the root's child left out, then token 0."""
    leaf = next(node for node in range(len(tree.parents)) if not tree.children(node))
    return [int(tree.tokens[node]) for node in tree.path(leaf)[1:]] + [0]


def test_the_contract_catches_a_sampler_that_returns_a_non_path():
    report = T.check_tree_sampler(_first_leaf_without_its_first_node, trials=200)
    assert not report.passed and "broke the contract" in report.summary
    assert "not a path from the root" in report.summary


def _bonus_dropped(tree, p, q):
    """SpecInfer's rule, but a path accepted to a leaf comes back without its bonus token."""
    outputs = T.specinfer_sampler.batch(tree, p, q)
    return [out[:-1] if len(out) == tree.depth + 1 else out for out in outputs]


_bonus_dropped.takes_batches = True
_bonus_dropped.batch = _bonus_dropped


def test_a_missing_bonus_breaks_the_recursive_contract_but_not_the_law():
    """Cut short after an accepted leaf, the output is still a path; continued from p its law is exact, but it
    ends on an accepted child, which the recursive rules never do."""
    scenarios = T.SCENARIOS[1:2]  # the irregular tree: leaves at depths 1, 2 and 3
    report = T.check_tree_sampler(_bonus_dropped, trials=2_000, scenarios=scenarios)
    assert not report.passed and "the token after it is missing" in report.summary
    assert_conforms(T.check_tree_sampler(_bonus_dropped, trials=2_000, scenarios=scenarios, recursive=False))


def test_contract_violation_rules():
    tree = T.TokenTree((-1, 0, 0, 1), torch.tensor([0, 1, 2, 3]))  # root -> 1 -> 3, root -> 2
    assert T.contract_violation([1, 3, 0], tree, vocab=4) is None  # a full path and its bonus token
    assert T.contract_violation([1, 2], tree, vocab=4) is None  # node 1's only child (3) rejected, then 2
    assert T.contract_violation([0], tree, vocab=4) is None  # both root children rejected
    assert "not a path" in T.contract_violation([3, 0], tree, vocab=4)  # 3 is not a child of the root
    assert "missing" in T.contract_violation([1, 3], tree, vocab=4)  # ends on node 1's child
    assert "missing" in T.contract_violation([2], tree, vocab=4)  # ends on a root child
    assert T.contract_violation([1, 3], tree, vocab=4, recursive=False) is None
    assert "at most 3" in T.contract_violation([1, 3, 0, 1], tree, vocab=4)
    assert "token ids" in T.contract_violation([], tree, vocab=4)
    assert "token ids" in T.contract_violation([1, 7], tree, vocab=4)
    twins = T.TokenTree((-1, 0, 0, 1, 2), torch.tensor([0, 1, 1, 2, 3]))  # i.i.d. siblings may repeat a token
    assert T.contract_violation([1, 2, 0], twins, vocab=4) is None  # through the first 1
    assert T.contract_violation([1, 3, 0], twins, vocab=4) is None  # through the second 1
    assert T.contract_violation([1, 2], twins, vocab=4) is None  # the second 1's child (3) was rejected
    assert "not a path" in T.contract_violation([1, 1, 0], twins, vocab=4)


def test_an_output_that_is_not_token_ids_breaks_the_contract():
    report = T.check_tree_sampler(lambda tree, p, q: 2.5, trials=10, scenarios=T.SCENARIOS[:1])
    assert not report.passed and "not a sequence of token ids" in report.summary


# ---- the check's own pieces


@pytest.mark.parametrize("scenario", T.SCENARIOS, ids=lambda s: s.name)
def test_the_exact_law_is_the_product_of_p_along_each_block(scenario):
    exact = scenario.exact_blocks()
    assert exact.shape == (scenario.vocab**scenario.block,)
    assert abs(float(exact.sum()) - 1.0) < 1e-12
    for cell, block in enumerate(itertools.product(range(scenario.vocab), repeat=scenario.block)):
        product = 1.0
        for i, token in enumerate(block):
            p = scenario.p(block[:i])
            assert abs(float(p.sum()) - 1.0) < 1e-12 and bool((p >= 0).all())
            product *= float(p[token])
        assert float(exact[cell]) == pytest.approx(product, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("scenario", T.SCENARIOS, ids=lambda s: s.name)
def test_the_scenarios_have_their_shapes(scenario):
    for prefix in [(), (0,), (1, 2)][: scenario.block]:
        p, q = scenario.p(prefix), scenario.q(prefix)
        assert abs(float(q.sum()) - 1.0) < 1e-12
        if scenario.kind == "zeros in q":
            assert bool(((q == 0) & (p > 0)).any())
        if scenario.kind == "disjoint supports":
            assert float((p * q).sum()) == 0.0
        if scenario.kind == "near one-hot p":
            assert float(p.max()) > 0.95
        if scenario.kind == "p == q":
            assert torch.equal(p, q)
        if scenario.kind == "ties":
            assert len(set(p.tolist())) == 2 and len(set(q.tolist())) == 2


def test_the_distributions_handed_to_the_sampler_are_p_and_q_after_each_path():
    scenario = T.SCENARIOS[1]  # the irregular tree
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        tree = T.draw_trees(scenario, 5, "iid")
    p, q = T.tree_distributions(scenario, tree)
    for t in range(5):
        for node in range(len(tree.parents)):
            prefix = tuple(int(tree.tokens[t, n]) for n in tree.path(node))
            assert torch.equal(p[t, node], scenario.p(prefix)) and torch.equal(q[t, node], scenario.q(prefix))


def test_drafted_siblings_follow_q_iid_or_without_replacement():
    """The root's first two children: i.i.d. from q, or the ordered pair (x, y) with probability
    q(x) q(y) / (1 - q(x)) without replacement (chi-square at 10⁻³ each)."""
    scenario = T.SCENARIOS[0]
    q = scenario.q(())
    vocab = scenario.vocab
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        iid = T.draw_trees(scenario, 20_000, "iid").tokens[:, 1:3]
        without = T.draw_trees(scenario, 20_000, "without replacement").tokens[:, 1:4]
    assert_matches(torch.bincount(iid[:, 0] * vocab + iid[:, 1], minlength=vocab**2), torch.outer(q, q).flatten())
    pairs = q[:, None] * q[None, :] / (1 - q[:, None])
    pairs.fill_diagonal_(0.0)
    assert_matches(torch.bincount(without[:, 0] * vocab + without[:, 1], minlength=vocab**2), pairs.flatten())
    assert bool((iid[:, 0] == iid[:, 1]).any())  # i.i.d. siblings repeat sometimes
    assert all(len(set(row)) == 3 for row in without.tolist())  # never without replacement


def test_the_check_repeats_and_leaves_the_global_generator_alone():
    state = torch.random.get_rng_state()
    first = T.check_tree_sampler(T.specinfer_sampler, trials=300, scenarios=T.SCENARIOS[:2])
    second = T.check_tree_sampler(T.specinfer_sampler, trials=300, scenarios=T.SCENARIOS[:2])
    assert first.figures == second.figures
    assert torch.equal(state, torch.random.get_rng_state())


def test_tree_shapes():
    assert T.chains(2, 3) == (-1, 0, 0, 1, 2, 3, 4)
    assert T.full_tree((2, 1)) == (-1, 0, 0, 1, 2)
    tree = T.TokenTree(T.EAGLE_TREE, torch.zeros(len(T.EAGLE_TREE), dtype=torch.long))
    assert tree.depth == 3 and tree.children(0) == [1, 2, 3] and tree.path(7) == [1, 4, 7]
    with pytest.raises(ValueError, match="before it"):
        T.TokenTree((-1, 2, 0), torch.zeros(3, dtype=torch.long))
