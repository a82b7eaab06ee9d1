"""A sentence encoder in numpy: the semantic channel's local models without torch.

Owns reading a sentence-transformers model folder (`config.json`, `tokenizer.json`,
`model.safetensors`, `sentence_bert_config.json`, `1_Pooling/config.json`), its WordPiece
tokenizer (BERT's normaliser and pre-tokeniser, as the `tokenizers` package runs them), and the
forward pass of the two encoders the packaged models are, BERT (all-MiniLM-L6-v2) and MPNet
(all-mpnet-base-v2): embeddings, self-attention (MPNet's relative position buckets), GELU
feed-forward, then mean pooling over the real tokens and L2 normalisation. A text longer than
the model's `max_seq_length` tokens is read to its head, as sentence-transformers reads it.
Weights are read from the safetensors file mapped in memory, never copied whole, and nothing is
downloaded. It never calls a chat model, never touches the store, and knows nothing of the
channel around it (embed.py turns its `ModelError` into an EmbedError with a hint).
"""

from __future__ import annotations

import json
import mmap
import re
import struct
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FFN_ROWS = 256  # tokens through the feed-forward layers at a time
DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


class ModelError(ValueError):
    """A model folder this encoder cannot read: a file missing, malformed, or of a kind (an
    architecture, a pooling, a tensor type) it does not implement."""


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (8 bytes little-endian header length, a JSON header
    of name -> dtype, shape and byte offsets, then the raw tensors), as read-only arrays over the
    file mapped in memory."""
    try:
        with path.open("rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # missing, unreadable, or empty
        raise ModelError(f"cannot read {path.name} ({e})") from e
    try:
        (size,) = struct.unpack("<Q", buf[:8])
        header = json.loads(buf[8:8 + size])
        if not isinstance(header, dict):
            raise ValueError("its header is not a JSON object")
        base, out = 8 + size, {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = np.dtype(DTYPES[info["dtype"]])
            start, end = (base + int(o) for o in info["data_offsets"])
            shape = tuple(int(n) for n in info["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            if end > len(buf) or end - start != count * dtype.itemsize:
                raise ValueError(f"tensor {name} does not fit its bytes")
            out[name] = np.frombuffer(buf, dtype=dtype, count=count, offset=start).reshape(shape)
        return out
    except KeyError as e:
        raise ModelError(f"{path.name} holds a tensor of a type this encoder does not read "
                         f"({e})") from e
    except (struct.error, ValueError, TypeError) as e:
        raise ModelError(f"{path.name} is not a safetensors file ({e})") from e


# --- the tokenizer ---------------------------------------------------------------------------

CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

Added = tuple[re.Pattern[str], list[int]] | None  # the added tokens' pattern, their ids


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in CJK)


def _is_punct(c: str) -> bool:
    return (c.isascii() and not c.isalnum() and c.isprintable() and not c.isspace()) \
        or unicodedata.category(c).startswith("P")


def _clean(c: str) -> str:
    """One character as BERT's normaliser cleans it: U+FFFD and control, format and
    private-use characters (other than tab and newlines) go, any whitespace is a space, a CJK
    ideograph stands alone."""
    if c in "\t\n\r":
        return " "
    if c == "\ufffd" or unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs"):
        return ""  # an unassigned character (Cn) stays, and is a word of its own: [UNK]
    if c.isspace():
        return " "
    return f" {c} " if _is_cjk(ord(c)) else c


@dataclass
class WordPiece:
    """BERT's uncased WordPiece as a `tokenizer.json` describes it (normaliser: clean text,
    CJK apart, accents stripped, lower case; pre-tokeniser: whitespace and punctuation; the
    added tokens matched whole first). Python's Unicode tables are newer than those of
    `tokenizers`: a character assigned since (U+061D, say) may split otherwise."""

    vocab: dict[str, int]
    unk: int
    first: int  # [CLS] or <s>
    last: int  # [SEP] or </s>
    pad: int
    raw_added: Added  # added tokens matched before normalising
    normal_added: Added  # and after
    lowercase: bool = True
    max_word: int = 100
    prefix: str = "##"

    @classmethod
    def load(cls, path: Path) -> WordPiece:
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
            model, post = spec["model"], spec["post_processor"]
            if model["type"] != "WordPiece":
                raise ModelError(f"{path.name}: a {model['type']} tokenizer, not WordPiece")
            vocab = {str(k): int(v) for k, v in model["vocab"].items()}
            if post["type"] == "RobertaProcessing":
                first, last = int(post["cls"][1]), int(post["sep"][1])
            else:  # TemplateProcessing: [CLS] $A [SEP]
                single, special = post["single"], post["special_tokens"]
                first, last = (int(special[single[at]["SpecialToken"]["id"]]["ids"][0])
                               for at in (0, -1))
            added = spec.get("added_tokens") or []
            norm = spec.get("normalizer") or {}
            return cls(vocab, vocab[model["unk_token"]], first, last,
                       int((spec.get("padding") or {}).get("pad_id", 0)),
                       _added_pattern([a for a in added if not a.get("normalized")]),
                       _added_pattern([a for a in added if a.get("normalized")]),
                       bool(norm.get("lowercase", True)),
                       int(model.get("max_input_chars_per_word", 100)),
                       str(model.get("continuing_subword_prefix", "##")))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            raise ModelError(f"cannot read the tokenizer {path.name} "
                             f"({type(e).__name__}: {e})") from e

    def normalise(self, text: str) -> str:
        text = "".join(_clean(c) for c in text)
        if self.lowercase:  # accents stripped first, then each character lower-cased alone
            text = "".join(c for c in unicodedata.normalize("NFD", text)
                           if unicodedata.category(c) != "Mn")
            text = "".join(c.lower() for c in text)
        return text

    def words(self, text: str) -> list[str]:
        out: list[str] = []
        for chunk in text.split():
            word = ""
            for c in chunk:
                if _is_punct(c):
                    word = _flush(out, word)
                    out.append(c)
                else:
                    word += c
            _flush(out, word)
        return out

    def pieces(self, word: str) -> list[int]:
        """A word's WordPiece ids, longest match first; a word that does not split into the
        vocabulary (or is over `max_word` characters) is one [UNK]."""
        if len(word) > self.max_word:
            return [self.unk]
        got, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    got.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return got

    def ids(self, text: str, limit: int) -> list[int]:
        """The token ids of `text`, between the model's first and last special tokens, read to
        its head: at most `limit` ids in all."""
        out: list[int] = []
        for raw, special in _split(text, self.raw_added):
            if special is not None:
                out.append(special)
                continue
            for normal, special2 in _split(self.normalise(raw), self.normal_added):
                if special2 is not None:
                    out.append(special2)
                    continue
                for word in self.words(normal):
                    out.extend(self.pieces(word))
                    if len(out) >= limit - 2:
                        return [self.first, *out[:limit - 2], self.last]
        return [self.first, *out[:limit - 2], self.last]


def _flush(out: list[str], word: str) -> str:
    if word:
        out.append(word)
    return ""


def _added_pattern(added: list[dict[str, object]]) -> Added:
    """One pattern for the added tokens (longest first; `lstrip` ones take the spaces before
    them, `rstrip` ones those after), a group each, and their ids in the groups' order."""
    if not added:
        return None
    ranked = sorted(added, key=lambda a: -len(str(a["content"])))
    parts = [(r"\s*" if a.get("lstrip") else "") + re.escape(str(a["content"]))
             + (r"\s*" if a.get("rstrip") else "") for a in ranked]
    return re.compile("|".join(f"({p})" for p in parts)), [int(str(a["id"])) for a in ranked]


def _split(text: str, added: Added) -> list[tuple[str, int | None]]:
    """`text` cut at the added tokens: (text, None) between them, ("", id) for each."""
    if added is None:
        return [(text, None)]
    pattern, ids = added
    out: list[tuple[str, int | None]] = []
    at = 0
    for m in pattern.finditer(text):
        out.append((text[at:m.start()], None))
        out.append(("", ids[(m.lastindex or 1) - 1]))
        at = m.end()
    out.append((text[at:], None))
    return out


# --- the encoder -----------------------------------------------------------------------------

def _erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26): numpy has none, and GELU needs it."""
    sign = np.sign(x)
    a = np.minimum(np.abs(x), np.float32(4))  # erf(4) is 1 in float32; e^-16 never subnormal
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                         + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def gelu(x: np.ndarray) -> np.ndarray:
    return (0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))).astype(np.float32)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + np.float32(eps)) * w + b


def relative_buckets(length: int, buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """MPNet's relative position bucket of each (query, key) pair, as transformers computes it
    (float32 logarithms, truncated)."""
    pos = np.arange(length, dtype=np.int64)
    n = -(pos[None, :] - pos[:, None])
    half = buckets // 2
    ret = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    exact = half // 2
    with np.errstate(divide="ignore"):
        scaled = (np.log(n.astype(np.float32) / np.float32(exact))
                  / np.float32(np.log(max_distance / exact)) * np.float32(half - exact))
    large = exact + np.where(n < exact, 0, scaled).astype(np.int64)
    return ret + np.where(n < exact, n, np.minimum(large, half - 1))


@dataclass
class Encoder:
    """A BERT or MPNet sentence encoder over one model folder's weights."""

    kind: str  # "bert" or "mpnet"
    tokenizer: WordPiece
    w: dict[str, np.ndarray]
    layers: int
    heads: int
    eps: float
    max_tokens: int

    @classmethod
    def load(cls, folder: str | Path) -> Encoder:
        root = Path(folder)
        try:
            cfg = json.loads((root / "config.json").read_text(encoding="utf-8"))
            st = root / "sentence_bert_config.json"
            st_cfg = json.loads(st.read_text(encoding="utf-8")) if st.is_file() else {}
            pool = root / "1_Pooling" / "config.json"
            pooling = json.loads(pool.read_text(encoding="utf-8")) if pool.is_file() else {}
            kind = str(cfg["model_type"])
            layers, heads = int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
            eps = float(cfg["layer_norm_eps"])
            limit = int(st_cfg.get("max_seq_length") or cfg["max_position_embeddings"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ModelError(f"{root} is not a sentence-transformers model folder "
                             f"({type(e).__name__}: {e})") from e
        if kind not in ("bert", "mpnet"):
            raise ModelError(f"a {kind} model: this encoder runs BERT and MPNet models")
        if any(pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                        "pooling_mode_mean_sqrt_len_tokens")):
            raise ModelError("a pooling other than the mean of the tokens: not implemented")
        tensors = read_safetensors(root / "model.safetensors")
        w = {k.removeprefix(f"{kind}."): v for k, v in tensors.items()}
        if layers and f"encoder.layer.{layers - 1}.output.dense.weight" not in w:
            raise ModelError(f"model.safetensors lacks the weights of the {kind} model its "
                             "config.json describes")
        limit = min(limit, w["embeddings.position_embeddings.weight"].shape[0]
                    - (2 if kind == "mpnet" else 0))
        return cls(kind, WordPiece.load(root / "tokenizer.json"), w, layers, heads, eps, limit)

    @property
    def dim(self) -> int:
        return int(self.w["embeddings.word_embeddings.weight"].shape[1])

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit vectors of `texts`, one float32 row each, `batch_size` texts at a time. No
        padding: a batch's tokens are packed in one matrix for the dense layers, and each text
        attends to its own tokens only."""
        ids = [self.tokenizer.ids(t, self.max_tokens) for t in texts]
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for at in range(0, len(ids), batch_size):
            out[at:at + batch_size] = self.forward(ids[at:at + batch_size])
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (out / norms).astype(np.float32)

    def forward(self, batch: list[list[int]]) -> np.ndarray:
        """The mean of each sequence's last hidden states (the mean pooling)."""
        bounds = np.cumsum([0, *(len(s) for s in batch)])
        spans = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        x = self._embed(batch)
        bias: dict[int, np.ndarray] = {}
        if self.kind == "mpnet":  # one relative-position bias per length, shared by the layers
            table = self.w["encoder.relative_attention_bias.weight"]
            for n in {b - a for a, b in spans}:
                bias[n] = table[relative_buckets(n)].transpose(2, 0, 1)
        for i in range(self.layers):
            x = self._layer(x, i, spans, bias)
        return np.stack([x[a:b].mean(axis=0) for a, b in spans])

    def _embed(self, batch: list[list[int]]) -> np.ndarray:
        w = self.w
        ids = np.concatenate([np.asarray(s, dtype=np.int64) for s in batch])
        offset = self.tokenizer.pad + 1 if self.kind == "mpnet" else 0  # MPNet's count from 2
        positions = np.concatenate([np.arange(len(s)) for s in batch]) + offset
        x = w["embeddings.word_embeddings.weight"][ids] \
            + w["embeddings.position_embeddings.weight"][positions]
        if self.kind == "bert":
            x = x + w["embeddings.token_type_embeddings.weight"][0]
        return layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"],
                          self.eps)

    def _names(self, i: int) -> tuple[str, str, str, str, str]:
        p = f"encoder.layer.{i}."
        if self.kind == "mpnet":
            a = p + "attention.attn."
            return a + "q", a + "k", a + "v", a + "o", p + "attention.LayerNorm"
        a = p + "attention."
        return (a + "self.query", a + "self.key", a + "self.value", a + "output.dense",
                a + "output.LayerNorm")

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                bias: np.ndarray | None) -> np.ndarray:
        """One text's multi-head self-attention: (tokens, dim) in, (tokens, dim) out."""
        n, d = q.shape
        h = self.heads
        q, k, v = (t.reshape(n, h, d // h).transpose(1, 0, 2) for t in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(d // h))
        if bias is not None:
            scores += bias
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        return (scores @ v).transpose(1, 0, 2).reshape(n, d)

    def _layer(self, x: np.ndarray, i: int, spans: list[tuple[int, int]],
               bias: dict[int, np.ndarray]) -> np.ndarray:
        q_name, k_name, v_name, o_name, norm = self._names(i)
        q, k, v = (self._linear(x, name) for name in (q_name, k_name, v_name))
        context = np.empty_like(x)
        for a, b in spans:
            context[a:b] = self._attend(q[a:b], k[a:b], v[a:b], bias.get(b - a))
        x = layer_norm(self._linear(context, o_name) + x, self.w[norm + ".weight"],
                       self.w[norm + ".bias"], self.eps)
        p = f"encoder.layer.{i}."
        out = np.empty_like(x)
        for a in range(0, len(x), FFN_ROWS):  # in rows that keep the wide middle in cache
            inner = gelu(self._linear(x[a:a + FFN_ROWS], p + "intermediate.dense"))
            out[a:a + FFN_ROWS] = self._linear(inner, p + "output.dense")
        return layer_norm(out + x, self.w[p + "output.LayerNorm.weight"],
                          self.w[p + "output.LayerNorm.bias"], self.eps)
