#!/usr/bin/env python3
"""Converts a Hugging Face BERT sentence-embedding model (e.g. all-MiniLM-L6-v2) to an F16 GGUF.

Why this exists: llama.cpp's own convert_hf_to_gguf.py (conversion/bert.py, conversion/base.py)
imports torch >= 2.1 at module level, and neither source of torch fits here: PyPI's wheel pulls
about 3 GB of CUDA libraries, and Debian 12's python3-torch is 1.13. This script needs only numpy
(Debian 12's python3-numpy 1.24 is enough), PyYAML (python3-yaml), and the gguf-py package of the
pinned llama.cpp (--gguf-py DIR, i.e. .deps/llama.cpp/gguf-py), whose GGUFWriter, TensorNameMap,
SpecialVocab and Metadata it uses.

It follows BertModel in conversion/bert.py of the pinned llama.cpp with the default f16 outtype, in
the same order of tensors and keys: the same tensor filtering and names, 2-D weights in F16, and
1-D tensors, norms, biases, position and token-type embeddings in F32; TextModel's hyperparameters,
pooling from modules.json + 1_Pooling/config.json, and the "phantom space" WordPiece vocab. Where it
must differ: tokenizer.ggml.pre is "bert-bge" for an uncased BertNormalizer + BertPreTokenizer +
WordPiece tokenizer.json, instead of a hash of the tokens transformers gives for a check text
(tests/fixtures/bert_reference.py --check-tokpre checks that hash), and tokenizer.json is read
directly instead of through transformers' AutoTokenizer. Models that are not plain BertModel
encoders (classification heads, other architectures, other tokenizers) are refused.

Usage: python3 scripts/convert_bert_to_gguf.py --gguf-py .deps/llama.cpp/gguf-py \\
           [--model-name NAME] MODEL_ZIP_OR_DIR OUT.gguf
The input is the model directory or a zip of it (files at its top or in one folder), with one
model.safetensors (no shards). The output is the same bytes on every run (a zip and its unpacked
directory give the same file); its sha256 is printed at the end.
"""
import argparse
import hashlib
import json
import struct
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np


def read_safetensors(data: bytes) -> dict:
    """Tensors of a .safetensors file as numpy arrays, by name (sorted, as safetensors lists them)."""
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    dtypes = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}
    tensors = {}
    for name, meta in sorted(header.items()):
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        dtype = np.dtype(dtypes[meta["dtype"]])
        a = np.frombuffer(data, dtype, (end - begin) // dtype.itemsize, 8 + n + begin).reshape(meta["shape"])
        if meta["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = a
    return tensors


def load_model(src: Path, tmp: Path) -> tuple[Path, bytes]:
    """The model directory (a zip's small files are extracted under tmp) and model.safetensors' bytes."""
    if src.is_dir():
        return src, (src / "model.safetensors").read_bytes()
    with zipfile.ZipFile(src) as z:
        prefix = min((n[:-len("model.safetensors")] for n in z.namelist()
                      if n.rpartition("/")[2] == "model.safetensors" and n.count("/") <= 1), key=len)
        model_dir = tmp / (prefix.rstrip("/") or src.stem)  # its name feeds gguf.Metadata like a directory's
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith(("/", ".safetensors")):
                (model_dir / name[len(prefix):]).parent.mkdir(parents=True, exist_ok=True)
                (model_dir / name[len(prefix):]).write_bytes(z.read(name))
        return model_dir, z.read(prefix + "model.safetensors")


def convert(src: Path, out: Path, model_name: str | None) -> None:
    import gguf
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, st_bytes = load_model(src, Path(tmp))
        hp = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
        if hp["architectures"][0] != "BertModel" or hp.get("position_embedding_type", "absolute") != "absolute":
            sys.exit(f"not a plain BertModel: {hp['architectures']}")
        if (tok["model"]["type"], tok["normalizer"]["type"], tok["normalizer"].get("lowercase"), (tok["pre_tokenizer"] or {}).get("type"),
                tok["model"].get("continuing_subword_prefix")) != ("WordPiece", "BertNormalizer", True, "BertPreTokenizer", "##"):
            sys.exit("tokenizer.json is not an uncased BERT WordPiece tokenizer (tokenizer.ggml.pre would not be bert-bge)")

        arch = gguf.MODEL_ARCH.BERT
        w = gguf.GGUFWriter(path=None, arch=gguf.MODEL_ARCH_NAMES[arch])
        tmap = gguf.get_tensor_name_map(arch, hp["num_hidden_layers"])
        f32_types = (gguf.MODEL_TENSOR.POS_EMBD, gguf.MODEL_TENSOR.TOKEN_TYPES)
        for name, data in read_safetensors(st_bytes).items():  # BertModel.filter_tensors, then prepare_tensors
            name = name.removeprefix("bert.")
            name = name[:-6] + ".weight" if name.endswith(".gamma") else name[:-5] + ".bias" if name.endswith(".beta") else name
            if name in ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias") or name.startswith("cls."):
                continue
            if name.endswith((".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")):
                continue
            if (mapped := tmap.get_type_and_name(name, try_suffixes=(".weight", ".bias"))) is None:
                sys.exit(f"cannot map tensor {name!r}")
            kind, new_name = mapped
            f32 = data.ndim <= 1 or new_name.endswith("_norm.weight") or kind in f32_types or not new_name.endswith(".weight")
            qtype = gguf.GGMLQuantizationType.F32 if f32 else gguf.GGMLQuantizationType.F16
            w.add_tensor(new_name, data.astype(np.float32 if f32 else np.float16), raw_dtype=qtype)

        # ModelBase.prepare_metadata
        total, shared, expert, n_expert = w.get_total_parameter_count()
        meta = gguf.Metadata.load(None, model_dir, model_name, total)
        meta.name = meta.name or model_dir.name
        if meta.size_label is None and total > 0:
            meta.size_label = gguf.size_label(total, shared, expert, n_expert)
        w.add_type(gguf.GGUFType.MODEL)
        meta.set_gguf_meta_model(w)

        # TextModel.set_gguf_parameters + BertModel.set_gguf_parameters
        w.add_block_count(hp["num_hidden_layers"])
        w.add_context_length(hp["max_position_embeddings"])
        w.add_embedding_length(hp["hidden_size"])
        w.add_feed_forward_length(hp["intermediate_size"])
        w.add_head_count(hp["num_attention_heads"])
        w.add_layer_norm_eps(hp["layer_norm_eps"])
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        w.add_causal_attention(False)
        pooling = {"pooling_mode_mean_tokens": gguf.PoolingType.MEAN, "pooling_mode_cls_token": gguf.PoolingType.CLS,
                   "pooling_mode_lasttoken": gguf.PoolingType.LAST}
        modules_json = model_dir / "modules.json"
        modules = json.loads(modules_json.read_text(encoding="utf-8")) if modules_json.is_file() else []
        if pooling_path := next((m["path"] for m in modules if m["type"].endswith("Pooling")), None):
            cfg = json.loads((model_dir / pooling_path / "config.json").read_text(encoding="utf-8"))
            if (mode := next((p for key, p in pooling.items() if cfg.get(key)), None)) is None:
                sys.exit("only MEAN, CLS and LAST pooling are supported")
            w.add_pooling_type(mode)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

        # TextModel.get_vocab_base + BertModel.set_vocab
        n_vocab = hp["vocab_size"]
        tokens, toktypes = [f"[PAD{i}]" for i in range(n_vocab)], [gguf.TokenType.UNUSED] * n_vocab
        for text, i in tok["model"]["vocab"].items():
            tokens[i], toktypes[i] = text, gguf.TokenType.NORMAL
        for added in tok["added_tokens"]:
            text = added["content"]
            special = added["special"] or text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or any(  # does_token_look_special
                text.startswith(a) and text.endswith(b) for a, b in (("<|", "|>"), ("<\uff5c", "\uff5c>"), ("<unused", ">")))
            tokens[added["id"]] = text if special else text.replace("\u2581", " ")
            toktypes[added["id"]] = gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED
        w.add_token_type_count(hp.get("type_vocab_size", 1))
        tokens = [t if tt == gguf.TokenType.CONTROL else t[2:] if t.startswith("##") else "\u2581" + t
                  for t, tt in zip(tokens, toktypes)]
        w.add_tokenizer_model("bert")
        w.add_tokenizer_pre("bert-bge")
        w.add_token_list(tokens)
        w.add_token_types(toktypes)
        gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(w, quiet=True)

        w.write_header_to_file(path=out)
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf-py", required=True, type=Path, help="llama.cpp's gguf-py directory")
    ap.add_argument("--model-name", help="general.name (llama.cpp's --model-name); default from config.json")
    ap.add_argument("model", type=Path, help="model directory or zip of it")
    ap.add_argument("out", type=Path, help="output .gguf")
    args = ap.parse_args()
    sys.path.insert(0, str(args.gguf_py.resolve()))
    convert(args.model, args.out, args.model_name)
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) sha256 {digest}")


if __name__ == "__main__":
    main()
