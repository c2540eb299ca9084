"""A feature-level draft head (EAGLE-1 style, Li et al. 2024) for a Llama-family target: the first pieces.

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

Training (`eagle_loss`) follows the paper: SmoothL1 between f'_{t+1} and the target's
f_{t+1}, plus 0.1 times the cross-entropy of the head's distribution against the target's own
next-token distribution (renormalised over the head's tokens).

What exists so far: the head, its loss, and a training step, tested on tiny models
(`tests/test_eagle.py`: the loss falls). The strategy that drafts a token tree with it, the
data and training recipe for SmolLM2, and the shipped head are issue 17's open parts.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from mtdecode.tensor_types import Float, Int, Tensor

#: weight of the token loss against the feature loss (EAGLE-1)
TOKEN_LOSS_WEIGHT = 0.1


class EagleHead(nn.Module):
    """Predicts the target's next feature from its current feature and the next token's embedding.

    **Arguments:**

    - `config`: the target's `LlamaConfig` (hidden size, heads, rotary settings); the head has one layer.
    - `embedding`: the target's input embedding `(vocab, hidden)`, frozen and shared.
    - `output`: the target's output layer weight `(vocab, hidden)`, frozen and shared.
    - `head_token_ids`: the tokens the head scores `(head,)`; every other token gets probability 0.
    """

    def __init__(
        self,
        config: LlamaConfig,
        embedding: Float[Tensor, "vocab hidden"],
        output: Float[Tensor, "vocab hidden"],
        head_token_ids: Int[Tensor, " head"],
    ) -> None:
        super().__init__()
        hidden = config.hidden_size
        layer_config = LlamaConfig(**{**config.to_dict(), "num_hidden_layers": 1})
        layer_config._attn_implementation = "sdpa"
        self.fuse = nn.Linear(2 * hidden, hidden, bias=True)  # step 1
        self.layer = LlamaDecoderLayer(layer_config, layer_idx=0)  # step 2
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)  # step 3
        self.rotary = LlamaRotaryEmbedding(layer_config)
        self.register_buffer("embedding", embedding.detach().clone(), persistent=False)
        self.register_buffer("head_token_ids", head_token_ids.long().clone(), persistent=True)
        self.register_buffer("output", output.detach()[head_token_ids].clone(), persistent=False)  # step 4's rows

    def forward(
        self,
        features: Float[Tensor, "batch seq hidden"],
        next_tokens: Int[Tensor, "batch seq"],
        positions: Int[Tensor, "batch seq"],
    ) -> Float[Tensor, "batch seq hidden"]:
        """Steps 1-3 over a whole sequence at once (training and the first draft step): f'_{t+1} for every t, each
        seeing the positions up to its own."""
        fused = self.fuse(torch.cat([features, self.embedding[next_tokens]], dim=-1))  # (batch, seq, hidden)
        seq = fused.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=fused.device).tril()
        mask = torch.zeros(seq, seq, dtype=fused.dtype, device=fused.device).masked_fill(
            ~causal, torch.finfo(fused.dtype).min
        )[None, None]  # (1, 1, seq, seq), additive
        cos_sin = self.rotary(fused, positions)
        out = self.layer(fused, attention_mask=mask, position_ids=positions, position_embeddings=cos_sin)
        out = out[0] if isinstance(out, tuple) else out
        return self.norm(out)

    def logits(self, features: Float[Tensor, "*rows hidden"]) -> Float[Tensor, "*rows head"]:
        """Step 4: scores over `head_token_ids` (index i is token `head_token_ids[i]`)."""
        return features @ self.output.T


def eagle_loss(
    head: EagleHead,
    features: Float[Tensor, "batch seq hidden"],
    tokens: Int[Tensor, "batch seq"],
    target_logits: Float[Tensor, "batch seq vocab"],
) -> tuple[Float[Tensor, ""], Float[Tensor, ""], Float[Tensor, ""]]:
    """The training loss on one batch of the target's own forward: `features[:, t]` and `target_logits[:, t]` are
    the target's at position t, `tokens[:, t]` the token at t. Position t's input is (f_t, x_{t+1}); its outputs are
    compared with f_{t+1} and with the target's distribution for x_{t+2}.

    **Returns:** the total loss, the feature loss (SmoothL1) and the token loss (cross-entropy), each a mean.
    """
    seq = tokens.shape[1]
    positions = torch.arange(seq - 1, device=tokens.device).expand(tokens.shape[0], -1)
    predicted = head(features[:, :-1], tokens[:, 1:], positions)  # f'_{t+1}, (batch, seq - 1, hidden)
    feature_loss = F.smooth_l1_loss(predicted, features[:, 1:])
    p = torch.softmax(target_logits[:, 1:, head.head_token_ids].float(), dim=-1)  # the target's, on the head's tokens
    log_q = torch.log_softmax(head.logits(predicted).float(), dim=-1)
    token_loss = -(p * log_q).sum(-1).mean()
    return feature_loss + TOKEN_LOSS_WEIGHT * token_loss, feature_loss, token_loss
