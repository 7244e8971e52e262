"""Write the same tiny random-weight Llama as a GGUF file for llama.cpp (no hub download, no converter).

llama.cpp's converter does not know a freshly trained tokenizer, so the GGUF is written directly with the gguf-py
bundled in the llama.cpp source (`tokenizer.ggml.pre = "default"`: "gpt2" is not a pre-tokenizer name it knows).
Run with PYTHONPATH pointing at that gguf-py:
    python make_gguf.py OUT.gguf
"""

import json
import sys

import gguf
import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|pad|>"]
N_VOCAB, N_EMBD, N_FF, N_LAYER, N_HEAD, N_KV, HEAD_DIM = 1024, 128, 256, 2, 4, 2, 32


def tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=N_VOCAB, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["the quick brown fox jumps over the lazy dog. " * 20, "hello " * 200,
                             " ".join(f"word{i} token{i % 97} cache{i % 7}" for i in range(3000))], trainer=trainer)
    return tok


def main(out: str) -> None:
    tok = tokenizer()
    vocab = tok.get_vocab()
    tokens = [f"[PAD{i}]" for i in range(N_VOCAB)]
    types = [gguf.TokenType.UNUSED] * N_VOCAB
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = gguf.TokenType.CONTROL if text in SPECIAL else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-llama")
    w.add_context_length(2048)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[SPECIAL[0]])
    w.add_eos_token_id(vocab[SPECIAL[1]])
    w.add_pad_token_id(vocab[SPECIAL[2]])
    w.add_add_bos_token(True)
    w.add_chat_template("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant:{% endif %}")
    rng = np.random.default_rng(0)

    def weights(*shape: int) -> np.ndarray:  # ggml shapes are (rows, cols), like torch's (out, in)
        return (rng.standard_normal(shape) * 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", weights(N_VOCAB, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    w.add_tensor("output.weight", weights(N_VOCAB, N_EMBD))
    for layer in range(N_LAYER):
        b = f"blk.{layer}."
        w.add_tensor(b + "attn_norm.weight", np.ones(N_EMBD, np.float32))
        w.add_tensor(b + "attn_q.weight", weights(N_HEAD * HEAD_DIM, N_EMBD))
        w.add_tensor(b + "attn_k.weight", weights(N_KV * HEAD_DIM, N_EMBD))
        w.add_tensor(b + "attn_v.weight", weights(N_KV * HEAD_DIM, N_EMBD))
        w.add_tensor(b + "attn_output.weight", weights(N_EMBD, N_HEAD * HEAD_DIM))
        w.add_tensor(b + "ffn_norm.weight", np.ones(N_EMBD, np.float32))
        w.add_tensor(b + "ffn_gate.weight", weights(N_FF, N_EMBD))
        w.add_tensor(b + "ffn_up.weight", weights(N_FF, N_EMBD))
        w.add_tensor(b + "ffn_down.weight", weights(N_EMBD, N_FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main(sys.argv[1])
