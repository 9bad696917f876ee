"""Train a small byte-level BPE tokenizer (Qwen's "Ġ" word-start convention) with `tokenizers`.

Used by the toy world and by the tests' tiny models; returns a transformers tokenizer with EOS
and PAD, which `save_pretrained` writes beside a model.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
# Pieces for split_digits: one digit (a leading space stays glued to it, so " 65" -> "Ġ6", "5"),
# a word, a run of punctuation/symbols, or a run of whitespace.
DIGIT_SPLIT_PATTERN = r" ?\d| ?[A-Za-z]+| ?[^\sA-Za-z\d]+|\s+"


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int = 512, split_digits: bool = False, byte_alphabet: bool = True
) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `texts`; ids 0 and 1 are EOS and PAD.

    Byte-level pre-tokenization marks a word start with "Ġ" (a leading space), as Qwen and
    Llama-3 do, so the engine's word-start detection works unchanged.

    split_digits: every digit becomes its own piece (a preceding space stays attached to the
    first digit of a number, keeping the "Ġ" word start), which helps tiny models do arithmetic.
    byte_alphabet: seed the vocabulary with all 256 byte symbols (any text encodes). With False,
    only the characters seen in `texts` are in the alphabet, so a small vocabulary goes to merges
    (whole words); fine for a closed toy corpus.
    """
    tok = Tokenizer(models.BPE())
    if split_digits:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(DIGIT_SPLIT_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else [],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
