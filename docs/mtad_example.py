"""Print the worked example of docs/strategies/mtad.md: MTAD's acceptance rule on a 4-token vocabulary.

    .venv/bin/python docs/mtad_example.py
"""

import math

from mtdecode import Sampler, oracle
from mtdecode.testing import tiny_model

TAU = 0.5
PROMPT = [1, 2]


def main() -> None:
    target = tiny_model("llama", vocab_size=4, seed=1, layers=1, hidden=16)
    draft = tiny_model("qwen2", vocab_size=4, seed=5, layers=1, hidden=16)
    p1 = oracle.token_by_token_joint(target, PROMPT, 1, Sampler(1.0))
    q1 = oracle.token_by_token_joint(draft, PROMPT, 1, Sampler(1.0))
    p2 = oracle.token_by_token_joint(target, PROMPT, 2, Sampler(1.0))
    q2 = oracle.token_by_token_joint(draft, PROMPT, 2, Sampler(1.0))
    sharp = oracle.mtjd(target, PROMPT, 2, 0.5)
    print(f"prompt {PROMPT}, k = 2, tau = {TAU}; P = target joint, Q = draft joint (temperature 1)")
    print("block   P(y1)   Q(y1)  P/Q(y1)   P(y1y2)  Q(y1y2)  P/Q(y1y2)  accepted n  MTJD T=0.5")
    for cell in range(16):
        y1, y2 = divmod(cell, 4)
        r1, r2 = float(p1[y1] / q1[y1]), float(p2[cell] / q2[cell])
        n = 2 if r2 > TAU else 1 if r1 > TAU else 0
        print(
            f"{y1} {y2}   {float(p1[y1]):.3f}   {float(q1[y1]):.3f}  {r1:7.3f}   {float(p2[cell]):.4f}   "
            f"{float(q2[cell]):.4f}  {r2:9.3f}  {n:10d}  {float(sharp[cell]):.4f}"
        )
    best = oracle.most_likely_block(target, PROMPT, 2)
    print(f"most likely block under P: {best}, P = {float(p2.max()):.4f}; log tau = {math.log(TAU):.3f}")


if __name__ == "__main__":
    main()
