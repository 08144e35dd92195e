"""A tiny random-weight GPT-2 and its BPE tokenizer, made here from local text: what real SGLang serves in tests.

Run by the serving engine's own Python (it needs ``transformers`` and
``tokenizers``, which pdtui does not), never imported by pdtui::

    ENGINE_PYTHON pdtui/sim/tiny_model.py [--arch gpt2|llama] OUT CORPUS_FILE...

Nothing is downloaded. GPT-2 for SGLang, because its CPU path without a CPU
build of its kernels cannot run a model with rotary embeddings, and GPT-2's
positions are learned. Llama for vLLM, whose CPU attention takes heads 32 wide
or wider (GPT-2's here are 16). The model's vocabulary is the tokenizer's (a larger one samples ids
that decode to nothing: an empty answer), and its 8,192 positions hold pdtui's
smoke prompt whatever the corpus. The weights are random but seeded: the same
folder every time, so greedy answers repeat.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

VOCAB = 1024
POSITIONS = 8192
EOS = "<|endoftext|>"
# A plain chat template: SGLang's chat endpoint needs one, and a tokenizer trained here has none of its own.
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def make(out: Path, corpus: list[Path], arch: str = "gpt2") -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([str(path) for path in corpus], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, unk_token=EOS,
                                   pad_token=EOS, model_max_length=POSITIONS)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    model(arch, len(fast), fast.convert_tokens_to_ids(EOS)).save_pretrained(out, safe_serialization=True)


def model(arch: str, vocab: int, eos: int) -> Any:    # transformers is the engine's, never pdtui's to import
    """The random model of ``arch``, two layers of four heads: 16 wide for GPT-2, 32 for Llama."""
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        return LlamaForCausalLM(LlamaConfig(
            vocab_size=vocab, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=POSITIONS, bos_token_id=eos, eos_token_id=eos,
            tie_word_embeddings=True, torch_dtype="float32"))
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=POSITIONS, n_embd=64, n_layer=2, n_head=4,
                                      bos_token_id=eos, eos_token_id=eos, torch_dtype="float32"))


if __name__ == "__main__":
    args = sys.argv[1:]
    chosen = "gpt2"
    if args[:1] == ["--arch"] and len(args) > 1 and args[1] in ("gpt2", "llama"):
        chosen, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit("usage: tiny_model.py [--arch gpt2|llama] OUT CORPUS_FILE...")
    make(Path(args[0]), [Path(arg) for arg in args[1:]], chosen)
