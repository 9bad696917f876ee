"""The model card (README.md) of a tandem-trained senior: what TRL's `create_model_card` writes for
GRPOTrainer, with what makes the run tandem (the junior, the schedule and p, the arm, the data) and the
paper's citation, tagged `tandem-rlvr`. `TandemGRPOTrainer` writes it through TRL's hook
(`create_model_card`, called on every checkpoint and by `push_to_hub`) and into every folder `save_model`
writes (each checkpoint-N, final/).

What this file does not know: the trainer, training, decoding.
"""

from __future__ import annotations

import os
from importlib.metadata import version

from huggingface_hub import ModelCard, ModelCardData

import trlvr

PAPER_ID = "2606.28166"
PAPER_TITLE = "Tandem Reinforcement Learning with Verifiable Rewards"
PAPER_CITATION = """@article{jiao2026tandemrlvr,
  title   = {Tandem Reinforcement Learning with Verifiable Rewards},
  author  = {Jiao, Difan and Singhal, Raghav and West, Robert and Anderson, Ashton},
  journal = {arXiv preprint arXiv:2606.28166},
  year    = {2026}
}"""
TAGS = ["trl", "grpo", "tandem-rlvr"]

TEMPLATE = """---
{{ card_data }}
---

# Model card for {{ model_name }}

A senior trained with Tandem RLVR ([{{ paper_title }}](https://arxiv.org/abs/{{ paper_id }})) by trlvr
{{ trlvr_version }}, on [TRL](https://github.com/huggingface/trl)'s `GRPOTrainer`: {{ arm_text }}

| | |
|---|---|
| base model (the senior before training) | {{ senior }} |
| junior (frozen co-writer) | {{ junior }} |
| arm | {{ arm }} |
| schedule | {{ schedule }} |
| reward grader | {{ grader }} |
| training data | {{ data }} |
| steps | {{ steps }} |

## Quick start

```python
from transformers import pipeline

generator = pipeline("text-generation", model="{{ load_id }}")
print(generator("What is 12 plus 30? Put the answer in \\\\boxed{}.", \
max_new_tokens=256)[0]["generated_text"])
```

### Framework versions

- trlvr: {{ trlvr_version }}
- TRL: {{ trl_version }}
- Transformers: {{ transformers_version }}
- PyTorch: {{ pytorch_version }}

## Citation

```bibtex
{{ citation }}
```
"""

ARMS = {
    "tandem": (
        "each rollout was co-written with the frozen junior, word by word as the schedule chose, and the "
        "GRPO loss covered the senior's tokens only."
    ),
    "grpo": "the matched plain-GRPO baseline (the senior alone, through the same engine).",
}


def _hub_id(name: str | None) -> str | None:
    """A hub id for the card's metadata; a local folder is not one (the Hub would reject it)."""
    return (
        name
        if name and "/" in name and not os.path.exists(name) and not name.startswith((".", "/"))
        else None
    )


def tandem_model_card(
    *,
    model_name: str,
    senior: str | None,
    junior: str | None,
    arm: str,
    schedule: str,
    data: str | None,
    steps: int,
    hub_model_id: str | None = None,
    tags: list[str] | None = None,
    grader: str = "trlvr",
) -> ModelCard:
    """The card: metadata (base_model and datasets when they are hub ids, the tags) and the run's table."""
    card_data = ModelCardData(
        base_model=_hub_id(senior),
        datasets=_hub_id(data),
        library_name="transformers",
        model_name=model_name,
        tags=["generated_from_trainer", *TAGS, *[t for t in tags or [] if t not in TAGS]],
    )
    return ModelCard.from_template(
        card_data,
        template_str=TEMPLATE,
        model_name=model_name,
        paper_title=PAPER_TITLE,
        paper_id=PAPER_ID,
        arm=arm,
        arm_text=ARMS.get(arm, ""),
        senior=senior or "not recorded",
        junior=junior or "none",
        schedule=schedule if arm == "tandem" else "none (the senior writes every token)",
        data=data or "not recorded",
        grader=grader,
        steps=steps,
        load_id=hub_model_id or model_name,
        citation=PAPER_CITATION,
        trlvr_version=trlvr.__version__,
        trl_version=version("trl"),
        transformers_version=version("transformers"),
        pytorch_version=version("torch"),
    )
