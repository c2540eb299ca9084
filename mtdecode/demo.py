"""The main job (`make demo`): the default model answers one prompt with every strategy,
and a table compares them with greedy autoregressive decoding.

Run with `python -m mtdecode.demo [--prompt TEXT] [--max-new-tokens N]`.
"""

import argparse

import mtdecode
from mtdecode.strategies import REGISTRY, Autoregressive, needs_draft

PROMPT = "Explain in three short sentences why the sky is blue."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    print(f"loading {mtdecode.DEFAULT_MODEL} ...", flush=True)
    model = mtdecode.load_model()
    tokenizer = mtdecode.load_tokenizer()
    messages = [{"role": "user", "content": args.prompt}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    settings = dict(max_new_tokens=args.max_new_tokens, eos_token_id=tokenizer.eos_token_id)

    # warm-up, so the first strategy's time is not spent on one-off allocations
    mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=4)
    greedy = mtdecode.generate(model, prompt, Autoregressive(), **settings)
    print(f"\nprompt: {args.prompt}\nanswer: {tokenizer.decode(greedy.tokens[0], skip_special_tokens=True)}\n")

    draft = None
    rows = []
    for name, strategy_class in REGISTRY.items():
        if needs_draft(strategy_class):
            draft = draft or mtdecode.load_model(mtdecode.DRAFT_MODEL)
            strategy = strategy_class(draft=draft)
        else:
            strategy = strategy_class()
        mtdecode.generate(model, prompt, strategy, max_new_tokens=4)  # warm-up (lookahead measures its forwards)
        result = mtdecode.generate(model, prompt, strategy, **settings)
        same = result.tokens[0].tolist() == greedy.tokens[0].tolist()
        expected = "" if getattr(strategy, "exact", True) else " (not exact by design)"
        s = result.stats
        rows.append(
            (
                name,
                s.new_tokens,
                f"{s.tokens_per_forward:.2f}",
                f"{s.tokens_per_second:.1f}",
                ("yes" if same else "NO") + expected,
            )
        )
    print_table(("strategy", "new tokens", "tokens/target forward", "tokens/s", "identical to greedy"), rows)


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header).rstrip())
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*map(str, row)).rstrip())


if __name__ == "__main__":
    main()
