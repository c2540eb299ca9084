"""The oracle at the kernel level for token trees: multi-candidate and tree verification in sampling mode.

**The kernel.** `check_tree_sampler(fn)` checks a function

    fn(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]

that verifies a drafted token tree and returns the accepted tokens plus one more:

- `tree.parents[i]` is node i's parent (node 0 is the root, the newest committed token x0, with parent -1;
  every parent comes before its children, `parents[i] < i`), `tree.tokens[i]` is node i's token, and the
  children of a node are listed in the order the draft drew them;
- `p[i]` is the target's distribution after the path root -> i (so `p[0]` is the target's next-token law
  after x0, and `p[leaf]` is the law of the bonus token after a leaf);
- `q[i]` is the draft's distribution after the same path: the law node i's children were drawn from;
- the return value is the tokens of the accepted path, root excluded, followed by one more token (the
  correction drawn from the residual, or the bonus token after a leaf).

Randomness comes from torch's global generator, which the check seeds (inside `torch.random.fork_rng`).
A sampler that takes batches says so (`fn.takes_batches = True` and `fn.batch(tree, p, q)`, where
`tree.tokens` is `(trials, node)` with `tree.parents` shared, p and q are `(trials, node, vocab)`, and it
returns one list per trial). How the siblings were drawn is part of the rule: i.i.d. from q, or without
replacement; the check draws them as `siblings=` says (or as `fn.siblings` says, "iid" by default).

**The rules.** Two recursive rejection rules are exact. At a node with target law p and draft law q,
try the children in the order they were drawn; accept child x with probability min(1, p(x) / q(x)) and
move to it; on a rejection set p <- norm(max(0, p - q)) and try the next child; if every child is
rejected draw the new token from what is left of p; at a leaf draw the bonus token from p[leaf].

- Siblings drawn i.i.d. from q: q stays as it is (SpecInfer's multi-step speculative sampling, Miao et
  al. 2024). `specinfer_sampler` implements it.
- Siblings drawn from q without replacement: after a rejected x, also set q(x) <- 0 and renormalise q,
  because the next sibling was drawn from that law (Sequoia, Chen et al. 2024; MCSD's variant without
  replacement, Yang et al. 2024; the conditional draft probabilities of EAGLE's sampled drafts,
  SafeAILab/EAGLE#74). `without_replacement_sampler` implements it.

In both, each step emits x with probability min(p(x), q(x)) on acceptance plus (1 - sum min(p, q)) times
the residual's law on rejection, which is p; by induction over the siblings and the depths the output
is distributed exactly as token-by-token sampling from the target, whatever the tree's shape.
mtdecode's own rule (`mtdecode.verification.verify_candidates`, the one-hot rule: accept x with
probability p(x), on rejection remove x from p) ignores q and is exact for any tree fixed before its
draws; `ours` adapts it.

**The check.** Synthetic sources (`SCENARIOS`) give p and q as deterministic functions of the prefix
over 4 or 5 tokens, in shapes that stress trees (generic, zeros in q where p > 0, disjoint supports, a
near one-hot p, p == q, exact ties), on trees of several shapes (candidate chains from the root, full
trees, an irregular EAGLE-style tree). Each trial draws the tree's tokens from q, calls `fn`, checks
the contract, and continues the output token by token from p to a block of depth + 1 tokens. The
law of those blocks must be the exact law of token-by-token sampling from p (enumerated over
vocab^(depth + 1) cells): a chi-square test per scenario at `false_alarm / len(scenarios)`, so a
correct sampler fails with probability at most `false_alarm`.

**The contract.** The tokens before the last must follow a path from the root (with i.i.d. siblings two
children may carry the same token: any of them will do). With `recursive=True` (the default) the last
token must not be the token of a child of the node where the path stops: under both recursive rules a
rejected child x had p(x) < q(x), so the residual max(0, p - q) is exactly 0 at x and stays 0 at every
later rejection; a child that was not rejected would have been followed. Exact rules of another family
(SpecTr's k-sequential selection, optimal-transport verifiers) can return a rejected token from their
residual: check them with `recursive=False`, which keeps the path rule and the law test.

**Mutants.** `TREE_MUTANTS` maps wrong samplers to their class of mistake; each fails the check at its
default settings (`tests/test_trees.py`).
"""

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from mtdecode.sampling import RowRandom
from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.testing.report import Report
from mtdecode.testing.stats import chi_square_test, detectable_tv
from mtdecode.verification import verify_candidates

#: how the draft drew the children of a node: i.i.d. from q, or from q without replacement
SIBLINGS = ("iid", "without replacement")


@dataclass(frozen=True, eq=False)
class TokenTree:
    """A drafted token tree: node 0 is the root (x0), `parents[i] < i` for every other node.

    `tokens` is `(node,)` for one tree, or `(trials, node)` for a batch of trees of the same shape.
    """

    parents: tuple[int, ...]
    tokens: Int[Tensor, "*trials node"]

    def __post_init__(self) -> None:
        if not self.parents or self.parents[0] != -1:
            raise ValueError(f"node 0 is the root and has parent -1, got parents {self.parents}")
        if any(not 0 <= parent < node for node, parent in enumerate(self.parents) if node):
            raise ValueError(f"every node's parent must come before it, got parents {self.parents}")
        if self.tokens.shape[-1] != len(self.parents):
            raise ValueError(f"{len(self.parents)} parents but {self.tokens.shape[-1]} tokens per tree")

    def children(self, node: int) -> list[int]:
        """The children of `node`, in the order the draft drew them."""
        return [child for child, parent in enumerate(self.parents) if parent == node]

    def level(self, node: int) -> int:
        """How many edges separate `node` from the root."""
        return 0 if node == 0 else 1 + self.level(self.parents[node])

    @property
    def depth(self) -> int:
        """The deepest node's level: a path accepts at most this many tokens."""
        return max(self.level(node) for node in range(len(self.parents)))

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to `node` (empty for the root)."""
        return [] if node == 0 else self.path(self.parents[node]) + [node]

    def children_table(self) -> Int[Tensor, "node most"]:
        """Row i: node i's children in order, padded with -1 (at least one column)."""
        kids = [self.children(node) for node in range(len(self.parents))]
        most = max(1, *(len(k) for k in kids))
        return torch.tensor([k + [-1] * (most - len(k)) for k in kids], dtype=torch.long)


def chains(count: int, length: int) -> tuple[int, ...]:
    """The parents of `count` candidate chains of `length` tokens from the root (lookahead's G candidates,
    SpecInfer's sequence-based speculation): the root's children first, then each chain's next tokens."""
    parents = [-1] + [0] * count
    for depth in range(1, length):
        parents += [1 + (depth - 1) * count + c for c in range(count)]
    return tuple(parents)


def full_tree(branching: Sequence[int]) -> tuple[int, ...]:
    """The parents of a tree whose nodes at depth d all have `branching[d]` children, breadth first."""
    parents, level = [-1], [0]
    for width in branching:
        new = []
        for node in level:
            for _ in range(width):
                parents.append(node)
                new.append(len(parents) - 1)
        level = new
    return tuple(parents)


#: an irregular tree as EAGLE-2 grows them: three children of the root, the first with two children (one of
#: them with a child of its own), the second with one, the third a leaf
EAGLE_TREE = (-1, 0, 0, 0, 1, 1, 2, 4)


@dataclass(frozen=True)
class Scenario:
    """A synthetic target p and draft q over `vocab` tokens, as functions of the tokens after x0, on trees of
    the shape `parents`.

    `kind` shapes them: "generic", "zeros in q" (q is 0 on the two tokens p likes most), "disjoint supports"
    (q on its three likeliest tokens, p on the others: every proposal is rejected), "near one-hot p" (0.96 on
    one token), "p == q" (every proposal is accepted), "ties" (p and q take two values each, exact ties).
    """

    name: str
    kind: str
    vocab: int
    parents: tuple[int, ...]
    seed: int

    @property
    def block(self) -> int:
        """Tokens per block: the tree's depth + 1."""
        return TokenTree(self.parents, torch.zeros(len(self.parents), dtype=torch.long)).depth + 1

    def p(self, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
        """The target's distribution after `prefix` (the tokens after x0)."""
        return _tables(self)[0][len(prefix)][_index(prefix, self.vocab)]

    def q(self, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
        """The draft's distribution after `prefix`."""
        return _tables(self)[1][len(prefix)][_index(prefix, self.vocab)]

    def exact_blocks(self) -> Float[Tensor, " cells"]:
        """P(x_1..x_L) under token-by-token sampling from p, L = `block`, at cell x_1 V^(L-1) + ... + x_L."""
        joint = torch.ones(1, dtype=torch.float64)
        for table in _tables(self)[0]:  # table[i] is p after the prefix numbered i, so row order = cell order
            joint = (joint[:, None] * table).reshape(-1)
        return joint


def _index(prefix: Sequence[int], vocab: int) -> int:
    """A prefix's row in its length's table: its tokens read as a number in base `vocab`."""
    index = 0
    for token in prefix:
        index = index * vocab + token
    return index


@functools.cache
def _tables(scenario: Scenario) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """p and q after every prefix of each length 0..block-1: `(vocab^length, vocab)` per length."""
    vocab, kind = scenario.vocab, scenario.kind
    targets, drafts = [], []
    for length in range(scenario.block):
        generator = torch.Generator().manual_seed(1_000 * scenario.seed + length)
        z = 1.5 * torch.randn(2, vocab**length, vocab, generator=generator, dtype=torch.float64)
        p, q = torch.softmax(z[0], -1), torch.softmax(z[1], -1)
        if kind == "zeros in q":  # q rules out the tokens p likes most
            q = q.scatter(1, p.topk(2, dim=-1).indices, 0.0)
        elif kind == "disjoint supports":  # q on its three likeliest tokens, p on the others
            support = torch.zeros_like(q, dtype=torch.bool).scatter(1, q.topk(3, dim=-1).indices, True)
            q, p = q * support, p * ~support
        elif kind == "near one-hot p":
            p = 0.96 * torch.nn.functional.one_hot(p.argmax(-1), vocab).double() + 0.04 * p
        elif kind == "p == q":
            p = q
        elif kind == "ties":  # the likelier half of the tokens (by z) share one value, the rest another
            p = _two_levels(z[0], 3.0, 2.0)
            q = _two_levels(z[1], 2.0, 1.0)
        elif kind != "generic":
            raise ValueError(f"unknown scenario kind {kind!r}")
        targets.append(p / p.sum(-1, keepdim=True))
        drafts.append(q / q.sum(-1, keepdim=True))
    return tuple(targets), tuple(drafts)


def _two_levels(z: Float[Tensor, "rows vocab"], high: float, low: float) -> Float[Tensor, "rows vocab"]:
    """`high` on the top half of each row of z, `low` on the rest (unnormalised): exact ties by design."""
    top = torch.zeros_like(z, dtype=torch.bool).scatter(1, z.topk(z.shape[1] // 2, dim=-1).indices, True)
    return torch.where(top, high, low).double()


SCENARIOS = (
    Scenario("generic, 3 candidates of 2 tokens", "generic", vocab=5, parents=chains(3, 2), seed=0),
    Scenario("generic, EAGLE-style tree", "generic", vocab=4, parents=EAGLE_TREE, seed=1),
    Scenario("zeros in q, tree 3x2", "zeros in q", vocab=5, parents=full_tree((3, 2)), seed=2),
    Scenario("disjoint supports, 3 candidates of 2", "disjoint supports", vocab=5, parents=chains(3, 2), seed=3),
    Scenario("near one-hot p, tree 2x2", "near one-hot p", vocab=4, parents=full_tree((2, 2)), seed=4),
    Scenario("p == q, tree 2x2x1", "p == q", vocab=4, parents=full_tree((2, 2, 1)), seed=5),
    Scenario("ties, tree 3x2", "ties", vocab=4, parents=full_tree((3, 2)), seed=6),
)


# ---------------------------------------------------------------- drafting the trees


def draw_trees(scenario: Scenario, trials: int, siblings: str) -> TokenTree:
    """Draft `trials` trees of the scenario's shape from its q, with torch's global generator.

    **Arguments:**

    - `scenario`: the source and the tree shape.
    - `trials`: how many trees.
    - `siblings`: "iid" (each child drawn from q after its parent's path) or "without replacement" (each child
      drawn from that q without the tokens of the siblings drawn before it, so the order is the draw order).

    **Returns:** a batched `TokenTree`, `tokens` of shape `(trials, node)`; the root's token is 0 (the sources
    look only at the tokens after it).
    """
    vocab, parents = scenario.vocab, scenario.parents
    drafts = _tables(scenario)[1]
    tokens = torch.zeros(trials, len(parents), dtype=torch.long)
    index = torch.zeros(trials, len(parents), dtype=torch.long)  # each node's prefix, numbered as in the tables
    tree = TokenTree(parents, tokens)
    for node in range(len(parents)):
        children = tree.children(node)
        if not children:
            continue
        q = drafts[tree.level(node)][index[:, node]]  # (trials, vocab)
        if siblings == "iid":
            drawn = torch.multinomial(q, len(children), replacement=True)
        else:  # one at a time, each from q without the tokens drawn before it, so the order is the draw order
            if int((q > 0).sum(-1).min()) < len(children):
                raise ValueError(f"{scenario.name}: a node has {len(children)} children but q has fewer tokens")
            columns = []
            for _ in children:
                columns.append(torch.multinomial(q, 1)[:, 0])
                q = q.scatter(1, columns[-1][:, None], 0.0)
            drawn = torch.stack(columns, dim=1)
        for column, child in enumerate(children):
            tokens[:, child] = drawn[:, column]
            index[:, child] = index[:, node] * vocab + drawn[:, column]
    return tree


def tree_distributions(
    scenario: Scenario, tree: TokenTree
) -> tuple[Float[Tensor, "trials node vocab"], Float[Tensor, "trials node vocab"]]:
    """p and q after the path to every node of every tree of a batch from `draw_trees`.

    **Returns:** `(p, q)`, each `(trials, node, vocab)`: row i of a trial is the distribution after the tokens on
    the path from the root to node i.
    """
    targets, drafts = _tables(scenario)
    rows = []
    for node in range(len(tree.parents)):
        prefix = tree.tokens[:, tree.path(node)]  # (trials, level)
        index = (prefix * scenario.vocab ** torch.arange(prefix.shape[1] - 1, -1, -1)).sum(1)
        rows.append((targets[prefix.shape[1]][index], drafts[prefix.shape[1]][index]))
    return torch.stack([p for p, _ in rows], dim=1), torch.stack([q for _, q in rows], dim=1)


# ---------------------------------------------------------------- the contract


class ContractError(Exception):
    """The sampler returned something that cannot be "an accepted path plus one more token"."""


def contract_violation(tokens: Sequence[int], tree: TokenTree, vocab: int, recursive: bool = True) -> str | None:
    """Which rule of the contract `tokens` breaks for the single tree `tree`, or None (see the module docstring).

    **Arguments:**

    - `tokens`: what the sampler returned.
    - `tree`: the tree it verified (`tree.tokens` one-dimensional).
    - `vocab`: the vocabulary's size.
    - `recursive`: also require that the last token is not a child's token of the node the path stops at
      (true of every recursive rejection rule: SpecInfer's, Sequoia's, the one-hot rule).

    **Returns:** a sentence naming the broken rule, or None.
    """
    tokens = list(tokens)
    if not tokens or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens):
        return f"returned {tokens}: expected 1 to {tree.depth + 1} token ids in [0, {vocab})"
    if len(tokens) > tree.depth + 1:
        return f"returned {len(tokens)} tokens from a tree of depth {tree.depth}: at most {tree.depth + 1}"
    ends = {0}  # the nodes the path so far may stand for (i.i.d. siblings may repeat a token)
    for i, token in enumerate(tokens[:-1]):
        ends = {child for node in ends for child in tree.children(node) if int(tree.tokens[child]) == token}
        if not ends:
            return (
                f"returned {tokens}: its first {i + 1} tokens are not a path from the root of the tree "
                f"(parents {tree.parents}, tokens {tree.tokens.tolist()})"
            )
    last = tokens[-1]
    if recursive and all(last in {int(tree.tokens[c]) for c in tree.children(node)} for node in ends):
        return (
            f"returned {tokens} for the tree (parents {tree.parents}, tokens {tree.tokens.tolist()}): it stops "
            f"at a node with a child carrying {last}, so either that child was accepted and the token after it is "
            "missing, or a rejected child came back as the correction (the residual max(0, p - q) is 0 there)"
        )
    return None


def _read_outputs(outputs, trials: int, block: int, vocab: int) -> tuple[Int[Tensor, "trials block"], list[int]]:
    """The outputs padded with -1 to `block` columns and their lengths; `ContractError` if one is not token ids."""
    try:
        # (`type(o) is list` first: isinstance against torch's Tensor costs microseconds per call)
        rows = [o if type(o) is list else o.tolist() if isinstance(o, Tensor) else list(o) for o in outputs]
    except TypeError as error:
        raise ContractError(f"an output is not a sequence of token ids ({error})") from None
    if len(rows) != trials:
        raise ContractError(f"returned {len(rows)} outputs for {trials} trees")
    lengths = [len(row) for row in rows]
    flat = list(itertools.chain.from_iterable(rows))
    if not set(map(type, flat)) <= {int} or not 1 <= min(lengths) <= max(lengths) <= block:  # the fast test
        for row in rows:  # the slow one, to name the first culprit
            if not 1 <= len(row) <= block or not all(type(t) is int for t in row):
                raise ContractError(f"returned {row}: expected 1 to {block} token ids in [0, {vocab})")
    tokens = torch.tensor(flat, dtype=torch.long)
    if bool(((tokens < 0) | (tokens >= vocab)).any()):
        row = next(row for row in rows if not all(0 <= t < vocab for t in row))
        raise ContractError(f"returned {row}: expected 1 to {block} token ids in [0, {vocab})")
    padded = torch.full((trials, block), -1, dtype=torch.long)
    padded[torch.arange(block) < torch.tensor(lengths)[:, None]] = tokens  # row by row, as `flat` is
    return padded, lengths


def _violations(
    out: Int[Tensor, "trials block"], lengths: Int[Tensor, " trials"], tree: TokenTree, recursive: bool
) -> Bool[Tensor, " trials"]:
    """`contract_violation`'s path and residual rules for every trial at once: True where a trial breaks one."""
    trials, nodes = tree.tokens.shape
    parents = torch.tensor(tree.parents)
    child_of = (parents[None, :] == torch.arange(nodes)[:, None]).double()  # (node, child): 1 on every edge
    ends = torch.zeros(trials, nodes, dtype=torch.bool)
    ends[:, 0] = True
    broken = torch.zeros(trials, dtype=torch.bool)
    for i in range(out.shape[1] - 1):
        on_path = i < lengths - 1
        step = ((ends.double() @ child_of) > 0) & (tree.tokens == out[:, i, None])
        broken |= on_path & ~step.any(1)
        ends = torch.where(on_path[:, None], step, ends)
    if recursive:
        last = out.gather(1, (lengths - 1)[:, None])  # (trials, 1)
        carries = torch.einsum("uc,tc->tu", child_of, (tree.tokens == last).double()) > 0  # a child of u carries it
        broken |= ~(ends & ~carries).any(1)
    return broken


# ---------------------------------------------------------------- the check


def check_tree_sampler(
    fn: Callable,
    *,
    siblings: str | None = None,
    trials: int = 10_000,
    false_alarm: float = 1e-3,
    scenarios: Sequence[Scenario] = SCENARIOS,
    seed: int = 0,
    recursive: bool = True,
) -> Report:
    """The law of `fn`'s outputs on synthetic sources and trees of many shapes (see the module docstring).

    **Arguments:**

    - `fn`: the tree sampler, `fn(tree, p, q) -> list[int]` (or `fn.batch` when `fn.takes_batches`).
    - `siblings`: "iid" or "without replacement", how the check draws the children of a node; default
      `fn.siblings` if set, else "iid".
    - `trials`: trees per scenario.
    - `false_alarm`: the probability that a correct sampler fails; each scenario's chi-square test runs at
      `false_alarm / len(scenarios)`.
    - `scenarios`: the sources and tree shapes.
    - `seed`: seeds torch's global generator inside `fork_rng` (the caller's stream is left as it was).
    - `recursive`: also check that the last token is not a child's token of the node the path stops at.

    **Returns:** a `Report`: the verdict, the false-alarm rate, the detectable total-variation distance,
    and per scenario the chi-square figures and the mean number of accepted tokens.
    """
    siblings = siblings or getattr(fn, "siblings", "iid")
    if siblings not in SIBLINGS:
        raise ValueError(f"siblings must be one of {SIBLINGS}, got {siblings!r}")
    name = getattr(fn, "__qualname__", None) or repr(fn)
    alpha = false_alarm / len(scenarios)
    results, failed = [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        seeds = torch.randint(0, 2**62, (len(scenarios),)).tolist()  # one per scenario: none depends on another
        for scenario, scenario_seed in zip(scenarios, seeds, strict=True):
            torch.manual_seed(scenario_seed)
            vocab, block = scenario.vocab, scenario.block
            tree = draw_trees(scenario, trials, siblings)
            p, q = tree_distributions(scenario, tree)
            handed = TokenTree(tree.parents, tree.tokens.clone())  # a copy: the contract reads the tree drawn
            if getattr(fn, "takes_batches", False):  # one call for every trial
                outputs = fn.batch(handed, p, q)
            else:
                outputs = [fn(TokenTree(tree.parents, handed.tokens[t]), p[t], q[t]) for t in range(trials)]
            try:
                out, lengths = _read_outputs(outputs, trials, block, vocab)
                broken = _violations(out, torch.tensor(lengths), tree, recursive)
                if broken.any():
                    t = int(broken.long().argmax())
                    one = TokenTree(tree.parents, tree.tokens[t])
                    why = contract_violation(out[t, : lengths[t]].tolist(), one, vocab, recursive)
                    raise ContractError(why or f"trial {t} broke the path or residual rule")
            except ContractError as error:
                summary = f"check_tree_sampler FAILED: {name} broke the contract ({scenario.name}): {error}."
                figures = {"scenario": scenario.name, "siblings": siblings}
                return Report("check_tree_sampler", False, summary, figures)
            cells = _continue(scenario, out, torch.tensor(lengths))
            counts = torch.bincount(cells, minlength=vocab**block)
            fit = chi_square_test(counts, scenario.exact_blocks(), false_alarm=alpha)
            epsilon = _detectable_tv(trials, fit.dof, alpha)
            accepted = sum(lengths) / trials - 1
            results.append(
                {"scenario": scenario.name, **vars(fit), "passed": fit.passed, "detectable_tv": epsilon,
                 "mean_accepted": accepted}
            )  # fmt: skip
            if not fit.passed:
                failed.append((scenario, fit))
    power = max(r["detectable_tv"] for r in results)
    figures = {
        "trials": trials, "false_alarm": false_alarm, "siblings": siblings, "detectable_tv": power,
        "scenarios": results,
    }  # fmt: skip
    strength = (
        f"A correct sampler fails with probability at most {false_alarm:g} (chi-square at {alpha:.2g} per "
        f"scenario); a law at total-variation distance {power:.3f} or more from the exact one is detected with "
        "probability 0.99."
    )
    if not failed:
        summary = (
            f"check_tree_sampler passed: {name} keeps the target's law exactly on {len(scenarios)} synthetic "
            f"sources and tree shapes ({'; '.join(s.name for s in scenarios)}), siblings drawn {siblings}, "
            f"{trials} trials each, the contract held in every trial. " + strength
        )
        return Report("check_tree_sampler", True, summary, figures)
    scenario, fit = failed[0]
    summary = (
        f"check_tree_sampler FAILED: {name} does not keep the target's law on '{scenario.name}' (vocabulary "
        f"{scenario.vocab}, blocks of {scenario.block} tokens, siblings drawn {siblings}): {fit}. "
        f"{len(failed)} of {len(scenarios)} scenarios failed. " + strength
    )
    return Report("check_tree_sampler", False, summary, figures)


@functools.cache
def _detectable_tv(trials: int, dof: int, alpha: float) -> float:
    """`detectable_tv`, kept: the pooled cells, so the dof, depend only on the scenario and the trials."""
    return detectable_tv(trials, dof, alpha)


def _continue(
    scenario: Scenario, out: Int[Tensor, "trials block"], lengths: Int[Tensor, " trials"]
) -> Int[Tensor, " trials"]:
    """Each output continued token by token from p to a full block; returns each block's cell."""
    targets = _tables(scenario)[0]
    cell = torch.zeros(out.shape[0], dtype=torch.long)
    for i, table in enumerate(targets):
        fresh = torch.multinomial(table[cell], 1)[:, 0]
        cell = cell * scenario.vocab + torch.where(i < lengths, out[:, i], fresh)
    return cell


# ---------------------------------------------------------------- the correct samplers


def _recursive_rejection(
    tree: TokenTree,
    p: Float[Tensor, "trials node vocab"],
    q: Float[Tensor, "trials node vocab"],
    *,
    without_replacement: bool,
    bug: str = "",
) -> list[list[int]]:
    """Recursive rejection over a batch of trees of one shape, one trial per row (torch's global generator).

    SpecInfer's multi-step speculative sampling when `without_replacement` is False, Sequoia's verification of
    siblings drawn without replacement when True. `bug` selects one of the mutants ("" is the correct rule).
    """
    trials = p.shape[0]
    rows = torch.arange(trials)
    tokens, parents, kids = tree.tokens, torch.tensor(tree.parents), tree.children_table()
    node = torch.zeros(trials, dtype=torch.long)  # where each trial stands: the last accepted node
    running = torch.ones(trials, dtype=torch.bool)
    accepted = torch.full((trials, tree.depth + 1), -1, dtype=torch.long)  # the path's tokens, then the new one
    count = torch.zeros(trials, dtype=torch.long)
    final = p[:, 0].clone()  # the law the last token is drawn from
    for level in range(tree.depth + 1):
        target, draft = p[rows, node], q[rows, node]  # the node's p and the law its children were drawn from
        if bug == "q_row_of_parent":
            draft = q[rows, parents[node].clamp(min=0)]
        children = kids[node]  # (trials, most), in draw order
        if bug == "siblings_sorted_by_q":
            weight = draft.gather(1, tokens.gather(1, children.clamp(min=0)))
            order = torch.where(children >= 0, weight, -1.0).argsort(dim=1, descending=True, stable=True)
            children = children.gather(1, order)
        chosen = torch.full((trials,), -1, dtype=torch.long)
        for j in range(children.shape[1]):
            child = children[:, j]
            trying = running & (child >= 0) & (chosen < 0)
            x = tokens.gather(1, child.clamp(min=0)[:, None])  # (trials, 1)
            tested = p[rows, node] if bug == "stale_target" else target
            # SpecInfer / Sequoia: accept x with probability min(1, p(x) / q(x))
            ratio = tested.gather(1, x)[:, 0] / draft.gather(1, x)[:, 0]
            accept = trying & (torch.rand(trials, dtype=torch.float64) < ratio)
            reject = trying & ~accept
            chosen = torch.where(accept, child, chosen)
            # on a rejection: p <- norm(max(0, p - q)) with the q that x was drawn from ...
            without_x = _normalised(draft.scatter(1, x, 0.0), draft)
            subtracted = without_x if bug == "residual_after_q_update" else draft
            residual = _normalised((target - subtracted).clamp(min=0), target)
            if bug == "residual_removes_token_only":
                residual = _normalised(target.scatter(1, x, 0.0), target)
            target = torch.where(reject[:, None], residual, target)
            if without_replacement:  # ... and (Sequoia) the next sibling came from q without x: q <- norm(q - q(x))
                draft = torch.where(reject[:, None], without_x, draft)
        # SpecInfer: every child rejected, the new token comes from the residual; at a leaf, the bonus token from
        # p[leaf] (Leviathan et al.'s extra token after a fully accepted draft)
        moved = chosen >= 0
        stopping = running & ~moved
        if bug == "bonus_from_parent":
            leaf = stopping & (children[:, 0] < 0)
            target = torch.where(leaf[:, None], p[rows, parents[node].clamp(min=0)], target)
        final = torch.where(stopping[:, None], target, final)
        count = torch.where(stopping, level, count)
        accepted[:, level] = torch.where(moved, tokens.gather(1, chosen.clamp(min=0)[:, None])[:, 0], -1)
        node = torch.where(moved, chosen, node)
        running = moved
    accepted[rows, count] = torch.multinomial(final, 1)[:, 0]
    return [row[: n + 1] for row, n in zip(accepted.tolist(), count.tolist(), strict=True)]


def _normalised(
    v: Float[Tensor, "trials vocab"], fallback: Float[Tensor, "trials vocab"]
) -> Float[Tensor, "trials vocab"]:
    """Each row of `v` divided by its sum; `fallback`'s row where the sum is 0 (only reachable by rounding: a
    rejection has probability 0 when the residual is empty)."""
    total = v.sum(-1, keepdim=True)
    return torch.where(total > 0, v / total.clamp(min=torch.finfo(v.dtype).tiny), fallback)


def _one_tree(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"], **rule) -> list[int]:
    """`_recursive_rejection` on a single tree: a batch of one."""
    return _recursive_rejection(TokenTree(tree.parents, tree.tokens[None]), p[None], q[None], **rule)[0]


def _batched(fn: Callable, siblings: str, **rule) -> Callable:
    """Give `fn` its batched form (`fn.batch`, `_recursive_rejection` with `rule`) and the way its siblings are
    drawn (`fn.siblings`)."""
    fn.takes_batches = True
    fn.batch = functools.partial(_recursive_rejection, **rule)
    fn.siblings = siblings
    return fn


def specinfer_sampler(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """SpecInfer's multi-step speculative sampling (Miao et al. 2024), for siblings drawn i.i.d. from q.

    At each node, try the children in the order they were drawn: accept x with probability min(1, p(x) / q(x))
    and move to it; on a rejection p <- norm(max(0, p - q)) and try the next. Every child rejected: the new
    token comes from what is left of p; a leaf reached: the bonus token comes from p[leaf]. Takes batches
    (`specinfer_sampler.batch`)."""
    return _one_tree(tree, p, q, without_replacement=False)


def without_replacement_sampler(
    tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]
) -> list[int]:
    """Recursive rejection for siblings drawn from q without replacement (Sequoia, Chen et al. 2024; MCSD's
    variant without replacement, Yang et al. 2024).

    SpecInfer's rule, and after a rejected x also q(x) <- 0 and q renormalised: the next sibling was drawn from
    that law. Takes batches (`without_replacement_sampler.batch`)."""
    return _one_tree(tree, p, q, without_replacement=True)


_batched(specinfer_sampler, "iid", without_replacement=False)
_batched(without_replacement_sampler, "without replacement", without_replacement=True)


def ours(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """mtdecode's multi-candidate rule (`mtdecode.verification.verify_candidates`) behind the kernel signature.

    Every root-to-leaf path is a candidate (as `mtdecode.strategies.eagle.verify_tree` builds them); the rule
    treats each proposal as one-hot (accept x with probability p(x), on a rejection remove x from p), so it
    ignores q and is exact whichever way the siblings were drawn, accepting less often than the rules that use
    q. Its random streams are seeded from torch's global generator; it takes batches (`ours.batch`)."""
    return _ours_batch(TokenTree(tree.parents, tree.tokens[None]), p[None], q[None])[0]


def _ours_batch(
    tree: TokenTree, p: Float[Tensor, "trials node vocab"], q: Float[Tensor, "trials node vocab"]
) -> list[list[int]]:
    # every root-to-leaf path a candidate, as mtdecode.strategies.eagle.verify_tree builds them; then the one-hot
    # multi-candidate rule (lookahead's, Fu et al. 2024; EAGLE's public sampling code, qx = 1)
    leaves = [node for node in range(len(tree.parents)) if not tree.children(node)]
    paths = [tree.path(leaf) for leaf in leaves]
    longest = max(len(path) for path in paths)
    nodes = torch.tensor([path + [-1] * (longest - len(path)) for path in paths], dtype=torch.long)  # (leaf, length)
    trials = p.shape[0]
    candidates = torch.where(nodes >= 0, tree.tokens[:, nodes.clamp(min=0)], -1)  # (trials, leaf, length)
    after = p[:, nodes.clamp(min=0)]  # after[t, c, k]: p after candidate c's tokens 0..k
    random = RowRandom(torch.randint(0, 2**62, (trials,)).tolist())
    verdict = verify_candidates(p[:, 0], after, candidates, random)
    return [row[: n + 1] for row, n in zip(verdict.tokens.tolist(), verdict.accepted.tolist(), strict=True)]


ours.takes_batches = True
ours.batch = _ours_batch


# ---------------------------------------------------------------- mutants


def stale_target(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """Every sibling tested against the node's own p instead of the residual the rejections before it left
    (the residual is kept, but only for the final draw)."""
    return _one_tree(tree, p, q, without_replacement=False, bug="stale_target")


def residual_removes_token_only(
    tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]
) -> list[int]:
    """On a rejection, x removed from p and p renormalised (the one-hot rule's residual) while the ratio uses the
    real q: the residual must be norm(max(0, p - q)). EAGLE's first sampling code did this with sampled drafts
    (SafeAILab/EAGLE#20)."""
    return _one_tree(tree, p, q, without_replacement=False, bug="residual_removes_token_only")


def q_not_renormalised(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """Siblings drawn without replacement but verified by the i.i.d. rule: q is not renormalised without the
    rejected token (with such drafts the ratio needs the conditional draft probabilities, SafeAILab/EAGLE#74)."""
    return _one_tree(tree, p, q, without_replacement=False)


def residual_after_q_update(
    tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]
) -> list[int]:
    """Without replacement, q updated (x removed, renormalised) before the residual is taken, so the residual
    subtracts the next sibling's law instead of the law x was drawn from (and keeps mass on x)."""
    return _one_tree(tree, p, q, without_replacement=True, bug="residual_after_q_update")


def bonus_from_parent(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """After a full acceptance, the bonus token drawn from the leaf's parent's p instead of the leaf's (an
    off-by-one in the rows of the target's logits)."""
    return _one_tree(tree, p, q, without_replacement=False, bug="bonus_from_parent")


def q_row_of_parent(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """The draft's row one level up: node i's children tested against q after i's parent (an off-by-one between
    the draft's rows and the target's; right at the root, where there is no row above)."""
    return _one_tree(tree, p, q, without_replacement=True, bug="q_row_of_parent")


def siblings_sorted_by_q(tree: TokenTree, p: Float[Tensor, "node vocab"], q: Float[Tensor, "node vocab"]) -> list[int]:
    """Siblings drawn without replacement, then verified in order of draft probability (as top-k trees store
    them) instead of the order they were drawn in."""
    return _one_tree(tree, p, q, without_replacement=True, bug="siblings_sorted_by_q")


_batched(stale_target, "iid", without_replacement=False, bug="stale_target")
_batched(residual_removes_token_only, "iid", without_replacement=False, bug="residual_removes_token_only")
_batched(q_not_renormalised, "without replacement", without_replacement=False)
_batched(residual_after_q_update, "without replacement", without_replacement=True, bug="residual_after_q_update")
_batched(bonus_from_parent, "iid", without_replacement=False, bug="bonus_from_parent")
_batched(q_row_of_parent, "without replacement", without_replacement=True, bug="q_row_of_parent")
_batched(siblings_sorted_by_q, "without replacement", without_replacement=True, bug="siblings_sorted_by_q")

#: wrong tree samplers, each with its class of mistake; each fails `check_tree_sampler` at its default settings
#: (with the siblings drawn as its `.siblings` says)
TREE_MUTANTS: dict[Callable, str] = {
    stale_target: "siblings after the first tested against the node's p, not the running residual",
    residual_removes_token_only: "on a rejection x removed from p (one-hot residual) instead of norm(max(0, p - q))",
    q_not_renormalised: "siblings drawn without replacement, verified with the i.i.d. rule (q not renormalised)",
    residual_after_q_update: "without replacement: the residual subtracts the renormalised q, not the q x came from",
    bonus_from_parent: "the bonus token drawn from the parent's p instead of the accepted leaf's",
    q_row_of_parent: "children tested against the draft row one level up (the parent's q)",
    siblings_sorted_by_q: "siblings verified in order of draft probability, not in the order they were drawn",
}

__all__ = [
    "EAGLE_TREE",
    "SCENARIOS",
    "SIBLINGS",
    "TREE_MUTANTS",
    "ContractError",
    "Scenario",
    "TokenTree",
    "chains",
    "check_tree_sampler",
    "contract_violation",
    "draw_trees",
    "full_tree",
    "ours",
    "specinfer_sampler",
    "tree_distributions",
    "without_replacement_sampler",
]
