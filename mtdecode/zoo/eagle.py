"""A feature-level draft head (EAGLE-1 style, Li et al. 2024) for a target of any supported family: the head, its
runner and its shipped weights' loading. Its training recipe is `mtdecode.recipes.eagle`.

EAGLE drafts in the target's feature space instead of with a separate small model. The
feature f_t is the target's top hidden state at position t (what its output layer reads;
`CausalLM.forward_features` returns it from the same forward that verifies). The head reads
f_t together with the embedding of the token x_{t+1} that followed, and predicts f_{t+1}; the
output layer turns the predicted feature into a distribution for x_{t+2}:

1. fuse:    h_t = W [f_t ; e(x_{t+1})] + b                 (a linear map 2H -> H)
2. attend:  g_t = one Llama decoder layer over h_1..h_t     (causal, the target's rotary positions)
3. feature: f'_{t+1} = norm(g_t)
4. logits:  over `head_token_ids` only, with the target's own output rows for those tokens
            (frozen, not shipped), as the distilled draft does: a full 49,152-row head would
            cost about a quarter of SmolLM2's forward.

`mtdecode.strategies.Eagle` drafts token trees with it, and `mtdecode.beam_q.HeadQ` makes it MTAD's and MMTAD's q;
`load_head` reads a trained head back, `quantize_head` turns it into int8.
"""

import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig, PretrainedConfig
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from mtdecode.attention import GROUPED_SDPA
from mtdecode.cache import KVCache, cache_keyword
from mtdecode.model import CausalLM, Runner
from mtdecode.session import Session
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: the tree's width by default (`Eagle.width`, nodes kept per depth), at which the course's reference depth cost is
#: kept (`mtdecode.costs.reference.record_reference`; `benchmarks/eagle_width.py` compares widths,
#: `docs/strategies/eagle.md`)
TREE_WIDTH = 3


class EagleHead(nn.Module):
    """Predicts the target's next feature from its current feature and the next token's embedding.

    **Arguments:**

    - `config`: the target's config, of any family; the head is one Llama decoder layer with the target's sizes,
      read through the config's own names (`head_layer_config`), and a final norm of the target's kind
      (`head_norm`).
    - `embedding`: the target's input embedding `(vocab, hidden)`, frozen and shared.
    - `output`: the target's output layer weight `(vocab, hidden)`, frozen and shared.
    - `head_token_ids`: the tokens the head scores `(head,)`; every other token gets probability 0.
    """

    def __init__(
        self,
        config: PretrainedConfig,
        embedding: Float[Tensor, "vocab hidden"],
        output: Float[Tensor, "vocab hidden"],
        head_token_ids: Int[Tensor, " head"],
    ) -> None:
        super().__init__()
        layer_config = head_layer_config(config)
        hidden = layer_config.hidden_size
        self.fuse = nn.Linear(2 * hidden, hidden, bias=True)  # step 1
        self.layer = LlamaDecoderLayer(layer_config, layer_idx=0)  # step 2
        self.cache_keyword = cache_keyword(self.layer.forward)  # `cache` (transformers >= 5.24) or `past_key_values`
        self.norm = head_norm(config, hidden)  # step 3
        self.rotary = LlamaRotaryEmbedding(layer_config)
        self.register_buffer("embedding", embedding.detach().clone(), persistent=False)
        self.register_buffer("head_token_ids", head_token_ids.long().clone(), persistent=True)
        self.register_buffer("output", output.detach()[head_token_ids].clone(), persistent=False)  # step 4's rows
        self.scorer: nn.Module | None = None  # step 4 in int8 (`quantize_head`), else `output` in float

    def forward(
        self,
        features: Float[Tensor, "batch seq hidden"],
        next_tokens: Int[Tensor, "batch seq"],
        positions: Int[Tensor, "batch seq"],
        mask: Bool[Tensor, "batch 1 seq seq"] | None = None,
    ) -> Float[Tensor, "batch seq hidden"]:
        """Steps 1-3 over a whole sequence at once (training): f'_{t+1} for every t, each seeing the positions up
        to its own, or what `mask` allows (training-time test lays several draft depths out in one sequence)."""
        if mask is None:
            seq = features.shape[1]
            mask = torch.ones(seq, seq, dtype=torch.bool, device=features.device).tril()[None, None]
        return self._predict(features, next_tokens, positions, mask, None)

    def step(
        self,
        features: Float[Tensor, "batch new hidden"],
        next_tokens: Int[Tensor, "batch new"],
        positions: Int[Tensor, "batch new"],
        mask: Bool[Tensor, "batch 1 new key"],
        cache: KVCache,
        *,
        valid: Bool[Tensor, "batch new"],
    ) -> Float[Tensor, "batch new hidden"]:
        """Steps 1-3 for new entries on top of the head's own KV cache (decoding): each (f_t, x_{t+1}) at position
        t, seeing what `mask` allows (the cached columns, then the new ones). The new entries become pending in
        `cache`, as a model's do in `mtdecode.CausalLM.forward`."""
        with torch.no_grad():
            predicted = self._predict(features.to(self.dtype), next_tokens, positions, mask, cache.hf_cache)
        cache.record(positions, valid)
        return predicted

    def _predict(self, features, next_tokens, positions, mask: Bool[Tensor, "batch 1 query key"], past):
        """Steps 1-3: fuse, the decoder layer (with its cache `past`, or none), norm."""
        fused = self.fuse(torch.cat([features, self.embedding[next_tokens]], dim=-1))  # (batch, new, hidden)
        additive = torch.zeros(mask.shape, dtype=fused.dtype, device=fused.device).masked_fill_(
            ~mask, torch.finfo(fused.dtype).min
        )
        cos_sin = self.rotary(fused, positions)
        out = self.layer(
            fused, attention_mask=additive, position_ids=positions, **{self.cache_keyword: past},
            use_cache=past is not None, position_embeddings=cos_sin,
        )  # fmt: skip
        out = out[0] if isinstance(out, tuple) else out
        return self.norm(out)

    @property
    def device(self) -> torch.device:
        return self.embedding.device

    @property
    def dtype(self) -> torch.dtype:
        """The float type the head computes in (its linear layers may hold int8 weights: `quantize_head`)."""
        return self.embedding.dtype

    def logits(self, features: Float[Tensor, "*rows hidden"]) -> Float[Tensor, "*rows head"]:
        """Step 4: scores over `head_token_ids` (index i is token `head_token_ids[i]`)."""
        from mtdecode.zoo.skinny import fast_matmul

        if self.scorer is not None:
            return self.scorer(features)
        return fast_matmul(features, self.output)  # `features @ output.T`, by the fastest path for few rows


class HeadRunner(Runner):
    """A `Runner` for an `EagleHead`: its cache is placed and masked like a model's, but it is fed features
    along with tokens and returns predicted features."""

    def __init__(self, head: EagleHead, batch: int) -> None:  # `Runner.__init__` takes a `CausalLM`
        self.model = head
        self.role = "head"
        self.cache = KVCache(batch, head.device)
        self.forwards = 0

    def step(
        self,
        features: Float[Tensor, "batch new hidden"],
        tokens: Int[Tensor, "batch new"],
        offsets: Int[Tensor, "... new"],
        sees: Bool[Tensor, "... new seen"],
        *,
        pad: Int[Tensor, " batch"] | None = None,
    ) -> Float[Tensor, "batch new hidden"]:
        """As `Runner.forward`, with each new entry's feature."""
        positions, mask, real = self.place(tokens, offsets, sees, pad)
        self.forwards += 1
        return self.model.step(features, tokens, positions, mask, self.cache, valid=real)


def head_layer_config(config: PretrainedConfig) -> LlamaConfig:
    """The config of the head's one Llama decoder layer, sized like the target's layers: hidden size, heads,
    key/value heads, head size, MLP width and activation, read through the target config's standard names (each
    family's `attribute_map` resolves them: GPT-2's `n_embd` is its `hidden_size`; where a size differs from layer
    to layer, the largest). The rotary embedding is the plain kind at the target's base frequency (10,000 where
    the target has no rotary positions): the head's positions are its own, and exactness never depends on it."""
    hidden = _setting(config, "hidden_size")
    heads = _setting(config, "num_attention_heads") or max(1, hidden // 64)
    intermediate = _setting(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    rope = _setting(config, "rope_parameters") or {}
    act = _setting(config, "hidden_act", "activation_function")
    layer = LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=1,
        num_attention_heads=heads,
        num_key_value_heads=_setting(config, "num_key_value_heads") or heads,
        head_dim=_setting(config, "head_dim") or hidden // heads,
        hidden_act=act if isinstance(act, str) and act in ACT2FN else "silu",
        max_position_embeddings=_setting(config, "max_position_embeddings") or 4096,
        rope_parameters={"rope_type": "default", "rope_theta": rope.get("rope_theta", 10_000.0)},
        attention_bias=bool(_setting(config, "attention_bias")),
        mlp_bias=bool(_setting(config, "mlp_bias")),
        rms_norm_eps=norm_eps(config),
    )
    layer._attn_implementation = GROUPED_SDPA  # the head's tree depths feed several nodes per row under a mask
    return layer


def _setting(config: PretrainedConfig, *names: str):
    """The first of `names` the config sets (a per-layer list: its largest entry), or None. Configs whose sizes
    vary by layer refuse to give one global value; they count as not setting it."""
    for name in names:
        try:
            value = getattr(config, name, None)
        except Exception:  # "a per-layer attribute": transformers' heterogeneous configs
            value = None
        if isinstance(value, list | tuple) and value and all(isinstance(v, int) for v in value):
            value = max(value)
        if value is not None:
            return value
    return None


def norm_eps(config: PretrainedConfig) -> float:
    """The target's normalisation epsilon, by whichever name its family gives it (1e-5 where it gives none)."""
    eps = _setting(config, "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon")
    return float(eps if eps is not None else 1e-5)


def head_norm(config: PretrainedConfig, hidden: int) -> nn.Module:
    """Step 3's norm, of the target's kind: RMSNorm for the families that use it (a `rms_norm_eps`), else LayerNorm,
    with the target's epsilon: the head predicts features that the target's own final norm made."""
    if _setting(config, "rms_norm_eps") is not None or _setting(config, "layer_norm_eps", "layer_norm_epsilon") is None:
        return LlamaRMSNorm(hidden, eps=norm_eps(config))
    return nn.LayerNorm(hidden, eps=norm_eps(config))


def load_head(target, folder: Path) -> EagleHead:
    """An `EagleHead` for `target` (a transformers causal LM of any family) with the weights saved in `folder`."""
    from safetensors.torch import load_file

    from mtdecode.zoo.skinny import skinny_linears

    state = load_file(str(folder / "head.safetensors"))
    embedding, output = target.get_input_embeddings().weight, target.get_output_embeddings().weight
    head = EagleHead(target.config, embedding.float(), output.float(), state["head_token_ids"])
    head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return skinny_linears(head.to(target.dtype).eval())  # few rows per step: the faster products, as the target's


def quantize_head(head: EagleHead) -> EagleHead:
    """The head's linear layers and its scores in int8 (`mtdecode.zoo.int8`: int8 weights, each row's activations
    quantized on their own, exact integer products), in place; returns `head`.

    Its guesses may differ a little from float32's, which changes how many are accepted, never what a strategy
    outputs: the target decides every token. `benchmarks/eagle_costs.py` measures both forms side by side
    (`docs/strategies/eagle.md`): int8 is cheaper per depth and accepts slightly less, so `Eagle()` keeps float32.

    **Raises:** `ValueError` unless the head is on CPU in float32; `RuntimeError` on a CPU whose int8 products
    are not exact (`mtdecode.zoo.int8.exact_int_mm`).
    """
    from mtdecode.zoo.int8 import Int8Linear, int8_linears

    if head.device.type != "cpu" or head.dtype != torch.float32:
        raise ValueError(f"an int8 head needs CPU and float32, got {head.device} and {head.dtype}")
    scores = nn.Linear(head.output.shape[1], head.output.shape[0], bias=False)
    scores.weight = nn.Parameter(head.output, requires_grad=False)
    int8_linears(head)
    head.scorer = Int8Linear(scores)
    return head


# ------------------------------------------------------------------ the head in a decoding session


def shipped_head(target: CausalLM) -> EagleHead:
    """The head that ships for the default model, on the target's device and in its dtype (loaded once)."""
    if (target.vocab_size, target.config.hidden_size) != (49152, 576):
        raise ValueError(
            f"Eagle() without a head uses the head shipped for SmolLM2-135M-Instruct, which does not fit {target.name} "
            "(another vocabulary or hidden size): pass head= a head trained for it (python -m mtdecode.recipes.eagle)"
        )
    return _shipped(str(target.device), target.dtype)


@functools.cache
def _shipped(device: str, dtype: torch.dtype) -> EagleHead:
    from mtdecode.zoo import EAGLE_MODEL, load_model

    return load_model(EAGLE_MODEL, device=device, dtype=dtype)


def head_runner(s: Session, head: EagleHead) -> HeadRunner:
    """The head's runner, its cache checked with the others after every step."""
    target = s.target.model
    embedding = head.embedding.shape
    if embedding != (target.vocab_size, target.config.hidden_size):
        raise ValueError(
            f"the head's embedding is {tuple(embedding)} but the target has {target.vocab_size} tokens of hidden size "
            f"{target.config.hidden_size}: an EAGLE head must be trained for the target at hand"
        )
    if head.device != s.device:
        raise ValueError(f"the head is on {head.device} but the target is on {s.device}; put both on one device")
    runner = HeadRunner(head, s.batch)
    s.runners.append(runner)
    return runner


def read_features(
    s: Session,
    head: HeadRunner,
    features: Sequence[Float[Tensor, "_fresh hidden"]],
    root: Float[Tensor, "batch hidden"] | None,
) -> Float[Tensor, "batch hidden"]:
    """Step 5's head update: row b's head cache grows by the entries (f_t, x_{t+1}) its target cache gained, from
    `features[b]` (the target's features at those positions, in order). Returns each row's prediction for the
    position of its newest token (unchanged for rows that gained nothing)."""
    start = head.cache.lengths.tolist()
    # the entries it lacks; a finished row's target cache may hold one more until the session settles it
    wanted = torch.minimum(s.target.cache.lengths, s.lengths - 1)
    needed = (wanted - head.cache.lengths).clamp(min=0).tolist()
    tokens = [s.tokens[b][start[b] + 1 : start[b] + 1 + n] for b, n in enumerate(needed)]
    rows = [features[b][:n] for b, n in enumerate(needed)]
    hidden = head.model.embedding.shape[1]
    if not any(needed):  # every row finished
        return root if root is not None else torch.zeros(s.batch, hidden, dtype=head.model.dtype,
                                                         device=s.device)  # fmt: skip
    ids, offsets, sees, pad = head.after_held(tokens)
    width = ids.shape[1]
    padded = torch.zeros(s.batch, width, hidden, dtype=head.model.dtype, device=s.device)
    for b, row in enumerate(rows):
        padded[b, width - len(row) :] = row
    predicted = head.step(padded, ids, offsets, sees, pad=pad)  # (batch, width, hidden)
    head.cache.commit()
    gained = torch.tensor([n > 0 for n in needed], device=s.device)
    if root is None:
        return predicted[:, -1]
    return torch.where(gained[:, None], predicted[:, -1], root)


class Backlog:
    """The target's features at the tokens that the head has not read yet, row by row (what `rest_step`s returned,
    in order), until `read_features` reads them. Each step's piece is kept apart and the pieces are joined once, when
    they are read: joining them every step would copy each row's whole backlog, its prompt's features included, at
    every step of a rest."""

    def __init__(self, batch: int) -> None:
        self.pieces: list[list[Float[Tensor, "_fed hidden"]]] = [[] for _ in range(batch)]
        self.sizes = [0] * batch  # entries per row

    @property
    def waiting(self) -> bool:
        """Whether any step's features wait to be read."""
        return any(self.pieces)

    def add(self, fresh: Sequence[Float[Tensor, "_fed hidden"]]) -> None:
        """Queue a step's features, row b's `fresh[b]`."""
        for b, piece in enumerate(fresh):
            self.pieces[b].append(piece)
            self.sizes[b] += len(piece)

    def take(self) -> list[Float[Tensor, "_unread hidden"]]:
        """Each row's waiting features, joined in order; the backlog is then empty."""
        rows = [torch.cat(pieces) if len(pieces) > 1 else pieces[0] for pieces in self.pieces]
        self.pieces, self.sizes = [[] for _ in rows], [0] * len(rows)
        return rows


def over_vocabulary(head: EagleHead, logits: Float[Tensor, "*rows head"]) -> Float[Tensor, "*rows vocab"]:
    """The head's logits (`EagleHead.logits`) placed at its tokens' ids among the target's; -inf (q = 0) elsewhere."""
    full = logits.new_full((*logits.shape[:-1], head.embedding.shape[0]), -torch.inf)
    full[..., head.head_token_ids] = logits
    return full


def committed_features(cache: KVCache, start: Int[Tensor, " batch"]) -> list[Float[Tensor, "_entries hidden"]]:
    """Row b's features at its committed entries from position `start[b]` on, in order of position, from a cache
    that carries them (`KVCache.carry_features`)."""
    if cache.features is None:
        raise ValueError("the cache carries no features: call carry_features() before the first forward")
    valid, positions = cache.valid[:, : cache.committed], cache.positions[:, : cache.committed]
    wanted = valid & (positions >= start[:, None])  # (batch, committed)
    order = torch.where(wanted, positions, torch.iinfo(torch.long).max).argsort(1)  # the wanted first, by position
    return [cache.features[b, order[b, :n]] for b, n in enumerate(wanted.sum(1).tolist())]
