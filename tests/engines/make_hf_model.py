"""Write a tiny random-weight Llama and a byte-level BPE tokenizer trained on the spot (no hub download).

2 layers, hidden 128, 4 heads, 2 KV heads, head_dim 32, vocab 1024: KV per token = 2 × 2 × 2 × 32 × 2 B = 512 B,
so a KV cache of a few dozen blocks fills with two or three requests. Run with the vLLM venv's Python:
    python make_hf_model.py OUT_DIR
"""

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
CORPUS = [
    "the quick brown fox jumps over the lazy dog. " * 20,
    "hello " * 200,
    " ".join(f"word{i} token{i % 97} request{i % 13} cache{i % 7}" for i in range(3000)),
]


def main(out: str) -> None:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1024, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[(SPECIAL[0], tok.token_to_id(SPECIAL[0]))])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL[0], eos_token=SPECIAL[1],
                                 pad_token=SPECIAL[2])
    hf.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant:{% endif %}")
    hf.save_pretrained(out)
    cfg = LlamaConfig(vocab_size=len(hf), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                      bos_token_id=hf.bos_token_id, eos_token_id=hf.eos_token_id, pad_token_id=hf.pad_token_id,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1])
