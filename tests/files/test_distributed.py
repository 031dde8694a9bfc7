"""`bertlite embed --engine ray` (bertlite.files.ray): same vectors as the single engine,
every row once, a killed replica survived, and no Ray needed unless asked for."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bertlite.cli import main
from bertlite.files import ray as distributed
from bertlite.files.readers import read_texts
from bertlite.jobs.embedder import Embedder
from tests.helpers import DATA, hide_modules, modules_after_embed

pytestmark = pytest.mark.slow  # a local Ray cluster in the test process

CORPUS = DATA / "stdlib_docs.jsonl"
ERROR_PREFIX = "bertlite embed: error:"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    # 2 CPUs as on the CI machine; a small object store: the vectors of 2,000 rows are 3 MB.
    # address="local": a fresh Ray even if RAY_ADDRESS or a `ray start` cluster is around.
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=200 * 2**20, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], str]:
    """2,000 corpus texts in 4 files -> {(absolute path, line): text}, as read_texts numbers them.

    Three jsonl files (one with a UTF-8 BOM) keep the corpus lines as they are; the
    txt file has CRLF endings, empty lines (rows of their own) and no final newline.
    """
    folder = tmp_path_factory.mktemp("inputs")
    lines = CORPUS.read_text(encoding="utf-8").splitlines()[:2000]
    (folder / "a.jsonl").write_text("\n".join(lines[:500]) + "\n", encoding="utf-8")
    (folder / "b.jsonl").write_bytes(b"\xef\xbb\xbf" + ("\n".join(lines[500:1000]) + "\n").encode("utf-8"))
    (folder / "c.jsonl").write_text("\n".join(lines[1000:1500]) + "\n", encoding="utf-8")
    texts = [" ".join(json.loads(line)["text"].splitlines()) for line in lines[1500:]]
    texts[10:10] = [""]
    texts[200:200] = ["", ""]
    (folder / "d.txt").write_bytes("\r\n".join(texts).encode("utf-8"))
    rows = {}
    for path in sorted(folder.iterdir()):
        for line, text in enumerate(read_texts(str(path))):
            rows[(str(path), line)] = text
    assert len(rows) == 2003
    return rows


@pytest.fixture(scope="module")
def reference(real_model_path: Path, inputs: dict[tuple[str, int], str]) -> dict[tuple[str, int], np.ndarray]:
    """The single-process path's vector for every (source, line)."""
    vectors = Embedder.from_pretrained(real_model_path, dtype="float32").encode(
        list(inputs.values())
    )  # bf16 vectors move with their batch
    return dict(zip(inputs, vectors, strict=True))


def read_output(folder: Path, keep_text: bool = False) -> tuple[list[tuple[str, int]], dict, dict]:
    """Every (source, line) key in the output folder (duplicates kept), vectors and texts by key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys, vectors, texts = [], {}, {}
    for path in sorted(folder.glob("*.parquet")):
        table = pq.read_table(path)
        assert table.schema.field("source").type == pa.string()
        assert table.schema.field("line").type == pa.int64()
        assert table.schema.field("embedding").type == pa.list_(pa.float32(), 384)
        assert ("text" in table.schema.names) == keep_text
        rows = list(zip(table.column("source").to_pylist(), table.column("line").to_pylist(), strict=True))
        keys += rows
        matrix = table.column("embedding").combine_chunks().flatten().to_numpy().reshape(len(table), 384)
        vectors.update(zip(rows, matrix, strict=True))
        if keep_text:
            texts.update(zip(rows, table.column("text").to_pylist(), strict=True))
    return keys, vectors, texts


def assert_every_row_once(keys: list[tuple[str, int]], expected: set[tuple[str, int]]) -> None:
    repeated = [key for key, n in Counter(keys).items() if n > 1]
    assert repeated == [], f"rows written more than once: {repeated[:5]}"
    assert set(keys) == expected, (
        f"missing: {sorted(expected - set(keys))[:5]}, extra: {sorted(set(keys) - expected)[:5]}"
    )


def error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith(ERROR_PREFIX)]
    assert len(lines) == 1, err
    return lines[0]


# --- on Ray -------------------------------------------------------------------------


def test_ray_engine_equals_single_engine_row_for_row(
    ray_cluster: object,
    real_model_path: Path,
    inputs: dict[tuple[str, int], str],
    reference: dict[tuple[str, int], np.ndarray],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = Path(next(iter(inputs))[0]).parent
    out = tmp_path / "vectors"
    # Two patterns, as a user passes them: the jsonl glob and the txt file.
    argv = ["embed", str(real_model_path), "-i", str(folder / "*.jsonl"), "-i", str(folder / "d.txt")]
    code = main(
        [*argv, "-o", str(out), "--engine", "ray", "--replicas", "2", "--keep-text", "--quiet", "--dtype", "float32"]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "embedded 2003 texts with 2 Ray replicas" in err
    keys, vectors, texts = read_output(out, keep_text=True)
    assert_every_row_once(keys, set(inputs))
    assert texts == inputs  # the line numbers point at the texts read_texts gives for them
    for key, vector in vectors.items():
        np.testing.assert_allclose(vector, reference[key], rtol=0, atol=1e-6, err_msg=str(key))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors"]  # the temp folder was renamed


def test_killed_replica_is_restarted_and_every_row_lands_once(
    ray_cluster: object,
    real_model_path: Path,
    inputs: dict[tuple[str, int], str],
    reference: dict[tuple[str, int], np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = tmp_path / "calls"
    calls.mkdir()
    marker = tmp_path / "kill-once"
    marker.write_text("")

    class KilledOnce(distributed.EmbedBatch):
        """The first replica to reach its second batch SIGKILLs itself mid-job, once:
        the rename of the marker file lets exactly one process win."""

        calls = 0

        def __call__(self, batch):
            self.calls += 1
            (calls / f"{os.getpid()}-{self.calls}").write_text(str(len(batch)))
            if self.calls == 2:
                try:
                    os.rename(marker, marker.with_suffix(".taken"))
                except FileNotFoundError:
                    pass
                else:
                    marker.with_suffix(".taken").write_text(str(os.getpid()))
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(batch)

    # Defined in this function, the class travels to the actors by value (cloudpickle).
    monkeypatch.setattr(distributed, "EmbedBatch", KilledOnce)
    source = next(path for path, _ in inputs if path.endswith("d.txt"))
    out = tmp_path / "vectors"
    result = distributed.embed_dataset(
        real_model_path, source, out, batch_size=64, num_replicas=2, show_progress=False, dtype="float32"
    )
    assert marker.with_suffix(".taken").exists(), "no replica was killed"
    killed = marker.with_suffix(".taken").read_text()
    pids = {name.split("-")[0] for name in os.listdir(calls)}
    # Work went on in another process after the kill (the restarted replica, the other one, or both).
    assert killed in pids and len(pids) >= 2, f"killed {killed}, calls from {sorted(pids)}"
    expected = {key for key in inputs if key[0] == source}
    assert result.rows == len(expected) == 503
    keys, vectors, _ = read_output(out)
    assert_every_row_once(keys, expected)
    for key, vector in vectors.items():
        np.testing.assert_allclose(vector, reference[key], rtol=0, atol=1e-6, err_msg=str(key))


def test_bad_line_in_a_ray_task_exits_2_with_its_number_and_writes_nothing(
    ray_cluster: object, real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.jsonl").write_text('{"text": "fine"}\n')
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "fine"}\nnot json\n')
    out = tmp_path / "out"
    code = main(["embed", str(real_model_path), "-i", str(tmp_path / "*.jsonl"), "-o", str(out), "--engine", "ray"])
    assert code == 2
    assert "bad.jsonl: line 3 is not a JSON object" in error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "good.jsonl"]


# --- without Ray --------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_line_numbers_are_read_texts_rows(parts: int, tmp_path: Path) -> None:
    """What each file's rows are called, checked on the parse step alone: BOM, CRLF,
    empty lines (rows of their own), no final newline, quoted newlines in csv; split
    into parts, the rows are still each numbered once."""
    import pyarrow as pa

    files = {
        "t.txt": b"\xef\xbb\xbffirst\r\n\r\nthird\n\nfifth",
        "j.jsonl": b'{"text": "a"}\n{"text": ""}\n{"text": "c\\nd"}\n',
        "c.csv": b'id,text\n1,"two\nlines"\n2,\n3,three\n',
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name in files]
    items = pa.Table.from_pylist([{"path": path, "part": k, "parts": parts} for path in paths for k in range(parts)])
    table = distributed._parse_parts(items, None, "text", "strict")
    columns = [table.column(name).to_pylist() for name in ("source", "line", "text")]
    expected = [(path, i, text) for path in paths for i, text in enumerate(read_texts(path))]
    assert list(zip(*columns, strict=True)) == expected
    assert [text for path, _, text in expected if path.endswith("t.txt")] == ["first", "", "third", "", "fifth"]


def test_parts_cover_small_files_for_every_replica(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_text("a\n")
    large.write_bytes(b"x" * 100)
    monkeypatch.setattr(distributed, "PART_BYTES", 30)
    plan = distributed._plan_parts([str(small)], num_replicas=3)
    assert [(p["part"], p["parts"]) for p in plan] == [(0, 3), (1, 3), (2, 3)]
    plan = distributed._plan_parts([str(small), str(large)], num_replicas=2)
    assert [(Path(p["path"]).name, p["parts"]) for p in plan] == [("small.txt", 1)] + [("large.txt", 4)] * 4


def test_ray_engine_without_ray_exits_2_with_install_hint(
    real_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hide_modules(monkeypatch, "ray", "ray.data")
    (tmp_path / "in.txt").write_text("hello\n")
    out = tmp_path / "out"
    code = main(["embed", str(real_model_path), "-i", str(tmp_path / "in.txt"), "-o", str(out), "--engine", "ray"])
    assert code == 2
    assert "pip install 'bertlite[ray]'" in error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_default_engine_and_import_never_import_ray(real_model_path: Path, tmp_path: Path) -> None:
    assert modules_after_embed(real_model_path, tmp_path, "bertlite, bertlite.files.ray", ("ray",)) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-i", "{a}", "--keep-text"], "--keep-text: for --engine ray only"),
        (["-i", "{a}", "--replicas", "3"], "--replicas: for --engine ray only"),
        (["-i", "{a}", "-i", "{b}"], "2 inputs"),
        (["-i", "{pattern}"], "2 inputs"),
    ],
)
def test_single_engine_refuses_ray_options_and_several_inputs(
    args: list[str], message: str, real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text("hello\n")
    args = [arg.format(a=tmp_path / "a.txt", b=tmp_path / "b.txt", pattern=tmp_path / "*.txt") for arg in args]
    code = main(["embed", str(real_model_path), *args, "-o", str(tmp_path / "out.npy")])
    assert code == 2
    assert message in error_line(capsys.readouterr().err)
    assert not (tmp_path / "out.npy").exists()


def test_single_engine_takes_a_pattern_that_matches_one_file(
    real_model_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "only.txt").write_text("hello\n\nworld\n")
    code = main(["embed", str(real_model_path), "-i", str(tmp_path / "on*.txt"), "-o", str(tmp_path / "out.npy")])
    assert code == 0, capsys.readouterr().err
    assert np.load(tmp_path / "out.npy").shape == (3, 384)


@pytest.mark.parametrize("case", ["no-match", "stdin", "folder-input", "output-not-empty", "output-is-a-file"])
def test_ray_engine_usage_errors_exit_2_before_starting_ray(
    case: str,
    real_model_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Ray cannot be imported here: each error must be found before Ray is needed.
    hide_modules(monkeypatch, "ray")
    (tmp_path / "in.txt").write_text("hello\n")
    source, out = str(tmp_path / "in.txt"), tmp_path / "out"
    expected = {
        "no-match": "no file matches",
        "stdin": "not stdin",
        "folder-input": "is a folder",
        "output-not-empty": "is not empty",
        "output-is-a-file": "is a file",
    }[case]
    if case == "no-match":
        source = str(tmp_path / "*.jsonl")
    elif case == "stdin":
        source = "-"
    elif case == "folder-input":
        source = str(tmp_path)
    elif case == "output-not-empty":
        out.mkdir()
        (out / "old.parquet").write_text("")
    else:
        out.write_text("")
    code = main(["embed", str(real_model_path), "-i", source, "-o", str(out), "--engine", "ray"])
    assert code == 2
    assert expected in error_line(capsys.readouterr().err)
