"""`dsim profile`: architecture zoo, measurement (CPU and a fake GPU), show (GPU estimate:
test_gpu_estimate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import ROOT, run_cli

from dsim.hardware import zoo
from dsim.hardware.latency import LatencyModel, profile_metadata, read_profile
from dsim.hardware.measure import (
    CudaEventTimer,
    CudaKernelTimer,
    Grid,
    build_model,
    cpu_timer,
    drafter_standin,
    filled_cache,
    latency_percentiles,
    measure_profile,
    profile_model,
    resolve_dtype,
    time_point,
)
from dsim.hardware.show import curves, knee
from dsim.models.cpu_profile import (
    Before,
    Focus,
    measure_cpu_profile,
    profile_cpu,
    round_robin,
)
from dsim.models.target import tiny_target

TINY = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "vocab_size": 128,
}


@pytest.fixture
def tiny_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    return path


# --- architecture zoo -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("smollm2-135m", 134.5e6),
        ("qwen3-4b", 4.02e9),
        ("qwen3-8b", 8.19e9),
        ("qwen3-14b", 14.77e9),
        ("llama3-8b", 8.03e9),
    ],
)
def test_zoo_parameter_counts_match_published(name, params):
    assert zoo.param_count(zoo.load_config(name)) == pytest.approx(params, rel=0.005)


def test_latency_percentiles_are_linear_between_order_statistics():
    """Five steps of 4, 1, 3, 2, 5 ms: p10 sits 0.4 of the way from the 1st to the 2nd."""
    p10, p50, p90 = latency_percentiles(np.array([4.0, 1.0, 3.0, 2.0, 5.0]) / 1e3)
    assert (p10, p50, p90) == pytest.approx((1.4, 3.0, 4.6), rel=1e-12)


@pytest.mark.parametrize(
    ("typed", "device", "expected"),
    [
        ("auto", "cpu", torch.float32),
        ("auto", "cuda", torch.bfloat16),
        ("bf16", "cpu", torch.bfloat16),
        ("Float16", "cpu", torch.float16),
        ("float32", "cuda", torch.float32),
    ],
)
def test_a_measured_dtype_is_torchs(typed, device, expected):
    assert resolve_dtype(typed, torch.device(device)) is expected


def test_the_cli_loads_without_transformers():
    """Only building a config imports transformers: `dsim run` and the GPU estimate read the
    zoo's fields and must not pay its import (seconds per command)."""
    code = "import dsim.cli, sys; print('transformers' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"
    assert type(zoo.load_config("qwen3-8b")).__name__ == "Qwen3Config"  # built on demand


def test_the_cli_loads_without_matplotlib():
    """Only the commands that draw import matplotlib (~0.4 s of every other command)."""
    code = "import dsim.cli, sys; print(any(m.startswith('matplotlib') for m in sys.modules))"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "False"


def test_config_json_by_path(tiny_json):
    config = zoo.load_config(str(tiny_json))
    assert (config.hidden_size, zoo.head_dim(config)) == (32, 8)
    assert zoo.load_config(str(tiny_json.parent)).num_hidden_layers == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
        ({"num_attention_heads": 5}, "num_attention_heads 5 does not divide hidden_size 32"),
        ({"num_key_value_heads": 3}, "num_key_value_heads 3 does not divide"),
        ({"model_type": "gpt2"}, "model_type 'gpt2' not supported"),
    ],
)
def test_bad_config_gives_one_error_line(tmp_path, monkeypatch, capsys, change, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**TINY, **change}))
    out_csv = tmp_path / "x.csv"
    code, out, err = run_cli(
        monkeypatch, capsys, "profile", "--model", str(path), "--out", str(out_csv)
    )
    assert code == 2
    assert err.count("\n") == 1 and message in err and str(path) in err
    assert not out_csv.exists()


def test_unknown_model_lists_known_ones(monkeypatch, capsys, tmp_path):
    out_csv = tmp_path / "p.csv"
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--model", "gpt5", "--out", str(out_csv))
    assert code == 2 and err.count("\n") == 1
    assert "unknown model 'gpt5'" in err and "qwen3-8b" in err and "llama3-8b" in err
    assert not out_csv.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seqs", "0"], "--seqs: '0' is not a positive integer"),
        (["--tokens-per-seq", "two"], "--tokens-per-seq: 'two' is not a positive integer"),
        (["--dtype", "float16"], "--device cpu measures float32"),
        (["--timer", "gpu"], "--timer must be wall or cpu"),
        (["--device", "cuda", "--timer", "wall"], "--timer must be events or kernels on cuda"),
        (["--timer", "cpu", "--threads", "2"], "--timer cpu times one thread"),
        (["--device", "tpu"], "--device must be cpu or cuda"),
        ([], "--out PATH is required"),
    ],
)
def test_bad_options_give_one_error_line(monkeypatch, capsys, tiny_json, args, message):
    out = [] if not args else ["--out", str(tiny_json.parent / "p.csv")]
    code, _, err = run_cli(monkeypatch, capsys, "profile", "--model", str(tiny_json), *args, *out)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_roofline_cli_round_trips_through_latency_model(monkeypatch, capsys, tmp_path):
    out = tmp_path / "roof.csv"
    code, _, _ = run_cli(
        monkeypatch, capsys, "profile", "--roofline", "a100", "--model", "llama3-8b",
        "--contexts", "1024,4096", "--out", str(out),
    )  # fmt: skip
    assert code == 0
    df = read_profile(out)
    verify = df[df["phase"] == "verify"]
    assert set(verify["context_len"]) == {1024, 4096} and verify["num_seqs"].nunique() > 4
    model = LatencyModel.from_csv(out)
    got = [
        model.latency(b, r, c) * 1e3
        for b, r, c in zip(
            verify["batch_tokens"], verify["num_seqs"], verify["context_len"], strict=True
        )
    ]
    np.testing.assert_allclose(got, verify["latency_ms"], rtol=0.03)  # the additive fit
    # More sequences at the same tokens read more KV: the model must see R.
    assert model.latency(64, 64, 4096) > 1.05 * model.latency(64, 8, 4096)
    meta = profile_metadata(out)
    assert meta["estimate"] is True and "--roofline a100" in meta["command"]


# --- measurement -------------------------------------------------------------------------------


def test_grid_varies_sequences_independently_of_batch_tokens():
    grid = Grid(seqs=(1, 4), tokens_per_seq=(1, 4), contexts=(64, 512), prefill_seqs=(1, 2),
                prefill_chunks=(32, 128))  # fmt: skip
    assert grid.points()[:4] == [(64, 1, 1), (64, 4, 1), (64, 4, 4), (64, 16, 4)]
    assert len(grid.points()) == 8  # B = 4 measured at R = 1 and at R = 4
    # a chunk longer than the context cannot end there
    assert (64, 128, 1) not in grid.prefill_points() and (512, 256, 2) in grid.prefill_points()
    assert grid.mixed_points() == [((4, 4), (1, 128), 512), ((4, 4), (2, 32), 512)]


def test_time_point_warms_up_untimed_and_resets_after_every_step():
    events: list[str] = []
    ticks = iter(range(100))

    def timer(step):
        step()
        return float(next(ticks))

    times = time_point(lambda: events.append("step"), lambda: events.append("reset"), timer, 3, 2)
    assert events == ["step", "reset"] * 5
    np.testing.assert_array_equal(times, [0.0, 1.0, 2.0])


def test_cache_keeps_fixed_context_across_repeats(tiny_json):
    config = zoo.load_config(str(tiny_json))
    model = build_model(config, torch.device("cpu"), torch.float32)
    cache = filled_cache(config, torch.randn(3, 2, 16, 8), 2)
    ids = torch.randint(config.vocab_size, (2, 4))

    def step():
        with torch.inference_mode():
            model(input_ids=ids, cache=cache, use_cache=True)
        assert cache.get_seq_length() == 20

    time_point(step, lambda: cache.crop(-4), cpu_timer, 3, 1)
    assert cache.get_seq_length() == 16


class FakeCuda:
    """Stands in for torch.cuda: every event record advances a fake GPU clock by 7 ms."""

    def __init__(self) -> None:
        self.clock_ms = 0.0
        self.syncs = 0
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.at: float | None = None
                self.synced = False

            def record(self) -> None:
                cuda.clock_ms += 7.0
                self.at = cuda.clock_ms

            def synchronize(self) -> None:
                self.synced = True

            def elapsed_time(self, end: Event) -> float:
                assert end.synced, "elapsed_time read before the end event completed"
                return end.at - self.at

        self.Event = Event

    def synchronize(self) -> None:
        self.syncs += 1


def test_gpu_timer_path_with_fake_device(tiny_json):
    cuda = FakeCuda()
    config = zoo.load_config(str(tiny_json))
    grid = Grid(seqs=(1, 2), tokens_per_seq=(1,), contexts=(16,), prefill_seqs=(1,),
                prefill_chunks=(8,))  # fmt: skip
    model = build_model(config, torch.device("cpu"), torch.float32)
    df, skipped = measure_profile(model, grid, repeats=3, warmup=1, timer=CudaEventTimer(cuda))
    assert skipped == [] and cuda.syncs == 9  # one sync before each timed step
    assert df["num_seqs"].tolist() == [1, 2, 1]
    assert df["phase"].tolist() == ["verify", "verify", "prefill"]
    for col in ("latency_ms", "latency_ms_p10", "latency_ms_p90"):
        np.testing.assert_allclose(df[col], 7.0)


def _recorder(events: list[str]):
    """Points that log their setup and run, and a timer that logs and returns the log's length."""

    def point(name: str) -> tuple:
        return (lambda: events.append(f"setup {name}"), lambda: events.append(f"run {name}"))

    def timer(step):
        events.append("timed")
        step()
        return float(len(events))

    return point, timer


def test_round_robin_times_one_repeat_of_every_point_per_round():
    """Warm-ups first and untimed; then each round times every point once, each run right
    after its own setup (points share the pool's slots); one array of repeats per point."""
    events: list[str] = []
    point, timer = _recorder(events)
    rounds = []
    times = round_robin([point("a"), point("b")], 2, 1, timer, lambda: rounds.append(1))
    assert events[:4] == ["setup a", "run a", "setup b", "run b"]
    assert events[4:] == ["setup a", "timed", "run a", "setup b", "timed", "run b"] * 2
    assert [len(t) for t in times] == [2, 2] and rounds == [1, 1]
    assert times[0][0] < times[1][0] < times[0][1] < times[1][1]  # interleaved, not point-wise


def test_round_robin_times_the_again_points_in_more_rounds_after_each_round():
    """Each round over all points is followed by `again_rounds` rounds over `again` only: those
    points get repeats x (1 + again_rounds) samples, spread over every round, the rest repeats."""
    events: list[str] = []
    point, timer = _recorder(events)
    rounds = []
    steps = [point("a"), point("b"), point("c")]
    times = round_robin(steps, 2, 0, timer, lambda: rounds.append(1), again=[1], again_rounds=2)
    runs = [e for e in events if e.startswith("run")]
    assert runs == ["run a", "run b", "run c", "run b", "run b"] * 2
    assert [len(t) for t in times] == [2, 6, 2] and rounds == [1, 1]
    b = times[1]  # its rounds over all points first, then its again rounds, each in order
    assert b[0] < b[2] < b[3] < b[1] < b[4] < b[5]


def test_cpu_profile_times_its_focus_points_again_and_counts_their_seconds():
    """Every timed pass "takes" 1 s: the two one-sequence verify points get 2 x 3 more samples
    each, and those 12 s are the focus's own, which the rest of the profile does not include."""
    timed = []

    def timer(run):
        run()
        timed.append(1)
        return 1.0

    grid = Grid(seqs=(1, 4), tokens_per_seq=(1, 2), contexts=(16,), prefill_seqs=(1,),
                prefill_chunks=(8,))  # fmt: skip
    focus = Focus(max_seqs=1, rounds=3)
    got = measure_cpu_profile(tiny_target(), grid, 2, 0, timer, focus=focus)
    points = len(got.rows) + len(got.mixed)
    assert got.focus_s == 12.0 and len(timed) == 2 * points + 12
    assert (got.rows["num_seqs"] == 1).sum() == 3  # the focus's 2 verify points and 1 prefill point
    assert measure_cpu_profile(tiny_target(), grid, 2, 0, timer).focus_s == 0.0


def test_before_pass_runs_right_before_every_timed_verify_pass_and_no_other():
    """A drafting engine's verify follows its draft: the `before` pass (given the point's R)
    runs right before each verify point's timed pass, in every round, never before a prefill
    or mixed point's, and its seconds are returned apart from the timed ones."""
    events: list[object] = []

    def timer(run):
        run()
        events.append("run")
        return 1.0

    grid = Grid(seqs=(1, 4), tokens_per_seq=(1, 2), contexts=(16,), prefill_seqs=(1,),
                prefill_chunks=(8,))  # fmt: skip

    def before_pass(seqs: int) -> None:
        events.append(seqs)
        time.sleep(0.002)

    timed = measure_cpu_profile(
        tiny_target(), grid, 2, 0, timer, before=Before(before_pass, "test")
    )
    df = timed.rows
    verify = df[df["phase"] == "verify"]["num_seqs"].tolist()
    others = len(df) - len(verify) + len(timed.mixed)
    one_round = [e for r in verify for e in (r, "run")] + ["run"] * others
    assert events == one_round * 2
    # every before pass's wall seconds counted, none of them in the timed ones (all 1.0)
    assert timed.before_s >= 0.002 * 2 * len(verify)
    assert (df["latency_ms"] == 1e3).all()
    assert measure_cpu_profile(tiny_target(), grid, 2, 0, timer).before_s == 0.0


def test_focus_picks_the_verify_points_of_few_sequences_and_nothing_without_rounds():
    assert Focus(max_seqs=2, rounds=2).points([1, 4, 2, 16, 3, 1]) == [0, 2, 5]
    assert Focus(max_seqs=2, rounds=0).points([1, 2]) == []
    assert Focus().points([1, 2]) == []


def test_kernel_timer_sums_only_the_steps_kernels():
    """Kernel time is the sum of the CUDA events' own durations (us -> s): CPU-side events and
    the launch gaps between kernels are not counted, and the step's kernels are awaited inside
    the profiled region."""
    cuda, ran = FakeCuda(), []

    class Event:
        def __init__(self, device_type: str, us: float) -> None:
            self.device_type, self.self_device_time_total = device_type, us

    class Profiler:
        class ProfilerActivity:
            CUDA = "cuda-activity"

        def profile(self, activities: list[str]) -> Profiler:
            assert activities == ["cuda-activity"]
            return self

        def __enter__(self) -> Profiler:
            return self

        def __exit__(self, *exc: object) -> None:
            assert cuda.syncs == 2, "the profile closed before the step's kernels finished"

        def events(self) -> list[Event]:
            return [Event("cuda", 1500.0), Event("cpu", 9e6), Event("cuda", 500.0)]

    timer = CudaKernelTimer(cuda, Profiler(), "cuda")
    assert timer(lambda: ran.append(1)) == pytest.approx(2e-3) and ran == [1]


def test_tiny_gpu_path_profile_writes_csv_and_sidecar(tmp_path, tiny_json):
    out = tmp_path / "tiny.csv"
    grid = Grid(seqs=(1, 2), tokens_per_seq=(1, 4), contexts=(0, 32))
    df = profile_model(str(tiny_json), grid, out, repeats=3, warmup=1, threads=1, progress=False)
    back = read_profile(out)
    assert len(back) == 8 and back["num_seqs"].tolist() == [1, 1, 2, 2] * 2
    assert (back["latency_ms_p10"] <= back["latency_ms"]).all()
    assert (back["latency_ms"] <= back["latency_ms_p90"]).all()
    np.testing.assert_allclose(back["latency_ms"], df["latency_ms"], rtol=1e-5)
    assert LatencyModel.from_csv(out).latency(4, 2, 16) > 0
    meta = profile_metadata(out)
    assert meta["estimate"] is False and meta["threads"] == 1 and meta["dtype"] == "float32"
    assert meta["model_config"]["hidden_size"] == 32 and meta["torch"] == torch.__version__
    assert {"device", "date", "command", "transformers", "load_average_before"} <= set(meta)
    assert meta["attn_implementation"] == "sdpa"


def test_cpu_profile_times_real_mode_pass_with_fit_and_composition(tmp_path, tiny_json):
    out = tmp_path / "cpu.csv"
    grid = Grid(seqs=(1, 2, 4), tokens_per_seq=(1, 2), contexts=(16, 32, 64), prefill_seqs=(1, 2),
                prefill_chunks=(8,))  # fmt: skip
    profile_cpu(
        str(tiny_json), grid, out, repeats=2, warmup=1, threads=1, timer="cpu", progress=False
    )
    back = read_profile(out)
    assert (back["phase"] == "verify").sum() == 18 and (back["phase"] == "prefill").sum() == 6
    assert (back.loc[back["phase"] == "prefill", "num_seqs"] <= 2).all()
    meta = profile_metadata(out)
    assert "RaggedTarget" in meta["method"] and meta["threads"] == 1
    assert meta["timer"].startswith("thread_time")
    assert meta["fit"]["verify"]["depends_on_num_seqs"] is True
    check = meta["composition_check"]
    assert len(check["steps"]) == 4 and check["worst_abs_error"] >= check["median_abs_error"]
    model = LatencyModel.from_csv(out)
    for step in check["steps"]:  # the sidecar's prediction is the model's own
        args = [step[k] for k in ("verify_tokens", "num_seqs", "context_len", "prefill_tokens",
                                  "prefill_seqs", "prefill_context")]  # fmt: skip
        assert model.step(*args) * 1e3 == pytest.approx(step["predicted_ms"], abs=1e-3)


def test_drafter_standin_is_one_layer_of_target_width(monkeypatch, capsys, tiny_json):
    target = zoo.load_config(str(tiny_json))
    small = drafter_standin(target)
    assert small.num_hidden_layers == 1 and small.hidden_size == target.hidden_size
    assert target.num_hidden_layers == 2  # the target config is untouched
    out = tiny_json.parent / "drafter.csv"
    code, _, err = run_cli(
        monkeypatch, capsys, "profile", "--model", str(tiny_json), "--drafter", "--seqs", "1,2",
        "--tokens-per-seq", "1,3", "--contexts", "8", "--prefill-seqs", "", "--repeats", "1",
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, err
    meta = profile_metadata(out)
    assert "stand-in" in meta["drafter"] and meta["model_config"]["num_hidden_layers"] == 1
    back = read_profile(out)  # rows are drafter passes: B tokens over R sequences
    assert back["batch_tokens"].tolist() == [1, 3, 2, 6] and back["num_seqs"].tolist() == [
        1,
        1,
        2,
        2,
    ]


# --- show --------------------------------------------------------------------------------------


def test_knee_is_first_point_past_ratio_of_light_load():
    b = np.array([1, 2, 4, 8, 16, 32, 64])
    lat = np.maximum(10.0, 0.5 * b)  # flat at 10 ms, then linear from B = 20
    assert knee(b, lat) == 32  # 16 ms > 1.2 * 10 ms
    assert knee(b, np.full(7, 10.0)) is None


def test_profile_show_prints_table_and_writes_png(monkeypatch, capsys, tmp_path):
    df = pd.DataFrame(
        {"batch_tokens": [1, 4, 64, 1024], "context_len": 512, "latency_ms": [5.0, 5.0, 6.0, 20.0]}
    )
    csv = tmp_path / "p.csv"
    df.to_csv(csv, index=False)
    png = tmp_path / "curve.png"
    code, out, err = run_cli(monkeypatch, capsys, "profile", "show", str(csv), "--out", str(png))
    assert code == 0, err
    assert "verify step latency (ms) by context length" in out and "knee B" in out and "1024" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    per_ctx = curves(df)
    np.testing.assert_allclose(
        per_ctx[512]["tokens_per_s"], per_ctx[512]["batch_tokens"] * per_ctx[512]["sps"]
    )


@pytest.mark.parametrize(
    "name",
    [
        "h200-qwen3-8b-roofline",
        "h200x8-deepseek-v3-fp8-roofline",
        "h200-qwen3-8b",
        "cpu-smollm2-135m",
    ],
)
def test_profile_show_is_readable_for_shipped_profiles(name, monkeypatch, capsys, tmp_path):
    """An 80-column terminal shows every cell whole; the knees are a small table, the plot has a
    short legend (contexts and the knee marker; R as a colour bar) and raises no warnings."""
    import warnings

    from dsim.hardware.show import PLOT_CONTEXTS, profile_figure

    csv = ROOT / "profiles" / f"{name}.csv"
    monkeypatch.setenv("COLUMNS", "80")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli(
            monkeypatch, capsys, "profile", "show", str(csv), "--out", str(tmp_path / "p.png")
        )
    assert code == 0 and err == "", err
    assert "\u2026" not in out  # rich's ellipsis: a truncated cell
    assert max(len(line) for line in out.splitlines()) <= 80
    knees = out[out.index("knee B by context") :].split("\n\n")[0].splitlines()  # its own block
    seqs = read_profile(csv).query("phase == 'verify'")["num_seqs"].nunique()
    assert len(knees) <= seqs + 4  # title, header, a row per R, the caption's lines
    fig = profile_figure(curves(read_profile(csv), by_seqs=True), name)
    legend = fig.axes[0].get_legend()
    assert len(legend.get_texts()) <= PLOT_CONTEXTS + 1
    assert len(fig.axes) == 3  # two panels and the colour bar of R


def test_profile_show_rejects_bad_profile(monkeypatch, capsys, tmp_path):
    csv = tmp_path / "bad.csv"
    pd.DataFrame({"batch_tokens": [1, 2], "context_len": [0, 0], "latency_ms": [1.0, -2.0]}).to_csv(
        csv, index=False
    )
    code, _, err = run_cli(monkeypatch, capsys, "profile", "show", str(csv))
    assert code == 2 and err.count("\n") == 1 and "row 2" in err
    assert not csv.with_suffix(".png").exists()
