#!/usr/bin/env python3
"""Reads a Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin) from its specification
(megatron/core/datasets/indexed_dataset.py: _IndexWriter / IndexedDatasetBuilder), independently
of stoker's readers, checks every field, and compares each document with Python SentencePiece's
encoding of the same text (when the `sentencepiece` module is installed) plus the end id.

usage: check_megatron_pack.py PREFIX TOKENIZER.model TEXT_FILE [--split paragraph|line]
Exit status 0: all checks passed; 1: a mismatch (printed); 77: numpy missing.
"""
import struct
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: skipped")
    sys.exit(77)

DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def documents(path, split):
    with open(path, encoding="utf-8", newline="") as f:
        lines = [l[:-1] if l.endswith("\n") else l for l in f]
    lines = [l[:-1] if l.endswith("\r") else l for l in lines]
    if split == "line":
        return [l for l in lines if l]
    docs, cur = [], []
    for l in lines:
        if l.strip(" \t\f\v") == "":
            if cur:
                docs.append("\n".join(cur))
            cur = []
        else:
            cur.append(l)
    if cur:
        docs.append("\n".join(cur))
    return docs


def main():
    prefix, model, text = sys.argv[1:4]
    split = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "--split" else "paragraph"
    idx = open(prefix + ".idx", "rb").read()
    if idx[:9] != b"MMIDIDX\x00\x00":
        fail("bad magic %r" % idx[:9])
    (version,) = struct.unpack("<Q", idx[9:17])
    code = idx[17]
    seqs, docs_plus_one = struct.unpack("<QQ", idx[18:34])
    if version != 1:
        fail("version %d" % version)
    if code not in (4, 8):
        fail("dtype code %d (pack-text writes 8 or 4)" % code)
    if len(idx) != 34 + 12 * seqs + 8 * docs_plus_one:
        fail("index size %d for %d sequences, %d document indices" % (len(idx), seqs, docs_plus_one))
    lengths = np.frombuffer(idx, np.int32, seqs, 34)
    pointers = np.frombuffer(idx, np.int64, seqs, 34 + 4 * seqs)
    doc_index = np.frombuffer(idx, np.int64, docs_plus_one, 34 + 12 * seqs)
    dtype = DTYPES[code]
    size = np.dtype(dtype).itemsize
    binary = np.fromfile(prefix + ".bin", dtype=dtype)
    if binary.size != int(lengths.sum()):
        fail(".bin holds %d ids, the lengths sum to %d" % (binary.size, lengths.sum()))
    expected_ptr = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))[:-1] * size])
    if not np.array_equal(pointers, expected_ptr):
        fail("sequence pointers are not the running byte offsets")
    if not np.array_equal(doc_index, np.arange(seqs + 1)):
        fail("document indices are not 0..%d (one sequence per document)" % seqs)
    if (lengths <= 0).any():
        fail("an empty sequence")
    texts = documents(text, split)
    if len(texts) != seqs:
        fail("%d documents in the text, %d sequences" % (len(texts), seqs))
    try:
        import sentencepiece as spm
    except ImportError:
        print("layout ok (%d documents, %d tokens); python sentencepiece not installed: "
              "encoding not compared" % (seqs, binary.size))
        return 0
    sp = spm.SentencePieceProcessor(model_file=model)
    vocab = sp.get_piece_size()
    if (code == 8) != (vocab < 65500):
        fail("dtype code %d for a vocabulary of %d (Megatron: uint16 below 65500)" % (code, vocab))
    for d, t in enumerate(texts):
        want = sp.encode(t) + [sp.eos_id()]
        got = binary[pointers[d] // size: pointers[d] // size + lengths[d]].tolist()
        if got != want:
            fail("document %d differs from python sentencepiece's encoding" % d)
    print("layout ok, %d documents equal python sentencepiece %s's encoding + </s>"
          % (seqs, spm.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
