"""Does the head's vocabulary limit its first guess? The shipped EAGLE head scored with other token lists.

The head predicts a feature; its scores are the target's own output rows for the tokens it keeps (8,192, the most
frequent in its training data, which include the read Python sources and docstrings). So the same trained weights
can score any list of tokens. For each held-out kind of the recipe's data this prints the share of answer tokens
inside the shipped list, then the held-out first guess (teacher forced, `held_out_scores`) with:

- the shipped list;
- the 8,192 tokens most frequent in the training answers alone;
- the 16,384 most frequent there;
- all of the target's tokens.

    python benchmarks/eagle_vocabulary.py   # the packed data; --work DIR: a work folder's
"""

import argparse

import torch

import mtdecode
from mtdecode.recipes.eagle import held_out_scores
from mtdecode.recipes.eagle_data import HEAD_TOKENS, load_records, with_features
from mtdecode.zoo.eagle import EagleHead

KINDS = ["chat", "conversation", "question", "passage", "extract", "summary", "code", "math"]


def answer_counts(work, vocab: int) -> torch.Tensor:
    """How often each token is an answer token in the training data of `KINDS`."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for kind in KINDS:
        for r in load_records(work, kind):
            counts += torch.bincount(r["tokens"][r["answer_start"] :], minlength=vocab)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default="build/eagle", help="the recipe's work folder (without data of its own: "
                        "the packed data)")
    args = parser.parse_args()
    target = mtdecode.load_model().hf
    shipped = mtdecode.load_model("smollm2-135m-eagle")
    vocab = target.config.vocab_size
    held_out = {kind: with_features(load_records(args.work, kind, held_out=True), target) for kind in KINDS}
    inside = torch.zeros(vocab, dtype=torch.bool)
    inside[shipped.head_token_ids] = True
    print("held-out answer tokens inside the shipped list:")
    for kind, records in held_out.items():
        answers = torch.cat([r["tokens"][r["answer_start"] :] for r in records])
        print(f"  {kind:13s} {inside[answers].float().mean():.1%} of {len(answers)}")
    counts = answer_counts(args.work, vocab)
    lists = {
        "shipped": shipped.head_token_ids,
        f"answers' {HEAD_TOKENS}": counts.topk(HEAD_TOKENS).indices.sort().values,
        f"answers' {2 * HEAD_TOKENS}": counts.topk(2 * HEAD_TOKENS).indices.sort().values,
        f"all {vocab}": torch.arange(vocab),
    }
    weights = {k: v for k, v in shipped.state_dict().items() if k != "head_token_ids"}
    output = target.get_output_embeddings().weight
    print("held-out first guess, teacher forced, with the shipped weights and each list:")
    for name, tokens in lists.items():
        head = EagleHead(target.config, shipped.embedding, output, tokens)
        result = head.load_state_dict(weights, strict=False)
        if result.unexpected_keys or result.missing_keys != ["head_token_ids"]:
            raise RuntimeError(f"the shipped weights do not fit the head: {result}")
        scores = {kind: held_out_scores(head.eval(), records)["first_guess"] for kind, records in held_out.items()}
        print(f"  {name:14s} " + " ".join(f"{kind} {score:.1%}" for kind, score in scores.items()), flush=True)


if __name__ == "__main__":
    main()
