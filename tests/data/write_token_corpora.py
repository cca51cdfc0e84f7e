#!/usr/bin/env python3
"""Writes small tokenized corpora in the formats stoker reads, from the formats' specifications
and independently of stoker's reader, plus what a reader must find in them (expected.json).

Usage: write_token_corpora.py OUT_DIR

Formats (docs/formats.md#token-corpora):
  - Megatron-LM's indexed dataset (megatron/core/datasets/indexed_dataset.py): PREFIX.idx =
    b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code (1 uint8, 2 int8, 3 int16, 4 int32,
    5 int64, 6 float64, 7 float32, 8 uint16), <Q sequence count, <Q document-index count,
    int32 sequence lengths, int64 sequence byte pointers into PREFIX.bin, int64 document indices
    (0 first, the sequence count last); PREFIX.bin = the ids of all sequences back to back.
  - llm.c's token shards (dev/data/data_common.py): 256 int32 header (magic, version, token
    count), then the ids: 20240520 / 1 / uint16 (GPT-2), 20240801 / 7 / uint32 (Llama 3). The
    writer (dev/data/fineweb.py) puts the end-of-text id before each document and cuts shards at
    a fixed token count, so a document may continue in the next shard.
  - Raw ids (nanoGPT's prepare.py): uint16/uint32, no header, end-of-text id after each document.

expected.json maps each corpus to its sources, the reader options it needs, the dtype, every
token in corpus order, the first position of each document (and the end), Megatron's sequence
starts and document indices, and the smallest and largest id.
"""
import json
import os
import struct
import sys

import numpy as np

MEGATRON_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                  np.float64: 6, np.float32: 7, np.uint16: 8}
NAMES = {np.uint8: "uint8", np.int8: "int8", np.int16: "int16", np.int32: "int32",
         np.int64: "int64", np.uint16: "uint16", np.uint32: "uint32"}


def write_megatron(prefix, documents, dtype):
    """documents: a list of documents, each a list of sequences (lists of ids)."""
    itemsize = np.dtype(dtype).itemsize
    lengths, pointers, doc_indices = [], [], [0]
    offset = 0
    with open(prefix + ".bin", "wb") as f:
        for doc in documents:
            for seq in doc:
                f.write(np.asarray(seq, dtype=dtype).tobytes())
                lengths.append(len(seq))
                pointers.append(offset)
                offset += len(seq) * itemsize
            doc_indices.append(len(lengths))
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", MEGATRON_CODES[dtype]))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_indices)))
        f.write(np.asarray(lengths, dtype="<i4").tobytes())
        f.write(np.asarray(pointers, dtype="<i8").tobytes())
        f.write(np.asarray(doc_indices, dtype="<i8").tobytes())
    tokens = [t for doc in documents for seq in doc for t in seq]
    doc_begins, seq_begins, pos = [], [], 0
    for doc in documents:
        doc_begins.append(pos)
        for seq in doc:
            seq_begins.append(pos)
            pos += len(seq)
    doc_begins.append(pos)
    seq_begins.append(pos)
    return {"format": "megatron", "sources": [prefix], "options": {}, "dtype": NAMES[dtype],
            "tokens": tokens, "documents": doc_begins, "sequences": seq_begins,
            "document_indices": doc_indices}


def write_llmc_shards(pattern_dir, name, documents, model, shard_size):
    """Tokenizes as fineweb.py does: eot before each document, shards of shard_size tokens."""
    magic, version, dtype, eot = {"gpt-2": (20240520, 1, np.uint16, 50256),
                                  "llama-3": (20240801, 7, np.uint32, 128000)}[model]
    stream = []
    doc_begins = []
    for doc in documents:
        doc_begins.append(len(stream))
        stream.append(eot)
        stream.extend(doc)
    doc_begins.append(len(stream))
    paths = []
    for i, start in enumerate(range(0, len(stream), shard_size)):
        toks = np.asarray(stream[start:start + shard_size], dtype=dtype)
        header = np.zeros(256, dtype="<i4")
        header[0], header[1], header[2] = magic, version, len(toks)
        path = os.path.join(pattern_dir, "%s_train_%06d.bin" % (name, i))
        with open(path, "wb") as f:
            f.write(header.tobytes())
            f.write(toks.astype(np.dtype(dtype).newbyteorder("<")).tobytes())
        paths.append(path)
    return {"format": "llmc", "sources": [os.path.join(pattern_dir, name + "_train_*.bin")],
            "options": {}, "dtype": NAMES[dtype], "tokens": stream, "documents": doc_begins,
            "shards": paths}


def write_raw(path, documents, dtype, eot):
    stream = []
    doc_begins = []
    for doc in documents:
        doc_begins.append(len(stream))
        stream.extend(doc)
        stream.append(eot)
    doc_begins.append(len(stream))
    with open(path, "wb") as f:
        f.write(np.asarray(stream, dtype=np.dtype(dtype).newbyteorder("<")).tobytes())
    return {"format": "raw", "sources": [path],
            "options": {"token_bytes": np.dtype(dtype).itemsize, "delimiter": eot},
            "dtype": NAMES[dtype], "tokens": stream, "documents": doc_begins}


def random_documents(rng, count, vocab, max_len, min_len=1):
    return [rng.integers(0, vocab, size=int(rng.integers(min_len, max_len + 1))).tolist()
            for _ in range(count)]


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240520)
    corpora = {}

    # Megatron, uint16: documents of several sequences, an empty document (no sequence), a
    # document whose only sequence is empty, ids up to the top of uint16.
    docs = [[s] for s in random_documents(rng, 5, 65536, 40)]
    docs.insert(2, [rng.integers(0, 65536, 7).tolist(), rng.integers(0, 65536, 3).tolist(),
                    rng.integers(0, 65536, 11).tolist()])
    docs.insert(4, [])
    docs.insert(5, [[]])
    docs.append([[65535, 0, 65535]])
    corpora["megatron_uint16"] = write_megatron(os.path.join(out, "mega_u16"), docs, np.uint16)

    # Megatron, int32 (Megatron's default for vocabularies of 65500 ids and more), several
    # sequences per document.
    docs = [[s for s in random_documents(rng, int(rng.integers(1, 4)), 200000, 30)]
            for _ in range(12)]
    corpora["megatron_int32"] = write_megatron(os.path.join(out, "mega_i32"), docs, np.int32)

    # Megatron, uint8 and int64.
    corpora["megatron_uint8"] = write_megatron(
        os.path.join(out, "mega_u8"), [[s] for s in random_documents(rng, 9, 256, 20)], np.uint8)
    corpora["megatron_int64"] = write_megatron(
        os.path.join(out, "mega_i64"), [[s] for s in random_documents(rng, 6, 1 << 20, 25)],
        np.int64)
    corpora["megatron_int16"] = write_megatron(
        os.path.join(out, "mega_i16"), [[s] for s in random_documents(rng, 4, 30000, 25)],
        np.int16)

    # llm.c GPT-2 shards: 3 shards of 64 tokens (the last shorter), documents across shards.
    shard_dir = os.path.join(out, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    corpora["llmc_gpt2"] = write_llmc_shards(shard_dir, "gpt2", random_documents(rng, 9, 50257 - 1, 30),
                                             "gpt-2", 64)
    # llm.c Llama 3 shards (uint32 ids, 128000 before each document): 2 shards.
    corpora["llmc_llama3"] = write_llmc_shards(
        shard_dir, "llama3", random_documents(rng, 5, 128000, 30), "llama-3", 60)

    # Raw files as nanoGPT writes them: end-of-text after each document.
    corpora["raw_uint16"] = write_raw(os.path.join(out, "raw_u16.bin"),
                                      random_documents(rng, 7, 50256, 30), np.uint16, 50256)
    corpora["raw_uint32"] = write_raw(os.path.join(out, "raw_u32.bin"),
                                      random_documents(rng, 4, 100000, 30), np.uint32, 100000)

    for c in corpora.values():
        c["min_id"] = int(min(c["tokens"]))
        c["max_id"] = int(max(c["tokens"]))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(corpora, f)


if __name__ == "__main__":
    main()
