"""The file rule (dsim/fileio.py `check_output_file`): a file or sidecar dsim did not write is
never replaced without --force, a folder dsim cannot write is refused before any work, and
what dsim wrote it recognises by the mark each kind of output carries."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from conftest import run_cli  # noqa: E402

from dsim.cli import main  # noqa: E402
from dsim.errors import InputError  # noqa: E402
from dsim.fileio import check_output_file, dsim_wrote, write_json, write_png  # noqa: E402

ROOFLINE = ["profile", "--roofline", "h200", "--model", "qwen3-8b", "--contexts", "512"]
SYNTH = ["synth-acceptance", "--acceptance", "iid:0.7", "--sequences", "3", "--rounds", "4"]


def _user_files(folder: Path, *names: str) -> dict[str, bytes]:
    files = {name: f"the user's {name}\n".encode() for name in names}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def _unchanged(folder: Path, files: dict[str, bytes]) -> bool:
    return all((folder / n).read_bytes() == data for n, data in files.items())


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
    run = ["run", "--trace", "synthetic:concurrency=2,n=8,prompt=50,output=20,sigma=0"]
    out = tmp_path / "r"
    out.mkdir()
    files = _user_files(out, "summary.json", "thesis.tex")  # not dsim's summary.json
    code, _, err = run_cli(monkeypatch, capsys, *run, "--out", str(out), "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "not a dsim output" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "thesis.tex"]
    assert _unchanged(out, files)
    shutil.rmtree(out)
    code, _, err = run_cli(monkeypatch, capsys, *run, "--out", str(out), "--no-progress")
    assert code == 0, err
    notes = _user_files(out, "notes.md")  # a note beside dsim's run: the run never drops it
    ran = {p.name: p.read_bytes() for p in out.iterdir()}
    code, _, err = run_cli(monkeypatch, capsys, *run, "--out", str(out), "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "holds notes.md" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == ran and _unchanged(out, notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temporary folder left
    (out / "notes.md").unlink()
    code, _, err = run_cli(monkeypatch, capsys, *run, "--out", str(out), "--no-progress")
    assert code == 0, err  # dsim's own run folder: replaced as a whole


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
