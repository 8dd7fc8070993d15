"""The file and folder rules (dsim/fileio.py `check_output_file`, `check_output_dir`,
`check_replaced_dir`): a file or sidecar dsim did not write is never replaced without --force,
a folder dsim cannot write is refused before any work, a folder swapped in whole never loses a
user's entry or a file the command reads, and what dsim wrote it recognises by the mark each
kind of output carries."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from conftest import run_cli  # noqa: E402

from dsim import run_commands  # noqa: E402
from dsim.acceptance import calibrate  # noqa: E402
from dsim.cli import main  # noqa: E402
from dsim.errors import InputError  # noqa: E402
from dsim.fileio import (  # noqa: E402
    check_output_dir,
    check_output_file,
    dsim_wrote,
    write_json,
    write_png,
)

ROOT = Path(__file__).resolve().parents[2]
ROOFLINE = ["profile", "--roofline", "h200", "--model", "qwen3-8b", "--contexts", "512"]
SYNTH = ["synth-acceptance", "--acceptance", "iid:0.7", "--sequences", "3", "--rounds", "4"]
RUN = ["run", "--trace", "synthetic:concurrency=2,n=8,prompt=50,output=20,sigma=0",
       "--no-progress"]  # fmt: skip
# a trace calibrate can split into fitted and held-out sequences
TRACE = ["synth-acceptance", "--acceptance", "iid:0.7", "--sequences", "20", "--rounds", "4",
         "--gamma", "3"]  # fmt: skip


def _user_files(folder: Path, *names: str) -> dict[str, bytes]:
    files = {name: f"the user's {name}\n".encode() for name in names}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _unchanged(folder: Path, files: dict[str, bytes]) -> bool:
    return all((folder / n).read_bytes() == data for n, data in files.items())


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry of `folder`, down to its sub-folders (None), with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
            for p in folder.rglob("*")}  # fmt: skip


@pytest.fixture
def no_work(monkeypatch):
    """Call it to make the simulation and the calibration's fit raise if reached: what is
    refused must be refused before the work."""

    def work(*args, **kwargs):
        raise RuntimeError("the work ran")

    def forbid() -> None:
        monkeypatch.setattr(run_commands, "simulate_inputs", work)
        monkeypatch.setattr(calibrate, "fit_sts", work)

    return forbid


def test_dsim_knows_its_own_files_by_their_marks(tmp_path):
    write_json(tmp_path / "a.json", {"command": "dsim profile --out a.csv"})
    write_json(tmp_path / "b.json", {"command": "python make.py"})
    (tmp_path / "a.csv").write_text("x\n1\n")
    (tmp_path / "b.csv").write_text("x\n1\n")
    (tmp_path / "c.csv").write_text("x\n1\n")  # no sidecar at all
    fig = plt.figure()
    write_png(fig, tmp_path / "mine.png", dpi=20)
    fig.savefig(tmp_path / "theirs.png", dpi=20)  # matplotlib's own stamp
    plt.close(fig)
    (tmp_path / "text.png").write_text("not a png")
    ours = {p.name for p in tmp_path.iterdir() if dsim_wrote(p)}
    assert ours == {"a.json", "a.csv", "mine.png"}


def test_profile_out_keeps_the_users_csv_and_sidecar(monkeypatch, capsys, tmp_path):
    files = _user_files(tmp_path, "mine.csv", "mine.json")
    out = str(tmp_path / "mine.csv")
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", out)
    assert code == 2 and err.count("\n") == 1 and "mine.csv: exists and dsim did not" in err
    assert "--force" in err and _unchanged(tmp_path, files)
    (tmp_path / "mine.csv").unlink()  # the sidecar alone is the user's too
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", out)
    assert code == 2 and "mine.json: exists and dsim did not write it (the sidecar" in err
    assert _unchanged(tmp_path, {"mine.json": files["mine.json"]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json"]  # no temporary left
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", out, "--force")
    assert code == 0, err
    assert dsim_wrote(tmp_path / "mine.csv") and dsim_wrote(tmp_path / "mine.json")
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", out)  # dsim's: replaced
    assert code == 0, err


def test_profile_show_keeps_a_png_it_did_not_write(monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(tmp_path / "p.csv"))
    assert code == 0, err
    files = _user_files(tmp_path, "p.png")  # the default --out: FILE with .png
    code, _, err = run_cli(monkeypatch, capsys, "profile", "show", str(tmp_path / "p.csv"))
    assert code == 2 and err.count("\n") == 1 and "p.png: exists" in err
    assert _unchanged(tmp_path, files)
    for _ in range(2):  # a picture dsim wrote is replaced
        code, _, err = run_cli(
            monkeypatch, capsys, "profile", "show", str(tmp_path / "p.csv"), "--out",
            str(tmp_path / "q.png"),
        )  # fmt: skip
        assert code == 0 and dsim_wrote(tmp_path / "q.png"), err


def test_profile_show_never_writes_over_what_it_reads(monkeypatch, capsys, tmp_path):
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(tmp_path / "p.csv"))
    assert code == 0, err
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    for name in ("p.csv", "p.json", "q.parquet"):  # even with --force: a PNG only
        args = ["profile", "show", str(tmp_path / "p.csv"), "--out", str(tmp_path / name)]
        code, _, err = run_cli(monkeypatch, capsys, *args, "--force")
        assert code == 2 and err.count("\n") == 1 and "end it in .png" in err, err
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before
    with pytest.raises(InputError, match="a file this command reads"):  # the rule itself
        check_output_file(tmp_path / "p.csv", force=True, sidecar=True, reads=(tmp_path / "p.csv",))
    with pytest.raises(InputError, match="a file this command reads"):  # or its sidecar
        check_output_file(tmp_path / "p.json", force=True, reads=(tmp_path / "p.csv",))


def test_run_keeps_a_users_file_in_its_folder(monkeypatch, capsys, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    files = _user_files(out, "summary.json", "thesis.tex")  # not dsim's summary.json
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "not a dsim output" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "thesis.tex"]
    assert _unchanged(out, files)
    shutil.rmtree(out)
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 0, err
    notes = _user_files(out, "notes.md")  # a note beside dsim's run: the run never drops it
    ran = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "holds notes.md" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == ran and _unchanged(out, notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temporary folder left
    (out / "notes.md").unlink()
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 0, err  # dsim's own run folder: replaced as a whole


@pytest.mark.parametrize("entry", ["notes.md", "plots"])
def test_a_users_entry_in_a_run_folder_is_refused_before_the_simulation(
    monkeypatch, capsys, tmp_path, no_work, entry
):
    """A file or a folder of the user's beside dsim's run: the swap would drop it, so the run
    is refused before it simulates anything, the folder as it was."""
    out = tmp_path / "r"
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 0, err
    (out / entry).mkdir() if entry == "plots" else (out / entry).write_text("mine\n")
    before = _snapshot(out)
    no_work()
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert f"r: holds {entry}, a " in err and "replacing the folder would delete it" in err
    assert _snapshot(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_calibrate_refuses_a_users_file_in_its_folder_before_the_fit(
    monkeypatch, capsys, tmp_path, no_work
):
    trace, out = tmp_path / "t.parquet", tmp_path / "c"
    code, _, err = run_cli(monkeypatch, capsys, *TRACE, "--out", str(trace))
    assert code == 0, err
    for _ in range(2):  # a calibration folder dsim wrote is replaced
        code, _, err = run_cli(monkeypatch, capsys, "calibrate", str(trace), "--out", str(out))
        assert code == 0, err
    files = _user_files(out, "notes.md")
    before = _snapshot(out)
    no_work()
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", str(trace), "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "c: holds notes.md" in err, err
    assert _snapshot(out) == before and _unchanged(out, files)


def test_a_run_never_replaces_a_folder_holding_what_it_reads(
    monkeypatch, capsys, tmp_path, no_work
):
    """A profile dsim wrote into a run folder, read by the next run into that folder: the swap
    would delete it and its sidecar though dsim wrote them, so the run is refused up front,
    naming the file."""
    out = tmp_path / "r"
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(out))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(out / "q.csv"))
    assert code == 0 and dsim_wrote(out / "q.csv"), err
    before = _snapshot(out)
    no_work()
    for profile in (out / "q.csv", tmp_path / "r" / ".." / "r" / "q.csv"):
        code, _, err = run_cli(monkeypatch, capsys, *RUN, "--profile", str(profile), "--out",
                               str(out))  # fmt: skip
        assert code == 2 and err.count("\n") == 1, err
        assert f"{out / 'q.csv'}: is a file this command reads, inside the output folder" in err
        assert "replaced as a whole: choose another --out" in err
    assert _snapshot(out) == before


def test_calibrate_never_replaces_a_folder_holding_its_trace(
    monkeypatch, capsys, tmp_path, no_work
):
    out = tmp_path / "c"
    code, _, err = run_cli(monkeypatch, capsys, *TRACE, "--out", str(tmp_path / "t.parquet"))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", str(tmp_path / "t.parquet"),
                           "--out", str(out))  # fmt: skip
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *TRACE, "--out", str(out / "t.parquet"))
    assert code == 0, err
    before = _snapshot(out)
    no_work()
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", str(out / "t.parquet"), "--out",
                           str(out), "--write-sidecar")  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert "t.parquet: is a file this command reads, inside the output folder" in err
    assert _snapshot(out) == before


@pytest.mark.parametrize(
    ("marker", "command"),
    [("summary.json", RUN), ("calibration.json", ["calibrate", "T"])],
)
def test_a_users_json_object_does_not_mark_a_folder_as_dsims(
    monkeypatch, capsys, tmp_path, no_work, marker, command
):
    """A JSON object of the user's under the name of dsim's marker: without dsim's mark it is
    not dsim's, and the folder is refused before the work, the file as it was."""
    code, _, err = run_cli(monkeypatch, capsys, *TRACE, "--out", str(tmp_path / "t.parquet"))
    assert code == 0, err
    out = tmp_path / "o"
    out.mkdir()
    (out / marker).write_text(json.dumps({"loss": 0.25, "spec": {}, "schema_version": 1}))
    before = _snapshot(out)
    no_work()
    args = [str(tmp_path / "t.parquet") if a == "T" else a for a in command]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--out", str(out))
    assert code == 2 and err.count("\n") == 1, err
    assert f"o: is a folder without dsim's {marker}, not a dsim output" in err
    assert _snapshot(out) == before


def test_every_folder_marker_dsim_writes_carries_dsims_mark(monkeypatch, capsys, tmp_path):
    """What dsim writes as a folder's marker is dsim's by `dsim_wrote`, so reruns into dsim's
    own folders go on: a run's summary.json, a calibration's calibration.json, a
    training-data cache's meta.json (its format, as `dsim prepare-data` writes it)."""
    data = pytest.importorskip("dsim.models.data")  # torch: the cache's module needs it
    code, _, err = run_cli(monkeypatch, capsys, *RUN, "--out", str(tmp_path / "r"))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *TRACE, "--out", str(tmp_path / "t.parquet"))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, "calibrate", str(tmp_path / "t.parquet"),
                           "--out", str(tmp_path / "c"))  # fmt: skip
    assert code == 0, err
    (tmp_path / "d").mkdir()
    write_json(tmp_path / "d" / "meta.json", {"format": data.DATA_FORMAT, "batches": 1})
    for folder, marker in (("r", "summary.json"), ("c", "calibration.json"), ("d", "meta.json")):
        assert dsim_wrote(tmp_path / folder / marker), marker
        check_output_dir(tmp_path / folder, marker)
    write_json(tmp_path / "d" / "meta.json", {"format": "train-data/1", "batches": 1})
    with pytest.raises(InputError, match="not a dsim output"):
        check_output_dir(tmp_path / "d", "meta.json")


def test_the_readmes_example_of_the_reads_rule_is_refused_by_it(monkeypatch, capsys, tmp_path):
    """The command the README gives for "a file the command reads" is refused by that rule
    (with --force), not by another one."""
    text = " ".join((ROOT / "README.md").read_text().split())
    example = re.search(r"a file the command reads \(`dsim ([^`]+)`", text)
    assert example, "the README's example of the rule is gone"
    shutil.copy(ROOT / "traces/acceptance/smollm2-ar.parquet", tmp_path / "T.parquet")
    shutil.copy(ROOT / "traces/acceptance/smollm2-ar.json", tmp_path / "T.json")
    before = _snapshot(tmp_path)
    args = [str(tmp_path / a) if a.startswith("T.") else a for a in example[1].split()]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--force")
    assert code == 2 and err.count("\n") == 1 and "a file this command reads" in err, err
    assert _snapshot(tmp_path) == before


def test_synth_acceptance_keeps_the_users_sidecar(monkeypatch, capsys, tmp_path):
    files = _user_files(tmp_path, "t.json")
    out = str(tmp_path / "t.parquet")
    code, _, err = run_cli(monkeypatch, capsys, *SYNTH, "--out", out)
    assert code == 2 and err.count("\n") == 1 and "t.json: exists" in err
    assert _unchanged(tmp_path, files) and not (tmp_path / "t.parquet").exists()
    code, _, err = run_cli(monkeypatch, capsys, *SYNTH, "--out", out, "--force")
    assert code == 0 and dsim_wrote(tmp_path / "t.parquet"), err
    code, _, err = run_cli(monkeypatch, capsys, *SYNTH, "--out", out)
    assert code == 0, err


@pytest.mark.parametrize(
    ("src", "spec", "gamma"),
    [("traces/acceptance/smollm2-ar.parquet", "{}", "7"), ("docs/examples/vllm_scrape.prom",
     "vllm:{}", "3")],
)  # fmt: skip
def test_synth_acceptance_never_writes_over_what_it_reads(
    monkeypatch, capsys, tmp_path, src, spec, gamma
):
    """A recorded trace (dsim's own, so no --force is needed) or a scrape the spec samples
    from: writing the synthetic trace over it would destroy the input."""
    shutil.copy(src, tmp_path / Path(src).name)
    if Path(src).with_suffix(".json").exists():
        shutil.copy(Path(src).with_suffix(".json"), tmp_path)
    before = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    path = str(tmp_path / Path(src).name)
    args = ["synth-acceptance", "--acceptance", spec.format(path), "--gamma", gamma,
            "--sequences", "3", "--rounds", "4", "--out", path]  # fmt: skip
    for force in ([], ["--force"]):
        code, _, err = run_cli(monkeypatch, capsys, *args, *force)
        assert code == 2 and err.count("\n") == 1 and "a file this command reads" in err, err
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before


def test_a_folder_or_a_json_name_is_not_an_output_file(monkeypatch, capsys, tmp_path):
    (tmp_path / "d.csv").mkdir()
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(tmp_path / "d.csv"))
    assert code == 2 and "is a folder" in err
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(tmp_path / "p.json"))
    assert code == 2 and "its own NAME.json sidecar" in err


def test_train_keeps_a_file_that_is_not_a_checkpoint(monkeypatch, capsys, tmp_path):
    files = _user_files(tmp_path, "d.pt")
    args = ["train", "--drafter", "markov", "--out", str(tmp_path / "d.pt")]
    code, _, err = run_cli(monkeypatch, capsys, *args, "--data", str(tmp_path / "none"))
    assert code == 2 and err.count("\n") == 1 and "d.pt: exists and dsim did not" in err
    assert _unchanged(tmp_path, files)


def test_validate_and_prepare_data_keep_a_users_folder(monkeypatch, capsys, tmp_path):
    files = _user_files(tmp_path, "notes.txt")
    code, _, err = run_cli(monkeypatch, capsys, "validate", "--out", str(tmp_path))
    assert code == 2 and "not a dsim output" in err, err
    code, _, err = run_cli(monkeypatch, capsys, "prepare-data", "--out", str(tmp_path))
    assert code == 2 and "not a dsim output" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert _unchanged(tmp_path, files)


def _as_nobody(argv: list[str], err_file: Path) -> int:
    """Run `dsim ARGV` in a forked child that has dropped root for `nobody` (the interpreter
    and the modules already loaded stay usable; an exec would need /root's Python)."""
    nobody = pwd.getpwnam("nobody")
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            fd = os.open(err_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            sys.stderr = os.fdopen(fd, "w", buffering=1)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            sys.argv = ["dsim", *argv]
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture
def open_folder():
    """A fresh folder nobody may enter (pytest's own base folder is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="dsim-ro-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root for nobody; as a user chmod binds")
def test_a_read_only_folder_is_refused_before_any_work_as_a_user(monkeypatch, capsys, open_folder):
    # warm the imports as root: the child cannot read the interpreter's stdlib under /root
    code, _, err = run_cli(monkeypatch, capsys, *ROOFLINE, "--out", str(open_folder / "w.csv"))
    assert code == 0, err
    code, _, err = run_cli(monkeypatch, capsys, *SYNTH, "--out", str(open_folder / "w.parquet"))
    assert code == 0, err
    if any(p.stat().st_mode & 0o005 != 0o005 for p in open_folder.parents):
        pytest.skip(f"a folder above {open_folder} is closed to nobody")
    ro = open_folder / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    err_file = open_folder / "err.txt"
    err_file.touch()
    err_file.chmod(0o666)
    cases = [
        [*ROOFLINE, "--out", str(ro / "p.csv")],
        [*ROOFLINE, "--out", str(ro / "new" / "p.csv")],
        [*SYNTH, "--out", str(ro / "t.parquet")],
    ]
    for argv in cases:
        code = _as_nobody(argv, err_file)
        err = err_file.read_text()
        assert code == 2 and err.count("\n") == 1, (argv, code, err)
        assert f"{ro}: cannot write here: Permission denied" in err
        assert list(ro.iterdir()) == []  # nothing written or left
