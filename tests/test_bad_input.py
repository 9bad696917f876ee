"""The bad-input battery (issue 11 item 15): each case is bad input -> exit code and message fragment.

CLI_CASES run through the real entry point `trlvr.cli.main.main(argv)`: exit 2 means the input
cannot be used at all and stderr is ONE line naming the file/row/field/key (no traceback); exit 1 is
`trlvr data check`'s "some rows are bad" with the rows on stdout. LIB_CASES call the library
directly and expect a one-line UserError. To add a case, add a row: `files` are written under a
temporary folder first ({tmp} in argv and in strings is that folder), `setup` may build more there
(e.g. a saved tiny model), `env` sets environment variables for the case.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trlvr.cli.main import main as cli_main
from trlvr.errors import UserError


def rows(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


OK = {"problem": "What is 1+1?", "answer": "2"}


def tiny_model_dir(path: Path) -> Path:
    """A saved tiny Qwen3 + tokenizer at `path` (what save_pretrained writes)."""
    from helpers import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_model("qwen3", len(tok), seed=0, hidden=16, layers=1).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@dataclass(frozen=True)
class Case:
    id: str
    argv: list[str]
    code: int
    fragment: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], object] | None = None
    env: dict[str, str] = field(default_factory=dict)


def _parquet(tmp: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([OK, OK]), tmp / "good.parquet")
    raw = (tmp / "good.parquet").read_bytes()
    (tmp / "torn.parquet").write_bytes(raw[: len(raw) // 2])


CLI_CASES = [
    # --- the source cannot be read: exit 2, one line on stderr -------------------------------------
    Case("missing-file", ["data", "check", "{tmp}/missing.jsonl"], 2, "missing.jsonl: no such file"),
    Case("missing-path-no-suffix", ["data", "check", "{tmp}/no/such/dir"], 2, "no/such/dir: no such file"),
    Case(
        "directory",
        ["data", "check", "{tmp}/world"],
        2,
        "world: is a directory; expected a .jsonl, .json or .parquet file (it holds train.jsonl: pass one",
        files={"world/train.jsonl": rows(OK)},
    ),
    Case(
        "non-utf8-jsonl",
        ["data", "check", "{tmp}/latin1.jsonl"],
        2,
        "latin1.jsonl:2: not valid UTF-8",
        files={"latin1.jsonl": rows(OK).encode() + b'{"problem": "caf\xe9", "answer": "1"}\n'},
    ),
    Case(
        "non-utf8-json",
        ["data", "check", "{tmp}/latin1.json"],
        2,
        "latin1.json: not valid UTF-8",
        files={"latin1.json": b'[{"problem": "caf\xe9", "answer": "1"}]'},
    ),
    Case(
        "array-line",
        ["data", "check", "{tmp}/a.jsonl"],
        2,
        "a.jsonl:2: expected a JSON object per line, got a JSON array",
        files={"a.jsonl": rows(OK, ["What is 1+1?", "2"])},
    ),
    Case(
        "scalar-line",
        ["data", "check", "{tmp}/s.jsonl"],
        2,
        "s.jsonl:1: expected a JSON object per line, got a JSON number",
        files={"s.jsonl": "42\n"},
    ),
    Case(
        "string-line",
        ["data", "check", "{tmp}/s.jsonl"],
        2,
        "s.jsonl:3: expected a JSON object per line, got a JSON string",
        files={"s.jsonl": rows(OK, OK, "just text")},
    ),
    Case(
        "invalid-json-line",
        ["data", "check", "{tmp}/b.jsonl"],
        2,
        "b.jsonl:2: not valid JSON",
        files={"b.jsonl": rows(OK) + '{"problem": "x", answer: 1}\n'},
    ),
    Case(
        "corrupt-parquet",
        ["data", "check", "{tmp}/torn.parquet"],
        2,
        "torn.parquet: not a readable parquet file",
        setup=_parquet,
    ),
    Case(
        "not-parquet-at-all",
        ["data", "check", "{tmp}/junk.parquet"],
        2,
        "junk.parquet: not a readable parquet file",
        files={"junk.parquet": b"this is not parquet"},
    ),
    Case(
        "empty-file",
        ["data", "check", "{tmp}/e.jsonl"],
        2,
        "e.jsonl: no rows (empty dataset)",
        files={"e.jsonl": ""},
    ),
    Case(
        "blank-lines",
        ["data", "check", "{tmp}/e.jsonl"],
        2,
        "no rows (empty dataset)",
        files={"e.jsonl": "\n \n\n"},
    ),
    Case(
        "empty-json-list",
        ["data", "check", "{tmp}/e.json"],
        2,
        "no rows (empty dataset)",
        files={"e.json": "[]"},
    ),
    Case(
        "json-scalar",
        ["data", "check", "{tmp}/n.json"],
        2,
        "n.json: expected a JSON list of row objects, got a JSON number",
        files={"n.json": "3"},
    ),
    Case(
        "json-list-of-strings",
        ["data", "check", "{tmp}/l.json"],
        2,
        "l.json: row 2: expected a JSON object, got a JSON string",
        files={"l.json": json.dumps([OK, "x"])},
    ),
    Case(
        "json-ragged-columns",
        ["data", "check", "{tmp}/c.json"],
        2,
        "column lists of different lengths",
        files={"c.json": json.dumps({"problem": ["a", "b"], "answer": ["1"]})},
    ),
    Case(
        "unsupported-suffix",
        ["data", "check", "{tmp}/d.csv"],
        2,
        "d.csv: unsupported file type '.csv'",
        files={"d.csv": "problem,answer\n1+1,2\n"},
    ),
    Case(
        "unknown-columns",
        ["data", "check", "{tmp}/u.jsonl"],
        2,
        "u.jsonl: cannot tell which columns hold problem and answer (columns: ['q', 'sol'])",
        files={"u.jsonl": rows({"q": "x", "sol": "1"})},
    ),
    Case(
        "unknown-schema",
        ["data", "check", "{tmp}/g.jsonl", "--schema", "nope"],
        2,
        "unknown schema 'nope'",
        files={"g.jsonl": rows(OK)},
    ),
    Case(
        "limit-zero",
        ["data", "check", "{tmp}/g.jsonl", "--limit", "0"],
        2,
        "argument --limit: expected an integer in [1, 2**63 - 1], got '0'",  # the parser's kind (trlvr.kinds)
        files={"g.jsonl": rows(OK)},
    ),
    Case(
        "reasoning-gym-bad-size",
        ["data", "check", "reasoning-gym:chain_sum?size=ten"],
        2,
        "size and seed must be integers",
    ),
    Case(
        "reasoning-gym-unknown-key",
        ["data", "check", "reasoning-gym:chain_sum?n=5"],
        2,
        "expected reasoning-gym:TASK?size=N&seed=S (unknown keys: ['n'])",
    ),
    Case(
        "hub-name-offline",
        ["data", "check", "openai/gsm8k"],
        2,
        "no network access to the Hugging Face Hub",
        env={"HF_ENDPOINT": "https://hub.invalid"},
    ),
    # --- the source reads but some rows are bad: exit 1, rows on stdout ----------------------------
    Case(
        "null-gold",
        ["data", "check", "{tmp}/n.jsonl"],
        1,
        "row 2: answer is null",
        files={"n.jsonl": rows(OK, {"problem": "b", "answer": None})},
    ),
    Case(
        "all-rows-bad",
        ["data", "check", "{tmp}/n.jsonl"],
        1,
        "2 rows, 0 usable, 2 unusable",
        files={"n.jsonl": rows({"problem": "a", "answer": None}, {"problem": "", "answer": "1"})},
    ),
    Case(
        "gold-math-verify-cannot-parse",
        ["data", "check", "{tmp}/m.jsonl"],
        1,
        "row 2: answer not parseable",
        files={"m.jsonl": rows(OK, {"problem": "b", "answer": "x^"})},
    ),
    Case(
        "duplicate-ids",
        ["data", "check", "{tmp}/d.jsonl"],
        1,
        "rows 1, 3 share id 'q1'",
        files={
            "d.jsonl": rows(
                {"id": "q1", "problem": "a", "answer": "1"},
                {"id": "q2", "problem": "b", "answer": "2"},
                {"id": "q1", "problem": "c", "answer": "3"},
            )
        },
    ),
    Case(
        "duplicate-problems",
        ["data", "check", "{tmp}/d.jsonl"],
        1,
        "rows 1, 2 repeat the problem 'What is 1+1?'",
        files={"d.jsonl": rows(OK, OK)},
    ),
    # --- trlvr eval: settings are checked before any model is loaded ------------------------------
    Case(
        "eval-top-p-zero",
        [
            "eval",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/j",
            "--data",
            "{tmp}/d.jsonl",
            "--top-p",
            "0",
            "--out",
            "{tmp}/o",
        ],
        2,
        "argument --top-p: expected a number in (0, 1], got '0'",
    ),
    Case(
        "eval-missing-senior",
        [
            "eval",
            "--senior",
            "{tmp}/runs/nothing",
            "--junior",
            "{tmp}/j",
            "--data",
            "{tmp}/d.jsonl",
            "--out",
            "{tmp}/o",
        ],
        2,
        "runs/nothing: no such folder; expected a model folder",
        files={"d.jsonl": rows(OK)},
    ),
    # --- trlvr train: the same checks, before any model is loaded or any step is taken ------------
    Case(
        "train-top-p-zero",
        ["train", "--config", "toy", "--holdout", "0", "--top_p", "0"],
        2,
        "top_p must be in (0, 1], got 0.0",
    ),
    Case(
        "train-empty-dataset",
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/s",
            "--dataset",
            "{tmp}/empty.jsonl",
            "--output_dir",
            "{tmp}/o",
        ],
        2,
        "empty.jsonl: no rows (empty dataset); expected at least one problem",
        files={"empty.jsonl": ""},
        setup=lambda tmp: tiny_model_dir(tmp / "s"),
    ),
    Case(
        "train-missing-senior",
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            "{tmp}/runs/nothing",
            "--junior",
            "{tmp}/runs/nothing",
            "--dataset",
            "{tmp}/d.jsonl",
            "--output_dir",
            "{tmp}/o",
        ],
        2,
        "runs/nothing: no such folder; expected a model folder",
        files={"d.jsonl": rows(OK)},
    ),
    Case(
        "train-prompt-row-null-gold",
        [
            "train",
            "--config",
            "toy",
            "--holdout",
            "0",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/s",
            "--dataset",
            "{tmp}/p.jsonl",
            "--output_dir",
            "{tmp}/o",
        ],
        2,
        "p.jsonl: 1 of 2 rows unusable (schema deepscaler): row 2: answer is null",
        files={
            "p.jsonl": rows(
                {"prompt": "1+1=", "problem": "1+1", "answer": "2"},
                {"prompt": "2+2=", "problem": "2+2", "answer": None},
            )
        },
        setup=lambda tmp: tiny_model_dir(tmp / "s"),
    ),
    Case(
        "eval-junior-device-with-self",
        [
            "eval",
            "--senior",
            "{tmp}/s",
            "--junior",
            "self",
            "--junior-device",
            "cpu",
            "--data",
            "{tmp}/d.jsonl",
            "--out",
            "{tmp}/o",
        ],
        2,
        "--junior-device: --junior self shares the senior's weights",
    ),
    Case(
        "train-bad-decode",
        ["train", "--config", "toy", "--holdout", "0", "--decode", "paged"],
        2,
        "decode: must be one of ('auto', 'eager', 'static')",
    ),
    Case(
        "eval-junior-device-missing",
        [
            "eval",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/j",
            "--junior-device",
            "cuda:99",
            "--data",
            "{tmp}/d.jsonl",
            "--out",
            "{tmp}/o",
        ],
        2,
        "--junior-device: cuda:99 is not on this machine",
    ),
    Case(
        "eval-device-not-a-name",
        [
            "eval",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/j",
            "--device",
            "gpu0",
            "--data",
            "{tmp}/d.jsonl",
            "--out",
            "{tmp}/o",
        ],
        2,
        "--device: 'gpu0' is not a device name",
    ),
    Case(
        "train-junior-device-missing",
        ["train", "--config", "toy", "--holdout", "0", "--junior_device", "cuda:99"],
        2,
        "junior_device: cuda:99 is not on this machine",
    ),
    Case(
        "eval-bad-data-syntax",
        ["eval", "--senior", "{tmp}/s", "--junior", "{tmp}/j", "--data", "gsm=", "--out", "{tmp}/o"],
        2,
        "--data: 'gsm=' is not [name=]source",
    ),
    Case(  # newcomer walk 3, finding 14: a colon for the "=" was read as a file name, without a hint
        "eval-data-colon-for-equals",
        [
            "eval",
            "--senior",
            "{tmp}/s",
            "--junior",
            "{tmp}/j",
            "--data",
            "toy:{tmp}/d.jsonl",
            "--out",
            "{tmp}/o",
        ],
        2,
        "/d.jsonl: no such file; did you mean toy=",
        files={"d.jsonl": rows(OK)},
    ),
]


def _materialise(case: Case, tmp: Path, monkeypatch) -> list[str]:
    for name, content in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content.replace("{tmp}", str(tmp)))
    if case.setup is not None:
        case.setup(tmp)
    for k, v in case.env.items():
        monkeypatch.setenv(k, v)
    return [a.replace("{tmp}", str(tmp)) for a in case.argv]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.id)
def test_cli_bad_input(case, tmp_path, monkeypatch, capsys):
    argv = _materialise(case, tmp_path, monkeypatch)
    capsys.readouterr()  # what the setup printed (e.g. saving a model) is not the command's output
    code = cli_main(argv)
    out, err = capsys.readouterr()
    assert code == case.code, (out, err)
    if case.code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in err, err
        # "trlvr data: error: ..." (trlvr.cli.main) or "trlvr data check: error: ..." (the subcommand's parser)
        assert lines[0].startswith(f"trlvr {argv[0]}") and ": error: " in lines[0], lines[0]
        assert case.fragment in lines[0], lines[0]
    else:
        assert case.fragment in out, out


def test_cli_unique_case_ids():
    ids = [c.id for c in CLI_CASES]
    assert len(ids) == len(set(ids))


def test_real_process_exit_codes_and_debug(tmp_path):
    """The installed entry point as a user runs it: exit 2 and one stderr line; --debug keeps the traceback."""
    bad = tmp_path / "a.jsonl"
    bad.write_text(rows(OK) + "[1, 2]\n")
    run = [sys.executable, "-m", "trlvr.cli.main", "data", "check", str(bad)]
    plain = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 2 and plain.stdout == ""
    assert plain.stderr.strip().splitlines() == [
        f"trlvr data: error: {bad}:2: expected a JSON object per line, got a JSON array"
    ]
    debug = subprocess.run(run + ["--debug"], capture_output=True, text=True, timeout=120)
    assert debug.returncode != 0 and "Traceback" in debug.stderr and "DataError" in debug.stderr


# --- library level: one-line UserError ---------------------------------------------------------------


def _load_problems(path: str, **kw):
    from trlvr.data import load_problems

    return lambda tmp: load_problems(path.replace("{tmp}", str(tmp)), **kw)


def _load_model(path: str, role: str = "--senior"):
    from trlvr.models import load_causal_lm

    return lambda tmp: load_causal_lm(path.replace("{tmp}", str(tmp)), role=role)


def _load_tok(path: str, role: str = "--tokenizer"):
    from trlvr.models import load_tokenizer

    return lambda tmp: load_tokenizer(path.replace("{tmp}", str(tmp)), role=role)


def _fingerprint(path: str):
    from trlvr.models import model_fingerprint

    return lambda tmp: model_fingerprint(path.replace("{tmp}", str(tmp)))


def _broken_model(what: str):
    def setup(tmp: Path) -> None:
        d = tiny_model_dir(tmp / "m")
        if what == "config":
            (d / "config.json").write_text("{not json")
        elif what == "weights":
            raw = (d / "model.safetensors").read_bytes()
            (d / "model.safetensors").write_bytes(raw[: len(raw) // 3])
        elif what == "header":
            (d / "model.safetensors").write_bytes((20).to_bytes(8, "little") + b"garbage-not-json....")
        elif what == "no-weights":
            (d / "model.safetensors").unlink()
        elif what == "no-tokenizer":
            for name in ("tokenizer.json", "tokenizer_config.json"):
                (d / name).unlink()

    return setup


@dataclass(frozen=True)
class LibCase:
    id: str
    call: Callable[[Path], object]
    fragment: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], object] | None = None


LIB_CASES = [
    LibCase(
        "prompt-row-null-gold",
        _load_problems("{tmp}/train.jsonl"),
        "train.jsonl: 1 of 2 rows unusable (schema prompt): row 2: answer is null",
        files={"train.jsonl": rows({"prompt": "P1", "answer": "1"}, {"prompt": "P2", "answer": None})},
    ),
    LibCase(
        "no-usable-row-even-when-skipping",
        _load_problems("{tmp}/t.jsonl", on_bad="skip"),
        "t.jsonl: none of 2 rows usable (schema prompt): row 1: answer is null (expected the gold answer as a "
        "string or number); row 2: answer empty",
        files={"t.jsonl": rows({"prompt": "P1", "answer": None}, {"prompt": "P2", "answer": ""})},
    ),
    LibCase(
        "empty-dataset",
        _load_problems("{tmp}/e.jsonl"),
        "e.jsonl: no rows (empty dataset)",
        files={"e.jsonl": ""},
    ),
    LibCase(
        "model-missing-path",
        _load_model("{tmp}/runs/nothing/final"),
        "--senior: {tmp}/runs/nothing/final: no such folder; expected a model folder",
    ),
    LibCase(
        "model-path-is-a-file",
        _load_model("{tmp}/x.jsonl"),
        "x.jsonl: is a file, not a folder",
        files={"x.jsonl": rows(OK)},
    ),
    LibCase(
        "model-dir-without-config",
        _load_model("{tmp}/empty", role="tandem.junior"),
        "tandem.junior: {tmp}/empty: not a model folder (no config.json)",
        files={"empty/notes.txt": "hi"},
    ),
    LibCase(
        "model-without-weights",
        _load_model("{tmp}/m"),
        "not a model folder (no weights",
        setup=_broken_model("no-weights"),
    ),
    LibCase(
        "model-config-not-json",
        _load_model("{tmp}/m"),
        "config.json' is not a valid JSON file",
        setup=_broken_model("config"),
    ),
    LibCase(
        "model-truncated-weights",
        _load_model("{tmp}/m"),
        "m: corrupt weights file",
        setup=_broken_model("weights"),
    ),
    LibCase(
        "tokenizer-dir-without-tokenizer",
        _load_tok("{tmp}/m"),
        "--tokenizer: {tmp}/m: not a tokenizer folder (no tokenizer files",
        setup=_broken_model("no-tokenizer"),
    ),
    LibCase(
        "fingerprint-corrupt-header",
        _fingerprint("{tmp}/m"),
        "model.safetensors: corrupt safetensors file",
        setup=_broken_model("header"),
    ),
]


@pytest.mark.parametrize("case", LIB_CASES, ids=lambda c: c.id)
def test_library_bad_input(case, tmp_path, monkeypatch):
    _materialise(Case(case.id, [], 2, case.fragment, case.files, case.setup), tmp_path, monkeypatch)
    with pytest.raises(UserError) as err:
        case.call(tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and case.fragment.replace("{tmp}", str(tmp_path)) in msg, msg
