#!/usr/bin/env python3
"""Makes a test reranker GGUF: a BERT encoder GGUF (all-MiniLM-L6-v2's) with a generated
classification head and pooling type "rank".

Why this exists: no cross-encoder reranker is packaged on PyPI or in Debian (PyPI's whole simple
index was searched for rerank, cross-encoder, ms-marco, bge and jina names; flashrank downloads its
ONNX files from Hugging Face at run time), and a reranker is what /v1/rerank serves. llama.cpp runs
a BERT reranker as the encoder, then its head on the first token ([CLS]): `cls` (dense, tanh) and
`cls.output` (one logit), the score being that logit (src/llama-graph.cpp, LLAMA_POOLING_TYPE_RANK).
This script writes exactly that shape, with the head's weights drawn from a fixed seed. Its scores
rank nothing meaningfully: it exercises the serving path (pair tokenization, batching, the head,
top_n), whose results tests compare with llama-server --reranking on the same file.

Needs numpy and the pinned llama.cpp's gguf-py (--gguf-py DIR). The output is the same bytes on every
run; its sha256 is printed.

Usage: python3 scripts/make_test_reranker.py --gguf-py .deps/llama.cpp/gguf-py ENCODER.gguf OUT.gguf
"""
import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np

SEED = 20261206


def make(encoder: Path, out: Path) -> None:
    import gguf
    reader = gguf.GGUFReader(encoder)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    if arch != "bert":
        sys.exit(f"{encoder} is a {arch!r} model; this script adds a head to a BERT encoder")
    n_embd = int(reader.fields[gguf.Keys.LLM.EMBEDDING_LENGTH.format(arch=arch)].contents())
    pooling_key = gguf.Keys.LLM.POOLING_TYPE.format(arch=arch)
    labels_key = gguf.Keys.Classifier.OUTPUT_LABELS.format(arch=arch)

    writer = gguf.GGUFWriter(path=None, arch=arch)
    for field in reader.fields.values():
        # The writer adds the architecture and the file's own GGUF.* fields itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name in (pooling_key, gguf.Keys.General.NAME):
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    writer.add_name("brisk test reranker (all-MiniLM-L6-v2 encoder, generated head)")
    writer.add_pooling_type(gguf.PoolingType.RANK)
    writer.add_array(labels_key, ["relevance"])

    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape,
                          raw_dtype=tensor.tensor_type)
    rng = np.random.default_rng(SEED)
    scale = 1.0 / np.sqrt(n_embd)
    head = {
        "cls.weight": rng.normal(0.0, scale, (n_embd, n_embd)).astype(np.float32),
        "cls.bias": rng.normal(0.0, 0.1, (n_embd,)).astype(np.float32),
        "cls.output.weight": rng.normal(0.0, 1.0, (1, n_embd)).astype(np.float32),
        "cls.output.bias": np.zeros((1,), np.float32),
    }
    for name, data in head.items():
        writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.F32)

    writer.write_header_to_file(path=out)
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf-py", required=True, type=Path, help="llama.cpp's gguf-py directory")
    ap.add_argument("encoder", type=Path, help="a BERT encoder GGUF (all-MiniLM-L6-v2's)")
    ap.add_argument("out", type=Path, help="output .gguf")
    args = ap.parse_args()
    sys.path.insert(0, str(args.gguf_py.resolve()))
    partial = args.out.with_name(args.out.name + ".partial")
    make(args.encoder, partial)
    partial.replace(args.out)  # a reader never sees half a file
    digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes) sha256 {digest}")


if __name__ == "__main__":
    main()
