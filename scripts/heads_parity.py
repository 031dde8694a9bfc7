"""Max abs diff of every task head vs transformers (logits and loss), eager and sdpa, on the
tests' random configs with padded inputs and labels. Usage: python scripts/heads_parity.py"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' model builders

from tests.helpers import HEAD_CONFIGS, HEADS, head_inputs, make_hf_head, to_ours


def main() -> None:
    print(f"{'head':34s} {'attn':5s} {'max|logits diff|':>17s} {'|loss diff|':>12s}")
    for name in HEADS:
        for attn in ("eager", "sdpa"):
            worst_l = worst_loss = 0.0
            for cfg in HEAD_CONFIGS.values():
                hf = make_hf_head(name, attn=attn, **cfg)
                ours = to_ours(hf, attn=attn)
                inputs = head_inputs(name, hf.config)
                with torch.no_grad():
                    a, b = hf(**inputs), ours(**inputs)
                for key in ("logits", "prediction_logits", "seq_relationship_logits", "start_logits", "end_logits"):
                    if getattr(a, key, None) is not None:
                        worst_l = max(worst_l, (a[key] - b[key]).abs().max().item())
                worst_loss = max(worst_loss, (a.loss - b.loss).abs().item())
            print(f"{name:34s} {attn:5s} {worst_l:17.2e} {worst_loss:12.2e}")


if __name__ == "__main__":
    main()
